"""frost_nb.models: pinned parameter counts and FLOPs, shapes, and the update rules' identities."""

import dataclasses
import math

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from frost_nb.config import ConfigError, ModelConfig, make_config
from frost_nb.halting import _select
from frost_nb.models import ChannelsLastMaxPool2d, FrostNet, ModelOutput, StepContext, create_model

NAMES = ("vanilla", "recurrent", "basic_ssm", "frost")
BACKBONES = ("resnet", "vit")
# small models: 8x8 images, 4 steps, width 16 (a fraction of a second each on a CPU)
SMALL = dict(in_channels=3, image_size=8, num_classes=5, steps=4, width=16, bottleneck=8,
             stem_stride=1, norm_groups=4, patch_size=2, heads=2, mlp_ratio=2.0)


def small(name, backbone, seed=0, **fields):
    torch.manual_seed(seed)
    return create_model(name, backbone=backbone, **(SMALL | fields))


def images(n=6, seed=1):
    return torch.randn(n, 3, 8, 8, generator=torch.Generator().manual_seed(seed))


def paper_model(name, backbone, **fields):
    cfg = make_config("paper", "imagenet100", name, backbone).model
    cfg = dataclasses.replace(cfg, **fields) if fields else cfg  # the paper size as config.py has it
    with torch.device("meta"):  # shapes only: 86M parameters in no time
        return create_model(cfg)


# --- parameter counts and FLOPs at the paper's settings (ImageNet-100, 224 px) ------------------

PAPER_PARAMS = {  # ours, exact (heads included; the halting head's LayerNorm, model.halt_norm, too)
    ("resnet", "vanilla"): 1_191_525, ("resnet", "recurrent"): 135_525,
    ("resnet", "basic_ssm"): 1_515_237, ("resnet", "frost"): 1_515_238,
    ("vit", "vanilla"): 85_876_325, ("vit", "recurrent"): 7_909_733,
    ("vit", "basic_ssm"): 20_896_613, ("vit", "frost"): 20_896_614,
}
HEADS = {"resnet": 26_981, "vit": 80_741}  # LayerNorm + Linear classifier, LayerNorm + Linear halting
TABLE3 = {  # the paper's Table 3, millions
    ("resnet", "vanilla"): 1.24, ("resnet", "recurrent"): 0.11,
    ("resnet", "basic_ssm"): 1.49, ("resnet", "frost"): 1.49,
    ("vit", "vanilla"): 85.80, ("vit", "recurrent"): 7.83,
    ("vit", "basic_ssm"): 20.81, ("vit", "frost"): 20.81,
}


@pytest.mark.parametrize("backbone", BACKBONES)
@pytest.mark.parametrize("name", NAMES)
def test_paper_parameter_counts(name, backbone):
    model = paper_model(name, backbone)
    n = model.num_parameters()
    assert n == PAPER_PARAMS[backbone, name]
    heads = sum(p.numel() for k, p in model.named_parameters() if k.startswith(("head", "halt_head")))
    assert heads == HEADS[backbone]
    # without the heads our counts round to Table 3's (the paper seems to leave the heads out),
    # except the ResNet vanilla row (1.16 against 1.24; see docs/parameters.md)
    ours = round((n - heads) / 1e6, 2)
    if (backbone, name) == ("resnet", "vanilla"):
        assert ours == 1.16
    elif (backbone, name) in (("vit", "basic_ssm"), ("vit", "frost")):
        assert ours == 20.82  # hidden 2816; 2813..2815 would give 20.81
    else:
        assert ours == TABLE3[backbone, name]


def test_paper_parameter_breakdown():
    # ResNet bottleneck branch at 256/64: three convolutions and three GroupNorms
    model = paper_model("vanilla", "resnet")
    branch = sum(p.numel() for p in model.branches[0].parameters())
    assert branch == 256 * 64 * 2 + 64 * 64 * 9 + 2 * (64 + 64 + 256) == 70_400
    # ViT-B encoder block: 7,087,872 (as timm's); 11 more in vanilla than in recurrent
    assert PAPER_PARAMS["vit", "vanilla"] - PAPER_PARAMS["vit", "recurrent"] == 11 * 7_087_872
    # B, C, D: three two-layer maps width -> hidden -> width with biases
    for bb, w, h in (("resnet", 256, 896), ("vit", 768, 2816)):
        assert PAPER_PARAMS[bb, "basic_ssm"] - PAPER_PARAMS[bb, "recurrent"] == 3 * (2 * w * h + h + w)
    gated = paper_model("frost", "resnet", update="gated").num_parameters()
    assert gated == PAPER_PARAMS["resnet", "frost"] + 256 * 257  # a 1x1 gate, 256 -> 256


