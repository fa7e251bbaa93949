"""Accuracy against mean depth, read off cached full-depth passes (no model call): ``curve``, the
one computation and table shape (``CURVE_COLUMNS``) for FROST's quantiles, a fixed depth and any
rule of ``halting_rules`` (docs/method.md sections 8 and 10), and readings at matched depth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..halting import PAPER_QUANTILES, HaltingCalibrator
from ..inputs import check_scores
from ..training import FullDepthPass
from .halting_rules import (
    FIXED,
    FIXED_RULE,
    FROST,
    FROST_QUANTILES,
    ORACLE,
    RULES,
    SIGNAL_RULES,
    THRESHOLDS,
    Rule,
    candidate_thresholds,
    oracle_accuracy_at,
    oracle_exits,
    rule_exits,
    sorted_points,
)
from .trajectories import run_trajectories

# one row per threshold; quantile: FROST's q (else NaN); val_*: NaN when no held-out pass was given
CURVE_COLUMNS = ("rule", "model", "quantile", "threshold", "val_mean_depth", "val_accuracy",
                 "mean_depth", "std_depth", "accuracy", "source")
SWEEP_COLUMNS = ("quantile", "threshold", "mean_depth", "std_depth", "accuracy")  # what sweep files hold


def _read(depth: torch.Tensor, correct: torch.Tensor) -> tuple[float, float, float]:
    """Mean and (population) std of the exit depths, and the accuracy at the exit steps."""
    d = depth.double()
    hit = correct.gather(1, (depth - 1)[:, None]).squeeze(1)
    return d.mean().item(), d.std(unbiased=False).item(), hit.double().mean().item()


def curve(test: FullDepthPass, rule: Rule | str = FROST, *, val: FullDepthPass | None = None,
          calibrator: HaltingCalibrator | None = None, quantiles: Sequence[float] = PAPER_QUANTILES,
          thresholds: Sequence[float] | None = None, count: int = THRESHOLDS, model: str = ""):
    """One rule's curve (``CURVE_COLUMNS``): a row per threshold, the exits it gives on ``test``
    and on ``val`` (``rule_exits``: the first step whose condition holds, else T). Thresholds:
    the ``calibrator``'s tau_q at ``quantiles`` (FROST, in the order of q); else ``thresholds``;
    else ``count`` from the rule's signal on ``val`` (MSDNet protocol, docs/method.md section 10).
    ``FIXED``: every sample stops at t (``threshold`` holds t; default 1..T)."""
    rule = FIXED_RULE if rule == FIXED else RULES[rule] if isinstance(rule, str) else rule
    passes = [p for p in (val, test) if p is not None]
    if not all(isinstance(p, FullDepthPass) for p in passes):
        raise TypeError(f"curve reads full-depth passes (training.FullDepthPass), got "
                        f"{[type(p).__name__ for p in passes]}")
    if rule.name == FROST:
        for p in passes:
            check_scores(p.scores.numpy(), "curve: the scores hold")
    qs = None
    if calibrator is not None:
        if not isinstance(calibrator, HaltingCalibrator):
            raise TypeError(f"calibrator must be a HaltingCalibrator, got {type(calibrator).__name__}")
        thresholds, qs = calibrator.thresholds(quantiles), [float(q) for q in quantiles]
    elif rule is FIXED_RULE and thresholds is None:
        thresholds = [float(t) for t in range(1, test.steps + 1)]
    elif thresholds is None:
        if val is None:
            raise ValueError(f"the {rule.name!r} curve takes its thresholds from val: give val, "
                             f"thresholds or (FROST) a calibrator")
        thresholds = candidate_thresholds(rule.signal(val), count)
    qs = qs or [math.nan] * len(thresholds)
    signals = [rule.signal(p) for p in passes]
    shift = 0.5 if rule is FIXED_RULE else 0.0  # the step index exceeds t - 0.5 first at t
    rows = []
    for q, thr in zip(qs, thresholds):
        read = [_read(rule_exits(rule, s, float(thr) - shift), p.correct) for s, p in zip(signals, passes)]
        (vd, _, va), (td, ts, ta) = read if val is not None else [(math.nan,) * 3, *read]
        rows.append({"rule": rule.name, "model": model, "quantile": q, "threshold": float(thr),
                     "val_mean_depth": vd, "val_accuracy": va, "mean_depth": td, "std_depth": ts,
                     "accuracy": ta, "source": rule.source})
    return pd.DataFrame(rows, columns=list(CURVE_COLUMNS))


def oracle_curve(test: FullDepthPass, model: str = "", per_step: int = 4):
    """The oracle's upper bound on test at mean depths 1, 1 + 1/per_step, ..., T, and its own point."""
    correct = test.correct
    steps = correct.shape[1]
    point = _read(oracle_exits(correct), correct)[0]  # on the bound's flat end
    depths = np.append(np.linspace(1.0, steps, per_step * (steps - 1) + 1), point)
    acc = oracle_accuracy_at(correct, depths)
    order = np.argsort(depths, kind="stable")
    rows = [{"rule": ORACLE, "model": model, "quantile": math.nan, "threshold": math.nan,
             "val_mean_depth": math.nan, "val_accuracy": math.nan, "mean_depth": float(depths[i]),
             "std_depth": math.nan, "accuracy": float(acc[i]),
             "source": "an upper bound: the earliest correct step"} for i in order]
    return pd.DataFrame(rows, columns=list(CURVE_COLUMNS))


