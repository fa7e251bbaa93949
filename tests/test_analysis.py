"""Analyses of the paper's geometric claims: trajectories, Table 1, contraction, gradient conflict."""

import math

import pytest
import torch

from frost_nb.analysis.trajectories import (
    adjacent_similarity,
    contraction_bound,
    contraction_summary,
    cosine_to_final,
    fit_contraction,
    jacobian_norm,
    jacobian_norms,
    jacobian_summary,
    product_summary,
    scale_consistency_rows,
    similarity_matrix,
)
from frost_nb.config import LossConfig, make_config
from frost_nb.halting import _select
from frost_nb.losses import gradient_conflict
from frost_nb.models import create_model
from frost_nb.training import full_depth_pass, train


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
    traj = full_depth_pass(model, batches, trajectories=True)
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
    traj = full_depth_pass(_model(), _batches(), trajectories=True, max_samples=7)
    assert len(traj) == 7 and traj.pooled.shape[:2] == (7, 6)
    with pytest.raises(ValueError, match=r"no samples \(an empty split, or max_samples=0\)"):
        full_depth_pass(_model(), _batches(), max_samples=0)


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
    s = contraction_summary(full_depth_pass(_model(), _batches(), trajectories=True))
    assert s["kappa_q25"] <= s["kappa"] <= s["kappa_q75"]
    assert 0 <= s["contracting"] <= 1 and 0 <= s["bound_holds"] <= s["contracting"]


def _manual_cosine(model, x, y, loss, column=None):
    """Reference: two separate backward passes, gradients read from .grad (``column``: the
    ranking loss of that step alone, its sets within the step)."""
    def grads(which):
        model.zero_grad(set_to_none=True)
        from frost_nb.losses import ranking_losses, step_losses, task_loss
        out = model(x)
        if which == "task":
            task_loss(out.logits, y).backward()
        else:
            halt, lm, pairs = out.halt_logits, step_losses(out.logits, y), loss.rank_pairs
            if column is not None:
                halt, lm, pairs = halt[:, column:column + 1], lm[:, column:column + 1], "per_step"
            r = ranking_losses(halt, lm, loss.rank_frac, loss.margin, pairs)
            (loss.lambda_rel * r.rel + loss.lambda_abs * r.abs).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    a, b = grads("task"), grads("rank")
    names = [n for n in a if n in b and not n.startswith(("head.", "head_norm.", "halt_head."))]
    ga = torch.cat([a[n].flatten() for n in names])
    gb = torch.cat([b[n].flatten() for n in names])
    return torch.nn.functional.cosine_similarity(ga, gb, dim=0).item()


@pytest.mark.parametrize("name,pairs", [("recurrent", "global"), ("frost", "global"), ("frost", "per_step")])
def test_gradient_conflict_matches_two_backward_passes(name, pairs):
    model = _model(name)
    x, y = _batches(n=16, batch=16)[0]
    loss = LossConfig(rank_pairs=pairs)
    got = gradient_conflict(model, x, y, loss)
    assert all(p.grad is None for p in model.parameters())  # the caller's grads are left alone
    assert -1 <= got["cosine"] <= 1 and got["rank_norm"] > 0 and got["task_norm"] > 0
    assert got["cosine"] == pytest.approx(_manual_cosine(model, x, y, loss), abs=1e-5)


def test_per_step_conflict_is_each_steps_own_ranking_loss():
    model = _model("frost")
    x, y = _batches(n=16, batch=16)[0]
    loss = LossConfig(rank_pairs="global", lambda_abs=1.0)
    got = gradient_conflict(model, x, y, loss, per_step=True)
    assert got["cosine"] == pytest.approx(gradient_conflict(model, x, y, loss)["cosine"], abs=1e-6)
    steps = model.config.steps
    assert len(got["step_cosines"]) == steps
    for t in (0, steps - 1):
        assert got["step_cosines"][t] == pytest.approx(_manual_cosine(model, x, y, loss, column=t), abs=1e-5)
    assert len({round(c, 6) for c in got["step_cosines"]}) > 1  # the steps differ


def test_gradient_conflict_without_backbone_gradient_is_undefined():
    x, y = _batches(n=16, batch=16)[0]
    got = gradient_conflict(_model(), x, y, LossConfig(rank_grad_to_backbone=False))
    assert math.isnan(got["cosine"]) and got["params"] == 0


