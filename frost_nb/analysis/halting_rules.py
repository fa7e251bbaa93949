"""Halting rules of related work, applied to the same trained models (docs/method.md section 10,
notebook 07), offline on a ``training.FullDepthPass`` or online (``OnlineRule``). A signal
undefined at a step is NaN there and never fires (nor counts as a hit): the second-order steps
and the KL at t = 1, a relative step of a state of norm 0 (0 / 0; x / 0 is +inf, never "< eps").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from ..halting import exit_steps
from ..losses import halting_distribution
from ..training import FullDepthPass

THRESHOLDS = 40  # candidate thresholds per rule: quantiles of its signal on the held-out split
FROST_QUANTILES = tuple(i / 32 for i in range(33))  # 0, 1/32, ..., 1
REACH_FRACTION = 0.99  # depth_at_99pct: the depth at which a curve reaches 99% of full depth
FIXED, ORACLE, FROST = "fixed depth", "oracle", "frost"

# Collapse (notebook 07; docs/method.md section 9.7), fixed before any run: see ``collapsed``.
COLLAPSE_ACCURACY_RATIO = 0.5
COLLAPSE_ONE_STEP_SHARE = 0.95
COLLAPSE_QUANTILE = 0.5


# ---------------------------------------------------------------- signals
def _relative(norms: Tensor, state_norms: Tensor) -> Tensor:
    return norms.double() / state_norms.double()  # IEEE: 0 / 0 = NaN, x / 0 = inf


def step_size_signal(traj: FullDepthPass) -> Tensor:
    """||h_t - h_{t-1}|| / ||h_t|| for t = 1..T, (N, T) float64."""
    return _relative(traj.step_norms, traj.state_norms[:, 1:])


def second_order_signal(traj: FullDepthPass) -> Tensor:
    """||(h_t - h_{t-1}) - (h_{t-1} - h_{t-2})|| / ||h_t||, (N, T) float64; NaN at t = 1. This
    project's normalised variant of the Two-Scale rule (``two_scale_signal`` is the rule as stated)."""
    s = _relative(traj.second_diff_norms, traj.state_norms[:, 2:])  # (N, T-1), t = 2..T
    return torch.cat([torch.full_like(s[:, :1], math.nan), s], 1)


def two_scale_signal(traj: FullDepthPass) -> Tensor:
    """||Delta_t - Delta_{t-1}||, Delta_t = h_t - h_{t-1}, unnormalised (Pappone et al. 2025,
    arXiv 2509.23314), (N, T) float64; NaN at t = 1."""
    s = traj.second_diff_norms.double()  # (N, T-1), t = 2..T
    return torch.cat([torch.full_like(s[:, :1], math.nan), s], 1)


def kl_signal(traj: FullDepthPass) -> Tensor:
    """KL(softmax y_t || softmax y_{t-1}), (N, T) float64; NaN at t = 1 (there is no y_0).
    Clamped at 0 (rounding can leave -1e-17 where the two are equal)."""
    logp = F.log_softmax(traj.logits.double(), dim=-1)  # (N, T, K)
    kl = (logp[:, 1:].exp() * (logp[:, 1:] - logp[:, :-1])).sum(-1).clamp_min(0.0)  # (N, T-1)
    return torch.cat([torch.full_like(kl[:, :1], math.nan), kl], 1)


def confidence_signal(traj: FullDepthPass) -> Tensor:
    """max_k softmax(y_t)_k, (N, T) float64."""
    return F.softmax(traj.logits.double(), dim=-1).amax(-1)


def ponder_signal(traj: FullDepthPass) -> Tensor:
    """PonderNet's cumulative halting probability (of ``losses.halting_distribution``), (N, T) float64."""
    return halting_distribution(traj.halt_logits).double().cumsum(1)


def frost_signal(traj: FullDepthPass) -> Tensor:
    """FROST's score sigmoid(halt logit), (N, T) float32: the pass's own, as ``adaptive_predict``'s."""
    return traj.scores


@dataclass(frozen=True)
class Rule:
    name: str
    signal: Callable[[FullDepthPass], Tensor]  # (N, T)
    exits_when: str  # "below": s_t < threshold; "above": s_t > threshold
    hits: int = 1  # exit once the condition has held at this many consecutive steps
    source: str = ""  # where the rule comes from (docs/method.md section 10)