PAPER_FLOPS = {  # (total, fixed = stem + B(e) + GAP(D(e))) at batch 1, torch.utils.flop_counter
    ("resnet", "recurrent"): (7_932_649_472, 944_111_616),
    ("resnet", "basic_ssm"): (59_723_915_264, 6_698_696_704),
    ("vit", "recurrent"): (34_943_625_216, 231_211_008),
    ("vit", "basic_ssm"): (58_681_288_704, 3_622_305_792),
}


@pytest.mark.parametrize("backbone", BACKBONES)
@pytest.mark.parametrize("name", ["recurrent", "basic_ssm"])
def test_paper_flops(name, backbone):
    model = paper_model(name, backbone)
    x = torch.empty(1, 3, 224, 224, device="meta")
    with FlopCounterMode(display=False) as total:
        model(x)
    with FlopCounterMode(display=False) as fixed:
        model.context(model.embed(x))
    assert (total.get_total_flops(), fixed.get_total_flops()) == PAPER_FLOPS[backbone, name]
    if (name, backbone) == ("recurrent", "resnet"):  # per step: branch at 56x56 + the two heads
        per_step = (total.get_total_flops() - fixed.get_total_flops()) // 16
        assert per_step == 2 * 56 * 56 * (256 * 64 * 2 + 64 * 64 * 9) + 2 * (256 * 100 + 256)


# --- construction -------------------------------------------------------------------------------

def test_create_model_registry():
    assert isinstance(create_model("recurrent", backbone="vit", **SMALL), FrostNet)
    cfg = ModelConfig(name="basic_ssm", **SMALL)
    model = create_model(cfg)
    assert model.config is cfg
    assert create_model(cfg, steps=2).config.steps == 2  # fields override a config
    with pytest.raises(ConfigError, match="FrostNet needs a ModelConfig"):
        create_model(make_config("smoke"))  # a RunConfig: pass its .model
    with pytest.raises(ConfigError, match="model.name"):
        create_model("resnet50")
    with pytest.raises(ConfigError, match="unknown model parameters"):
        create_model("frost", depth=3)
    with pytest.raises(ConfigError, match="stem_stride"):
        create_model("recurrent", **(SMALL | dict(image_size=20, stem_stride=5)))
    with pytest.raises(ConfigError, match="hurst"):
        create_model("frost", learn_hurst=True, hurst=1.0)


def test_create_model_refuses_an_infinite_float_field():
    # ModelConfig's range check (mlp_ratio > 0) lets +inf through; the ViT MLP then failed with
    # an OverflowError deep in its constructor
    for backbone in ("vit", "resnet"):
        with pytest.raises(ConfigError, match=r"model\.mlp_ratio=inf is not finite"):
            create_model("frost", backbone=backbone, mlp_ratio=math.inf)
    with pytest.raises(ConfigError, match=r"model\.mlp_ratio=inf is not finite"):
        create_model(ModelConfig(name="recurrent", mlp_ratio=math.inf))


@pytest.mark.parametrize("stride,side", [(1, 8), (2, 4), (4, 2)])
def test_resnet_stem_strides(stride, side):
    model = small("recurrent", "resnet", stem_stride=stride)
    assert model.embed(images(2)).shape == (2, 16, side, side)


# --- shapes and the step-wise API -----------------------------------------------------------------

@pytest.mark.parametrize("backbone", BACKBONES)
@pytest.mark.parametrize("name", NAMES)
def test_shapes_and_stepwise_loop(name, backbone):
    model = small(name, backbone)
    x = images()
    out = model(x, return_states=True)
    state = (16, 8, 8) if backbone == "resnet" else (16, 16)  # (C, H, W) or (L, D)
    assert isinstance(out, ModelOutput)
    assert out.logits.shape == (6, 4, 5)
    assert out.halt_logits.shape == (6, 4)
    assert out.pooled.shape == (6, 4, 16)
    assert out.states.shape == (6, 5, *state)
    assert model(x).states is None
    # (b) forward is exactly the step-wise loop
    ctx = model.context(model.embed(x))
    assert isinstance(ctx, StepContext) and ctx.e.shape[0] == 6
    h = model.init_state(ctx)
    assert torch.equal(h, out.states[:, 0])
    for t in range(4):
        h = model.step(h, ctx, t)
        logits, halt, pooled = model.readout(h, ctx)
        assert torch.equal(h, out.states[:, t + 1])
        assert torch.equal(logits, out.logits[:, t])
        assert torch.equal(halt, out.halt_logits[:, t])
        assert torch.equal(pooled, out.pooled[:, t])
        assert torch.allclose(pooled, out.states[:, t + 1].flatten(2).mean(2) if backbone == "resnet"
                              else out.states[:, t + 1].mean(1), atol=1e-6)
    # trajectory, the one full-depth loop: h_0 without a readout, then every step with its own
    steps = list(model.trajectory(x))
    assert [s.t for s in steps] == list(range(5)) and steps[0].logits is None
    assert all(torch.equal(s.h, out.states[:, s.t]) for s in steps)
    assert all(torch.equal(s.logits, out.logits[:, s.t - 1]) and torch.equal(s.halt_logit, out.halt_logits[:, s.t - 1])
               for s in steps[1:])
    # a bare e works in place of the context (B(e), D(e) recomputed)
    e = model.embed(x)
    h1 = model.step(model.init_state(e), e, 0)
    assert torch.allclose(h1, out.states[:, 1], atol=1e-6)
    assert torch.allclose(model.readout(h1, e)[0], out.logits[:, 0], atol=1e-6)


