"""Losses of FROST (Yu and Hwang, ICML 2026) and of PonderNet (Banino et al., 2021): docs/method.md
sections 6.2 (eq. (task), (rel), (abs), (total)) and 10 (eq. (ponder)); the gradient conflict of 9.6; a
student's match to its teacher, section 16 (eq. (state), (match)). Pure functions, float32 halting terms."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .config import RANK_PAIRS, LossConfig, check_range
from .models import HEAD_PARAMS


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


def _per_step_ce(logits: Tensor, y: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """CE(y_t[i], y[i]) for every sample and step, float32 (N, T), differentiable."""
    _check_logits(logits, y)  # below: the (N*T, K) rows, each sample's label T times (N*T,)
    return F.cross_entropy(logits.float().flatten(0, 1), y.repeat_interleave(logits.shape[1]),
                           reduction="none", label_smoothing=label_smoothing).view(logits.shape[:2])


def step_losses(logits: Tensor, y: Tensor) -> Tensor:
    """Per-sample, per-step cross-entropy l[i, t], detached float32 of shape (N, T)."""
    with torch.no_grad():
        return _per_step_ce(logits.detach(), y)


def set_size(numel: int, rank_frac: float) -> int:
    """Entries in S_easy (and in S_hard): floor(rank_frac * numel), at least 1."""
    # the epsilon keeps e.g. 0.29 * 100 = 28.999999999999996 from flooring to 28
    return max(1, int(math.floor(rank_frac * numel + 1e-9)))


def ranking_losses(halt_logits: Tensor, losses: Tensor, rank_frac: float = 0.25,
                   margin: float = 0.2, pairs: str = "global") -> RankingLosses:
    """L_rel and L_abs of the halting logits (N, T) over the easy and hard sets of the detached
    ``losses`` (N, T), ranked all together ("global") or per step; a stable sort breaks ties."""
    if halt_logits.shape != losses.shape or halt_logits.dim() != 2:
        raise ValueError(f"halt_logits and losses must both be (N, T); got "
                         f"{tuple(halt_logits.shape)} and {tuple(losses.shape)}")
    check_range("rank_frac", rank_frac, 0.0, 0.5, low_open=True, what="a fraction",
                hint=" (the easy and hard sets would overlap above 0.5)", error=ValueError)  # as LossConfig
    if pairs not in RANK_PAIRS:
        raise ValueError(f"pairs={pairs!r} must be one of {RANK_PAIRS}")
    # columns ranked on their own: one column of all N*T entries ("global"), or the T steps
    loss_cols = losses.detach().reshape(-1, 1) if pairs == "global" else losses.detach()  # (M, C)
    m = set_size(loss_cols.shape[0], rank_frac)  # >= 1, so order[-m:] is the last m rows
    order = torch.argsort(loss_cols, dim=0, stable=True)  # (M, C) ascending per column
    easy_idx, hard_idx = order[:m], order[-m:]  # (E, C), (D, C) row indices

    z = halt_logits.float().reshape(loss_cols.shape)  # (M, C) float32 even under bf16 autocast
    z_easy, z_hard = z.gather(0, easy_idx), z.gather(0, hard_idx)  # (E, C), (D, C)
    p_easy, p_hard = torch.sigmoid(z_easy), torch.sigmoid(z_hard)
    # the hinge over the full E x D (x T) matrix: about 4 MiB at N = 256, T = 16, so never chunked
    rel = F.relu(margin - (p_easy[:, None, :] - p_hard[None, :, :])).mean()  # eq. (rel) or (rel-t), (E, D, C)
    abs_ = (F.binary_cross_entropy_with_logits(z_easy, torch.ones_like(z_easy))  # eq. (abs)
            + F.binary_cross_entropy_with_logits(z_hard, torch.zeros_like(z_hard)))

    mask = lambda i: torch.zeros_like(loss_cols, dtype=torch.bool).scatter_(0, i, True).view_as(losses)
    return RankingLosses(rel, abs_, mask(easy_idx), mask(hard_idx),  # masks (N, T)
                         p_easy.detach().mean(), p_hard.detach().mean())


# --- PonderNet ---------------------------------------------------------------------------------

class PonderLosses(NamedTuple):
    loss: Tensor  # scalar, ce + beta * kl
    ce: Tensor  # scalar, mean over samples of sum_t p_t CE(y_t, y)
    kl: Tensor  # scalar, mean over samples of KL(p || p_G)
    halting: Tensor  # (N, T) the halting distribution p (differentiable)


def log_halting_distribution(halt_logits: Tensor) -> Tensor:
    """log p_t of PonderNet's halting distribution, (N, T) float32; each row sums to 1 in p."""
    if halt_logits.dim() != 2:
        raise ValueError(f"halt_logits must be (N, T), got shape {tuple(halt_logits.shape)}")
    z = halt_logits.float()  # (N, T)
    log_stay = F.logsigmoid(-z)  # log(1 - lambda_t)
    log_not_yet = torch.cat([torch.zeros_like(z[:, :1]), log_stay[:, :-1].cumsum(1)], 1)  # sum_{s<t}
    log_p = log_not_yet + F.logsigmoid(z)  # log lambda_t + sum_{s<t} log(1 - lambda_s)
    return torch.cat([log_p[:, :-1], log_not_yet[:, -1:]], 1)  # the last step takes the rest


