"""frost_nb.dfmamba.model and .scan: the fast scan against the loop (outputs and gradients), the block
against mambapy's, pinned parameter counts (the full model, each ablation), level lengths, the step's
scaling and clip, the gate-flow loss, channel independence."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from mambapy.mamba import MambaConfig, ResidualBlock

from frost_nb.dfmamba import model as M
from frost_nb.dfmamba import scan
from frost_nb.dfmamba.model import DFMamba, DFMambaConfig, level_lengths, total_loss

PAPER = DFMambaConfig()  # Table 11, look-back 336, horizon 96
SMALL = DFMambaConfig(channels=2, lookback=40, horizon=6, d_model=8, d_state=4, d_conv=3, dt_rank=2)


def scan_inputs(n, length, e=5, s=3, big_steps=False, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g, dtype=dtype)
    dt = F.softplus(r(n, length, e)) * (8.0 if big_steps else 1.0)  # up to the clip: decays near 0
    A = -torch.exp(r(e, s) + (2.0 if big_steps else 0.0))
    return [t.requires_grad_() for t in (r(n, length, e), dt, A, r(n, length, s), r(n, length, s), r(e))]


def outputs_and_grads(fn, inputs, seed=1):
    y = fn(*inputs)
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed), dtype=y.dtype)
    return y, torch.autograd.grad(y, inputs, gy)


# --- the scan ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("n, length, chunk, block", [(5, 37, 8, 2), (3, 8, 8, 64), (4, 33, 4, 3),
                                                     (2, 1, 8, 1), (6, 30, 1, 4), (3, 29, 64, 2)])
@pytest.mark.parametrize("big_steps", [False, True])
def test_chunked_scan_equals_the_loop(n, length, chunk, block, big_steps):
    inputs = scan_inputs(n, length, big_steps=big_steps)
    y, grads = outputs_and_grads(scan.sequential_scan, inputs)
    y_fast, grads_fast = outputs_and_grads(lambda *a: scan.chunked_scan(*a, chunk=chunk, block=block), inputs)
    torch.testing.assert_close(y_fast, y, rtol=1e-12, atol=1e-12)
    for name, g, g_fast in zip(("x", "dt", "A", "B", "C", "D"), grads, grads_fast):
        torch.testing.assert_close(g_fast, g, rtol=1e-11, atol=1e-11, msg=lambda m, v=name: f"d/d{v}: {m}")
    with torch.no_grad():  # the path without checkpoints
        y_no_grad = scan.chunked_scan(*inputs, chunk=chunk, block=block)
    torch.testing.assert_close(y_no_grad, y, rtol=1e-12, atol=1e-12)


def test_chunked_scan_gradcheck():
    inputs = scan_inputs(2, 9, e=3, s=2)
    assert torch.autograd.gradcheck(lambda *a: scan.chunked_scan(*a, chunk=4, block=1), inputs)


def test_chunked_scan_float32_with_vanishing_decays():
    """Steps x |A| far past float32's range (decays underflow): finite, and equal to the loop."""
    inputs = [t.detach().float().requires_grad_() for t in scan_inputs(3, 20, big_steps=True)]
    with torch.no_grad():
        inputs[2].mul_(50.0)  # dt A down to about -10^4
    y, grads = outputs_and_grads(scan.sequential_scan, inputs)
    y_fast, grads_fast = outputs_and_grads(scan.chunked_scan, inputs)
    torch.testing.assert_close(y_fast, y, rtol=1e-5, atol=1e-5)
    for g, g_fast in zip(grads, grads_fast):
        assert torch.isfinite(g_fast).all()
        torch.testing.assert_close(g_fast, g, rtol=1e-4, atol=1e-4)


def test_the_model_runs_the_fast_scan(monkeypatch):
    def refuse(*args):
        raise AssertionError("the reference loop ran")

    monkeypatch.setattr(M, "sequential_scan", refuse)
    model = DFMamba(SMALL)
    total_loss(model(torch.randn(2, 40, 2)), torch.randn(2, 6, 2), SMALL)[0].backward()
    with pytest.raises(AssertionError, match="reference loop"):  # and the switch reaches the loop
        DFMamba(dataclasses.replace(SMALL, scan_impl="sequential"))(torch.randn(2, 40, 2))


def test_scan_implementations_give_the_same_model():
    torch.manual_seed(0)
    fast = DFMamba(SMALL).double()
    loop = DFMamba(dataclasses.replace(SMALL, scan_impl="sequential")).double()
    loop.load_state_dict(fast.state_dict())
    x, y = torch.randn(3, 40, 2, dtype=torch.float64), torch.randn(3, 6, 2, dtype=torch.float64)
    for m in (fast, loop):
        total_loss(m(x), y, m.cfg)[0].backward()
    torch.testing.assert_close(fast(x).prediction, loop(x).prediction, rtol=1e-12, atol=1e-12)
    for (name, p), q in zip(fast.named_parameters(), loop.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-10, atol=1e-12, msg=lambda m, v=name: f"{v}: {m}")