def test_init_state_zeros():
    model = small("basic_ssm", "resnet", init_state="zeros")
    out = model(images(), return_states=True)
    assert out.states[:, 0].abs().max() == 0


FAMILIES = [(n, b, {}) for n in NAMES for b in BACKBONES]
FAMILIES += [("frost", b, {"update": u}) for u in ("canonical", "convex") for b in BACKBONES]
FAMILIES += [("basic_ssm", "resnet", {"bcd_kernel": 3}), ("frost", "vit", {"bcd_hidden": 8}),
             ("frost", "resnet", {"stem_stride": 4})]
FAMILIES += [("frost", b, {"update": u, "halt_norm": True}) for u in ("leaky", "leaky_gated")
             for b in BACKBONES]
FAMILIES += [("frost", "vit", {"update": "leaky", "scaled_inside": True, "learn_hurst": True,
                               "hurst_param": "free"})]


@pytest.mark.parametrize("name,backbone,fields", FAMILIES)
def test_compacted_batch_matches_full_batch(name, backbone, fields):
    # (g) stepping a subset of samples with the context compacted as adaptive inference does gives their
    # rows of the full batch; the compacted context has no e, so no step and no readout reads e
    model = small(name, backbone, **fields)
    x = images(8)
    out = model(x, return_states=True)
    ctx = model.context(model.embed(x))
    h = model.init_state(ctx)
    idx = torch.arange(8)
    for t, keep in enumerate([[0, 2, 3, 5, 6, 7], [1, 2, 3, 5], [0, 3], [1]]):
        h = model.step(h, ctx, t)
        logits, halt, _ = model.readout(h, ctx)
        assert torch.allclose(logits, out.logits[idx, t], atol=1e-5)
        assert torch.allclose(halt, out.halt_logits[idx, t], atol=1e-5)
        keep = torch.tensor(keep)
        h, ctx, idx = h[keep], _select(ctx, keep, len(idx)), idx[keep]
        assert ctx.e is None


def test_step_context_compaction():
    # compaction copies the rows of the fields with index_select and drops e, which only init_state
    # reads: e is an init-only argument, so a row copy of the fields drops it
    g = torch.Generator().manual_seed(0)
    e, be = torch.randn(7, 4, 3, 3, generator=g), torch.randn(7, 4, 3, 3, generator=g)
    dp = torch.randn(7, 4, generator=g)
    ctx = StepContext(e, be, dp)
    assert ctx.e is e and [f.name for f in dataclasses.fields(ctx)] == ["be", "d_pooled"]
    keep = torch.tensor([0, 2, 3, 6])
    sub = _select(ctx, keep, 7)
    assert type(sub) is StepContext and sub.e is None
    assert torch.equal(sub.be, be[keep]) and torch.equal(sub.d_pooled, dp[keep])
    assert StepContext(be=be).e is None
    empty = _select(StepContext(e), keep, 7)  # vanilla, recurrent: nothing to copy
    assert empty.e is None and empty.be is None and empty.d_pooled is None
    model = small("basic_ssm", "resnet")
    ctx = model.context(model.embed(images()))
    assert torch.equal(model.init_state(ctx), ctx.e)
    with pytest.raises(ValueError, match="stem output"):
        model.init_state(_select(ctx, keep[:2], 6))