TWO_SCALE = "second-order step (two-scale, as stated)"
RULES = {r.name: r for r in (
    Rule("step size", step_size_signal, "below", source="Geiping et al. 2025 (recurrent-depth LMs)"),
    Rule("second-order step", second_order_signal, "below",
         source="this project: the Two-Scale rule normalised by ||h_t||, exit on the first hit"),
    Rule(TWO_SCALE, two_scale_signal, "below", hits=2,
         source="Pappone et al. 2025, arXiv 2509.23314: unnormalised, two consecutive hits"),
    Rule("KL between steps", kl_signal, "below", source="Geiping et al. 2025 (recurrent-depth LMs)"),
    Rule("confidence", confidence_signal, "above", source="BranchyNet; MSDNet"),
    Rule("ponder", ponder_signal, "above", source="PonderNet (Banino et al. 2021)"),
    Rule(FROST, frost_signal, "above", source="FROST (Yu and Hwang 2026): tau_q of the KLL sketch"),
)}
SIGNAL_RULES = ("step size", "second-order step", TWO_SCALE, "KL between steps", "confidence")  # any model


def _norms(v: Tensor) -> Tensor:
    return v.reshape(v.shape[0], -1).norm(dim=1)  # (n,) over the whole state, as full_depth_pass


class OnlineRule:
    """A rule of ``RULES`` applied while ``halting.adaptive_predict(rule=...)`` or ``stream_predict`` runs
    (docs/method.md section 10): step t's signal on the rows still running, from h_t, the readout and a
    per-row memory (``ONLINE``), against ``threshold`` as in ``rule_exits`` (NaN never fires). Each row
    has its own step index t; with ``hits`` > 1 the memory also counts each row's consecutive hits."""

    def __init__(self, rule: Rule | str, threshold: float):
        name = rule if isinstance(rule, str) else rule.name
        if name not in ONLINE:  # every rule of RULES, and FIXED
            raise ValueError(f"unknown halting rule {name!r}; known: {sorted(ONLINE)}")
        self.rule = {**RULES, FIXED: FIXED_RULE}[name] if isinstance(rule, str) else rule
        if math.isnan(threshold):
            raise ValueError(f"rule {self.rule.name!r}: the threshold is NaN; expected a real number")
        self.threshold = float(threshold)

    def __repr__(self) -> str:
        return f"OnlineRule({self.rule.name!r}, {self.threshold!r})  # {self.rule.source}"

    def start(self, h0: Tensor) -> tuple:
        """The memory before step 1 (from h_0), one row per row of h_0."""
        memory = ONLINE[self.rule.name][0](h0)
        if self.rule.hits == 1:
            return memory
        return memory, torch.zeros(h0.shape[0], dtype=torch.int64, device=h0.device)  # hits in a row

    def fires(self, t: Tensor | int, h: Tensor, logits: Tensor, halt_logit: Tensor, memory: tuple):
        """``(exits, memory)`` at step ``t`` in 1..T, (n,) int64 per row (or one int for every row):
        (n,) bool, and the memory for each row's next step."""
        if not (isinstance(t, Tensor) and t.dim() == 1):  # one int for every row
            t = torch.full((h.shape[0],), int(t), dtype=torch.int64, device=h.device)
        inner, run = (memory, None) if self.rule.hits == 1 else memory
        signal, inner = ONLINE[self.rule.name][1](t, h, logits, halt_logit, inner)
        hit = signal > self.threshold if self.rule.exits_when == "above" else signal < self.threshold
        if run is None:
            return hit, inner
        run = torch.where(hit, run + 1, 0)  # consecutive hits so far; a miss (or NaN) restarts
        return run >= self.rule.hits, (inner, run)


def _nan(n: Tensor) -> Tensor:
    return torch.full((n.shape[0],), math.nan, dtype=torch.float64, device=n.device)


def _online_second_order(t, h, logits, halt, memory, normalised: bool = True):
    h_prev, d_prev = memory
    d = h - h_prev
    change = _norms(d - d_prev)
    signal = _relative(change, _norms(h)) if normalised else change.double()  # two-scale: unnormalised
    return torch.where(t == 1, _nan(h), signal), (h, d)  # NaN at t = 1


def _online_kl(t, h, logits, halt, memory):
    logp = F.log_softmax(logits.double(), dim=-1)  # (n, K)
    (prev,) = memory  # (n, K), or the (n, 1) zeros of start: no y_0, NaN at t = 1 anyway
    return torch.where(t == 1, _nan(logits), (logp.exp() * (logp - prev)).sum(-1).clamp_min(0.0)), (logp,)


