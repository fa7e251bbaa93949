"""Analyses of the paper's geometric claims: trajectories, Table 1, contraction, gradient conflict."""

import math

import pytest
import torch

from frost_nb.analysis import (
    adjacent_similarity,
    collect_trajectories,
    contraction_bound,
    contraction_summary,
    cosine_to_final,
    fit_contraction,
    gradient_conflict,
    scale_consistency_rows,
    similarity_matrix,
)
from frost_nb.config import LossConfig, make_config
from frost_nb.models import create_model
from frost_nb.training import Trainer


def _model(name="frost", steps=5, **kw):
    torch.manual_seed(0)
    return create_model(make_config("smoke", None, name, **{"model.steps": steps, **kw}).model)


def _batches(n=12, seed=0, size=8, batch=5):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, size, size, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    return [(x[i:i + batch], y[i:i + batch]) for i in range(0, n, batch)]


@pytest.mark.parametrize("name", ["vanilla", "recurrent", "basic_ssm", "frost"])
def test_trajectories_equal_the_forward_pass(name):
    model = _model(name).eval()
    batches = _batches()
    traj = collect_trajectories(model, batches)
    x = torch.cat([b[0] for b in batches])
    with torch.no_grad():
        out = model(x, return_states=True)
    torch.testing.assert_close(traj.logits, out.logits)
    torch.testing.assert_close(traj.halt_logits, out.halt_logits)
    torch.testing.assert_close(traj.pooled[:, 1:], out.pooled)
    h = out.states.flatten(2)  # (N, T+1, S)
    torch.testing.assert_close(traj.step_norms, (h[:, 1:] - h[:, :-1]).norm(dim=2))
    torch.testing.assert_close(traj.dist_to_final, (h - h[:, -1:]).norm(dim=2))
    torch.testing.assert_close(traj.state_norms, h.norm(dim=2))
    d = h[:, 1:] - h[:, :-1]
    torch.testing.assert_close(traj.second_diff_norms, (d[:, 1:] - d[:, :-1]).norm(dim=2))
    assert len(traj) == 12 and traj.steps == 5


def test_trajectories_stop_at_max_samples():
    traj = collect_trajectories(_model(), _batches(), max_samples=7)
    assert len(traj) == 7 and traj.pooled.shape[:2] == (7, 6)


def _rotating(n=4, steps=6, angle=0.3):
    """Pooled states at known angles from the last one: step t is (T - t) * angle away."""
    theta = (steps - torch.arange(steps + 1, dtype=torch.float32)) * angle  # (T+1,)
    v = torch.stack([theta.cos(), theta.sin(), torch.zeros_like(theta)], 1)  # (T+1, 3)
    scale = torch.arange(1, n + 1, dtype=torch.float32)[:, None, None]  # norms must not matter
    return v[None] * scale  # (N, T+1, 3)


def test_scale_consistency_of_known_angles():
    pooled = _rotating()
    cos = cosine_to_final(pooled)
    torch.testing.assert_close(cos[0], ((6 - torch.arange(7)) * 0.3).cos().float())
    rows = scale_consistency_rows(pooled, steps=(1, 3, 6))
    assert [r["step"] for r in rows] == [1, 3, 6]
    assert rows[0]["mean"] == pytest.approx(math.cos(1.5), abs=1e-6)
    assert rows[2]["mean"] == pytest.approx(1.0) and rows[2]["std"] == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="step 9"):
        scale_consistency_rows(pooled, steps=(9,))


def test_similarity_matrix_is_symmetric_with_unit_diagonal():
    pooled = _rotating()
    m = similarity_matrix(pooled)
    torch.testing.assert_close(m, m.T)
    torch.testing.assert_close(torch.diagonal(m), torch.ones(7))
    assert m[0, 6].item() == pytest.approx(math.cos(1.8), abs=1e-6)
    torch.testing.assert_close(adjacent_similarity(pooled), torch.full((6,), math.cos(0.3)))