def test_channels_last_max_pool_equals_max_pool():
    # the ResNet stem pools in channels-last layout: the same values and gradients (ties too:
    # both kernels keep the first maximum of a window), an NCHW result
    pool, ref = ChannelsLastMaxPool2d(3, stride=2, padding=1), nn.MaxPool2d(3, stride=2, padding=1)
    g = torch.Generator().manual_seed(0)
    z = torch.randint(0, 3, (5, 8, 14, 13), generator=g).float()  # many ties in every window
    za, zb = z.clone().requires_grad_(), z.clone().requires_grad_()
    a, b = pool(za), ref(zb)
    assert torch.equal(a, b) and a.is_contiguous()
    grad = torch.randn(a.shape, generator=g)
    a.backward(grad)
    b.backward(grad)
    assert torch.equal(za.grad, zb.grad)
    with torch.no_grad():  # inference takes oneDNN's pooling: the same maxima, an NCHW result
        assert torch.equal(pool(z), b) and pool(z).is_contiguous() and torch.equal(pool(-z), ref(-z))
        nan = z.clone()
        nan[0, 0, 0, 0] = float("nan")  # oneDNN's would drop it: the other path keeps it
        torch.testing.assert_close(pool(nan), ref(nan), rtol=0, atol=0, equal_nan=True)
        wide = ChannelsLastMaxPool2d(3, stride=2, padding=1, dilation=2)  # a setting oneDNN's refuses
        assert torch.equal(wide(z), nn.MaxPool2d(3, stride=2, padding=1, dilation=2)(z))
    cl = z.contiguous(memory_format=torch.channels_last)  # a channels-last model keeps its layout
    assert torch.equal(pool(cl), b) and pool(cl).is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(pool(z[0]), ref(z[0]))  # unbatched (C, H, W)
    # in the model: the stem's pool is this one, the parameters are unchanged, and outputs and
    # gradients are those of a plain nn.MaxPool2d
    model = small("frost", "resnet", stem_stride=4)
    assert isinstance(model.stem[3], ChannelsLastMaxPool2d)
    stem_keys = [k for k in model.state_dict() if k.startswith("stem.")]
    assert stem_keys == ["stem.0.weight", "stem.1.weight", "stem.1.bias"]
    plain = small("frost", "resnet", stem_stride=4)
    plain.stem[3] = nn.MaxPool2d(3, stride=2, padding=1)
    x = images()
    out, out_plain = model(x, return_states=True), plain(x, return_states=True)
    for f in ("logits", "halt_logits", "states"):
        assert torch.equal(getattr(out, f), getattr(out_plain, f))
    for o in (out, out_plain):
        (o.logits.square().sum() + o.halt_logits.square().sum()).backward()
    for (k, p), q in zip(model.named_parameters(), plain.parameters()):
        assert torch.equal(p.grad, q.grad), k


# --- analytic identities of the update rules ----------------------------------------------------

def test_resnet_branch_is_scale_invariant():
    # (a) the bottleneck branch normalises right after its first (bias-free) linear map:
    # A(c h) = A(h) for c > 0, up to GroupNorm's eps
    model = small("recurrent", "resnet").double()
    h = torch.randn(4, 16, 8, 8, dtype=torch.float64)
    A = model.branches[0]
    for c in (0.3, 1.7, 12.0):
        assert torch.allclose(A(c * h), A(h), atol=1e-3)
    A.gn1.eps = 1e-12  # exact but for GroupNorm's eps; a conv bias before gn1 would break it
    for c in (0.3, 1.7, 12.0):
        assert torch.allclose(A(c * h), A(h), atol=1e-9)
    # the ViT branch is not: its MLP sees c h + a (documented in the module)
    vit = small("recurrent", "vit").double()
    tokens = torch.randn(4, 16, 16, dtype=torch.float64)
    B = vit.branches[0]
    with torch.no_grad():  # a and m comparable to h (at init, std 0.02, A is nearly invariant)
        for p in B.parameters():
            if p.dim() == 2:
                p.normal_(std=0.5)
    rel = lambda u, v: ((u - v).norm() / v.norm()).item()
    assert rel(B(3.0 * tokens), B(tokens)) > 0.05
    assert rel(B.attn(B.ln1(3.0 * tokens)), B.attn(B.ln1(tokens))) < 1e-5  # its attention part is


def test_recurrent_equals_vanilla_with_shared_weights():
    # (c)
    for backbone in BACKBONES:
        rec, van = small("recurrent", backbone), small("vanilla", backbone, seed=5)
        state = {k: v for k, v in rec.state_dict().items() if not k.startswith("branches.")}
        for t in range(4):
            state |= {k.replace("branches.0.", f"branches.{t}."): v
                      for k, v in rec.state_dict().items() if k.startswith("branches.0.")}
        van.load_state_dict(state)
        x = images()
        a, b = rec(x, return_states=True), van(x, return_states=True)
        assert torch.allclose(a.states, b.states, atol=1e-6)
        assert torch.allclose(a.logits, b.logits, atol=1e-6)


def _set_alpha(model, alpha):
    with torch.no_grad():
        model.alpha_raw.fill_(math.log(math.expm1(alpha)))  # softplus^-1


@pytest.mark.parametrize("backbone", BACKBONES)
def test_frost_with_alpha_one_is_basic_ssm(backbone):
    # (d) at alpha = 1 every scaled operator is the plain one, whatever H (any branch)
    ssm = small("basic_ssm", backbone)
    x = images()
    ref = ssm(x, return_states=True)
    for update in ("canonical", "convex"):
        for H in (0.0, 0.3, 1.0):
            frost = small("frost", backbone, update=update, hurst=H)
            frost.load_state_dict(ssm.state_dict() | {k: v for k, v in frost.state_dict().items()
                                                      if k in ("alpha_raw", "hurst_value")})
            _set_alpha(frost, 1.0)
            out = frost(x, return_states=True)
            assert torch.allclose(out.states, ref.states, atol=1e-5)
            assert torch.allclose(out.logits, ref.logits, atol=1e-5)