def model_curves(val: FullDepthPass, test: FullDepthPass, model: str = "", *,
                 calibrator: HaltingCalibrator | None = None, ponder: bool = False,
                 count: int = THRESHOLDS):
    """Every curve of one model: the signal rules, FROST's (given its ranking-trained calibrator),
    PonderNet's (``ponder``: a model trained with PonderNet's loss), fixed depth and the oracle."""
    names = list(SIGNAL_RULES) + (["ponder"] if ponder else [])
    parts = [curve(test, name, val=val, count=count, model=model) for name in names]
    if calibrator is not None:
        parts.append(curve(test, val=val, calibrator=calibrator, quantiles=FROST_QUANTILES, model=model))
    parts += [curve(test, FIXED, val=val, model=model), oracle_curve(test, model)]
    return pd.concat(parts, ignore_index=True)


def run_rule_curves(result, model: str, count: int | None = None, test=None):
    """``model_curves`` of one trained run (``test``: its test trajectories, if at hand), with FROST's
    rule when its score was trained to be thresholded (the ranking losses or a ``loss.halt_target``),
    PonderNet's when with PonderNet's loss."""
    loss = result.config.loss
    test = run_trajectories(result, "test") if test is None else test
    return model_curves(run_trajectories(result, "val"), test, model,
                        calibrator=result.calibrator if loss.score_halting else None, ponder=loss.ponder,
                        count=THRESHOLDS if count is None else count)


# ---------------------------------------------------------------- readings at matched depth
def read_at(table, depths) -> np.ndarray:
    """A curve's accuracy at mean ``depths``: its finite points in order of depth joined by straight
    lines (points at one depth averaged), as notebook 07's areas join them; outside, its end points."""
    x, y = sorted_points(table)
    if not x.size:
        raise ValueError("the curve has no finite (mean_depth, accuracy) point to read")
    at, index = np.unique(x, return_inverse=True)
    return np.interp(depths, at, np.bincount(index, weights=y) / np.bincount(index))


def summarise_sweeps(tables: dict[Any, Any]):
    """Mean and spread (std over runs) of several runs' FROST curves, one row per quantile."""
    g = pd.concat([t.assign(run=k) for k, t in tables.items()]).groupby("quantile")
    return pd.DataFrame({"mean_depth": g["mean_depth"].mean(), "mean_depth_spread": g["mean_depth"].std(ddof=0),
                         "accuracy": g["accuracy"].mean(), "accuracy_spread": g["accuracy"].std(ddof=0),
                         "runs": g["run"].nunique()}).reset_index()


def versus_fixed_depth(sweep, fixed, rival=None, rival_name: str = "rival"):
    """Each row of a FROST curve beside the fixed-depth curve read at its mean depth (``read_at``):
    ``gain`` > 0 where halting beats stopping everyone at once. With ``rival`` (another rule's
    curve), its accuracy there and the gain over it (``<rival_name>_accuracy``, ``gain_over_<rival_name>``)."""
    table = sweep[["quantile", "mean_depth", "accuracy"]].copy()
    table["fixed_depth_accuracy"] = read_at(fixed, table["mean_depth"])
    table["gain"] = table["accuracy"] - table["fixed_depth_accuracy"]
    if rival is not None:
        table[f"{rival_name}_accuracy"] = accuracy = read_at(rival, table["mean_depth"])
        table[f"gain_over_{rival_name}"] = table["accuracy"] - accuracy
    return table


