"""Measurements behind the paper's geometric claims (FROST, Yu and Hwang, ICML 2026).

docs/method.md section 9. Pure functions over tensors (no printing, no I/O); ``full_depth_pass``
is the one pass over the data that runs a model (``training.evaluate`` over a split), and
everything else works on its result, a ``FullDepthPass``.

- Scale consistency (Table 1, section 9.1), contraction fitted from the step sizes (section 9.3)
  and gradient conflict (appendix D, section 9.6; per step: Definition D.1's conflict "at
  iteration t", the task gradient against the gradient of step t's ranking loss alone).
- Contraction from the Jacobian: sigma_t = ||d h_{t+1} / d h_t||_2 (spectral norm) of each
  sample at its own state, by power iteration with Jacobian-vector products. Appendix B's
  argument needs sigma_t <= kappa < 1; the step sizes are only a proxy for it.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor

from .config import LossConfig
from .losses import ranking_losses, step_losses, task_loss
from .models import gap


@dataclass
class FullDepthPass:
    """One full-depth pass of a model over a split, per sample and step (float32, on the CPU;
    ``full_depth_pass``): halting scores, class logits and labels always; the reductions of its
    states (the trajectory) when the pass was asked for them, else None."""

    # (N, T) halting scores sigmoid(halt_logits), taken batch by batch (a sigmoid over the whole
    # split can differ in the last bit): exits read off any pass of a model then agree to the bit
    scores: Tensor
    halt_logits: Tensor  # (N, T)
    logits: Tensor  # (N, T, K) class logits at t = 1..T
    y: Tensor  # (N,)
    pooled: Tensor | None = None  # (N, T+1, D) GAP(h_t) for t = 0..T
    step_norms: Tensor | None = None  # (N, T) ||h_{t+1} - h_t|| over the full state
    state_norms: Tensor | None = None  # (N, T+1) ||h_t||
    dist_to_final: Tensor | None = None  # (N, T+1) ||h_t - h_T||
    second_diff_norms: Tensor | None = None  # (N, T-1) ||(h_{t+1} - h_t) - (h_t - h_{t-1})||, t = 1..T-1

    def __post_init__(self) -> None:
        s, z, lg, y = self.scores, self.halt_logits, self.logits, self.y
        if s.dim() != 2 or z.shape != s.shape or lg.dim() != 3 or lg.shape[:2] != s.shape \
                or y.shape != s.shape[:1]:
            raise ValueError(f"a full-depth pass holds scores and halt_logits (N, T), logits (N, T, K) and "
                             f"labels y (N,), got {tuple(s.shape)}, {tuple(z.shape)}, {tuple(lg.shape)} "
                             f"and {tuple(y.shape)}")

    @property
    def steps(self) -> int:
        return self.scores.shape[1]

    def __len__(self) -> int:
        return self.y.shape[0]

    # derived once per pass: sweeps, exit caches and the rule curves read them again and again
    @cached_property
    def preds(self) -> Tensor:
        return self.logits.argmax(-1)  # (N, T) predicted class at each step

    @cached_property
    def correct(self) -> Tensor:
        return self.preds == self.y[:, None]  # (N, T)

    @property
    def accuracy(self) -> float:
        """Full-depth accuracy (the last step)."""
        return self.correct[:, -1].float().mean().item()

    def accuracy_per_step(self) -> list[float]:
        return self.correct.float().mean(0).tolist()


def _first(batches, max_samples: int | None):
    """The (x, y) batches cut to their first ``max_samples`` samples in all (None: every one)."""
    seen = 0
    for x, y in batches:
        if max_samples is not None and seen >= max_samples:
            return
        if max_samples is not None:
            x, y = x[: max_samples - seen], y[: max_samples - seen]
        seen += len(y)
        yield x, y


@torch.no_grad()
def full_depth_pass(model: torch.nn.Module, batches, *, trajectories: bool = False, amp: bool = False,
                    max_samples: int | None = None) -> FullDepthPass:
    """The ``FullDepthPass`` of ``model`` over ``batches`` ((x, y) pairs; the first ``max_samples``
    samples), under bf16 autocast with ``amp``; with ``trajectories`` also the reductions of its
    states. Reads ``model.trajectory``, the loop its forward runs; full states are reduced to norms
    batch by batch, so memory stays O(N T D) (every state of a CIFAR-size split: about 11 GB)."""
    model.eval()
    parts: dict[str, list[Tensor]] = defaultdict(list)
    for x, y in _first(batches, max_samples):
        states, logits, halts = [], [], []
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=amp):
            for s in model.trajectory(x):
                if trajectories:
                    states.append(s.h.float())
                if s.t:
                    logits.append(s.logits.float())
                    halts.append(s.halt_logit.float())
        halt = torch.stack(halts, 1)  # (B, T)
        parts["scores"].append(torch.sigmoid(halt).cpu())
        parts["halt_logits"].append(halt.cpu())
        parts["logits"].append(torch.stack(logits, 1).cpu())  # (B, T, K)
        parts["y"].append(y.cpu())
        if not trajectories:
            continue
        hs = torch.stack(states, 1)  # (B, T+1, *state)
        diffs = hs[:, 1:] - hs[:, :-1]  # (B, T, *state)
        b, t1 = hs.shape[:2]
        parts["pooled"].append(torch.stack([gap(s) for s in states], 1).cpu())  # (B, T+1, D)
        parts["step_norms"].append(diffs.reshape(b, t1 - 1, -1).norm(dim=2).cpu())
        parts["state_norms"].append(hs.reshape(b, t1, -1).norm(dim=2).cpu())
        parts["dist_to_final"].append((hs - hs[:, -1:]).reshape(b, t1, -1).norm(dim=2).cpu())
        parts["second_diff_norms"].append(
            (diffs[:, 1:] - diffs[:, :-1]).reshape(b, t1 - 2, -1).norm(dim=2).cpu())
    if not parts:
        raise ValueError("full_depth_pass got no batches (an empty split?)")
    return FullDepthPass(**{k: torch.cat(v) for k, v in parts.items()})


# ---------------------------------------------------------------- scale consistency
def cosine_to_final(pooled: Tensor) -> Tensor:
    """(N, T+1, D) pooled states -> (N, T+1) cosine of each step's state with the last one."""
    if pooled.dim() != 3:
        raise ValueError(f"pooled must be (N, T+1, D), got shape {tuple(pooled.shape)}")
    return torch.nn.functional.cosine_similarity(pooled, pooled[:, -1:], dim=2)  # (N, T+1)