def log_geometric_prior(lambda_p: float, steps: int) -> Tensor:
    """log p_G(t), t = 1..T: the geometric(lambda_p) prior truncated to T and renormalised, (T,)."""
    if not 0.0 < lambda_p < 1.0 or steps < 1:
        raise ValueError(f"need lambda_p in (0, 1) and steps >= 1, got {lambda_p!r} and {steps!r}")
    t = torch.arange(steps, dtype=torch.float64)  # t - 1
    log_g = math.log(lambda_p) + t * math.log1p(-lambda_p)
    return (log_g - torch.logsumexp(log_g, 0)).float()


def ponder_loss(logits: Tensor, halt_logits: Tensor, y: Tensor, prior: float = 0.125,
                beta: float = 0.01, label_smoothing: float = 0.0) -> PonderLosses:
    """PonderNet's loss: the halting-weighted per-step cross-entropy plus beta KL(p || p_G), ``prior``
    lambda_p; ``logits`` (N, T, K) and ``halt_logits`` (N, T) both receive gradient."""
    ce = _per_step_ce(logits, y, label_smoothing)  # (N, T)
    n, t = ce.shape
    if halt_logits.shape != (n, t):
        raise ValueError(f"halt_logits must be (N, T) = {(n, t)}, got {tuple(halt_logits.shape)}")
    log_p = log_halting_distribution(halt_logits)  # (N, T)
    p = log_p.exp()
    log_prior = log_geometric_prior(prior, t).to(log_p.device)  # (T,)
    weighted = (p * ce).sum(1).mean()  # eq. (ponder), reconstruction term
    kl = (p * (log_p - log_prior)).sum(1).mean()  # eq. (ponder), KL(p || p_G)
    return PonderLosses(weighted + beta * kl, weighted, kl, p)


# --- beyond the paper: deep supervision, self-distillation, a directly trained halting head ---------

def halt_targets(logits: Tensor, y: Tensor, target: str) -> Tensor:
    """The halting head's per-step binary target (N, T) float32 off the detached readouts
    (docs/method.md section 14, eq. (target)): "correct", "settled" or "safe"."""
    _check_logits(logits, y)
    with torch.no_grad():
        preds = logits.detach().argmax(-1)  # (N, T)
        if target == "settled":
            return (preds == preds[:, -1:]).float()
        correct = preds == y[:, None]  # (N, T)
        if target == "correct":
            return correct.float()
        if target == "safe":
            later = correct.flip(1).cummax(1).values.flip(1)  # (N, T): some step s >= t is correct
            return (correct | ~later).float()
    raise ValueError(f"target={target!r} must be 'correct', 'settled' or 'safe'")


def distill_loss(logits: Tensor) -> Tensor:
    """Mean over samples and steps t < T of KL(softmax(y_T) || softmax(y_t)), y_T detached: each
    readout is pulled towards the last (eq. (distill)); float32 under autocast."""
    if logits.dim() != 3 or logits.shape[1] < 2:
        raise ValueError(f"logits must be (N, T, K) with T >= 2, got shape {tuple(logits.shape)}")
    logp = F.log_softmax(logits.float(), dim=-1)  # (N, T, K)
    target = logp[:, -1:].detach()  # (N, 1, K)
    return (target.exp() * (target - logp[:, :-1])).sum(-1).mean()  # the mean of (N, T-1)


