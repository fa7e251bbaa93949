"""Losses of FROST (Yu and Hwang, ICML 2026, arXiv 2601.19551), spec section 4.

Pure functions: no printing, no I/O, no state.

    L_task = CE(y_T, y)                                                   # final step only
    l[i, t] = CE(y_t[i], y[i])  (detached, N x T)                          # ranks the entries
    S_easy = lowest  floor(rank_frac * N * T) entries of l  (at least 1)
    S_hard = highest floor(rank_frac * N * T) entries of l
    L_rel = mean_{e in S_easy, d in S_hard} max(0, margin - (p_e - p_d))   # eq. (rel)
    L_abs = BCE(p_S_easy, 1) + BCE(p_S_hard, 0)                            # eq. (abs)
    L     = L_task + lambda_rel * L_rel + lambda_abs * L_abs               # eq. (total)

with p = sigmoid(halt_logit). Everything touching the halting score is computed from the
logit in float32 (BCE with logits): the probability form is unstable and refused under
bf16 autocast. Whether the ranking gradient reaches the backbone is the model's business
(``model(x, detach_halt_input=...)``), not this module's.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .config import LossConfig


class RankingLosses(NamedTuple):
    rel: Tensor  # scalar, L_rel (differentiable w.r.t. halt_logits)
    abs: Tensor  # scalar, L_abs (differentiable w.r.t. halt_logits)
    easy_mask: Tensor  # (N, T) bool, the entries in S_easy
    hard_mask: Tensor  # (N, T) bool, the entries in S_hard
    easy_score: Tensor  # scalar float32, mean sigmoid over S_easy (detached)
    hard_score: Tensor  # scalar float32, mean sigmoid over S_hard (detached)


def _check_logits(logits: Tensor, y: Tensor) -> None:
    if logits.dim() != 3:
        raise ValueError(f"logits must be (N, T, K), got shape {tuple(logits.shape)}")
    if y.dim() != 1 or y.shape[0] != logits.shape[0]:
        raise ValueError(f"y must be (N,) with N = {logits.shape[0]}, got shape {tuple(y.shape)}")


def task_loss(logits: Tensor, y: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of the final step only (the paper supervises only the last step)."""
    _check_logits(logits, y)
    return F.cross_entropy(logits[:, -1].float(), y, label_smoothing=label_smoothing)  # eq. (task)


def step_losses(logits: Tensor, y: Tensor) -> Tensor:
    """Per-sample, per-step cross-entropy l[i, t], detached float32 of shape (N, T)."""
    _check_logits(logits, y)
    n, t, k = logits.shape
    with torch.no_grad():
        flat = logits.detach().float().reshape(n * t, k)  # (N*T, K)
        target = y[:, None].expand(n, t).reshape(n * t)  # (N*T,)
        return F.cross_entropy(flat, target, reduction="none").view(n, t)  # (N, T)


def set_size(numel: int, rank_frac: float) -> int:
    """Entries in S_easy (and in S_hard): floor(rank_frac * numel), at least 1."""
    # the epsilon keeps e.g. 0.29 * 100 = 28.999999999999996 from flooring to 28
    return max(1, int(math.floor(rank_frac * numel + 1e-9)))


def ranking_losses(halt_logits: Tensor, losses: Tensor, rank_frac: float = 0.25,
                   margin: float = 0.2) -> RankingLosses:
    """L_rel and L_abs over the easy and hard sets of the (detached) loss matrix.

    ``halt_logits`` (N, T) are the halting logits ``w . GAP(h_t) + b``; ``losses`` (N, T)
    the per-step task losses (``step_losses``), used only to rank and never differentiated.
    All N*T entries are ranked ascending with a stable sort, so ties go to the lower flat
    index (row-major: sample, then step) and the sets are deterministic.

    The pairwise hinge is averaged over the full E x D matrix (E = D = set size); at
    N = 256, T = 16 and rank_frac = 0.25 that is 1024^2 float32 = 4 MiB (plus as much for
    autograd), so it is materialised rather than chunked.
    """
    if halt_logits.shape != losses.shape or halt_logits.dim() != 2:
        raise ValueError(f"halt_logits and losses must both be (N, T); got "
                         f"{tuple(halt_logits.shape)} and {tuple(losses.shape)}")
    if not 0.0 < rank_frac <= 0.5:
        raise ValueError(f"rank_frac={rank_frac} must be in (0, 0.5] (the easy and hard sets "
                         f"would overlap above 0.5)")
    numel = losses.numel()
    m = set_size(numel, rank_frac)
    order = torch.argsort(losses.detach().reshape(-1), stable=True)  # (N*T,) ascending
    easy_idx, hard_idx = order[:m], order[numel - m:]  # (E,), (D,)

    z = halt_logits.float().reshape(-1)  # (N*T,) float32 even under bf16 autocast
    z_easy, z_hard = z[easy_idx], z[hard_idx]  # (E,), (D,)
    p_easy, p_hard = torch.sigmoid(z_easy), torch.sigmoid(z_hard)
    rel = F.relu(margin - (p_easy[:, None] - p_hard[None, :])).mean()  # eq. (rel), (E, D) pairs
    abs_ = (F.binary_cross_entropy_with_logits(z_easy, torch.ones_like(z_easy))  # eq. (abs)
            + F.binary_cross_entropy_with_logits(z_hard, torch.zeros_like(z_hard)))

    easy_mask = torch.zeros(numel, dtype=torch.bool, device=losses.device)
    hard_mask = torch.zeros(numel, dtype=torch.bool, device=losses.device)
    easy_mask[easy_idx] = True
    hard_mask[hard_idx] = True
    return RankingLosses(rel, abs_, easy_mask.view_as(losses), hard_mask.view_as(losses),
                         p_easy.detach().mean(), p_hard.detach().mean())


def total_loss(logits: Tensor, halt_logits: Tensor | None, y: Tensor,
               cfg: LossConfig) -> tuple[Tensor, dict[str, Tensor]]:
    """L = L_task + lambda_rel L_rel + lambda_abs L_abs (cfg.ranking), else L_task.

    Returns ``(loss, parts)``; ``parts`` always has the keys loss, task, rel, abs, easy_score,
    hard_score as detached scalar tensors (no GPU sync here: call ``float()`` when logging).
    With ``cfg.ranking`` off the ranking terms are still reported (computed without
    gradient, a diagnostic of the untrained halting head) but not added; they are NaN when
    ``halt_logits`` is None.
    """
    task = task_loss(logits, y, cfg.label_smoothing)
    nan = torch.full((), float("nan"), device=task.device)
    if halt_logits is None:
        if cfg.ranking:
            raise ValueError("loss.ranking is on but no halt_logits were given")
        rank = RankingLosses(nan, nan, None, None, nan, nan)  # type: ignore[arg-type]
    elif cfg.ranking:
        rank = ranking_losses(halt_logits, step_losses(logits, y), cfg.rank_frac, cfg.margin)
    else:
        with torch.no_grad():
            rank = ranking_losses(halt_logits.detach(), step_losses(logits, y), cfg.rank_frac,
                                  cfg.margin)
    if cfg.ranking:
        loss = task + cfg.lambda_rel * rank.rel + cfg.lambda_abs * rank.abs  # eq. (total)
    else:
        loss = task
    parts = {"loss": loss.detach(), "task": task.detach(), "rel": rank.rel.detach(),
             "abs": rank.abs.detach(), "easy_score": rank.easy_score, "hard_score": rank.hard_score}
    return loss, parts
