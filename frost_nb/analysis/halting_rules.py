"""Halting rules of related work (docs/method.md section 10, notebook 07), offline on a
``training.FullDepthPass`` or online (``OnlineRule``), and the references beside them: the oracle, the
hindsight exit and random exits of a rule's own depths (``gain_split``). A signal undefined at a
step (the second-order steps and the KL at t = 1, 0 / 0) is NaN there and never fires.
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
from ..losses import log_halting_distribution
from ..training import FullDepthPass

THRESHOLDS = 40  # candidate thresholds per rule: quantiles of its signal on the held-out split
FROST_QUANTILES = tuple(i / 32 for i in range(33))  # 0, 1/32, ..., 1
REACH_FRACTION = 0.99  # depth_at_99pct: the depth at which a curve reaches 99% of full depth
WITHIN = 0.005  # half a point: "stays within WITHIN of full-depth accuracy" (claim 16's depth target)
FIXED, ORACLE, FROST = "fixed depth", "oracle", "frost"
HINDSIGHT = "hindsight exit"  # stop where the prediction equals its final one from then on: needs step T
PATIENCE, PROBE = "patience", "settled probe"  # PABEE's rule; ours (``fit_settled_probe``)
REFERENCES = (FIXED, ORACLE, HINDSIGHT)  # curves that are no rule of their own

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
    return _relative(two_scale_signal(traj), traj.state_norms[:, 1:])


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
    """PonderNet's cumulative halting probability (of ``losses.log_halting_distribution``), (N, T) float64."""
    return log_halting_distribution(traj.halt_logits).exp().double().cumsum(1)


def patience_signal(traj: FullDepthPass) -> Tensor:
    """How many steps in a row the prediction has stayed the same up to t (0 at t = 1 and wherever it
    just changed), (N, T) float64: PABEE (Zhou et al. 2020) stops once it reaches its patience."""
    preds = traj.preds  # (N, T)
    t = torch.arange(preds.shape[1], device=preds.device)
    changed = F.pad(preds[:, 1:] != preds[:, :-1], (1, 0), value=True)  # step 1 starts a run
    return (t - torch.where(changed, t, 0).cummax(1).values).double()


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
    Rule(PATIENCE, patience_signal, "above", source="PABEE (Zhou et al. 2020): the prediction unchanged "
         "for more than the threshold's steps in a row"),
    Rule("ponder", ponder_signal, "above", source="PonderNet (Banino et al. 2021)"),
    # FROST's score sigmoid(halt logit), (N, T) float32: the pass's own, as ``adaptive_predict``'s
    Rule(FROST, lambda traj: traj.scores, "above",
         source="FROST (Yu and Hwang 2026): tau_q of the KLL sketch"),
)}
# the rules any model has: no trained halting head
SIGNAL_RULES = tuple(name for name in RULES if name not in ("ponder", FROST))


def _norms(v: Tensor) -> Tensor:
    return v.reshape(v.shape[0], -1).norm(dim=1)  # (n,) over the whole state, as full_depth_pass


class OnlineRule:
    """A rule of ``RULES`` applied while ``halting.adaptive_predict(rule=...)`` or ``stream_predict`` runs:
    step t's signal on the rows still running from h_t, the readout and a per-row memory (``ONLINE``),
    against ``threshold`` as in ``rule_exits``; with ``hits`` > 1 the memory counts consecutive hits."""

    def __init__(self, rule: str, threshold: float):
        if rule not in ONLINE:  # every rule of RULES, and FIXED
            raise ValueError(f"unknown halting rule {rule!r}; known: {sorted(ONLINE)}")
        self.rule = {**RULES, FIXED: FIXED_RULE}[rule]
        if math.isnan(threshold):
            raise ValueError(f"rule {self.rule.name!r}: the threshold is NaN; expected a real number")
        self.threshold = float(threshold)

    def __repr__(self) -> str:
        return f"OnlineRule({self.rule.name!r}, {self.threshold!r})  # {self.rule.source}"

    def start(self, h0: Tensor) -> tuple:
        """The memory before step 1 (from h_0), one row per row of h_0."""
        memory = ONLINE[self.rule.name][0](h0)
        return memory if self.rule.hits == 1 else (memory, _per_row(h0, 0, torch.int64))  # and hits in a row

    def fires(self, t: Tensor | int, h: Tensor, logits: Tensor, halt_logit: Tensor, memory: tuple):
        """``(exits, memory)`` at step ``t`` in 1..T, (n,) int64 per row (or one int for every row):
        (n,) bool, and the memory for each row's next step."""
        if not (isinstance(t, Tensor) and t.dim() == 1):  # one int for every row
            t = _per_row(h, int(t), torch.int64)
        inner, run = (memory, None) if self.rule.hits == 1 else memory
        signal, inner = ONLINE[self.rule.name][1](t, h, logits, halt_logit, inner)
        hit = signal > self.threshold if self.rule.exits_when == "above" else signal < self.threshold
        if run is None:
            return hit, inner
        run = torch.where(hit, run + 1, 0)  # consecutive hits so far; a miss (or NaN) restarts
        return run >= self.rule.hits, (inner, run)