def _geometric(kappa, n_steps=12, scale=2.0):
    """A linear contraction to h* = 1: h_t = h* + kappa^t (h_0 - h*), in 3 dimensions."""
    t = torch.arange(n_steps + 1, dtype=torch.float64)
    h = 1.0 + (kappa ** t)[:, None] * torch.tensor([scale, -scale, 0.5], dtype=torch.float64)
    h = h[None]  # (1, T+1, 3)
    steps = (h[:, 1:] - h[:, :-1]).norm(dim=2).float()
    dist = (h - h[:, -1:]).norm(dim=2).float()
    return steps, dist


@pytest.mark.parametrize("kappa", [0.3, 0.7, 0.95])
def test_contraction_rate_and_bound_of_a_linear_contraction(kappa):
    steps, dist = _geometric(kappa)
    k = fit_contraction(steps)
    assert k.item() == pytest.approx(kappa, rel=1e-4)
    assert contraction_bound(steps, dist, k).all()  # the bound is exact for a linear map
    # a rate too small makes the bound fail (it must be able to fail)
    assert not contraction_bound(steps, dist, k * 0.5).all()


def test_expanding_steps_never_satisfy_the_bound():
    steps, dist = _geometric(1.2)
    k = fit_contraction(steps)
    assert k.item() == pytest.approx(1.2, rel=1e-4)
    assert not contraction_bound(steps, dist, k).any()


def test_contraction_summary_on_a_model():
    s = contraction_summary(collect_trajectories(_model(), _batches()))
    assert s["kappa_q25"] <= s["kappa"] <= s["kappa_q75"]
    assert 0 <= s["contracting"] <= 1 and 0 <= s["bound_holds"] <= s["contracting"]


def _manual_cosine(model, x, y, loss):
    """Reference: two separate backward passes, gradients read from .grad."""
    def grads(which):
        model.zero_grad(set_to_none=True)
        from frost_nb.losses import ranking_losses, step_losses, task_loss
        out = model(x)
        if which == "task":
            task_loss(out.logits, y).backward()
        else:
            r = ranking_losses(out.halt_logits, step_losses(out.logits, y), loss.rank_frac, loss.margin)
            (loss.lambda_rel * r.rel + loss.lambda_abs * r.abs).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    a, b = grads("task"), grads("rank")
    names = [n for n in a if n in b and not n.startswith(("head.", "head_norm.", "halt_head."))]
    ga = torch.cat([a[n].flatten() for n in names])
    gb = torch.cat([b[n].flatten() for n in names])
    return torch.nn.functional.cosine_similarity(ga, gb, dim=0).item()


@pytest.mark.parametrize("name", ["recurrent", "frost"])
def test_gradient_conflict_matches_two_backward_passes(name):
    model = _model(name)
    x, y = _batches(n=16, batch=16)[0]
    loss = LossConfig()
    got = gradient_conflict(model, x, y, loss)
    assert all(p.grad is None for p in model.parameters())  # the caller's grads are left alone
    assert -1 <= got["cosine"] <= 1 and got["rank_norm"] > 0 and got["task_norm"] > 0
    assert got["cosine"] == pytest.approx(_manual_cosine(model, x, y, loss), abs=1e-5)


def test_gradient_conflict_without_backbone_gradient_is_undefined():
    x, y = _batches(n=16, batch=16)[0]
    got = gradient_conflict(_model(), x, y, LossConfig(rank_grad_to_backbone=False))
    assert math.isnan(got["cosine"]) and got["params"] == 0


def test_diagnostics_are_recorded_and_change_nothing(tiny_config, tmp_path):
    cfg = tiny_config.replace(**{"train.epochs": 1})
    plain = Trainer(cfg, checkpoint=tmp_path / "a.pt").fit()
    probed_cfg = cfg.replace(**{"train.diagnostics_every": 5})
    assert probed_cfg.key() != cfg.key()  # a separate cached run, with the extra history
    probed = Trainer(probed_cfg, checkpoint=tmp_path / "b.pt").fit()
    for (name, a), b in zip(plain.model.state_dict().items(), probed.model.state_dict().values()):
        assert torch.equal(a, b), name
    d = probed.history["diagnostics"]
    n_steps = len(probed.history["steps"]["step"])
    assert d["step"] == list(range(0, n_steps, 5))
    assert all(-1 <= c <= 1 for c in d["grad_cosine"])
    assert plain.history["diagnostics"]["step"] == []
