"""The four model families of FROST (Yu and Hwang, ICML 2026, arXiv 2601.19551), one class.

Families, branches, heads: docs/method.md section 3; scaled operators, H and alpha: section 4; the
update forms (``model.update``, the method ``_<update>``): section 5; k branches (``model.branch_steps``): 16.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import InitVar, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import MODELS, ConfigError, ModelConfig, replace_model

__all__ = ["MODELS", "ChannelsLastMaxPool2d", "FrostNet", "ModelOutput", "Step", "StepContext",
           "create_model", "init_from_teacher"]


@dataclass
class ModelOutput:
    logits: Tensor  # (N, T, K) class logits of the readout of h_1 .. h_T
    halt_logits: Tensor  # (N, T) w . GAP(h_t) + b (GAP(h_t) LayerNorm-ed with halt_norm); scores sigmoid(.)
    pooled: Tensor  # (N, T, D) GAP(h_t) for t = 1..T
    states: Tensor | None = None  # (N, T+1, *state) h_0 .. h_T when asked for


@dataclass
class Step:
    """One state of a full-depth pass (``FrostNet.trajectory``): h_t and, for t >= 1, its readout."""

    t: int  # 0 .. T
    h: Tensor  # (N, C, H, W) or (N, L, D)
    logits: Tensor | None = None  # (N, K) class logits
    halt_logit: Tensor | None = None  # (N,) the halting head's logit; score sigmoid(.)
    pooled: Tensor | None = None  # (N, D) GAP(h_t)


@dataclass
class StepContext:
    """What the steps need from the stem, once per forward: e, (N, C, H, W) or (N, L, D), and for
    basic_ssm and frost B(e) like e and GAP(D(e)) (N, D); only ``init_state`` reads e."""

    e: InitVar[Tensor | None] = None  # init-only: compaction (a row copy of the fields) drops it
    be: Tensor | None = None
    d_pooled: Tensor | None = None

    def __post_init__(self, e: Tensor | None) -> None:
        self.e = e


# --- building blocks --------------------------------------------------------------------------

def resnet_stem(cfg: ModelConfig) -> nn.Sequential:
    """Image to a (N, width, H/s, W/s) map, s = stem_stride: one 3x3 convolution of stride s for
    s <= 3, else the ResNet stem (7x7 convolution of stride s/2, 3x3 max-pool of stride 2)."""
    c, w, s = cfg.in_channels, cfg.width, cfg.stem_stride
    kernel, stride, pad = (3, s, 1) if s <= 3 else (7, s // 2, 3)  # ModelConfig: s in 1, 2, 3 or 4k
    pool = [] if s <= 3 else [ChannelsLastMaxPool2d(3, stride=2, padding=1)]
    return nn.Sequential(nn.Conv2d(c, w, kernel, stride=stride, padding=pad, bias=False),
                         nn.GroupNorm(cfg.norm_groups, w), nn.ReLU(inplace=True), *pool)


class ChannelsLastMaxPool2d(nn.MaxPool2d):
    """nn.MaxPool2d through faster layouts on the CPU, NCHW in and out: the same maxima and gradients."""

    def forward(self, z: Tensor) -> Tensor:
        if z.dim() != 4 or z.is_contiguous(memory_format=torch.channels_last):
            return super().forward(z)
        fast = _inference(z) and z.dtype == torch.float32 and torch.backends.mkldnn.is_available()
        if fast and self.dilation == 1 and not self.return_indices and not z.sum().isnan():
            return torch.mkldnn_max_pool2d(z.to_mkldnn(), self.kernel_size, self.stride, self.padding, 1,
                                           self.ceil_mode).to_dense()  # oneDNN's: no NaN in z to lose
        return super().forward(z.contiguous(memory_format=torch.channels_last)).contiguous()


class PatchEmbed(nn.Module):
    """ViT stem: non-overlapping patches to tokens plus a learned position embedding (no CLS)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        p, d = cfg.patch_size, cfg.width
        self.proj = nn.Conv2d(cfg.in_channels, d, p, stride=p)
        self.pos = nn.Parameter(torch.zeros(1, (cfg.image_size // p) ** 2, d))
        nn.init.trunc_normal_(self.pos, std=0.02)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).flatten(2).transpose(1, 2) + self.pos  # (N, D, H/p, W/p) -> (N, L, D)


class BottleneckBranch(nn.Module):
    """ResNet bottleneck *branch*: no skip, no stride, no pooling; shape preserving."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        w, b, d, g = cfg.width, cfg.bottleneck, cfg.dilation, cfg.norm_groups
        self.conv1 = nn.Conv2d(w, b, 1, bias=False)
        self.gn1 = nn.GroupNorm(g, b)  # normalises right after the first linear map: A(c h) = A(h)
        self.conv2 = nn.Conv2d(b, b, 3, padding=d, dilation=d, bias=False)
        self.gn2 = nn.GroupNorm(g, b)
        self.conv3 = nn.Conv2d(b, w, 1, bias=False)
        self.gn3 = nn.GroupNorm(g, w)

    def forward(self, h: Tensor) -> Tensor:
        z = F.relu(self.gn1(self.conv1(h)))  # (N, b, H, W)
        z = F.relu(self.gn2(self.conv2(z)))  # (N, b, H, W)
        return self.gn3(self.conv3(z))  # (N, C, H, W)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        n, l, d = x.shape
        qkv = self.qkv(x).view(n, l, 3, self.heads, d // self.heads)  # (N, L, 3, nh, hd)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # (N, nh, L, hd) each
        y = F.scaled_dot_product_attention(q, k, v)  # (N, nh, L, hd)
        return self.proj(y.transpose(1, 2).reshape(n, l, d))  # (N, L, D)


class EncoderBranch(nn.Module):
    """ViT encoder *branch* A(h) = a + MLP(LN2(h + a)), a = Attn(LN1(h)): h + A(h) is a pre-norm block."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d, hidden = cfg.width, int(cfg.width * cfg.mlp_ratio)
        self.ln1 = nn.LayerNorm(d, eps=1e-6)
        self.attn = Attention(d, cfg.heads)
        self.ln2 = nn.LayerNorm(d, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))

    def forward(self, h: Tensor) -> Tensor:
        a = self.attn(self.ln1(h))  # (N, L, D)
        return a + self.mlp(self.ln2(h + a))  # (N, L, D)


def state_map(cfg: ModelConfig) -> nn.Module:
    """B, C or D: width -> width, linear (bcd_hidden = 0) or two layers: convolutions of kernel
    bcd_kernel with ReLU between (resnet), token-wise Linear layers with GELU between (vit)."""
    w, h, k, vit = cfg.width, cfg.bcd_hidden, cfg.bcd_kernel, cfg.backbone == "vit"
    lin = nn.Linear if vit else lambda i, o: nn.Conv2d(i, o, k, padding=k // 2)
    act = nn.GELU() if vit else nn.ReLU(inplace=True)
    return lin(w, w) if h == 0 else nn.Sequential(lin(w, h), act, lin(h, w))


def _inference(x: Tensor) -> bool:
    """No gradient, eager, on the CPU: the fast paths of ``embed`` and the stem's pool."""
    return not torch.is_grad_enabled() and x.device.type == "cpu" and not torch.compiler.is_compiling()


def gap(h: Tensor) -> Tensor:
    """Global average pool: (N, C, H, W) -> (N, C), or mean over tokens (N, L, D) -> (N, D)."""
    return h.mean((2, 3)) if h.dim() == 4 else h.mean(1)


def _init_vit(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.trunc_normal_(m.weight, std=0.02)
        nn.init.zeros_(m.bias)


# alpha = f(raw) and the inverse that sets raw from alpha_init
_ALPHA = {
    "softplus": (F.softplus, lambda a: a + math.log(-math.expm1(-a))),  # log(exp(a) - 1), stable
    "exp": (torch.exp, math.log),
    "sigmoid": (torch.sigmoid, lambda a: math.log(a / (1 - a))),
}


# --- the model --------------------------------------------------------------------------------

class FrostNet(nn.Module):
    """vanilla, recurrent, basic_ssm or frost (``config.name``) on a resnet or vit backbone."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise ConfigError(f"FrostNet needs a ModelConfig (create_model also takes a name of {MODELS}), "
                              f"got {type(config).__name__}.")
        self.config = cfg = config
        vit = cfg.backbone == "vit"
        self.stem = PatchEmbed(cfg) if vit else resnet_stem(cfg)
        # vanilla: T distinct branches, or k each over a range of steps (model.branch_steps); else one
        ranges = cfg.branch_ranges
        self.branches = nn.ModuleList((EncoderBranch if vit else BottleneckBranch)(cfg) for _ in ranges)
        self.branch_of_step = tuple(i for i, (a, b) in enumerate(ranges) for _ in range(a, b))  # t -> branch
        self.has_bcd = cfg.name in ("basic_ssm", "frost")
        if self.has_bcd:
            self.B, self.C, self.D = state_map(cfg), state_map(cfg), state_map(cfg)
            # GAP commutes with a pointwise linear map: then C and D act on pooled vectors (exact)
            self.pool_first = cfg.bcd_hidden == 0 and (vit or cfg.bcd_kernel == 1)
        # leaky_gated with the plain A, B has no alpha (the gate interpolates): no parameter that
        # no loss reaches (DDP refuses those), and alpha() is None
        self.has_alpha = cfg.name == "frost" and (cfg.update != "leaky_gated" or cfg.scaled_inside)
        if self.has_alpha:
            self._to_alpha, from_alpha = _ALPHA[cfg.alpha_param]
            self.alpha_raw = nn.Parameter(torch.tensor(from_alpha(cfg.alpha_init)))
        if cfg.name == "frost":
            if cfg.learn_hurst:  # H = raw ("free": may leave (0, 1)) or sigmoid(raw), H in (0, 1)
                raw = cfg.hurst if cfg.hurst_param == "free" else _ALPHA["sigmoid"][1](cfg.hurst)
                self.hurst_raw = nn.Parameter(torch.tensor(float(raw)))
            else:
                self.register_buffer("hurst_value", torch.tensor(float(cfg.hurst)))
            if cfg.update in ("gated", "leaky_gated"):  # per-channel, per-position gate from h_t
                self.gate = nn.Linear(cfg.width, cfg.width) if vit else nn.Conv2d(cfg.width, cfg.width, 1)
        # h_{t+1} from (self, h_t, A, B(e)), chosen once: basic_ssm's, or frost's update form
        self._update = getattr(FrostNet, f"_{cfg.update}") if cfg.name == "frost" else FrostNet._basic_ssm
        self._term = FrostNet._scaled_term if cfg.scaled_inside else FrostNet._plain_term  # leaky's bracket
        self.head_norm = nn.LayerNorm(cfg.width)
        self.head = nn.Linear(cfg.width, cfg.num_classes)
        if cfg.halt_norm:  # scale-free halting input; created only when on (parameter counts)
            self.halt_head_norm = nn.LayerNorm(cfg.width)
        self.halt_head = nn.Linear(cfg.width, 1)  # the same w, b at every step
        if vit:
            self.apply(_init_vit)

    # --- scalars of the FROST update --------------------------------------------------------

    def alpha(self) -> Tensor | None:
        """alpha > 0 (0-dim tensor) for frost; None elsewhere and for leaky_gated with plain A, B."""
        return self._to_alpha(self.alpha_raw) if self.has_alpha else None

    def hurst(self) -> Tensor | None:
        """H (0-dim tensor) for frost: a fixed buffer, or learned (sigmoid(raw), or raw when "free")."""
        cfg = self.config
        if cfg.name != "frost":
            return None
        if not cfg.learn_hurst:
            return self.hurst_value
        return self.hurst_raw if cfg.hurst_param == "free" else torch.sigmoid(self.hurst_raw)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # --- step-wise API (trajectory runs it; forward reads trajectory) --------------------------

    def embed(self, x: Tensor) -> Tensor:
        """Stem: (N, C_in, S, S) -> e, (N, C, S/s, S/s) or (N, L, D); in inference in chunks (EMBED_CHUNK)."""
        return self.stem(x) if not _inference(x) or len(x) <= EMBED_CHUNK else \
            torch.cat([self.stem(part) for part in x.tensor_split(-(-len(x) // EMBED_CHUNK))])

    def _gap_of(self, m: nn.Module, z: Tensor) -> Tensor:
        """GAP(m(z)) for C or D: (N, D); with ``pool_first`` as W GAP(z) + b, which is GAP(W z + b)."""
        return F.linear(gap(z), m.weight.flatten(1), m.bias) if self.pool_first else gap(m(z))

    def context(self, e: Tensor) -> StepContext:
        """e with the t-independent terms B(e), like e, and GAP(D(e)), (N, D), computed once."""
        return StepContext(e, self.B(e), self._gap_of(self.D, e)) if self.has_bcd else StepContext(e)

    def _ctx(self, ctx: StepContext | Tensor) -> StepContext:
        return ctx if isinstance(ctx, StepContext) else self.context(ctx)

    def init_state(self, ctx: StepContext | Tensor) -> Tensor:
        """h_0: e ("embedding") or zeros ("zeros")."""
        e = ctx.e if isinstance(ctx, StepContext) else ctx
        if e is None:
            raise ValueError("init_state needs the stem output e: pass e or context(e), not a "
                             "compacted context (compaction drops e, which no step reads)")
        return e if self.config.init_state == "embedding" else torch.zeros_like(e)

    def step(self, h: Tensor, ctx: StepContext | Tensor, t: int) -> Tensor:
        """h_{t+1} from h_t, t = 0..T-1. ``ctx`` from context(e); a bare e works (B(e) recomputed)."""
        A = self.branches[self.branch_of_step[t]]
        return self._update(self, h, A, self._ctx(ctx).be) if self.has_bcd else h + A(h)

    # --- the update forms, h_{t+1} from (h_t, A, B(e)) (docs/method.md section 5). Each builds its
    # graph in the order of the former single ``step`` (the same gradients, bit for bit)

    def _scaled_term(self, h: Tensor, A: nn.Module, be: Tensor, alpha: Tensor) -> Tensor:
        H = self.hurst()
        return alpha ** (1 - H) * A(alpha ** H * h) + alpha * be  # A_a(h_t) + B_a(e), like h

    def _plain_term(self, h: Tensor, A: nn.Module, be: Tensor, alpha: Tensor | None) -> Tensor:
        return A(h) + be  # A(h_t) + B(e), like h

    def _basic_ssm(self, h: Tensor, A: nn.Module, be: Tensor) -> Tensor:
        return h + A(h) + be

    def _canonical(self, h: Tensor, A: nn.Module, be: Tensor) -> Tensor:
        return h + self._scaled_term(h, A, be, self.alpha())  # h + A_a(h) + alpha B(e): eq. (14)-(15)

    def _convex(self, h: Tensor, A: nn.Module, be: Tensor) -> Tensor:
        return h + self.alpha() * (A(h) + be)  # eq. (8): (1 - alpha) h + alpha (h + A(h) + B(e))

    def _gated(self, h: Tensor, A: nn.Module, be: Tensor) -> Tensor:
        update = self._scaled_term(h, A, be, self.alpha())
        return h + torch.sigmoid(self.gate(h)) * update  # (1 - g) h + g (h + A_a(h) + B_a(e))

    def _leaky(self, h: Tensor, A: nn.Module, be: Tensor) -> Tensor:
        alpha = self.alpha()  # keep (1 - alpha) of the state, the rest is the residual *term*
        term = self._term(self, h, A, be, alpha)
        return (1 - alpha) * h + alpha * term  # eq. (8) read as an interpolation (section 5.4)

    def _leaky_gated(self, h: Tensor, A: nn.Module, be: Tensor) -> Tensor:
        term = self._term(self, h, A, be, self.alpha())  # alpha: None with the plain operators
        g = torch.sigmoid(self.gate(h))  # like h: per channel and position
        return (1 - g) * h + g * term  # app. C: "interpolation between h and the residual term"

    def readout(self, h: Tensor, ctx: StepContext | Tensor,
                detach_halt_input: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """(class logits (N, K), halt logit (N,), GAP(h) (N, D)) of the state h."""
        pooled = gap(h)  # (N, D)
        r = self._gap_of(self.C, h) + self._ctx(ctx).d_pooled if self.has_bcd else pooled  # GAP(C(h) + D(e))
        logits = self.head(self.head_norm(r))  # (N, K)
        z = pooled.detach() if detach_halt_input else pooled  # (N, D)
        if self.config.halt_norm:
            z = self.halt_head_norm(z)  # LayerNorm(GAP(h_t)): blind to the scale of h_t
        return logits, self.halt_head(z).squeeze(-1), pooled  # halt logit (N,)

    def prologue(self, x: Tensor) -> tuple[Tensor, StepContext]:
        """(h_0, ctx): the stem, its t-independent terms and the initial state, once per pass."""
        ctx = self.context(self.embed(x))
        return self.init_state(ctx), ctx

    def trajectory(self, x: Tensor, detach_halt_input: bool = False) -> Iterator[Step]:
        """The full-depth pass, one step at a time: h_0 (t = 0, no readout), then h_1 .. h_T each
        with its readout; the loop of every full-depth pass but adaptive_predict's and jacobian_norms'."""
        h, ctx = self.prologue(x)
        yield Step(0, h)
        for t in range(self.config.steps):
            h = self.step(h, ctx, t)
            yield Step(t + 1, h, *self.readout(h, ctx, detach_halt_input))

    def forward(self, x: Tensor, return_states: bool = False, detach_halt_input: bool = False) -> ModelOutput:
        """All T steps. ``detach_halt_input``: the halting head sees GAP(h_t).detach()."""
        states, reads = [], []
        for s in self.trajectory(x, detach_halt_input):
            if return_states:
                states.append(s.h)
            if s.t:
                reads.append((s.logits, s.halt_logit, s.pooled))
        logits, halts, pooled = (torch.stack(r, 1) for r in zip(*reads))  # (N, T, K), (N, T), (N, T, D)
        return ModelOutput(logits, halts, pooled, torch.stack(states, 1) if return_states else None)


def create_model(cfg_or_name: ModelConfig | str = "frost", **fields: Any) -> FrostNet:
    """The model of a config, or of a name (vanilla | recurrent | basic_ssm | frost) plus fields
    (``backbone`` among them).

    >>> create_model("recurrent", backbone="vit", width=32, heads=2).config.backbone
    'vit'
    """
    known = {f.name for f in dataclasses.fields(ModelConfig)}
    if bad := set(fields) - known:
        raise ConfigError(f"unknown model parameters {sorted(bad)}; known: {sorted(known)}")
    if isinstance(cfg_or_name, str):
        cfg_or_name = ModelConfig(name=cfg_or_name, **fields)  # validation names the unknown model
    elif fields and isinstance(cfg_or_name, ModelConfig):
        cfg_or_name = replace_model(cfg_or_name, **fields)
    return FrostNet(cfg_or_name)  # refuses anything else; a ModelConfig is validated on construction


@torch.no_grad()
def init_from_teacher(student: FrostNet, teacher: FrostNet) -> list[int]:
    """Start a block-recurrent student from its teacher (docs/method.md section 16): every weight outside
    the branches copied, branch i from the teacher branch of step start + len // 2 (returned, each)."""
    ours, theirs = student.state_dict(), teacher.state_dict()
    shared = [k for k in ours if not k.startswith("branches.")]
    bad = [k for k in shared if k not in theirs or theirs[k].shape != ours[k].shape]
    if bad or student.config.steps != teacher.config.steps:
        raise ConfigError(f"the teacher ({teacher.config.name}, {teacher.config.steps} steps) does not fit "
                          f"the student ({student.config.steps} steps; weights {bad[:3]}): give both the "
                          "same model config but model.branch_steps")
    for k in shared:
        ours[k].copy_(theirs[k])
    picked = [teacher.branch_of_step[a + (b - a) // 2] for a, b in student.config.branch_ranges]
    for mine, i in zip(student.branches, picked):
        mine.load_state_dict(teacher.branches[i].state_dict())
    return picked


EMBED_CHUNK = 128  # inference's stem chunks: at most this many images, more than half (docs/scaling.md)
HEAD_PARAMS = ("head.", "head_norm.", "halt_head.", "halt_head_norm.")  # the classifier and halting heads