def _online_ponder(t, h, logits, halt, memory):
    log_not_yet, cumulative = memory  # sum_{s<t} log(1 - lambda_s) (float32), sum_{s<t} p_s (float64)
    z = halt.float()
    cumulative = cumulative + (log_not_yet + F.logsigmoid(z)).exp().double()
    return cumulative, (log_not_yet + F.logsigmoid(-z), cumulative)


def _step_index(traj: FullDepthPass) -> Tensor:
    """t at step t, (N, T) float64: the fixed-depth rule's signal (exit at d: threshold d - 0.5)."""
    n, steps = traj.halt_logits.shape
    return torch.arange(1, steps + 1, dtype=torch.float64).expand(n, steps)


FIXED_RULE = Rule(FIXED, _step_index, "above", source="every sample stops at the same step")

# rule name -> (memory from h_0, step function (t, h, logits, halt logit, memory) -> (signal, memory));
# t (n,) int64 is each row's step index in 1..T; every memory tensor has one row per row of h
ONLINE = {
    FIXED: (lambda h0: (), lambda t, h, lg, z, m: (t.double(), m)),
    "step size": (lambda h0: (h0,), lambda t, h, lg, z, m: (_relative(_norms(h - m[0]), _norms(h)), (h,))),
    "second-order step": (lambda h0: (h0, torch.zeros_like(h0)), _online_second_order),
    TWO_SCALE: (lambda h0: (h0, torch.zeros_like(h0)),
                lambda t, h, lg, z, m: _online_second_order(t, h, lg, z, m, normalised=False)),
    "KL between steps": (lambda h0: (torch.zeros(h0.shape[0], 1, dtype=torch.float64, device=h0.device),),
                         _online_kl),
    "confidence": (lambda h0: (), lambda t, h, lg, z, m: (F.softmax(lg.double(), dim=-1).amax(-1), m)),
    "ponder": (lambda h0: (torch.zeros(h0.shape[0], device=h0.device),
                           torch.zeros(h0.shape[0], dtype=torch.float64, device=h0.device)), _online_ponder),
    FROST: (lambda h0: (), lambda t, h, lg, z, m: (torch.sigmoid(z.float()), m)),
}


def consecutive(condition: Tensor, hits: int) -> Tensor:
    """(N, T) bool: ``condition`` held at t and at the ``hits`` - 1 steps before it."""
    if hits == 1:
        return condition
    before = torch.zeros_like(condition[:, : hits - 1])  # no step 0, -1, ...: never a hit
    return torch.cat([before, condition], 1).unfold(1, hits, 1).all(-1)  # (N, T)


def rule_exits(rule: Rule, signal: Tensor, threshold: float) -> Tensor:
    """Exit depth (N,) int64: the first t whose condition held at ``rule.hits`` steps ending at t, else T."""
    if rule.hits > 1:
        hit = signal > threshold if rule.exits_when == "above" else signal < threshold  # NaN: False
        return exit_steps(consecutive(hit, rule.hits).to(torch.float32), 0.5)
    if rule.exits_when == "above":
        return exit_steps(signal, threshold)  # first s_t > threshold
    return exit_steps(-signal, -threshold)  # "below": s_t < eps  <=>  -s_t > -eps (NaN stays NaN)


# ---------------------------------------------------------------- exits and accuracy
def oracle_exits(correct: Tensor) -> Tensor:
    """Earliest step whose prediction is correct, else T (those samples count wrong): (N,)."""
    return exit_steps(correct.float(), 0.5)


def oracle_accuracy_at(correct: Tensor, depths: Sequence[float] | np.ndarray) -> np.ndarray:
    """The most accuracy any exit assignment of mean depth <= B can reach, for each B in depths:
    a sample whose earliest correct step is e costs e - 1 steps beyond step 1, and the cheapest
    are taken first until the budget N (B - 1) is spent (every other sample stops at step 1)."""
    n, _ = correct.shape
    extra = np.sort((oracle_exits(correct)[correct.any(1)] - 1).numpy())  # (M,) cost of each solvable one
    spent = np.concatenate([[0], np.cumsum(extra)])  # cost of the k cheapest, k = 0..M
    budget = n * (np.asarray(depths, dtype=float) - 1.0) + 1e-6  # slack for mean-of-ints rounding
    k = np.searchsorted(spent, budget, side="right") - 1
    return np.where(budget >= 0, k / n, np.nan)


