"""DF-Mamba for forecasting (DF-Mamba-TS): "Dynamic Fractal Mamba: A Neural Renormalization Group Flow
for Scale-Invariant Sequence Modeling", ICML 2026; section 3, Algorithm 1, Table 11, appendix A.14. One
Mamba block (``MambaBlock``) runs at every level k = 0..K of a recursion that halves the sequence, its step
x 2^k clipped at 8 (``DFMamba.level``: eq. 5-9 at its lines); auxiliary losses eq. (11), (12) and Algorithm
1, line 28. Around it (not in the paper's text; docs/df-mamba.md): channel independence, per-window
instance normalisation, a Linear(1 -> D) embedding and a head over time. ``variant``: see ``VARIANTS``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import _Validated
from .scan import chunked_scan, sequential_scan

# Table 2's rows that change the model (L2/L3 drop one loss term: lambda_2 or lambda_1 = 0). S2: K separate
# blocks stacked at full length (no recursion, coarse-graining, gate or auxiliary loss); S3: one block and
# norm per level; T2: step x (1 + k); T3: x 1; C2: pair means for the coarse-graining (no encoder, decoder,
# recon loss); C3: local + up for the gate (no gate, no flow loss); L4: the task loss alone
VARIANTS = ("full", "S2", "S3", "T2", "T3", "C2", "C3", "L4")


@dataclass(frozen=True)
class DFMambaConfig(_Validated):
    _section = "model"
    channels: int = 7  # variables; each is its own sequence (channel independence): only checked
    lookback: int = 336  # section 4.1, ETT
    horizon: int = 96
    d_model: int = 64  # Table 11: embedding dim
    d_state: int = 16  # Table 11: SSM state dim
    expand: int = 2  # Table 11: expansion factor (inner width 128)
    d_conv: int = 4  # Table 11: conv kernel
    dt_rank: int = 4  # Mamba's ceil(d_model / 16): the block's 32,640 parameters
    depth: int = 3  # Table 11: fractal depth K (levels k = 0..K)
    min_length: int = 8  # Table 11: min length stop
    step_clip: float = 8.0  # appendix A.14
    lambda_recon: float = 1.0  # Table 11: lambda_1
    lambda_consist: float = 1.0  # lambda_2
    lambda_flow: float = 0.1  # lambda_3
    variant: str = "full"  # a key of VARIANTS
    scan_impl: str = "chunked"  # "chunked" (fast) or "sequential" (the reference loop)
    norm_eps: float = 1e-5  # RMSNorm, and the instance normalisation's variance

    def validate(self) -> None:
        self._check("variant", self.variant in VARIANTS, f"one of {VARIANTS}")
        self._check("scan_impl", self.scan_impl in ("chunked", "sequential"), "'chunked' or 'sequential'")
        for name in ("channels", "lookback", "horizon", "d_model", "d_state", "expand", "d_conv", "dt_rank",
                     "min_length"):
            self._check(name, getattr(self, name) >= 1, "a positive size")
        self._check("depth", self.depth >= 0, "a depth >= 0")
        self._check("step_clip", self.step_clip > 0, "a positive clip")


@dataclass
class Forecast:
    prediction: Tensor  # (B, H, C) in the input's units
    aux: dict[str, Tensor]  # recon, consist, flow: scalars, each summed over levels, unweighted
    gates: list[Tensor] = field(default_factory=list)  # level k's gate (B, C, L_k, D), k = 0..K-1


def level_lengths(cfg: DFMambaConfig) -> list[int]:
    """The sequence length at each level: [336, 168, 84, 42] at the defaults (Algorithm 1, line 7)."""
    lengths = [cfg.lookback]  # S2: no recursion
    while cfg.variant != "S2" and len(lengths) <= cfg.depth and lengths[-1] >= cfg.min_length:
        lengths.append(math.ceil(lengths[-1] / 2))
    return lengths


def level_scale(variant: str, k: int) -> float:
    """The step's factor at level k: 2^k (eq. 5), 1 + k (T2) or 1 (T3)."""
    return {"T2": 1.0 + k, "T3": 1.0}.get(variant, 2.0 ** k)


def step_size(raw: Tensor, k: int, cfg: DFMambaConfig) -> Tensor:
    """Delta_k = min(softplus(raw) * scale_k, clip), eq. (5); A.14's clip has no gradient where it binds."""
    return torch.clamp(F.softplus(raw) * level_scale(cfg.variant, k), max=cfg.step_clip)