def at_depths(sweep, fixed, depths, rival=None, rival_name: str = "rival"):
    """A FROST curve and the fixed-depth curve read at mean ``depths`` (``read_at``), each also as
    ``kept``, the share of full-depth accuracy: for matched depth rather than matched q (the paper's
    Table 2 reaches other depths at the same q). With ``rival``, ``<rival_name>_accuracy`` and ``_kept``."""
    full = float(fixed["accuracy"].iloc[-1])
    halting, at_fixed = read_at(sweep, depths), read_at(fixed, depths)
    table = pd.DataFrame({"mean_depth": np.asarray(depths, dtype=float), "accuracy": halting,
                          "fixed_depth_accuracy": at_fixed, "kept": halting / full, "fixed_kept": at_fixed / full})
    if rival is not None:
        table[f"{rival_name}_accuracy"] = accuracy = read_at(rival, table["mean_depth"])
        table[f"{rival_name}_kept"] = accuracy / full
    return table


def side_by_side(groups: dict[str, dict[Any, Any]], rivals: dict[str, dict[Any, Any]] | None = None,
                 rival_name: str = "confidence", quantiles=PAPER_QUANTILES):
    """Groups of runs (group -> run label -> ``exits.ExitCache`` of the test split) at ``quantiles``,
    one row per group and quantile, means over the group's runs: ``mean_depth``, ``std_depth``
    (per-sample spread), ``accuracy``, ``kept`` (share of full depth), ``gain`` over a fixed depth;
    with ``rivals`` (group -> label -> curve), ``gain_over_<rival_name>``; ``runs``."""
    parts = []
    for group, caches in groups.items():
        for label, cache in caches.items():
            sweep = curve(cache.outputs, calibrator=cache.calibrator, quantiles=quantiles)
            fixed = curve(cache.outputs, FIXED)
            rival = None if rivals is None else rivals[group][label]
            table = versus_fixed_depth(sweep, fixed, rival, rival_name)
            parts.append(table.assign(std_depth=sweep["std_depth"].to_numpy(),
                                      kept=table["accuracy"] / float(fixed["accuracy"].iloc[-1]),
                                      group=group, run=str(label)))
    columns = ["mean_depth", "std_depth", "accuracy", "kept", "gain"] + (
        [f"gain_over_{rival_name}"] if rivals is not None else [])
    by = pd.concat(parts).groupby(["group", "quantile"], sort=False)
    return by[columns].mean().assign(runs=by["run"].nunique()).reset_index()


def halting_gains(curves, steps: int, quantiles: Sequence[float] = PAPER_QUANTILES[:-1]):
    """One row per model of ``curves`` (``model_curves`` tables): the area under FROST's rule (its
    score at the calibrated quantiles), a fixed depth's and the oracle's (``curve_auc``); ``closed``,
    the share of the fixed-depth-to-oracle gap in area that the rule closes; ``full_depth``, the
    accuracy at t = T; and ``gap_q<q>``, the rule's accuracy at quantile q minus a fixed depth's at
    the same mean depth (``versus_fixed_depth``), for each of ``quantiles`` (Table 2's, but q = 1,
    where both are full depth); ``worst_gap``, the least of them."""
    from .halting_rules import curve_auc

    rows = []
    for model, part in curves.groupby("model", sort=False):
        rule, fixed, oracle = (part[part["rule"] == name] for name in (FROST, FIXED, ORACLE))
        if rule.empty:
            continue
        area = {name: curve_auc(c, steps) for name, c in (("rule", rule), ("fixed", fixed), ("oracle", oracle))}
        at_q = rule[np.isin(rule["quantile"].to_numpy(), np.asarray(quantiles, dtype=float))]
        gaps = versus_fixed_depth(at_q, fixed).set_index("quantile")["gain"]
        full = fixed.loc[fixed["mean_depth"] == steps, "accuracy"]
        rows.append({"model": model, "auc": area["rule"], "fixed_auc": area["fixed"], "oracle_auc": area["oracle"],
                     "closed": (area["rule"] - area["fixed"]) / (area["oracle"] - area["fixed"]),
                     "full_depth": float(full.iloc[0]) if len(full) else math.nan,
                     **{f"gap_q{q:g}": float(gaps.get(q, math.nan)) for q in quantiles},
                     "worst_gap": float(gaps.min()) if len(gaps) else math.nan})
    return pd.DataFrame(rows)