def total_loss(logits: Tensor, halt_logits: Tensor, y: Tensor,
               cfg: LossConfig) -> tuple[Tensor, dict[str, Tensor]]:
    """L = L_task + lambda_rel L_rel + lambda_abs L_abs (cfg.ranking), PonderNet's loss (cfg.ponder),
    else L_task; ``(loss, parts)``, parts detached (the ranking terms reported even when not trained)."""
    task = task_loss(logits, y, cfg.label_smoothing)
    with torch.set_grad_enabled(cfg.ranking and torch.is_grad_enabled()):
        rank = ranking_losses(halt_logits, step_losses(logits, y), cfg.rank_frac, cfg.margin, cfg.rank_pairs)
    loss = task
    if cfg.ranking:
        loss = task + cfg.lambda_rel * rank.rel + cfg.lambda_abs * rank.abs  # eq. (total)
    elif cfg.ponder:
        loss = ponder_loss(logits, halt_logits, y, cfg.ponder_prior, cfg.ponder_beta,
                           cfg.label_smoothing).loss  # eq. (ponder)
    # beyond the paper (eq. (variant)); each term is off at its default, FROST's recipe
    if cfg.deep_supervision > 0:
        loss = loss + cfg.deep_supervision * _per_step_ce(logits, y, cfg.label_smoothing).mean()
    if cfg.distill > 0:
        loss = loss + cfg.distill * distill_loss(logits)
    if cfg.halt_target != "none":
        target = halt_targets(logits, y, cfg.halt_target)  # (N, T), no gradient
        loss = loss + cfg.lambda_halt * F.binary_cross_entropy_with_logits(halt_logits.float(), target)
    return loss, {"loss": loss.detach(), "task": task.detach(), "rel": rank.rel.detach(),
                  "abs": rank.abs.detach(), "easy_score": rank.easy_score, "hard_score": rank.hard_score}


# --- the block-recurrent student's match to its teacher (docs/method.md section 16) ----------------

class TeacherLosses(NamedTuple):
    loss: Tensor  # scalar, w_state * state + w_kl * kl
    state: Tensor  # scalar, mean over samples and steps of ||h_t - h'_t||^2 / ||h'_t||^2
    kl: Tensor  # scalar, mean over samples of KL(softmax(y'_T) || softmax(y_T))


def teacher_losses(states: Tensor, logits: Tensor, teacher_states: Tensor, teacher_logits: Tensor,
                   w_state: float = 1.0, w_kl: float = 1.0, eps: float = 1e-12) -> TeacherLosses:
    """The student's match to its frozen teacher: eq. (state)'s normalised state error at t = 1..T and
    the final-step KL of eq. (match), from states (N, T+1, *state) and logits (N, T, K); float32."""
    if states.shape != teacher_states.shape or states.dim() < 3:
        raise ValueError(f"states and teacher_states must both be (N, T+1, *state), got "
                         f"{tuple(states.shape)} and {tuple(teacher_states.shape)}")
    if logits.dim() != 3 or logits.shape != teacher_logits.shape:
        raise ValueError(f"logits and teacher_logits must both be (N, T, K), got {tuple(logits.shape)} "
                         f"and {tuple(teacher_logits.shape)}")
    ref = teacher_states[:, 1:].detach().float().flatten(2)  # (N, T, M): h'_1 .. h'_T
    err = (states[:, 1:].float().flatten(2) - ref).pow(2).sum(-1)  # (N, T)
    state = (err / ref.pow(2).sum(-1).clamp_min(eps)).mean()  # eq. (state)
    log_q = F.log_softmax(teacher_logits[:, -1].detach().float(), dim=-1)  # (N, K) the teacher's
    kl = (log_q.exp() * (log_q - F.log_softmax(logits[:, -1].float(), dim=-1))).sum(-1).mean()
    return TeacherLosses(w_state * state + w_kl * kl, state, kl)  # eq. (match), without the task loss


def gradient_conflict(model: torch.nn.Module, x: Tensor, y: Tensor, loss: LossConfig,
                      per_step: bool = False) -> dict:
    """Cosine between the gradients of L_task and of the weighted ranking losses over the parameters both
    reach (docs/method.md section 9.6), norms and count; ``per_step``: also ``step_cosines``, t = 1..T."""
    was_training = model.training
    model.train()
    out = model(x, detach_halt_input=not loss.rank_grad_to_backbone)
    task = task_loss(out.logits, y, loss.label_smoothing)
    losses = step_losses(out.logits, y)

    def weighted(halt: Tensor, lm: Tensor, pairs: str) -> Tensor:
        rank = ranking_losses(halt, lm, loss.rank_frac, loss.margin, pairs)
        return loss.lambda_rel * rank.rel + loss.lambda_abs * rank.abs

    params = [p for n, p in model.named_parameters() if p.requires_grad and not n.startswith(HEAD_PARAMS)]
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
        return {"cosine": math.nan, "task_norm": math.nan, "rank_norm": math.nan, "params": 0,
                **({"step_cosines": [math.nan] * steps} if per_step else {})}

    def flat(grads) -> Tensor:  # the shared parameters' gradient; zeros where a step's loss does not reach
        return torch.cat([(torch.zeros_like(params[i]) if grads[i] is None else grads[i]).flatten().float()
                          for i in shared])

    ga, gb = flat(g_task), flat(g_rank)
    out_d = {"cosine": F.cosine_similarity(ga, gb, dim=0).item(), "task_norm": ga.norm().item(),
             "rank_norm": gb.norm().item(), "params": ga.numel()}
    if per_step:
        out_d["step_cosines"] = [F.cosine_similarity(ga, flat(g), dim=0).item() for g in g_steps]
    return out_d