def scale_consistency_rows(pooled: Tensor, steps=None) -> list[dict]:
    """Table 1 rows: for each step t (default every t = 1..T), mean and std over samples of
    cos(GAP(h_t), GAP(h_T)). Population std (ddof 0), as a spread over the test set."""
    cos = cosine_to_final(pooled)  # (N, T+1)
    last = cos.shape[1] - 1
    steps = range(1, last + 1) if steps is None else steps
    rows = []
    for t in steps:
        if not 0 <= t <= last:
            raise ValueError(f"step {t} outside 0..{last}")
        c = cos[:, t]
        rows.append({"step": int(t), "mean": c.mean().item(), "std": c.std(unbiased=False).item()})
    return rows


def similarity_matrix(pooled: Tensor) -> Tensor:
    """(T+1, T+1) mean over samples of cos(GAP(h_s), GAP(h_t)) for every pair of steps."""
    z = torch.nn.functional.normalize(pooled.float(), dim=2)  # (N, T+1, D) unit vectors
    return torch.einsum("nsd,ntd->st", z, z) / z.shape[0]  # (T+1, T+1)


def adjacent_similarity(pooled: Tensor) -> Tensor:
    """(T,) mean cos(GAP(h_t), GAP(h_{t+1})): a dip marks an abrupt change of phase."""
    return torch.diagonal(similarity_matrix(pooled), offset=1)


# ---------------------------------------------------------------- contraction
def fit_contraction(step_norms: Tensor, eps: float = 1e-12) -> Tensor:
    """Per-sample rate kappa: exp(slope) of the least-squares line log s_t = a + t log kappa,
    t = 0..T-1. Returns (N,); kappa < 1 means the steps shrink geometrically on average."""
    if step_norms.dim() != 2 or step_norms.shape[1] < 2:
        raise ValueError(f"step_norms must be (N, T) with T >= 2, got {tuple(step_norms.shape)}")
    logs = step_norms.double().clamp_min(eps).log()  # (N, T)
    t = torch.arange(logs.shape[1], dtype=torch.float64)
    tc = t - t.mean()
    slope = ((logs - logs.mean(1, keepdim=True)) * tc).sum(1) / (tc * tc).sum()  # (N,)
    return slope.exp().float()