def _parts(model, x):
    ctx = model.context(model.embed(x))
    h = model.init_state(ctx)
    h = model.step(h, ctx, 0)  # an h_1 that is not e
    return h, ctx, model.branches[0], model.alpha(), model.hurst()


def test_canonical_update_and_scale_invariance():
    # eq. (14)-(15), and with the scale-invariant ResNet branch H only rescales the step
    model = small("frost", "resnet", update="canonical", alpha_init=0.4, hurst=0.3).double()
    h, ctx, A, a, H = _parts(model, images().double())
    new = model.step(h, ctx, 1)
    assert torch.allclose(new, h + a ** (1 - H) * A(a ** H * h) + a * ctx.be, atol=1e-10)
    assert torch.allclose(new, h + a ** (1 - H) * A(h) + a * ctx.be, atol=1e-4)


@pytest.mark.parametrize("backbone", BACKBONES)
def test_convex_and_gated_updates(backbone):
    # (e) convex: h + alpha (A(h) + B(e)), eq. (8); gated: h + g (A_a(h) + B_a(e))
    x = images().double()
    model = small("frost", backbone, update="convex", alpha_init=0.3).double()
    h, ctx, A, a, _ = _parts(model, x)
    assert torch.allclose(model.step(h, ctx, 1), h + a * (A(h) + ctx.be), atol=1e-10)
    assert torch.allclose(model.step(h, ctx, 1), (1 - a) * h + a * (h + A(h) + ctx.be), atol=1e-10)
    model = small("frost", backbone, update="gated", alpha_init=0.3, hurst=0.7).double()
    h, ctx, A, a, H = _parts(model, x)
    g = torch.sigmoid(model.gate(h))
    assert g.shape == h.shape
    expected = (1 - g) * h + g * (h + a ** (1 - H) * A(a ** H * h) + a * ctx.be)
    assert torch.allclose(model.step(h, ctx, 1), expected, atol=1e-10)


@pytest.mark.parametrize("backbone", BACKBONES)
def test_readout_is_gap_of_c_plus_d(backbone):
    # the pooled-C fast path (pointwise linear C) against the full map GAP(C(h) + D(e))
    for fields in (dict(bcd_kernel=1), dict(bcd_kernel=3), dict(bcd_hidden=8)):
        if backbone == "vit" and fields.get("bcd_kernel") == 3:
            continue
        model = small("basic_ssm", backbone, **fields).double()
        x = images().double()
        e = model.embed(x)
        h = torch.randn_like(e)
        dims = (2, 3) if backbone == "resnet" else (1,)
        r = (model.C(h) + model.D(e)).mean(dims)
        logits, _, pooled = model.readout(h, model.context(e))
        assert torch.allclose(logits, model.head(model.head_norm(r)), atol=1e-10)
        assert torch.allclose(pooled, h.mean(dims), atol=1e-12)


# --- parameters and gradients -------------------------------------------------------------------

def test_alpha_init_and_parameterisations():
    # (h)
    for param in ("softplus", "exp", "sigmoid"):
        for a0 in (0.05, 0.5, 0.97):
            model = small("frost", "resnet", alpha_param=param, alpha_init=a0)
            assert model.alpha().item() == pytest.approx(a0, rel=1e-6)
    model = small("frost", "resnet", alpha_param="softplus", alpha_init=3.0)
    assert model.alpha().item() == pytest.approx(3.0, rel=1e-6)
    assert model.hurst().item() == 0.5 and "hurst_value" in dict(model.named_buffers())
    assert not any("hurst" in k for k, _ in model.named_parameters())  # H is fixed by default
    for name in ("vanilla", "recurrent", "basic_ssm"):
        model = small(name, "resnet")
        assert model.alpha() is None and model.hurst() is None


def test_learnable_hurst_gets_gradients_and_stays_in_unit_interval():
    # (i)
    model = small("frost", "resnet", update="canonical", learn_hurst=True, hurst=0.8, alpha_init=0.5)
    assert model.hurst().item() == pytest.approx(0.8, rel=1e-6)
    opt = torch.optim.SGD([model.hurst_raw], lr=2.0)
    x = images()
    seen = [model.hurst().item()]
    for sign in (1.0, -1.0):  # push H down, then up
        for _ in range(10):
            opt.zero_grad()
            out = model(x, return_states=True)
            (sign * out.states[:, -1].square().mean()).backward()
            assert model.hurst_raw.grad is not None and model.hurst_raw.grad.abs() > 0
            opt.step()
            seen.append(model.hurst().item())
            assert 0.0 < seen[-1] < 1.0
    assert max(seen) - min(seen) > 0.1  # it really moved