def flow_loss(gates: list[Tensor]) -> Tensor:
    """sum_k (m_k - sg(m_{k+1}))^2, m_k level k's mean gate (Algorithm 1, lines 25-28)."""
    m = [g.mean() for g in gates]
    terms = [(m[k] - m[k + 1].detach()) ** 2 for k in range(len(m) - 1)]
    return torch.stack(terms).sum() if terms else torch.zeros(())


class MambaBlock(nn.Module):
    """Mamba's selective state-space block (section 3.1), its layers and parameter names mambapy's (in_proj,
    conv1d, x_proj, dt_proj, A_log, D, out_proj): 32,640 parameters at Table 11's sizes."""

    def __init__(self, cfg: DFMambaConfig):
        super().__init__()
        self.cfg = cfg
        d, e, s, r = cfg.d_model, cfg.expand * cfg.d_model, cfg.d_state, cfg.dt_rank
        self.in_proj = nn.Linear(d, 2 * e, bias=False)
        self.conv1d = nn.Conv1d(e, e, cfg.d_conv, groups=e, padding=cfg.d_conv - 1)
        self.x_proj = nn.Linear(e, r + 2 * s, bias=False)
        self.dt_proj = nn.Linear(r, e)
        self.A_log = nn.Parameter(torch.log(torch.arange(1.0, s + 1)).repeat(e, 1))  # (E, S) S4D-real
        self.D = nn.Parameter(torch.ones(e))
        self.out_proj = nn.Linear(e, d, bias=False)
        self.A_log._no_weight_decay = self.D._no_weight_decay = True  # Mamba's mark, for the optimiser
        # Mamba's initialisation of the step: softplus(bias) log-uniform in [1e-3, 1e-1]
        nn.init.uniform_(self.dt_proj.weight, -r ** -0.5, r ** -0.5)
        dt = torch.exp(torch.rand(e) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)).clamp(min=1e-4)
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1

    def forward(self, x: Tensor, k: int = 0) -> Tensor:
        L, s = x.shape[1], self.cfg.d_state
        u, z = self.in_proj(x).chunk(2, dim=-1)  # (N, L, E) each
        u = F.silu(self.conv1d(u.transpose(1, 2))[..., :L].transpose(1, 2))  # causal: the first L outputs
        dt, B, C = self.x_proj(u).split([self.cfg.dt_rank, s, s], dim=-1)  # (N, L, R), (N, L, S) x 2
        dt = step_size(self.dt_proj(dt), k, self.cfg)  # (N, L, E)  eq. (5)
        A = -torch.exp(self.A_log)  # (E, S)  section 3.1: non-positive eigenvalues
        run = chunked_scan if self.cfg.scan_impl == "chunked" else sequential_scan  # looked up per call
        y = run(u, dt, A, B, C, self.D)  # (N, L, E)  eq. (2)-(3)
        return self.out_proj(y * F.silu(z))  # (N, L, D)


def _mlp(d_in: int, d_hidden: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d_hidden), nn.GELU(), nn.Linear(d_hidden, d_out))


