"""Measurements behind the paper's geometric claims (docs/method.md section 9): scale consistency
(Table 1), contraction from the step sizes and from the Jacobian along each sample's trajectory."""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from ..config import RunConfig
from ..data.datasets import make_batches
from ..training import FullDepthPass, evaluate, first_batches, load_split


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
    steps = range(1, last + 1) if steps is None else list(steps)
    if bad := [t for t in steps if not 0 <= t <= last]:
        raise ValueError(f"step {bad[0]} outside 0..{last}")
    return [{"step": int(t), "mean": cos[:, t].mean().item(), "std": cos[:, t].std(unbiased=False).item()}
            for t in steps]


def similarity_matrix(pooled: Tensor) -> Tensor:
    """(T+1, T+1) mean over samples of cos(GAP(h_s), GAP(h_t)) for every pair of steps."""
    z = torch.nn.functional.normalize(pooled.float(), dim=2)  # (N, T+1, D) unit vectors
    return torch.einsum("nsd,ntd->st", z, z) / z.shape[0]  # (T+1, T+1)


def adjacent_similarity(pooled: Tensor) -> Tensor:
    """(T,) mean cos(GAP(h_t), GAP(h_{t+1})): a dip marks an abrupt change of phase."""
    return torch.diagonal(similarity_matrix(pooled), offset=1)