def test_detach_halt_input():
    # (f) the halting loss trains the halting head only
    model = small("frost", "resnet")
    x = images()
    model(x, detach_halt_input=True).halt_logits.sum().backward()
    assert model.halt_head.weight.grad.abs().sum() > 0
    for p in [*model.stem.parameters(), *model.branches.parameters(), model.alpha_raw]:
        assert p.grad is None
    model.zero_grad(set_to_none=True)
    model(x).halt_logits.sum().backward()
    assert all(p.grad.abs().sum() > 0 for p in model.stem.parameters())
    assert model.alpha_raw.grad.abs() > 0


@pytest.mark.parametrize("backbone", BACKBONES)
def test_bf16_autocast_and_channels_last(backbone):
    model = small("frost", backbone, update="gated")
    x = images()
    ref = model(x)
    if backbone == "resnet":
        model, x = model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    assert out.logits.shape == ref.logits.shape
    assert torch.isfinite(out.logits.float()).all() and torch.isfinite(out.halt_logits.float()).all()
    assert torch.allclose(out.logits.float(), ref.logits, atol=0.15, rtol=0.05)
    out.logits.float().sum().backward()
    assert model.alpha_raw.grad is not None


# --- the interpolating forms (docs/method.md section 5.4) ------------------------------------

def _linear_branch(model, backbone, W):
    """Replace the shared branch A by the plain linear map h -> W h (per position or token)."""
    c = W.shape[0]
    lin = nn.Conv2d(c, c, 1, bias=False) if backbone == "resnet" else nn.Linear(c, c, bias=False)
    lin = lin.to(W.dtype)  # before the copy: a float32 weight would round W
    with torch.no_grad():
        lin.weight.copy_(W.view(lin.weight.shape))
    model.branches[0] = lin
    return lin


def _sym(c, lo, hi, seed=0):
    """A symmetric c x c matrix with eigenvalues evenly spread over [lo, hi] (float64)."""
    q, _ = torch.linalg.qr(torch.randn(c, c, dtype=torch.float64,
                                       generator=torch.Generator().manual_seed(seed)))
    return q @ torch.diag(torch.linspace(lo, hi, c, dtype=torch.float64)) @ q.T


@pytest.mark.parametrize("backbone", BACKBONES)
@pytest.mark.parametrize("update", ["leaky", "leaky_gated"])
@pytest.mark.parametrize("scaled", [False, True])
def test_leaky_forms_equal_their_formula_on_a_linear_branch(backbone, update, scaled):
    model = small("frost", backbone, update=update, scaled_inside=scaled, alpha_init=0.3,
                  hurst=0.7).double()
    W = torch.randn(16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) / 4
    lin = _linear_branch(model, backbone, W)
    h, ctx, A, a, H = _parts(model, images().double())
    assert A is lin
    Wh = torch.einsum("ij,njyx->niyx", W, h) if backbone == "resnet" else h @ W.T  # W h, like h
    w = a if update == "leaky" else torch.sigmoid(model.gate(h))  # alpha, or the gate like h
    if scaled:  # A_a(h) = a^(1-H) A(a^H h) = a W h for a linear A; B_a = a B
        assert a.item() == pytest.approx(0.3) and H.item() == pytest.approx(0.7)
        expected = (1 - w) * h + w * (a ** (1 - H) * A(a ** H * h) + a * ctx.be)
        assert torch.allclose(expected, (1 - w) * h + w * a * (Wh + ctx.be), atol=1e-12)
    else:  # plain A and B: alpha appears once (leaky) or not at all (leaky_gated)
        expected = (1 - w) * h + w * (Wh + ctx.be)
    assert torch.allclose(model.step(h, ctx, 1), expected, atol=1e-12)


@pytest.mark.parametrize("backbone", BACKBONES)
def test_leaky_forms_on_the_real_branch(backbone):
    x = images().double()
    model = small("frost", backbone, update="leaky", alpha_init=0.3).double()
    assert model.config.alpha_param == "sigmoid" and model.alpha().item() == pytest.approx(0.3)
    h, ctx, A, a, _ = _parts(model, x)
    assert torch.allclose(model.step(h, ctx, 1), (1 - a) * h + a * (A(h) + ctx.be), atol=1e-12)
    # alpha -> 1 replaces the state by the residual term: h_{t+1} = A(h_t) + B(e)
    with torch.no_grad():
        model.alpha_raw.fill_(40.0)
    assert torch.allclose(model.step(h, ctx, 1), A(h) + ctx.be, atol=1e-12)
    # leaky_gated with the plain operators has no alpha: the gate is the interpolation weight
    gated = small("frost", backbone, update="leaky_gated").double()
    assert gated.alpha() is None and not hasattr(gated, "alpha_raw")
    assert gated.num_parameters() == small("frost", backbone, update="gated").num_parameters() - 1
    assert small("frost", backbone, update="leaky_gated", scaled_inside=True).alpha() is not None
    # a config's alpha map left at its form's default follows a change of form, a chosen one stays
    assert create_model(ModelConfig(**SMALL), update="leaky").config.alpha_param == "sigmoid"
    chosen = ModelConfig(alpha_param="exp", **SMALL)
    assert create_model(chosen, update="leaky").config.alpha_param == "exp"
    assert create_model(ModelConfig(**SMALL), update="leaky", alpha_param="softplus").config.alpha_param == \
        "softplus"