def contraction_bound(step_norms: Tensor, dist_to_final: Tensor, kappa: Tensor) -> Tensor:
    """(N, T) whether ||h_t - h_T|| <= kappa^t / (1 - kappa) ||h_1 - h_0|| for t = 0..T-1; False
    for every t of a sample with kappa >= 1 (the bound is not defined there)."""
    n, t = step_norms.shape
    if dist_to_final.shape != (n, t + 1) or kappa.shape != (n,):
        raise ValueError("expected step_norms (N, T), dist_to_final (N, T+1) and kappa (N,)")
    k = kappa.double()[:, None]  # (N, 1)
    steps = torch.arange(t, dtype=torch.float64)[None]  # (1, T)
    bound = k.pow(steps) / (1 - k) * step_norms[:, :1].double()  # (N, T)
    holds = dist_to_final[:, :t].double() <= bound * (1 + 1e-6)  # relative slack for rounding
    return holds & (k < 1)


def contraction_summary(traj: FullDepthPass) -> dict:
    """kappa (median and quartiles over samples), the share of samples with kappa < 1, and
    the share of samples for which the error bound holds at every step."""
    kappa = fit_contraction(traj.step_norms)
    holds = contraction_bound(traj.step_norms, traj.dist_to_final, kappa)
    q = torch.quantile(kappa.double(), torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    return {"kappa": q[1].item(), "kappa_q25": q[0].item(), "kappa_q75": q[2].item(),
            "contracting": (kappa < 1).float().mean().item(),
            "bound_holds": holds.all(1).float().mean().item()}


def step_jacobian_norm(model: torch.nn.Module, h: Tensor, ctx, t: int, *, iters: int = 20,
                       generator: torch.Generator | None = None) -> Tensor:
    """(N,) spectral norm of d h_{t+1} / d h_t for each sample, at the states ``h`` (N, *state).

    Power iteration on J^T J: v <- J^T J v / ||J^T J v||, then sigma = ||J v||, with J v from
    ``torch.func.jvp`` and J^T u from ``torch.func.vjp`` (its linearisation is built once). The
    step maps every sample on its own (GroupNorm, LayerNorm and attention work per sample), so
    the batch's Jacobian is block-diagonal and one batched iteration, normalised per sample,
    runs every sample's iteration at once. The estimate is a lower bound that rises towards
    sigma_max; its error shrinks like (sigma_2 / sigma_max)^(2 iters). Attention runs on
    PyTorch's math kernel here: the fused CPU kernel has no forward mode.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if iters < 1:
        raise ValueError(f"iters={iters} must be at least 1")
    h = h.detach()  # (N, *state), in the model's dtype
    f = lambda z: model.step(z, ctx, t)  # h_t -> h_{t+1}, like h
    v = torch.randn(h.shape, generator=generator, dtype=h.dtype).to(h.device)  # (N, *state)
    unit = (-1,) + (1,) * (h.dim() - 1)  # a per-sample norm (N,) shaped to broadcast against h
    v = v / v.flatten(1).norm(dim=1).view(unit)
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]), warnings.catch_warnings():
        # forward mode loads torch's own decompositions once per process through torch.jit.script,
        # which warns of its deprecation: torch's business, and noise in a notebook's output
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*", category=FutureWarning)
        _, vjp_fn = torch.func.vjp(f, h)
        for _ in range(iters):
            _, jv = torch.func.jvp(f, (h,), (v,))  # J v, like h
            (w,) = vjp_fn(jv)  # J^T J v, like h
            v = w / w.flatten(1).norm(dim=1).view(unit).clamp_min(1e-30)
        _, jv = torch.func.jvp(f, (h,), (v,))
    return jv.flatten(1).norm(dim=1)  # (N,) ||J v|| with ||v|| = 1


def jacobian_norms(model: torch.nn.Module, batches, *, iters: int = 20,
                   max_samples: int | None = None, seed: int = 0) -> Tensor:
    """(N, T) sigma_{i,t} = ||d h_{t+1} / d h_t||_2 of sample i at step t = 0..T-1, along the
    model's own full-depth trajectory (``step_jacobian_norm`` at every step), on the CPU."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for x, _ in _first(batches, max_samples):
        with torch.no_grad():
            h, ctx = model.prologue(x)
        norms = []  # the step loop by hand: each state's Jacobian is probed before the next step
        for t in range(model.config.steps):
            norms.append(step_jacobian_norm(model, h, ctx, t, iters=iters, generator=generator))
            with torch.no_grad():
                h = model.step(h, ctx, t)
        rows.append(torch.stack(norms, 1).cpu())  # (B, T)
    if not rows:
        raise ValueError("jacobian_norms got no batches (an empty split?)")
    return torch.cat(rows)


def jacobian_summary(norms: Tensor, first_step: int = 0) -> dict:
    """Contraction read off the Jacobian norms (N, T), over steps t >= first_step (0-based):
    the median and quartiles of sigma over samples and steps, the share of entries below 1, the
    share of samples below 1 at every step (appendix B's condition), and kappa_jvp, the median
    over samples of each sample's largest sigma (the rate appendix B's bound would use)."""
    if norms.dim() != 2 or not 0 <= first_step < norms.shape[1]:
        raise ValueError(f"norms must be (N, T) and first_step in 0..T-1, got {tuple(norms.shape)}, "
                         f"{first_step}")
    s = norms[:, first_step:].double()  # (N, T')
    q = torch.quantile(s.reshape(-1), torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    return {"jvp_norm": q[1].item(), "jvp_norm_q25": q[0].item(), "jvp_norm_q75": q[2].item(),
            "jvp_below_one": (s < 1).double().mean().item(),
            "jvp_contracting": (s < 1).all(1).double().mean().item(),
            "kappa_jvp": s.max(1).values.median().item()}


# ---------------------------------------------------------------- gradient conflict
HEADS = ("head.", "head_norm.", "halt_head.", "halt_head_norm.")  # the classifier and halting heads


def gradient_conflict(model: torch.nn.Module, x: Tensor, y: Tensor, loss: LossConfig,
                      per_step: bool = False) -> dict:
    """Cosine between the gradients of L_task and of lambda_rel L_rel + lambda_abs L_abs (docs/method.md
    section 9.6; C and D, which only the classifier reads, drop out by themselves), the ranking loss
    as training with ``loss`` would compute it, also for a model trained without it. Returns cosine,
    both gradient norms and the number of parameters; with ``per_step`` also ``step_cosines`` (t =
    1..T, step t's ranking loss with its sets and pairs within that step; T more backward passes).
    """
    was_training = model.training
    model.train()
    out = model(x, detach_halt_input=not loss.rank_grad_to_backbone)
    task = task_loss(out.logits, y, loss.label_smoothing)
    losses = step_losses(out.logits, y)

    def weighted(halt: Tensor, lm: Tensor, pairs: str) -> Tensor:
        rank = ranking_losses(halt, lm, loss.rank_frac, loss.margin, pairs)
        return loss.lambda_rel * rank.rel + loss.lambda_abs * rank.abs

    named = [(n, p) for n, p in model.named_parameters()
             if p.requires_grad and not n.startswith(HEADS)]
    params = [p for _, p in named]
    g_task = torch.autograd.grad(task, params, retain_graph=True, allow_unused=True)
    g_rank = torch.autograd.grad(weighted(out.halt_logits, losses, loss.rank_pairs), params,
                                 retain_graph=per_step, allow_unused=True)
    steps = out.halt_logits.shape[1]
    g_steps = [torch.autograd.grad(weighted(out.halt_logits[:, t:t + 1], losses[:, t:t + 1], "per_step"),
                                   params, retain_graph=t < steps - 1, allow_unused=True)
               for t in range(steps)] if per_step else []
    model.train(was_training)
    shared = [i for i, (a, b) in enumerate(zip(g_task, g_rank)) if a is not None and b is not None]
    if not shared:
        nan = float("nan")
        return {"cosine": nan, "task_norm": nan, "rank_norm": nan, "params": 0,
                **({"step_cosines": [nan] * steps} if per_step else {})}

    def flat(grads) -> Tensor:  # the shared parameters' gradient; zeros where a step's loss does not reach
        return torch.cat([(grads[i] if grads[i] is not None else torch.zeros_like(params[i])).flatten().float()
                          for i in shared])

    ga, gb = flat(g_task), flat(g_rank)
    cos = torch.nn.functional.cosine_similarity(ga, gb, dim=0)
    out_d = {"cosine": cos.item(), "task_norm": ga.norm().item(), "rank_norm": gb.norm().item(),
             "params": ga.numel()}
    if per_step:
        out_d["step_cosines"] = [torch.nn.functional.cosine_similarity(ga, flat(g), dim=0).item()
                                 for g in g_steps]
    return out_d