def _per_row(like: Tensor, value: float, dtype: torch.dtype = torch.float64) -> Tensor:
    return torch.full((like.shape[0],), value, dtype=dtype, device=like.device)  # (n,) on like's device


def _online_second_order(t, h, logits, halt, memory, normalised: bool = True):
    h_prev, d_prev = memory
    d = h - h_prev
    change = _norms(d - d_prev)
    signal = _relative(change, _norms(h)) if normalised else change.double()  # two-scale: unnormalised
    return torch.where(t == 1, _per_row(h, math.nan), signal), (h, d)  # NaN at t = 1


def _online_kl(t, h, logits, halt, memory):
    logp = F.log_softmax(logits.double(), dim=-1)  # (n, K)
    (prev,) = memory  # (n, K), or the (n, 1) zeros of start: no y_0, NaN at t = 1 anyway
    kl = (logp.exp() * (logp - prev)).sum(-1).clamp_min(0.0)  # (n,)
    return torch.where(t == 1, _per_row(logits, math.nan), kl), (logp,)


def _online_ponder(t, h, logits, halt, memory):
    log_not_yet, cumulative = memory  # sum_{s<t} log(1 - lambda_s) (float32), sum_{s<t} p_s (float64)
    z = halt.float()
    cumulative = cumulative + (log_not_yet + F.logsigmoid(z)).exp().double()
    return cumulative, (log_not_yet + F.logsigmoid(-z), cumulative)


def _online_patience(t, h, logits, halt, memory):
    previous, run = memory  # (n,) the last prediction (-1 before step 1), (n,) float64 its run so far
    pred = logits.argmax(-1)
    run = torch.where((pred == previous) & (t > 1), run + 1, 0.0)
    return run, (pred, run)


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
    "KL between steps": (lambda h0: (_per_row(h0, 0.0)[:, None],), _online_kl),
    "confidence": (lambda h0: (), lambda t, h, lg, z, m: (F.softmax(lg.double(), dim=-1).amax(-1), m)),
    "ponder": (lambda h0: (_per_row(h0, 0.0, torch.float32), _per_row(h0, 0.0)), _online_ponder),
    FROST: (lambda h0: (), lambda t, h, lg, z, m: (torch.sigmoid(z.float()), m)),
    PATIENCE: (lambda h0: (_per_row(h0, -1, torch.int64), _per_row(h0, 0.0)), _online_patience),
}


def consecutive(condition: Tensor, hits: int) -> Tensor:
    """(N, T) bool: ``condition`` held at t and at the ``hits`` - 1 steps before it."""
    before = torch.zeros_like(condition[:, : hits - 1])  # no step 0, -1, ...: never a hit
    return torch.cat([before, condition], 1).unfold(1, hits, 1).all(-1)  # (N, T)


def rule_exits(rule: Rule, signal: Tensor, threshold: float) -> Tensor:
    """Exit depth (N,) int64: the first t whose condition held at ``rule.hits`` steps ending at t, else T."""
    if rule.hits > 1:
        hit = signal > threshold if rule.exits_when == "above" else signal < threshold  # NaN: False
        return exit_steps(consecutive(hit, rule.hits).to(torch.float32), 0.5)
    # "above": the first s_t > threshold; "below": s_t < eps  <=>  -s_t > -eps (NaN stays NaN)
    return exit_steps(signal, threshold) if rule.exits_when == "above" else exit_steps(-signal, -threshold)


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
    return np.where(budget >= 0, (np.searchsorted(spent, budget, side="right") - 1) / n, np.nan)


