"""Tests of frost_nb.losses: known answers by brute force, gradient routing, autocast."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from frost_nb.config import LossConfig
from frost_nb.losses import (
    RankingLosses,
    log_geometric_prior,
    log_halting_distribution,
    ponder_loss,
    ranking_losses,
    set_size,
    step_losses,
    task_loss,
    total_loss,
)


def _batch(n=8, t=4, k=5, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, t, k, generator=g, requires_grad=requires_grad)
    halt = torch.randn(n, t, generator=g, requires_grad=requires_grad)
    y = torch.randint(0, k, (n,), generator=g)
    return logits, halt, y


# --- task and step losses ------------------------------------------------------------------

def test_task_loss_is_final_step_cross_entropy():
    logits, _, y = _batch()
    assert torch.allclose(task_loss(logits, y), F.cross_entropy(logits[:, -1], y))
    smooth = task_loss(logits, y, label_smoothing=0.1)
    assert torch.allclose(smooth, F.cross_entropy(logits[:, -1], y, label_smoothing=0.1))
    assert not torch.allclose(smooth, task_loss(logits, y))


def test_step_losses_per_sample_per_step_detached_float32():
    logits, _, y = _batch(requires_grad=True)
    l = step_losses(logits.bfloat16(), y)
    assert l.shape == (8, 4) and l.dtype == torch.float32 and not l.requires_grad
    l = step_losses(logits, y)
    for i, t in itertools.product(range(8), range(4)):
        expected = F.cross_entropy(logits[i, t][None], y[i][None])
        assert torch.allclose(l[i, t], expected.detach(), atol=1e-6)


def test_bad_shapes_raise():
    logits, halt, y = _batch()
    with pytest.raises(ValueError, match=r"\(N, T, K\)"):
        task_loss(logits[:, 0], y)
    with pytest.raises(ValueError, match="y must be"):
        step_losses(logits, y[:3])
    with pytest.raises(ValueError, match=r"\(N, T\)"):
        ranking_losses(halt, step_losses(logits, y)[:, :2])
    with pytest.raises(ValueError, match="rank_frac"):
        ranking_losses(halt, step_losses(logits, y), rank_frac=0.6)


# --- ranking sets ----------------------------------------------------------------------------

def test_set_size():
    assert set_size(128 * 16, 0.25) == 512
    assert set_size(100, 0.29) == 29  # not 28 from 28.999999999999996
    assert set_size(3, 0.25) == 1  # at least one entry
    assert set_size(10, 0.5) == 5


@pytest.mark.parametrize("n,t,frac", [(8, 4, 0.25), (7, 3, 0.25), (16, 16, 0.1), (5, 2, 0.5)])
def test_easy_and_hard_sets_are_lowest_and_highest_losses(n, t, frac):
    logits, halt, y = _batch(n, t, seed=n + t)
    losses = step_losses(logits, y)
    r = ranking_losses(halt, losses, rank_frac=frac)
    m = set_size(n * t, frac)
    assert r.easy_mask.shape == r.hard_mask.shape == (n, t)
    assert r.easy_mask.dtype == torch.bool
    assert int(r.easy_mask.sum()) == int(r.hard_mask.sum()) == m
    assert not (r.easy_mask & r.hard_mask).any()
    flat = losses.reshape(-1).sort().values
    assert losses[r.easy_mask].max() <= flat[m - 1] and losses[~r.easy_mask].min() >= flat[m - 1]
    assert losses[r.hard_mask].min() >= flat[-m] and losses[~r.hard_mask].max() <= flat[-m]
    assert torch.allclose(r.easy_score, torch.sigmoid(halt[r.easy_mask]).mean())
    assert torch.allclose(r.hard_score, torch.sigmoid(halt[r.hard_mask]).mean())


def test_ties_are_broken_deterministically():
    halt = torch.randn(4, 4)
    losses = torch.ones(4, 4)  # every entry tied
    r1, r2 = ranking_losses(halt, losses), ranking_losses(halt, losses.clone())
    assert torch.equal(r1.easy_mask, r2.easy_mask) and torch.equal(r1.hard_mask, r2.hard_mask)
    # stable sort: ties go to the lowest flat index (sample, then step)
    assert r1.easy_mask.reshape(-1)[:4].all() and r1.hard_mask.reshape(-1)[-4:].all()


# --- known answers ---------------------------------------------------------------------------

def _brute_force_rel(z, losses, m, margin):
    entries = sorted(range(len(losses)), key=lambda i: (losses[i], i))
    easy, hard = entries[:m], entries[len(losses) - m:]
    sig = [1.0 / (1.0 + math.exp(-v)) for v in z]
    total = 0.0
    for e in easy:
        for d in hard:
            total += max(0.0, margin - (sig[e] - sig[d]))
    return total / (len(easy) * len(hard))


def test_rel_known_answer_hand_made():
    # 3 samples x 2 steps; rank_frac 1/3 -> 2 easy, 2 hard
    losses = torch.tensor([[0.1, 2.0], [0.5, 0.05], [3.0, 1.0]])
    z = torch.tensor([[2.0, 0.0], [0.7, -0.5], [-2.0, 0.5]])
    # easy: losses 0.05 (z=-0.5, p=0.3775), 0.1 (z=2, p=0.8808)
    # hard: losses 2.0 (z=0, p=0.5), 3.0 (z=-2, p=0.1192)
    # hinges max(0, 0.2 - (p_e - p_d)): only (0.3775, 0.5) is active: 0.2 + 0.1225 = 0.3225
    r = ranking_losses(z, losses, rank_frac=1 / 3, margin=0.2)
    expected = (0.2 - (1 / (1 + math.exp(0.5)) - 0.5)) / 4  # = 0.0806...
    assert math.isclose(float(r.rel), expected, rel_tol=1e-6)
    brute = _brute_force_rel(z.reshape(-1).tolist(), losses.reshape(-1).tolist(), 2, 0.2)
    assert math.isclose(expected, brute, rel_tol=1e-9)
    assert r.easy_mask.tolist() == [[True, False], [False, True], [False, False]]
    assert r.hard_mask.tolist() == [[False, True], [False, False], [True, False]]


@pytest.mark.parametrize("seed", range(4))
def test_rel_and_abs_known_answer_random(seed):
    logits, halt, y = _batch(6, 5, seed=seed)
    halt = halt * 0.3  # keep scores close so the hinge is active
    losses = step_losses(logits, y)
    frac, margin = 0.2, 0.25
    r = ranking_losses(halt, losses, frac, margin)
    m = set_size(30, frac)
    expected = _brute_force_rel(halt.reshape(-1).tolist(), losses.reshape(-1).tolist(), m, margin)
    assert math.isclose(float(r.rel), expected, rel_tol=1e-5)
    # L_abs against the probability form of torch's BCE
    pe, pd = torch.sigmoid(halt[r.easy_mask]), torch.sigmoid(halt[r.hard_mask])
    expected_abs = (F.binary_cross_entropy(pe, torch.ones_like(pe))
                    + F.binary_cross_entropy(pd, torch.zeros_like(pd)))
    assert torch.allclose(r.abs, expected_abs, atol=1e-6)


def test_abs_is_stable_for_saturated_logits():
    losses = torch.arange(8.0).reshape(2, 4)
    z = torch.tensor([[60.0, 60.0, 0.0, 0.0], [0.0, 0.0, -60.0, -60.0]])  # easy saturated at 1
    r = ranking_losses(z, losses, rank_frac=0.25)
    assert torch.isfinite(r.abs) and float(r.abs) < 1e-6
    r = ranking_losses(-z, losses, rank_frac=0.25)  # saturated the wrong way: large, finite
    assert torch.isfinite(r.abs) and math.isclose(float(r.abs), 120.0, rel_tol=1e-4)


# --- per-step sets and pairs (loss.rank_pairs = "per_step") ------------------------------------

def _brute_force_per_step(z, losses, frac, margin):
    """L_rel and L_abs by explicit same-step pairs: loops over t, then (easy, hard) in column t."""
    n, t = losses.shape
    m = set_size(n, frac)
    rels, bce = [], []
    for s in range(t):
        col = sorted(range(n), key=lambda i: (float(losses[i, s]), i))
        easy, hard = col[:m], col[n - m:]
        p = lambda i: 1.0 / (1.0 + math.exp(-float(z[i, s])))
        rels.append(sum(max(0.0, margin - (p(e) - p(d))) for e in easy for d in hard) / m ** 2)
        bce.append((sum(-math.log(p(e)) for e in easy) / m, sum(-math.log(1 - p(d)) for d in hard) / m))
    rel = sum(rels) / t
    abs_ = sum(b[0] for b in bce) / t + sum(b[1] for b in bce) / t
    return rel, abs_


@pytest.mark.parametrize("n,t,frac,seed",
                         [(8, 4, 0.25, 0), (7, 3, 0.5, 1), (16, 5, 0.125, 2), (3, 2, 0.25, 3)])
def test_per_step_rel_and_abs_known_answer(n, t, frac, seed):
    logits, halt, y = _batch(n, t, seed=seed)
    halt = halt * 0.3  # scores close together: most hinges active
    losses = step_losses(logits, y)
    r = ranking_losses(halt, losses, frac, 0.25, pairs="per_step")
    rel, abs_ = _brute_force_per_step(halt, losses, frac, 0.25)
    assert math.isclose(float(r.rel), rel, rel_tol=1e-5) and math.isclose(float(r.abs), abs_, rel_tol=1e-5)
    # each step holds its own m easiest and m hardest samples
    m = set_size(n, frac)
    assert r.easy_mask.sum(0).tolist() == [m] * t and r.hard_mask.sum(0).tolist() == [m] * t
    for s in range(t):
        col = losses[:, s].sort().values
        assert losses[r.easy_mask[:, s], s].max() <= col[m - 1] <= losses[~r.easy_mask[:, s], s].min()
    # one step's sets and pairs are the global ones of that step's column alone
    cols = [ranking_losses(halt[:, s:s + 1], losses[:, s:s + 1], frac, 0.25) for s in range(t)]
    assert torch.allclose(r.rel, torch.stack([c.rel for c in cols]).mean(), atol=1e-7)
    assert torch.equal(r.easy_mask, torch.cat([c.easy_mask for c in cols], 1))


def test_per_step_pairs_never_cross_steps():
    # Later steps easier for every sample (losses fall with t) and a score that only counts
    # steps (equal within a step, rising with t): the global sets put every easy entry at a late
    # step and every hard one at an early step, and the score ranks them perfectly, so no hinge
    # is active. Per step, easy and hard entries share a step and so a score: every same-step
    # hinge is exactly the margin. A pair across steps anywhere would lower the mean below it.
    n, t = 6, 4
    losses = torch.arange(t, 0, -1.0)[None] + 0.01 * torch.arange(n)[:, None]  # (N, T)
    z = torch.linspace(-3, 3, t)[None].expand(n, t).clone()  # a step counter
    glob = ranking_losses(z, losses, 0.25, 0.2)
    assert float(glob.rel) == 0.0
    assert glob.easy_mask[:, -1].all() and glob.hard_mask[:, 0].all()  # the last / first step
    per = ranking_losses(z, losses, 0.25, 0.2, pairs="per_step")
    assert math.isclose(float(per.rel), 0.2, rel_tol=1e-6)
    assert per.easy_mask.sum(0).tolist() == per.hard_mask.sum(0).tolist() == [1] * t
    # shifting every score of one step moves no same-step difference (it would move every pair
    # of that step with another step), so the per-step loss stays exactly the margin
    for s in range(t):
        z_moved = z.clone()
        z_moved[:, s] += 0.5
        assert math.isclose(float(ranking_losses(z_moved, losses, 0.25, 0.2, pairs="per_step").rel),
                            0.2, rel_tol=1e-6)


def test_per_step_pairs_in_total_loss_and_bad_value():
    logits, halt, y = _batch()
    cfg = LossConfig(rank_pairs="per_step", rank_frac=0.25)
    loss, parts = total_loss(logits, halt, y, cfg)
    r = ranking_losses(halt, step_losses(logits, y), 0.25, cfg.margin, pairs="per_step")
    assert torch.allclose(loss, task_loss(logits, y) + r.rel + 0.1 * r.abs)
    glob = LossConfig(rank_pairs="global", rank_frac=0.25)
    assert float(parts["rel"]) != float(total_loss(logits, halt, y, glob)[1]["rel"])
    with pytest.raises(ValueError, match=r"pairs='within'.*\('global', 'per_step'\)"):
        ranking_losses(halt, step_losses(logits, y), pairs="within")


# --- gradients -------------------------------------------------------------------------------

def test_ranking_gradient_reaches_halt_logits_only():
    logits, halt, y = _batch(requires_grad=True)
    r = ranking_losses(halt, step_losses(logits, y))
    (r.rel + r.abs).backward()
    assert logits.grad is None  # the loss matrix is detached
    assert halt.grad is not None and halt.grad.abs().sum() > 0
    in_sets = r.easy_mask | r.hard_mask
    assert (halt.grad[~in_sets] == 0).all()  # entries in neither set get nothing


def test_total_loss_gradients_task_through_last_step_only():
    logits, halt, y = _batch(requires_grad=True)
    loss, _ = total_loss(logits, halt, y, LossConfig())
    loss.backward()
    assert (logits.grad[:, :-1] == 0).all() and logits.grad[:, -1].abs().sum() > 0
    assert halt.grad.abs().sum() > 0


# --- total loss ------------------------------------------------------------------------------

def test_total_loss_with_ranking_off_is_task_loss():
    logits, halt, y = _batch(requires_grad=True)
    cfg = LossConfig(ranking=False, label_smoothing=0.1)
    loss, parts = total_loss(logits, halt, y, cfg)
    assert torch.equal(loss, task_loss(logits, y, 0.1))
    assert set(parts) == {"loss", "task", "rel", "abs", "easy_score", "hard_score"}
    assert all(not v.requires_grad for v in parts.values())
    loss.backward()
    assert halt.grad is None  # the diagnostics are not differentiated


def test_total_loss_with_ranking_combines_terms():
    logits, halt, y = _batch()
    cfg = LossConfig(lambda_rel=0.7, lambda_abs=0.3, margin=0.5, rank_frac=0.125)
    loss, parts = total_loss(logits, halt, y, cfg)
    r = ranking_losses(halt, step_losses(logits, y), 0.125, 0.5, cfg.rank_pairs)  # per_step, the default
    assert isinstance(r, RankingLosses)
    assert torch.allclose(loss, task_loss(logits, y) + 0.7 * r.rel + 0.3 * r.abs)
    assert math.isclose(float(parts["rel"]), float(r.rel), rel_tol=1e-6)
    assert math.isclose(float(parts["easy_score"]), float(r.easy_score), rel_tol=1e-6)


def test_bf16_autocast_does_not_raise():
    torch.manual_seed(0)
    feats = torch.randn(16, 4, 12)
    y = torch.randint(0, 5, (16,))
    cls, halt_head = torch.nn.Linear(12, 5), torch.nn.Linear(12, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = cls(feats)  # (N, T, K) bf16
        halt = halt_head(feats).squeeze(-1)  # (N, T) bf16
        assert logits.dtype == torch.bfloat16
        loss, parts = total_loss(logits, halt, y, LossConfig())
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(halt_head.weight.grad).all() and halt_head.weight.grad.abs().sum() > 0


# --- PonderNet --------------------------------------------------------------------------------

def test_halting_distribution_sums_to_one_with_the_rest_on_the_last_step():
    halt = torch.tensor([[0.0, 0.0, 0.0, 0.0], [60.0, 3.0, -2.0, 9.0], [-60.0, -60.0, -60.0, 5.0]])
    p = log_halting_distribution(halt).exp()
    assert torch.allclose(p.sum(1), torch.ones(3), atol=1e-6)
    assert torch.allclose(p[0], torch.tensor([0.5, 0.25, 0.125, 0.125]))  # lambda = 1/2 each step
    assert p[1, 0] > 0.999 and p[2, -1] > 0.999  # halts at once; never halts: T takes the mass
    assert torch.isfinite(log_halting_distribution(torch.full((2, 5), 1e4)).exp()).all()


def test_geometric_prior_truncated_and_renormalised():
    log_prior = log_geometric_prior(0.2, 4)
    g = torch.tensor([0.2 * 0.8 ** t for t in range(4)])
    assert torch.allclose(log_prior.exp(), g / g.sum())
    with pytest.raises(ValueError, match="lambda_p"):
        log_geometric_prior(1.0, 4)


def test_ponder_loss_known_answer():
    logits, halt, y = _batch(6, 5, seed=1)
    out = ponder_loss(logits, halt, y, prior=0.3, beta=0.5)
    p = log_halting_distribution(halt).exp()
    ce = torch.stack([F.cross_entropy(logits[:, t], y, reduction="none") for t in range(5)], 1)
    prior = log_geometric_prior(0.3, 5).exp()
    kl = (p * (p.log() - prior.log())).sum(1).mean()
    assert torch.allclose(out.ce, (p * ce).sum(1).mean(), atol=1e-6)
    assert torch.allclose(out.kl, kl, atol=1e-6) and float(out.kl) > 0
    assert torch.allclose(out.loss, out.ce + 0.5 * out.kl)
    assert torch.allclose(out.halting, p)


def test_ponder_kl_vanishes_when_lambda_follows_the_prior():
    # the prior's own hazards lambda_t = p_G(t) / (1 - sum_{s<t} p_G(s)) give p = p_G exactly
    prior = log_geometric_prior(0.125, 16).double().exp()
    left = 1 - torch.cat([torch.zeros(1, dtype=torch.float64), prior.cumsum(0)[:-1]])
    hazard = (prior / left).clamp(max=1 - 1e-9)
    halt = torch.logit(hazard).float().expand(3, 16)
    logits, _, y = _batch(3, 16, seed=2)
    out = ponder_loss(logits, halt, y, prior=0.125, beta=1.0)
    assert abs(float(out.kl)) < 1e-5
    # a constant lambda = lambda_p is the untruncated geometric with its tail on T: not the prior
    const = torch.full((3, 16), math.log(0.125 / 0.875))
    assert float(ponder_loss(logits, const, y, prior=0.125).kl) > 1e-3


def test_ponder_gradient_reaches_logits_and_halt_logits():
    logits, halt, y = _batch(requires_grad=True)
    ponder_loss(logits, halt, y).loss.backward()
    assert (logits.grad.abs().sum(-1) > 0).all()  # every step's prediction is weighted by p_t
    assert (halt.grad[:, :-1].abs() > 0).all()
    assert (halt.grad[:, -1] == 0).all()  # the last step takes the rest: its lambda is unused


def test_total_loss_with_ponder():
    logits, halt, y = _batch(requires_grad=True)
    cfg = LossConfig(ranking=False, ponder=True, ponder_prior=0.2, ponder_beta=0.05)
    loss, parts = total_loss(logits, halt, y, cfg)
    assert torch.allclose(loss, ponder_loss(logits, halt, y, 0.2, 0.05).loss)
    assert torch.allclose(parts["task"], task_loss(logits, y))  # still the final step's CE
    assert set(parts) == {"loss", "task", "rel", "abs", "easy_score", "hard_score"}
    loss.backward()
    assert halt.grad.abs().sum() > 0 and logits.grad[:, 0].abs().sum() > 0


def test_ponder_under_bf16_autocast():
    logits, halt, y = _batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = ponder_loss(logits.bfloat16(), halt.bfloat16(), y)
    assert out.loss.dtype == torch.float32 and torch.isfinite(out.loss)


# --- beyond the paper: deep supervision, self-distillation, a directly trained halting head --------

def _readouts(preds: list[list[int]], k: int = 3) -> torch.Tensor:
    """(N, T, K) logits whose argmax at each step is ``preds[i][t]``."""
    p = torch.tensor(preds)
    return torch.nn.functional.one_hot(p, k).float() * 5.0


def test_halt_targets_known_answers():
    from frost_nb.losses import halt_targets

    y = torch.tensor([0, 1, 2])
    logits = _readouts([[1, 0, 0, 1],   # right at steps 2-3, wrong at the end
                        [0, 0, 2, 2],   # never right
                        [2, 1, 2, 2]])  # right at 1, 3, 4
    assert halt_targets(logits, y, "correct").tolist() == [[0, 1, 1, 0], [0, 0, 0, 0], [1, 0, 1, 1]]
    assert halt_targets(logits, y, "settled").tolist() == [[1, 0, 0, 1], [0, 0, 1, 1], [1, 0, 1, 1]]
    # safe: right now, or no later step is right (stopping loses nothing)
    assert halt_targets(logits, y, "safe").tolist() == [[0, 1, 1, 1], [1, 1, 1, 1], [1, 0, 1, 1]]
    with pytest.raises(ValueError, match="target"):
        halt_targets(logits, y, "none")


def test_distill_loss_is_zero_when_every_readout_is_the_last_and_pulls_towards_it():
    from frost_nb.losses import distill_loss

    same = torch.randn(4, 1, 5).expand(4, 6, 5).clone()
    assert distill_loss(same).item() == pytest.approx(0.0, abs=1e-6)
    logits = torch.randn(4, 6, 5, requires_grad=True)
    distill_loss(logits).backward()
    assert logits.grad[:, -1].abs().max().item() == 0.0  # the last readout is the detached target
    assert logits.grad[:, :-1].abs().sum().item() > 0


def test_variant_terms_are_off_by_default_and_add_up_when_on():
    from frost_nb.config import make_config
    from frost_nb.losses import _per_step_ce, distill_loss, halt_targets, total_loss

    torch.manual_seed(0)
    logits, halt, y = torch.randn(8, 4, 5), torch.randn(8, 4), torch.randint(0, 5, (8,))
    base = make_config("smoke", **{"loss.ranking": False}).loss
    plain, _ = total_loss(logits, halt, y, base)
    assert plain.item() == pytest.approx(F.cross_entropy(logits[:, -1], y).item())
    on = make_config("smoke", **{"loss.ranking": False, "loss.deep_supervision": 0.5, "loss.distill": 2.0,
                                 "loss.halt_target": "safe", "loss.lambda_halt": 3.0}).loss
    full, _ = total_loss(logits, halt, y, on)
    expected = (plain + 0.5 * _per_step_ce(logits, y).mean() + 2.0 * distill_loss(logits)
                + 3.0 * F.binary_cross_entropy_with_logits(halt, halt_targets(logits, y, "safe")))
    assert full.item() == pytest.approx(expected.item(), rel=1e-6)


def test_a_halt_target_replaces_the_ranking_losses():
    from frost_nb.config import ConfigError, make_config

    with pytest.raises(ConfigError, match=r"loss\.halt_target.*loss\.ranking=False"):
        make_config("smoke", **{"loss.halt_target": "correct"})
    cfg = make_config("smoke", **{"loss.ranking": False, "loss.halt_target": "correct"}).loss
    assert cfg.halting_trained and cfg.score_halting
    assert not make_config("smoke", **{"loss.ranking": False, "loss.ponder": True}).loss.score_halting