# ---------------------------------------------------------------- thresholds
def candidate_thresholds(signal: Tensor, count: int = THRESHOLDS) -> np.ndarray:
    """``count`` quantiles (levels 0..1) of the finite values of ``signal``, and -inf, +inf."""
    values = signal.double().reshape(-1).numpy()
    values = values[np.isfinite(values)]
    levels = np.linspace(0.0, 1.0, count) if count > 1 else np.array([0.5])
    qs = np.quantile(values, levels) if values.size else np.array([])
    return np.unique(np.concatenate([[-np.inf], qs, [np.inf]]))


# ---------------------------------------------------------------- summaries
def sorted_points(curve) -> tuple[np.ndarray, np.ndarray]:
    """(depth, accuracy) of the finite rows, sorted by depth then accuracy."""
    x, y = (np.asarray(curve[c], dtype=float) for c in ("mean_depth", "accuracy"))
    keep = np.isfinite(x) & np.isfinite(y)
    order = np.lexsort((y[keep], x[keep]))
    return x[keep][order], y[keep][order]


def curve_auc(curve, steps: int) -> float:
    """Mean accuracy over mean depths 1..T: the area under the curve sorted by depth and extended flat
    to depths 1 and T, divided by T - 1 (a flat curve gives its accuracy)."""
    if steps < 2:
        raise ValueError(f"steps={steps}: the depth range 1..T needs T >= 2")
    x, y = sorted_points(curve)
    if not x.size:
        return math.nan
    x = np.clip(np.concatenate([[1.0], x, [float(steps)]]), 1.0, float(steps))
    y = np.concatenate([[y[0]], y, [y[-1]]])
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2) / (steps - 1))


def depth_to_reach(curve, target: float) -> float:
    """The smallest mean depth at which the curve, linear between its points sorted by depth, reaches
    ``target`` accuracy (NaN if never; its shallowest point's depth if that reaches it already)."""
    x, y = sorted_points(curve)
    reached = np.flatnonzero(y >= target)
    if not reached.size:
        return math.nan
    i = reached[0]
    return float(x[0] if i == 0 else x[i - 1] + (target - y[i - 1]) / (y[i] - y[i - 1]) * (x[i] - x[i - 1]))


def summary(curves, steps: int):
    """One row per (rule, model): ``auc`` (``curve_auc``) and ``depth_at_99pct``, the depth reaching
    99% of that model's full-depth accuracy (its fixed-depth curve at t = T)."""
    full = curves[(curves["rule"] == FIXED) & (curves["mean_depth"] == steps)]
    full = dict(zip(full["model"], full["accuracy"]))
    rows = [{"rule": rule, "model": model, "auc": curve_auc(curve, steps),
             "depth_at_99pct": depth_to_reach(curve, REACH_FRACTION * full.get(model, math.nan))}
            for (rule, model), curve in curves.groupby(["rule", "model"], sort=False)]
    return pd.DataFrame(rows, columns=["rule", "model", "auc", "depth_at_99pct"])


def collapsed(accuracy: float, reference_accuracy: float,
              depth_histogram: Sequence[int] | np.ndarray) -> tuple[bool, list[str]]:
    """The collapse verdict (docs/method.md section 9.7) of a run trained with the ranking losses
    against its task-only twin's ``reference_accuracy``; ``depth_histogram``: test samples per exit
    step 1..T at q = COLLAPSE_QUANTILE. Returns ``(flag, reasons)``, reasons empty if not collapsed."""
    counts = np.asarray(depth_histogram, dtype=float)
    if not (math.isfinite(accuracy) and math.isfinite(reference_accuracy)) or counts.sum() <= 0:
        raise ValueError(f"collapsed needs finite accuracies and a non-empty histogram; got "
                         f"{accuracy!r}, {reference_accuracy!r} and {counts.tolist()}")
    reasons = []
    if accuracy < COLLAPSE_ACCURACY_RATIO * reference_accuracy:
        reasons.append(f"full-depth accuracy {accuracy:.4f} is below half of the reference's "
                       f"{reference_accuracy:.4f}")
    share = counts.max() / counts.sum()
    if share > COLLAPSE_ONE_STEP_SHARE:
        reasons.append(f"{share:.1%} of the samples exit at step {int(counts.argmax()) + 1} "
                       f"at q = {COLLAPSE_QUANTILE}")
    return bool(reasons), reasons