# --- the block against mambapy ------------------------------------------------------------------------

@pytest.mark.parametrize("pscan", [False, True])
def test_level_zero_is_mambapy_residual_block(pscan):
    """At k = 0 the step is Mamba's (scale 1, far from the clip): x + block(RMSNorm(x)) is mambapy's
    ResidualBlock with the same weights (its parameters carry the same names and shapes)."""
    torch.manual_seed(0)
    cfg = dataclasses.replace(PAPER, d_model=16, d_state=4)
    ours = DFMamba(cfg)
    with torch.no_grad():  # off the initial values, so that every parameter counts
        for p in ours.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ref = ResidualBlock(MambaConfig(d_model=16, n_layers=1, d_state=4, expand_factor=2, d_conv=4, dt_rank=4,
                                    pscan=pscan))
    ref.mixer.load_state_dict(ours.blocks[0].state_dict())
    ref.norm.load_state_dict(ours.norms[0].state_dict())
    x = torch.randn(3, 50, 16, requires_grad=True)
    y, (gx,) = outputs_and_grads(lambda v: ours.local(v, 0), [x])
    y_ref, (gx_ref,) = outputs_and_grads(ref, [x])
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gx, gx_ref, rtol=1e-4, atol=1e-5)


# --- sizes --------------------------------------------------------------------------------------------

BLOCK, NORM, ENCODER, DECODER, GATE = 32_640, 64, 12_416, 12_480, 8_256
FULL = 98_465  # embed 128 + block + norm + encoder + decoder + gate + final norm 64 + head 32,352 + 65


def count(**fields):
    return sum(p.numel() for p in DFMamba(dataclasses.replace(PAPER, **fields)).parameters())


def test_mamba_block_has_32640_parameters():
    # in_proj 16,384, conv 640, x_proj 4,608, dt_proj 640, A_log 2,048, D 128, out_proj 8,192
    assert sum(p.numel() for p in M.MambaBlock(PAPER).parameters()) == BLOCK


def test_parameter_count_pinned_and_independent_of_depth():
    model = DFMamba(PAPER)
    parts = {name: sum(p.numel() for p in child.parameters()) for name, child in model.named_children()}
    assert parts == {"embed": 128, "blocks": BLOCK, "norms": NORM, "encoder": ENCODER, "decoder": DECODER,
                     "gate": GATE, "norm_f": 64, "head_time": 336 * 96 + 96, "head_out": 65}
    assert sum(parts.values()) == FULL
    assert [count(depth=k) for k in (2, 3, 4)] == [FULL] * 3


def test_variant_parameter_counts():
    assert count(variant="S3") == FULL + 3 * (BLOCK + NORM)  # one block and norm for each of k = 1..3
    assert count(variant="C2") == FULL - ENCODER - DECODER
    assert count(variant="C3") == FULL - GATE
    assert count(variant="S2") == FULL + 2 * (BLOCK + NORM) - ENCODER - DECODER - GATE
    assert [count(variant=v) for v in ("T2", "T3", "L4")] == [FULL] * 3
    # the numbers docs/df-mamba.md gives, and each variant's count at K = 2, 3, 4 (S2 and S3 grow with K)
    assert [count(variant=v) for v in ("S3", "C2", "C3", "S2")] == [196_577, 73_569, 90_209, 130_721]
    for k in (2, 4):
        assert [count(variant=v, depth=k) for v in ("full", "C2", "C3", "T2", "T3", "L4")] == \
            [FULL, FULL - ENCODER - DECODER, FULL - GATE, FULL, FULL, FULL]
        assert count(variant="S3", depth=k) == FULL + k * (BLOCK + NORM)


def test_level_lengths_and_shapes():
    assert level_lengths(PAPER) == [336, 168, 84, 42]
    assert level_lengths(dataclasses.replace(PAPER, depth=4)) == [336, 168, 84, 42, 21]
    assert level_lengths(dataclasses.replace(PAPER, lookback=45, depth=9)) == [45, 23, 12, 6]  # stops under 8
    assert level_lengths(dataclasses.replace(PAPER, variant="S2")) == [336]
    out = DFMamba(dataclasses.replace(PAPER, channels=2))(torch.randn(1, 336, 2))
    assert out.prediction.shape == (1, 96, 2)
    assert [g.shape for g in out.gates] == [(1, 2, n, 64) for n in (336, 168, 84)]
    odd = dataclasses.replace(SMALL, lookback=45, depth=9)  # zero-padded pairs at 45 and 23
    assert [g.shape[2] for g in DFMamba(odd)(torch.randn(2, 45, 2)).gates] == level_lengths(odd)[:-1]