def test_diagnostics_are_recorded_and_change_nothing(tiny_config, tmp_path):
    cfg = tiny_config.replace(**{"train.epochs": 1})
    plain = train(cfg, checkpoint=tmp_path / "a.pt")
    probed_cfg = cfg.replace(**{"train.diagnostics_every": 5})
    assert probed_cfg.identity() != cfg.identity()  # a separate stored run, with the extra history
    probed = train(probed_cfg, checkpoint=tmp_path / "b.pt")
    for (name, a), b in zip(plain.model.state_dict().items(), probed.model.state_dict().values()):
        assert torch.equal(a, b), name
    d = probed.history["diagnostics"]
    n_steps = len(probed.history["steps"]["step"])
    assert d["step"] == list(range(0, n_steps, 5))
    assert all(-1 <= c <= 1 for c in d["grad_cosine"])
    assert [len(c) for c in d["step_grad_cosine"]] == [cfg.model.steps] * len(d["step"])
    assert all(-1 <= c <= 1 for cs in d["step_grad_cosine"] for c in cs)
    assert plain.history["diagnostics"]["step"] == []


# --- contraction from Jacobian-vector products ----------------------------------------------------

def _linear_leaky(update="leaky", W=None, alpha=0.5, steps=4):
    """frost on smoke digits (width 16) whose branch is the 1x1 linear map W: its step map is
    affine with the linear part M = (1 - alpha) I + alpha W at every position (leaky), or
    I + alpha W (canonical), so ||d h_{t+1} / d h_t||_2 = ||M||_2 exactly."""
    model = _model(steps=steps, **{"model.update": update, "model.alpha_init": alpha}).double().eval()
    conv = torch.nn.Conv2d(16, 16, 1, bias=False).double()
    with torch.no_grad():
        conv.weight.copy_(W.view(16, 16, 1, 1))
    model.branches[0] = conv
    return model


def _double_batches(n=6, batch=4):
    return [(x.double(), y) for x, y in _batches(n=n, batch=batch)]


def test_jvp_norm_of_a_linear_step_map_is_its_operator_norm():
    W = torch.randn(16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(4)) / 6
    a = 0.5
    M = (1 - a) * torch.eye(16, dtype=torch.float64) + a * W
    exact = torch.linalg.matrix_norm(M, ord=2).item()
    assert 0.5 < exact < 1  # a contraction, though W itself is not symmetric
    norms = jacobian_norms(_linear_leaky(W=W, alpha=a, steps=3), _double_batches(n=5), iters=100)
    assert norms.shape == (5, 3)  # per sample and step
    torch.testing.assert_close(norms, torch.full((5, 3), exact, dtype=torch.float64), rtol=1e-6, atol=0)
    canonical = torch.eye(16, dtype=torch.float64) + a * W  # the residual form: I + alpha W
    got = jacobian_norms(_linear_leaky("canonical", W=W, alpha=a, steps=3), _double_batches(n=2), iters=100)
    torch.testing.assert_close(got, torch.full((2, 3), torch.linalg.matrix_norm(canonical, ord=2).item(),
                                               dtype=torch.float64), rtol=1e-6, atol=0)
    assert (got > 1).all()  # the residual form does not contract with this branch


def test_k_step_product_norm_of_a_linear_step_map_is_the_norm_of_its_power():
    # the step map's linear part M is not normal, so the 3-step product's norm ||M^3||_2 lies
    # strictly below ||M||_2^3: the product is measured, not the one-step norm raised to k
    W = torch.randn(16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(4)) / 6
    a = 0.5
    M = (1 - a) * torch.eye(16, dtype=torch.float64) + a * W
    exact = torch.linalg.matrix_norm(torch.linalg.matrix_power(M, 3), ord=2).item()
    assert exact < 0.95 * torch.linalg.matrix_norm(M, ord=2).item() ** 3
    model = _linear_leaky(W=W, alpha=a, steps=4)
    got = jacobian_norms(model, _double_batches(n=5), steps=3, start=1, iters=100)
    assert got.shape == (5, 1)  # one product per sample: d h_4 / d h_1
    torch.testing.assert_close(got, torch.full((5, 1), exact, dtype=torch.float64), rtol=1e-6, atol=0)
    windows = jacobian_norms(model, _double_batches(n=2), steps=2, iters=100)  # t = 0, 1, 2
    two = torch.linalg.matrix_norm(M @ M, ord=2).item()
    torch.testing.assert_close(windows, torch.full((2, 3), two, dtype=torch.float64), rtol=1e-6, atol=0)
    s = product_summary(got[:, 0], 3)
    assert s["product_steps"] == 3 and s["product_norm"] == pytest.approx(exact, rel=1e-6)
    with pytest.raises(ValueError, match="start"):
        jacobian_norms(model, _double_batches(n=2), steps=3, start=2)