class DFMamba(nn.Module):
    """(B, lookback, channels) -> ``Forecast`` (B, horizon, channels): section 3's recursion between a
    per-variable embedding and head; ``cfg.variant`` picks an ablation."""

    def __init__(self, cfg: DFMambaConfig):
        super().__init__()
        self.cfg = cfg
        d, v = cfg.d_model, cfg.variant
        self.embed = nn.Linear(1, d)  # one token per time step and variable
        n_blocks = {"S2": cfg.depth, "S3": cfg.depth + 1}.get(v, 1)  # shared: one for every level
        self.blocks = nn.ModuleList(MambaBlock(cfg) for _ in range(n_blocks))
        self.norms = nn.ModuleList(nn.RMSNorm(d, eps=cfg.norm_eps) for _ in range(n_blocks))
        if v not in ("S2", "C2"):  # eq. (7) and its decoder, shared across levels
            self.encoder = _mlp(2 * d, d, d)
            self.decoder = _mlp(d, d, 2 * d)
        if v not in ("S2", "C3"):
            self.gate = nn.Linear(2 * d, d)  # eq. (9): one gate per feature
        self.norm_f = nn.RMSNorm(d, eps=cfg.norm_eps)
        self.head_time = nn.Linear(cfg.lookback, cfg.horizon)  # over time, per feature
        self.head_out = nn.Linear(d, 1)

    def local(self, x: Tensor, k: int) -> Tensor:
        """H_local = X + S(Norm(X); Delta * alpha_k): Algorithm 1, line 5."""
        i = k if self.cfg.variant == "S3" else 0
        return x + self.blocks[i](self.norms[i](x), k)

    def level(self, x: Tensor, k: int, aux: dict[str, list[Tensor]], gates: list[Tensor]) -> Tensor:
        """RecursiveForward(X, k) of Algorithm 1. x (N, L_k, D) -> (N, L_k, D)."""
        cfg, L = self.cfg, x.shape[1]
        local = self.local(x, k)  # (N, L, D)
        if k >= cfg.depth or L < cfg.min_length:
            return local
        pairs = F.pad(local, (0, 0, 0, L % 2)).reshape(x.shape[0], -1, 2 * x.shape[2])  # (N, L/2, 2D) eq. (6)
        if cfg.variant == "C2":
            coarse = (pairs[..., :cfg.d_model] + pairs[..., cfg.d_model:]) / 2  # (N, L/2, D)
        else:
            coarse = self.encoder(pairs)  # (N, L/2, D)  eq. (7)
            aux["recon"].append(F.mse_loss(self.decoder(coarse), pairs.detach()))  # eq. (11)
        deep = self.level(coarse, k + 1, aux, gates)  # (N, L/2, D)
        up = F.interpolate(deep.transpose(1, 2), size=L, mode="linear").transpose(1, 2)  # (N, L, D) eq. (8)
        aux["consist"].append(F.mse_loss(up, local.detach()))  # eq. (12)
        if cfg.variant == "C3":
            return local + up
        g = torch.sigmoid(self.gate(torch.cat([local, up], dim=-1)))  # (N, L, D)
        gates.insert(0, g)  # deeper levels inserted theirs first: gates[k] is level k's
        return (1 - g) * local + g * up  # eq. (9)

    def forward(self, x: Tensor) -> Forecast:
        cfg, (b, L, c) = self.cfg, x.shape
        if (L, c) != (cfg.lookback, cfg.channels):
            raise ValueError(f"input (B, {L}, {c}): expected (B, {cfg.lookback}, {cfg.channels}), "
                             "(batch, lookback, channels)")
        mean = x.mean(1, keepdim=True)  # (B, 1, C): instance normalisation, no affine
        std = torch.sqrt(x.var(1, keepdim=True, unbiased=False) + cfg.norm_eps)
        z = ((x - mean) / std).transpose(1, 2).reshape(b * c, L, 1)  # (B*C, L, 1): one sequence per variable
        h = self.embed(z)  # (N, L, D)
        aux, gates = {"recon": [], "consist": []}, []
        if cfg.variant == "S2":
            for k in range(cfg.depth):
                h = h + self.blocks[k](self.norms[k](h), 0)
        else:
            h = self.level(h, 0, aux, gates)
        h = self.norm_f(h)
        out = self.head_time(h.transpose(1, 2))  # (N, D, H)
        out = self.head_out(out.transpose(1, 2)).squeeze(-1)  # (N, H)
        pred = out.view(b, c, cfg.horizon).transpose(1, 2) * std + mean  # (B, H, C)
        sums = {name: torch.stack(t).sum() if t else h.new_zeros(()) for name, t in aux.items()}
        sums["flow"] = flow_loss(gates).to(h)
        return Forecast(pred, sums, [g.view(b, c, *g.shape[1:]) for g in gates])


def total_loss(forecast: Forecast, target: Tensor, cfg: DFMambaConfig) -> tuple[Tensor, dict[str, float]]:
    """L = L_task + lambda_1 L_recon + lambda_2 L_consist + lambda_3 L_flow (section 3.3); L4: L_task. Each
    squared norm a mean over its elements (the task's an MSE). Returns L and its unweighted terms as
    floats."""
    task = F.mse_loss(forecast.prediction, target)
    weights = {"recon": cfg.lambda_recon, "consist": cfg.lambda_consist, "flow": cfg.lambda_flow}
    loss = task + sum(w * forecast.aux[name] for name, w in weights.items() if w and cfg.variant != "L4")
    parts = {"loss": loss, "task": task, **forecast.aux}
    return loss, {name: float(v.detach()) for name, v in parts.items()}