# --- the step, the gate-flow loss, the losses ------------------------------------------------------

def test_step_scaling_and_clip():
    raw = torch.log(torch.expm1(torch.tensor([0.5, 3.0])))  # softplus(raw) = 0.5, 3.0
    expect = {"full": [[0.5, 3], [1, 6], [2, 8], [4, 8]],  # x 2^k, clipped at 8 (appendix A.14)
              "T2": [[0.5, 3], [1, 6], [1.5, 8], [2, 8]],  # x (1 + k)
              "T3": [[0.5, 3]] * 4}
    for variant, rows in expect.items():
        cfg = dataclasses.replace(PAPER, variant=variant)
        got = torch.stack([M.step_size(raw, k, cfg) for k in range(4)])
        torch.testing.assert_close(got, torch.tensor(rows, dtype=got.dtype), msg=variant)


def test_block_passes_the_clipped_step_to_the_scan(monkeypatch):
    seen = []
    monkeypatch.setattr(M, "chunked_scan", lambda u, dt, *rest: seen.append(dt) or u)
    block = M.MambaBlock(SMALL)
    with torch.no_grad():
        block.dt_proj.bias.fill_(1.0)  # softplus 1.31: x 2^3 = 10.5, clipped
        block.dt_proj.weight.zero_()
    for k in (0, 3):
        block(torch.randn(2, 10, 8), k)
    assert torch.allclose(seen[0], torch.tensor(1.3133), atol=1e-4) and torch.all(seen[1] == 8.0)


def test_flow_loss_on_constructed_gates():
    gates = [torch.full((2, 5, 3), v, requires_grad=True) for v in (0.2, 0.5, 0.9)]
    loss = M.flow_loss(gates)
    assert loss.item() == pytest.approx((0.2 - 0.5) ** 2 + (0.5 - 0.9) ** 2)
    loss.backward()  # each mean against the next level's, held fixed: level 2 is only a target
    for g, grad in zip(gates, (2 * (0.2 - 0.5), 2 * (0.5 - 0.9))):
        torch.testing.assert_close(g.grad, torch.full_like(g, grad / g.numel()))
    assert gates[2].grad is None


def test_total_loss_per_variant():
    x, y = torch.randn(2, 40, 2), torch.randn(2, 6, 2)
    for variant in ("full", "L4", "S2", "C2", "C3"):
        cfg = dataclasses.replace(SMALL, variant=variant)
        torch.manual_seed(0)
        out = DFMamba(cfg)(x)
        loss, parts = total_loss(out, y, cfg)
        task = F.mse_loss(out.prediction, y).item()
        aux = {k: v.item() for k, v in out.aux.items()}
        assert parts == pytest.approx({"loss": loss.item(), "task": task, **aux})
        weighted = task + aux["recon"] + aux["consist"] + 0.1 * aux["flow"]
        assert loss.item() == pytest.approx(task if variant == "L4" else weighted)
        zero = {"S2": ("recon", "consist", "flow"), "C2": ("recon",), "C3": ("flow",)}.get(variant, ())
        assert all((aux[k] == 0) == (k in zero) for k in aux), (variant, aux)
        assert len(out.gates) == (0 if variant in ("S2", "C3") else 3)


def test_channel_independence_and_instance_normalisation():
    torch.manual_seed(0)
    model = DFMamba(SMALL).double()
    x = torch.randn(2, 40, 2, dtype=torch.float64)
    base = model(x).prediction
    moved = x.clone()
    moved[..., 1] = 5 * torch.randn(2, 40, dtype=torch.float64)  # variable 1 only
    torch.testing.assert_close(model(moved).prediction[..., 0], base[..., 0], rtol=0, atol=1e-12)
    shifted = model(x + torch.tensor([3.0, -7.0], dtype=torch.float64)).prediction  # a level is undone
    torch.testing.assert_close(shifted, base + torch.tensor([3.0, -7.0], dtype=torch.float64))


def test_config_rejects_unknown_variant():
    with pytest.raises(ValueError, match="variant"):
        DFMambaConfig(variant="S9")


def test_the_optimiser_spares_mambas_a_and_d_from_weight_decay():
    """Mamba marks A_log and D ``_no_weight_decay``; the library's optimiser honours the mark (A_log is 2-D,
    so the rule "no decay on 1-D parameters" alone would decay it)."""
    from types import SimpleNamespace

    from frost_nb.training import make_optimizer

    model = DFMamba(DFMambaConfig(lookback=16, horizon=4, depth=1))
    opt = make_optimizer(model, SimpleNamespace(weight_decay=0.05, optimizer="adamw", lr=1e-4))
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    block = model.blocks[0]
    assert id(block.A_log) not in decayed and id(block.D) not in decayed
    assert id(block.in_proj.weight) in decayed and id(block.dt_proj.bias) not in decayed