def random_exit_accuracy(correct: Tensor, exits: Tensor) -> float:
    """The exact expected accuracy of random exits with the depth histogram of ``exits`` (N,) in 1..T:
    sum_d p_d acc(d), p_d the share of exits at d, acc(d) the mean of ``correct[:, d - 1]``."""
    n, steps = correct.shape
    if exits.shape != (n,) or exits.dtype.is_floating_point:
        raise ValueError(f"exits must be ({n},) integer steps, got {tuple(exits.shape)} {exits.dtype}")
    if n == 0 or int(exits.min()) < 1 or int(exits.max()) > steps:
        raise ValueError(f"exits must lie in 1..{steps} (and N > 0)")
    share = torch.bincount(exits.long() - 1, minlength=steps).double() / n  # (T,) p_d
    return float((share * correct.double().mean(0)).sum())


def fixed_accuracy_at(correct: Tensor, depths) -> np.ndarray:
    """A fixed depth read at mean ``depths``: linear between whole steps, as ``read_at`` reads
    the fixed-depth curve (the accuracy of stopping at floor(d) and ceil(d) in proportion)."""
    acc = correct.double().mean(0).numpy()  # (T,)
    return np.interp(np.asarray(depths, dtype=float), np.arange(1, acc.size + 1), acc)


def gain_split(accuracy, fixed_accuracy, random_accuracy=None) -> dict:
    """The one split of a rule's gain over a fixed depth at the same mean depth (numbers or arrays):
    ``gain`` = its accuracy - fixed depth; with its random exits (``random_exit_accuracy``), ``spread``
    = random exits - fixed depth (at most 0 when accuracy is concave in depth) and ``ranking`` = its
    accuracy - random exits (what its choice of samples adds), gain = spread + ranking."""
    split = {"gain": accuracy - fixed_accuracy}
    if random_accuracy is not None:
        split.update(spread=random_accuracy - fixed_accuracy, ranking=accuracy - random_accuracy)
    return split


def settled_exits(preds: Tensor) -> Tensor:
    """(N,) the first step from which each sample's prediction stays equal to its final one (settled
    for good), in 1..T: needs no label."""
    same = preds == preds[:, -1:]  # (N, T)
    for_good = same.flip(1).int().cumprod(1).flip(1)  # 1 where every step from t on agrees
    return exit_steps(for_good.float(), 0.5)


def hindsight_constructions(preds: Tensor, labels: Tensor, depths: Sequence[float] | np.ndarray):
    """(cheapest, capped): the hindsight exit's two constructions, their accuracy at each mean depth B of
    ``depths`` (NaN below 1). Cheapest first is ``oracle_accuracy_at``'s with "settled for good on its final
    prediction" for "correct": a sample settling at e costs e - 1 steps beyond step 1, the cheapest stop
    there first (ties in sample order) within the budget N (B - 1), the rest at step 1 with its readout
    (below a fixed depth at small budgets). Capped: stop at step s, or earlier where settled (a fixed depth
    s's accuracy at a smaller mean depth; linear between s and s + 1). No test label chooses (``labels`` only
    score); both need the final step and reach full-depth accuracy at the mean of ``settled_exits``."""
    n, steps = preds.shape
    exits = settled_exits(preds)
    order = torch.argsort(exits, stable=True)
    first, final = (preds[:, t] == labels for t in (0, -1))
    spent = np.concatenate([[0], np.cumsum((exits[order] - 1).numpy())])  # cost of the k cheapest
    right = first.sum().item() + np.concatenate([[0], np.cumsum((final[order].int() - first[order].int()).numpy())])
    budget = n * (np.asarray(depths, dtype=float) - 1.0) + 1e-6
    cheapest = right[np.maximum(np.searchsorted(spent, budget, side="right") - 1, 0)] / n
    s = torch.arange(1, steps + 1)  # capped at s = 1..T: stop at s, or where settled before it
    hit = torch.where(exits[:, None] <= s, final[:, None], preds == labels[:, None])  # (N, T)
    # a mean depth repeats only from the s on which every sample has settled, at full-depth accuracy
    at, first_s = np.unique(torch.minimum(exits[:, None], s).double().mean(0).numpy(), return_index=True)
    capped = np.interp(np.asarray(depths, dtype=float), at, hit.double().mean(0).numpy()[first_s])
    return tuple(np.where(budget >= 0, c, np.nan) for c in (cheapest, capped))