@pytest.mark.parametrize("update", ["leaky", "leaky_gated"])
def test_hurst_enters_only_with_the_scaled_operators_inside(update):
    x = images()
    for scaled, same in ((False, True), (True, False)):
        lo, hi = (small("frost", "vit", update=update, scaled_inside=scaled, hurst=H)(x).logits
                  for H in (0.2, 0.8))
        assert torch.equal(lo, hi) == same


@pytest.mark.parametrize("update,name", [("leaky", "leaky"), ("leaky_gated", "leaky_gated"),
                                         ("leaky", "scaled")])
def test_every_parameter_of_the_new_forms_gets_a_gradient(update, name):
    # no parameter that no loss reaches (DDP without find_unused_parameters refuses those)
    fields = dict(scaled_inside=True, learn_hurst=True) if name == "scaled" else {}
    model = small("frost", "resnet", update=update, halt_norm=True, **fields)
    out = model(images())
    (out.logits.square().mean() + out.halt_logits.square().mean()).backward()
    assert [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum()] == []


def _step_norms(model, x):
    with torch.no_grad():
        states = model(x, return_states=True).states.double()  # (N, T+1, *state)
    return (states[:, 1:] - states[:, :-1]).flatten(2).norm(dim=2)  # (N, T) ||h_{t+1} - h_t||


def test_leaky_contracts_where_the_maths_says_and_canonical_does_not():
    # A linear branch W, symmetric with eigenvalues in [0.3, 0.6] (operator norm 0.6). leaky:
    # h_{t+1} - h_t = ((1 - a) I + a W)(h_t - h_{t-1}), norm <= kappa = 1 - a + 0.6 a < 1, so the
    # steps shrink at least geometrically; canonical: (I + a W), every eigenvalue >= 1 + 0.3 a,
    # so they grow at least by that factor (the residual form bounds nothing)
    W, a = _sym(16, 0.3, 0.6), 0.8
    x = images().double()
    leaky = small("frost", "resnet", update="leaky", alpha_init=a, steps=12).double()
    canonical = small("frost", "resnet", update="canonical", alpha_init=a, steps=12).double()
    for model in (leaky, canonical):
        _linear_branch(model, "resnet", W)
    kappa = 1 - a + 0.6 * a  # 0.68
    s = _step_norms(leaky, x)  # (N, 12)
    assert (s[:, 1:] <= kappa * s[:, :-1] * (1 + 1e-9)).all()
    assert (s <= kappa ** torch.arange(12.0, dtype=torch.float64) * s[:, :1] * (1 + 1e-9)).all()
    assert (s[:, -1] / s[:, 0]).max() < kappa ** 11 < 0.02
    c = _step_norms(canonical, x)
    assert (c[:, 1:] >= (1 + 0.3 * a) * c[:, :-1] * (1 - 1e-9)).all()
    assert (c[:, -1] / c[:, 0]).min() > (1 + 0.3 * a) ** 11 > 10


def test_leaky_keeps_the_state_bounded_with_the_real_branch():
    # The branch ends in a GroupNorm (unit weight, zero bias at init), so ||A(h)|| <= sqrt(C H W)
    # whatever h, and ||h_{t+1}|| <= (1 - a) ||h_t|| + a (sqrt(C H W) + ||B(e)||): the state never
    # leaves max(||h_0||, sqrt(C H W) + ||B(e)||). The residual forms add a step of nearly that
    # size every time, and the state grows far past it (docs/method.md section 5.4)
    x = images()
    bound = None
    for update in ("leaky", "canonical", "convex", "gated"):
        model = small("frost", "resnet", update=update, steps=30)
        with torch.no_grad():
            norms = model(x, return_states=True).states.flatten(2).norm(dim=2)  # (N, 31)
            be = model.context(model.embed(x)).be.flatten(1).norm(dim=1)  # (N,)
        if bound is None:
            bound = torch.maximum(norms[:, 0], (16 * 8 * 8) ** 0.5 + be)  # (N,)
            assert (norms <= bound[:, None] * (1 + 1e-5)).all(), update
        else:
            assert (norms[:, -1] > 5 * bound).all(), update