# ---------------------------------------------------------------- contraction
def _quartiles(name: str, values: Tensor) -> dict:  # ``name``: the median; ``<name>_q25``, ``<name>_q75``
    q = torch.quantile(values.double(), torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    return {name: q[1].item(), f"{name}_q25": q[0].item(), f"{name}_q75": q[2].item()}


def fit_contraction(step_norms: Tensor, eps: float = 1e-12) -> Tensor:
    """Per-sample rate kappa: exp(slope) of the least-squares line log s_t = a + t log kappa,
    t = 0..T-1. Returns (N,); kappa < 1 means the steps shrink geometrically on average."""
    if step_norms.dim() != 2 or step_norms.shape[1] < 2:
        raise ValueError(f"step_norms must be (N, T) with T >= 2, got {tuple(step_norms.shape)}")
    logs = step_norms.double().clamp_min(eps).log()  # (N, T)
    t = torch.arange(logs.shape[1], dtype=torch.float64)
    tc = t - t.mean()
    return (((logs - logs.mean(1, keepdim=True)) * tc).sum(1) / (tc * tc).sum()).exp().float()  # (N,)


def contraction_bound(step_norms: Tensor, dist_to_final: Tensor, kappa: Tensor) -> Tensor:
    """(N, T) whether ||h_t - h_T|| <= kappa^t / (1 - kappa) ||h_1 - h_0|| for t = 0..T-1; False
    for every t of a sample with kappa >= 1 (the bound is not defined there)."""
    n, t = step_norms.shape
    if dist_to_final.shape != (n, t + 1) or kappa.shape != (n,):
        raise ValueError("expected step_norms (N, T), dist_to_final (N, T+1) and kappa (N,)")
    k = kappa.double()[:, None]  # (N, 1)
    steps = torch.arange(t, dtype=torch.float64)[None]  # (1, T)
    bound = k.pow(steps) / (1 - k) * step_norms[:, :1].double()  # (N, T)
    return (dist_to_final[:, :t].double() <= bound * (1 + 1e-6)) & (k < 1)  # relative slack for rounding


def contraction_summary(traj: FullDepthPass) -> dict:
    """kappa's quartiles over samples, and the shares of samples with kappa < 1 and with the bound."""
    kappa = fit_contraction(traj.step_norms)
    holds = contraction_bound(traj.step_norms, traj.dist_to_final, kappa)
    return {**_quartiles("kappa", kappa), "contracting": (kappa < 1).float().mean().item(),
            "bound_holds": holds.all(1).float().mean().item()}


def jacobian_norm(model: torch.nn.Module, h: Tensor, ctx, t: int, steps: int = 1, *, iters: int = 20,
                  generator: torch.Generator | None = None) -> Tensor:
    """(N,) spectral norm of d h_{t+steps} / d h_t at the states ``h`` (N, *state), by batched power
    iteration on J^T J (a lower bound rising towards sigma_max)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if iters < 1 or steps < 1:
        raise ValueError(f"iters={iters} and steps={steps} must be at least 1")
    h = h.detach()  # (N, *state), in the model's dtype

    def f(z):  # h_t -> h_{t+steps}, like h
        for s in range(t, t + steps):
            z = model.step(z, ctx, s)
        return z

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


def jacobian_norms(model: torch.nn.Module, batches, *, steps: int = 1, start: int = 0, iters: int = 20,
                   max_samples: int | None = None, seed: int = 0) -> Tensor:
    """(N, W) ||d h_{t+steps} / d h_t||_2 (``jacobian_norm``) for t = start .. T-steps along the model's
    own trajectory (CPU); start = T - steps: the one product to h_T, (N, 1)."""
    model.eval()
    last = model.config.steps - steps  # the last t whose product ends at h_T
    if not 0 <= start <= last:
        raise ValueError(f"start={start} with steps={steps}: need 0 <= start <= T - steps = {last}")
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for x, _ in first_batches(batches, max_samples):
        with torch.no_grad():
            h, ctx = model.prologue(x)
        norms = []  # the step loop by hand: each state's Jacobian is probed before the next step
        for t in range(last + 1):
            if t >= start:
                norms.append(jacobian_norm(model, h, ctx, t, steps, iters=iters, generator=generator))
            if t < last:
                with torch.no_grad():
                    h = model.step(h, ctx, t)
        rows.append(torch.stack(norms, 1).cpu())  # (B, W)
    if not rows:
        raise ValueError("jacobian_norms got no batches (an empty split?)")
    return torch.cat(rows)


def jacobian_summary(norms: Tensor, first_step: int = 0) -> dict:
    """Contraction read off the Jacobian norms (N, T) at steps t >= first_step: quartiles of sigma, the
    shares of entries and of samples below 1, and kappa_jvp (the median of each sample's largest)."""
    if norms.dim() != 2 or not 0 <= first_step < norms.shape[1]:
        raise ValueError(f"norms must be (N, T) and first_step in 0..T-1, got {tuple(norms.shape)}, "
                         f"{first_step}")
    s = norms[:, first_step:].double()  # (N, T')
    return {**_quartiles("jvp_norm", s.reshape(-1)), "jvp_below_one": (s < 1).double().mean().item(),
            "jvp_contracting": (s < 1).all(1).double().mean().item(),
            "kappa_jvp": s.max(1).values.median().item()}


JVP_SAMPLES = 200  # test samples whose step Jacobians are estimated (power iteration, 20 rounds)
LATE_STEP = 7  # 0-based: the one-step norms are read over the late steps 8..T
PRODUCT_START = 8  # t0: claim 2 reads the product d h_T / d h_t0 (claims.contraction, method.md 9.3)


def product_summary(norms: Tensor, steps: int) -> dict:
    """The k-step product norms (N,) of ``jacobian_norms`` over ``steps`` steps -> their median over
    samples with its quartiles (``product_norm``, what claims.product_rate reads) and ``product_steps``."""
    if norms.dim() != 1 or norms.numel() == 0:
        raise ValueError(f"norms must be (N,) with N >= 1, got shape {tuple(norms.shape)}")
    return {**_quartiles("product_norm", norms), "product_steps": int(steps)}


def run_jacobian_summary(result, max_samples: int = JVP_SAMPLES) -> dict:
    """``jacobian_summary`` of a trained run over the late steps (LATE_STEP on), and the
    ``product_summary`` of d h_T / d h_t0 (t0 = PRODUCT_START), on the first ``max_samples`` test
    images, on the CPU (the forward-mode passes run there)."""
    cfg = result.config
    batches = make_batches(load_split(cfg, "test"), cfg.train.eval_batch_size, shuffle=False,
                           augment=False, device="cpu")
    model, steps = result.model.cpu(), cfg.model.steps
    norms = jacobian_norms(model, batches, max_samples=max_samples)
    start = min(PRODUCT_START, steps - 1)
    product = jacobian_norms(model, batches, steps=steps - start, start=start, max_samples=max_samples)
    return {**jacobian_summary(norms, first_step=min(LATE_STEP, steps - 1)),
            **product_summary(product[:, 0], steps - start)}


def run_trajectories(result, split: str = "test", max_samples: int | None = None):
    """``model_trajectories`` of a trained run: its full-depth pass over one split, with trajectory."""
    return model_trajectories(result.model, result.config, split, max_samples)


def model_trajectories(model, cfg: RunConfig, split: str = "test", max_samples: int | None = None):
    """The full-depth pass with trajectory (``training.evaluate``) of ``model`` over a split of ``cfg``'s."""
    return evaluate(model, load_split(cfg, split), batch_size=cfg.train.eval_batch_size, trajectories=True,
                    max_samples=max_samples)