def hindsight_exit_at(preds: Tensor, labels: Tensor, depths, val_preds: Tensor, val_labels: Tensor) -> np.ndarray:
    """The hindsight exit on a test pass (``preds``, ``labels``) at mean ``depths``: per depth, the one of
    ``hindsight_constructions`` more accurate on the held-out pass (``val_preds``, ``val_labels``; a tie,
    capped). No rule (it needs step T), no bound on label-free rules (which may stop on answers that flip)."""
    val_cheapest, val_capped = hindsight_constructions(val_preds, val_labels, depths)
    return np.where(val_cheapest > val_capped, *hindsight_constructions(preds, labels, depths))


def auroc(score: Tensor, positive: Tensor) -> float:
    """Area under the ROC curve of ``score`` for ``positive`` (Mann-Whitney, ties counted half);
    NaN when a class is empty."""
    from scipy.stats import rankdata

    pos = positive.bool().numpy()
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if not n_pos or not n_neg:
        return math.nan
    return float((rankdata(score.double().numpy())[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def settled_auroc(scores: Tensor, preds: Tensor) -> tuple[np.ndarray, float]:
    """Does a score know when the prediction has settled for good? Per step t < T the AUROC of
    ``scores[:, t - 1]`` for "settled for good by t" (``settled_exits`` <= t), (T - 1,); and their
    mean weighted by the samples not yet settled at t (the ones a stop at t could cost)."""
    exits = settled_exits(preds)
    done = [exits <= t for t in range(1, preds.shape[1])]  # t = 1..T-1
    per = np.array([auroc(scores[:, t], d) for t, d in enumerate(done)])
    weight = np.array([float((~d).sum()) for d in done])
    keep = np.isfinite(per) & (weight > 0)
    return per, float(np.average(per[keep], weights=weight[keep])) if keep.any() else math.nan


# ---------------------------------------------------------------- a rule of ours: the settled probe
def probe_features(traj: FullDepthPass) -> Tensor:
    """(N, T, 6) what a label-free probe sees at step t: t / T, the run of the prediction
    (``patience_signal`` / T), the top softmax probability, the top-two margin, the KL to the
    previous readout (0 at t = 1) and the model's halting score."""
    steps = traj.steps
    first, second = F.softmax(traj.logits.double(), dim=-1).topk(2, dim=-1).values.unbind(-1)  # (N, T) each
    return torch.stack([_step_index(traj) / steps, patience_signal(traj) / steps, first, first - second,
                        kl_signal(traj).nan_to_num(0.0), traj.scores.double()], -1)


def fit_settled_probe(val: FullDepthPass) -> Rule:
    """Ours: a logistic probe fitted on the held-out split to say "the prediction has settled for good
    by t" from ``probe_features``, the target the model's own final prediction (no label), then used
    as a rule (exit once its probability is above a threshold). Offline only."""
    from sklearn.linear_model import LogisticRegression

    x = probe_features(val).flatten(0, 1)  # (N T, 6)
    y = (torch.arange(1, val.steps + 1)[None] >= settled_exits(val.preds)[:, None]).flatten().numpy()  # (NT,)
    mean, std = x.mean(0), x.std(0).clamp_min(1e-9)
    fit = None if y.all() else LogisticRegression(max_iter=1000).fit(((x - mean) / std).numpy(), y)
    # every sample settled from step 1 (step T always is): nothing to fit, a probe at 1 (the sigmoid of inf)
    w, b = ((torch.tensor(fit.coef_[0]), float(fit.intercept_[0])) if fit is not None
            else (torch.zeros(x.shape[1], dtype=torch.float64), math.inf))

    def signal(traj: FullDepthPass) -> Tensor:
        return torch.sigmoid(((probe_features(traj) - mean) / std) @ w + b)  # (N, T) float64

    return Rule(PROBE, signal, "above", source="ours: a logistic probe of 'settled for good by t', "
                "fitted on the held-out split to the model's own final predictions (no labels)")


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


def _joined(curve) -> tuple[np.ndarray, np.ndarray]:
    """A curve's finite points by depth, points at one depth averaged: (depths, accuracies), ascending."""
    x, y = sorted_points(curve)
    at, index = np.unique(x, return_inverse=True)
    return at, np.bincount(index, weights=y) / np.bincount(index)


def read_at(table, depths) -> np.ndarray:
    """A curve's accuracy at mean ``depths``: its finite points in order of depth joined by straight
    lines (points at one depth averaged), as notebook 07's areas join them; outside, its end points."""
    at, mean = _joined(table)
    if not at.size:
        raise ValueError("the curve has no finite (mean_depth, accuracy) point to read")
    return np.interp(depths, at, mean)


def reach(curve) -> tuple[float, float]:
    """The shallowest and the deepest mean depth of a curve's finite points (NaN, NaN if none)."""
    x, _ = sorted_points(curve)
    return (float(x[0]), float(x[-1])) if x.size else (math.nan, math.nan)


def common_window(curves: Sequence, steps: int) -> tuple[float, float]:
    """The mean depths every one of ``curves`` reaches, within 1..T: (largest start, smallest end)."""
    ends = np.array([reach(c) for c in curves], dtype=float).reshape(-1, 2)
    return max(1.0, float(np.max(ends[:, 0]))), min(float(steps), float(np.min(ends[:, 1])))


def curve_auc(curve, steps: int, window: tuple[float, float] | None = None) -> float:
    """Mean accuracy over mean depths ``window`` (default 1..T): the area under the curve's points joined
    by straight lines (as ``read_at``) over the window's width. Never extended: NaN when the curve
    does not reach the whole window (``common_window``). A window of one depth: the accuracy there."""
    if steps < 2:
        raise ValueError(f"steps={steps}: the depth range 1..T needs T >= 2")
    lo, hi = (1.0, float(steps)) if window is None else (float(window[0]), float(window[1]))
    at, mean = _joined(curve)  # sorted and averaged once: bootstraps call this per resample
    if not at.size or not (lo <= hi) or at[0] > lo + 1e-9 or at[-1] < hi - 1e-9:
        return math.nan
    if hi - lo < 1e-12:
        return float(np.interp(lo, at, mean))
    grid = np.unique(np.concatenate([[lo, hi], at[(at > lo) & (at < hi)]]))
    acc = np.interp(grid, at, mean)
    return float(np.sum((grid[1:] - grid[:-1]) * (acc[1:] + acc[:-1]) / 2) / (hi - lo))


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
    """One row per (rule, model): ``auc`` over the mean depths every rule of the model reaches
    (``common_window``: ``window_lo``..``window_hi``), ``random_auc`` of its random exits, and
    ``depth_at_99pct``, the depth reaching 99% of the model's full-depth accuracy."""
    full = curves[(curves["rule"] == FIXED) & (curves["mean_depth"] == steps)]
    full = dict(zip(full["model"], full["accuracy"]))
    rows = []
    for model, part in curves.groupby("model", sort=False):
        groups = list(part.groupby("rule", sort=False))
        window = common_window([c for rule, c in groups if rule not in (ORACLE, HINDSIGHT)], steps)
        for rule, c in groups:
            random = c.assign(accuracy=c["random_accuracy"]) if "random_accuracy" in c else c.iloc[:0]
            rows.append({"rule": rule, "model": model, "auc": curve_auc(c, steps, window),
                         "random_auc": curve_auc(random, steps, window) if rule not in REFERENCES else math.nan,
                         "window_lo": window[0], "window_hi": window[1],
                         "depth_at_99pct": depth_to_reach(c, REACH_FRACTION * full.get(model, math.nan))})
    return pd.DataFrame(rows, columns=["rule", "model", "auc", "random_auc", "window_lo", "window_hi",
                                       "depth_at_99pct"])


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