@pytest.mark.parametrize("backbone", BACKBONES)
def test_halt_norm_makes_the_score_blind_to_the_state_scale(backbone):
    x = images().double()
    for halt_norm in (False, True):
        model = small("frost", backbone, halt_norm=halt_norm).double().eval()
        if halt_norm:
            model.halt_head_norm.eps = 1e-12  # exact but for LayerNorm's eps
        ctx = model.context(model.embed(x))
        h = model.step(model.init_state(ctx), ctx, 0)
        with torch.no_grad():
            z = model.readout(h, ctx)[1]  # (N,)
            scaled = [model.readout(c * h, ctx)[1] for c in (0.5, 3.0, 40.0)]  # GAP(c h) = c GAP(h)
        assert all(torch.allclose(z, zc, atol=1e-9) for zc in scaled) == halt_norm
    # w . LayerNorm(GAP(h_t)) + b, with the LayerNorm the classifier head has
    pooled = model.readout(h, ctx)[2]
    ref = model.halt_head(torch.nn.functional.layer_norm(pooled, (16,), model.halt_head_norm.weight,
                                                         model.halt_head_norm.bias, 1e-12)).squeeze(-1)
    assert torch.allclose(model.readout(h, ctx)[1], ref, atol=1e-12)


def test_halt_norm_parameter_counts():
    # the counts change only when it is on (the default): one LayerNorm of the width (weight and bias)
    for backbone, width in (("resnet", 256), ("vit", 768)):
        for name in NAMES:
            assert paper_model(name, backbone, halt_norm=False).num_parameters() == \
                PAPER_PARAMS[backbone, name] - 2 * width
    assert small("frost", "resnet", halt_norm=True).num_parameters() == \
        small("frost", "resnet", halt_norm=False).num_parameters() + 2 * 16


def test_free_hurst_can_leave_the_unit_interval():
    model = small("frost", "resnet", update="canonical", learn_hurst=True, hurst_param="free",
                  hurst=0.5, alpha_init=0.4).double()
    assert model.hurst().item() == 0.5 and model.hurst_raw.item() == 0.5  # H = raw, from hurst
    with torch.no_grad():
        model.hurst_raw.fill_(1.3)
    h, ctx, A, a, H = _parts(model, images().double())
    assert H.item() == pytest.approx(1.3)
    assert torch.allclose(model.step(h, ctx, 1), h + a ** (1 - 1.3) * A(a ** 1.3 * h) + a * ctx.be,
                          atol=1e-10)
    with torch.no_grad():
        model.hurst_raw.fill_(-0.4)
    assert model.hurst().item() == pytest.approx(-0.4)
    sig = small("frost", "resnet", update="canonical", learn_hurst=True, hurst=0.5)  # today's: sigmoid(raw) in (0, 1)
    with torch.no_grad():
        sig.hurst_raw.fill_(1.3)
    assert sig.hurst().item() == pytest.approx(1 / (1 + math.exp(-1.3)))
    # free H starts anywhere in [0, 1], sigmoid H only inside
    assert small("frost", "resnet", update="canonical", learn_hurst=True, hurst_param="free", hurst=1.0).hurst().item() == 1.0


@pytest.mark.parametrize("backbone", ["resnet", "vit"])
def test_inference_embeds_in_chunks_the_same_e(backbone, monkeypatch):
    """In inference the stem takes EMBED_CHUNK images at a time (fewer page faults on the CPU): the same
    e bit for bit, and with gradients on (training) one call on the whole batch."""
    import frost_nb.models as models

    model = small("frost", backbone, **({"stem_stride": 4} if backbone == "resnet" else {}))
    x = images(11)
    calls = []
    stem = model.stem.forward
    monkeypatch.setattr(model.stem, "forward", lambda z: calls.append(len(z)) or stem(z))
    whole = model.embed(x).detach()
    monkeypatch.setattr(models, "EMBED_CHUNK", 4)
    with torch.no_grad():
        chunked = model.embed(x)
    assert calls == [11, 4, 4, 3] and torch.equal(chunked, whole)
    calls.clear()
    with torch.no_grad():
        model.embed(images(9))
    assert calls == [3, 3, 3]  # even chunks: never a batch of one, which may take another kernel
    monkeypatch.setattr(models, "EMBED_CHUNK", 128)
    for fields in ({}, {"stem_stride": 4}) if backbone == "resnet" else ({},):  # a 3x3 or a 7x7 stem
        model, x = small("frost", backbone, **fields), images(2 * 128 + 1)
        whole = model.embed(x).detach()  # gradients on: one call
        with torch.no_grad():
            assert torch.equal(model.embed(x), whole)