def test_one_step_norms_are_the_products_of_one_step():
    # the default (steps 1 from t = 0) is the k = 1 case of the product: the same draws, the same norms
    model = _model(steps=3, **{"model.update": "leaky"}).eval()
    x, y = _batches(n=4, batch=4)[0]
    with torch.no_grad():
        h, ctx = model.prologue(x)
    one = jacobian_norm(model, h, ctx, 0, iters=5, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(jacobian_norms(model, [(x, y)], iters=5)[:, 0], one, rtol=0, atol=0)


def test_product_summary_known_answer():
    s = product_summary(torch.tensor([4.0, 1.0, 2.0, 3.0, 0.5]), 8)
    assert s == {"product_norm": 2.0, "product_norm_q25": 1.0, "product_norm_q75": 3.0, "product_steps": 8}
    with pytest.raises(ValueError, match="norms"):
        product_summary(torch.zeros(0), 8)


def test_jvp_summary_of_a_contraction_and_of_the_residual_form():
    # W symmetric with eigenvalues 0.3..0.45 and 0.6: leaky's M has norm 1 - a + 0.6 a < 1, the
    # canonical form's I + a W has norm 1 + 0.6 a > 1; every sample and step the same
    g = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(16, 16, dtype=torch.float64, generator=g))
    eig = torch.cat([torch.linspace(0.3, 0.45, 15), torch.tensor([0.6])]).double()
    W = q @ torch.diag(eig) @ q.T
    leaky = jacobian_summary(jacobian_norms(_linear_leaky(W=W, alpha=0.8), _double_batches(), iters=50))
    assert leaky["kappa_jvp"] == pytest.approx(0.68, rel=1e-6)
    assert leaky["jvp_norm"] == pytest.approx(0.68, rel=1e-6)
    assert leaky["jvp_below_one"] == 1.0 and leaky["jvp_contracting"] == 1.0
    res = jacobian_summary(jacobian_norms(_linear_leaky("canonical", W=W, alpha=0.8), _double_batches(),
                                          iters=50))
    assert res["kappa_jvp"] == pytest.approx(1.48, rel=1e-6)
    assert res["jvp_below_one"] == 0.0 and res["jvp_contracting"] == 0.0


@pytest.mark.parametrize("backbone", ["resnet", "vit"])
def test_jvp_norm_per_sample_against_the_full_jacobian(backbone):
    # a real (nonlinear) step: the batched power iteration gives each sample its own norm, a
    # lower bound of the exact one (from the full Jacobian) that comes close within 50 iterations
    torch.manual_seed(0)
    cfg = make_config("smoke", None, "frost", backbone, **{"model.steps": 3, "model.update": "leaky"})
    model = create_model(cfg.model).double().eval()
    x = _double_batches(n=3, batch=3)[0][0]
    with torch.no_grad():
        ctx = model.context(model.embed(x))
        h = model.step(model.init_state(ctx), ctx, 0)
    est = jacobian_norm(model, h, ctx, 1, iters=50, generator=torch.Generator().manual_seed(0))
    assert est.shape == (3,)
    for i in range(3):
        one = _select(ctx, torch.tensor([i]), 3)
        J = torch.autograd.functional.jacobian(lambda z: model.step(z, one, 1), h[i:i + 1])  # noqa: B023
        exact = torch.linalg.matrix_norm(J.reshape(h[0].numel(), -1), ord=2).item()
        assert 0.97 * exact <= est[i].item() <= exact * (1 + 1e-9)
    assert len(set(est.tolist())) == 3  # samples differ


def test_jvp_summary_known_answer_and_max_samples():
    norms = torch.tensor([[2.0, 0.9, 0.8], [0.5, 0.7, 1.2], [3.0, 0.6, 0.4]])
    s = jacobian_summary(norms, first_step=1)  # steps 1..2 only: 0.9 0.8 0.7 1.2 0.6 0.4
    assert s["jvp_norm"] == pytest.approx(0.75) and s["jvp_below_one"] == pytest.approx(5 / 6)
    assert s["jvp_contracting"] == pytest.approx(2 / 3) and s["kappa_jvp"] == pytest.approx(0.9)
    assert jacobian_summary(norms)["jvp_contracting"] == 0.0
    with pytest.raises(ValueError, match="first_step"):
        jacobian_summary(norms, first_step=3)
    model = _model(steps=2, **{"model.update": "leaky"}).eval()
    assert jacobian_norms(model, _batches(), iters=3, max_samples=7).shape == (7, 2)
