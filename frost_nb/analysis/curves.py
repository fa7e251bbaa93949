"""Accuracy against mean depth off cached full-depth passes (docs/method.md sections 8 and 10):
``curve``, one table shape (``CURVE_COLUMNS``) for FROST's quantiles, a fixed depth and every rule;
the references; readings at matched depth; the gain over a fixed depth split (``gain_split``)."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..halting import PAPER_QUANTILES, HaltingCalibrator
from ..inputs import check_scores
from ..training import FullDepthPass
from .halting_rules import (FIXED, FIXED_RULE, FROST, FROST_QUANTILES, HINDSIGHT, ORACLE, PROBE, REFERENCES,
                            RULES, SIGNAL_RULES, THRESHOLDS, WITHIN, Rule, candidate_thresholds,
                            common_window, confidence_signal, curve_auc, depth_to_reach, fit_settled_probe,
                            fixed_accuracy_at, gain_split, hindsight_exit_at, oracle_accuracy_at,
                            oracle_exits, random_exit_accuracy, reach, read_at, rule_exits, settled_auroc,
                            settled_exits)
from .stats import IMAGE_RESAMPLES
from .trajectories import run_trajectories

# one row per threshold; quantile: FROST's q (else NaN); val_*: NaN when no held-out pass was given;
# random_accuracy: random exits with the row's own depth histogram on test (NaN for the references)
CURVE_COLUMNS = ("rule", "model", "quantile", "threshold", "val_mean_depth", "val_accuracy",
                 "mean_depth", "std_depth", "accuracy", "random_accuracy", "source")
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
    if calibrator is not None:
        if not isinstance(calibrator, HaltingCalibrator):
            raise TypeError(f"calibrator must be a HaltingCalibrator, got {type(calibrator).__name__}")
        thresholds = calibrator.thresholds(quantiles)
    elif rule is FIXED_RULE and thresholds is None:
        thresholds = [float(t) for t in range(1, test.steps + 1)]
    elif thresholds is None:
        if val is None:
            raise ValueError(f"the {rule.name!r} curve takes its thresholds from val: give val, "
                             f"thresholds or (FROST) a calibrator")
        thresholds = candidate_thresholds(rule.signal(val), count)
    qs = [float(q) for q in quantiles] if calibrator is not None else [math.nan] * len(thresholds)
    signals = [rule.signal(p) for p in passes]
    shift = 0.5 if rule is FIXED_RULE else 0.0  # the step index exceeds t - 0.5 first at t
    rows = []
    for q, thr in zip(qs, thresholds):
        exits = [rule_exits(rule, s, float(thr) - shift) for s in signals]
        read = [_read(e, p.correct) for e, p in zip(exits, passes)]
        (vd, _, va), (td, ts, ta) = read if val is not None else [(math.nan,) * 3, *read]
        rows.append({"rule": rule.name, "model": model, "quantile": q, "threshold": float(thr),
                     "val_mean_depth": vd, "val_accuracy": va, "mean_depth": td, "std_depth": ts,
                     "accuracy": ta, "random_accuracy": random_exit_accuracy(test.correct, exits[-1]),
                     "source": rule.source})
    return pd.DataFrame(rows, columns=list(CURVE_COLUMNS))


def _reference(name: str, test: FullDepthPass, accuracy_at, point: float, model: str, source: str):
    """A reference curve on ``test`` at mean depths 1, 1 + 1/16, ..., T and at its own ``point``."""
    depths = np.append(np.linspace(1.0, test.steps, 16 * (test.steps - 1) + 1), point)
    acc = accuracy_at(depths)
    rows = [{**dict.fromkeys(CURVE_COLUMNS, math.nan), "rule": name, "model": model,
             "mean_depth": float(depths[i]), "accuracy": float(acc[i]), "source": source}
            for i in np.argsort(depths, kind="stable")]
    return pd.DataFrame(rows, columns=list(CURVE_COLUMNS))


def oracle_curve(test: FullDepthPass, model: str = ""):
    """The oracle's upper bound (a sample counts as right if any step is right) and its own point."""
    correct = test.correct
    return _reference(ORACLE, test, lambda d: oracle_accuracy_at(correct, d), _read(oracle_exits(correct), correct)[0],
                      model, "an upper bound: any step correct, the earliest correct step")


def hindsight_curve(val: FullDepthPass, test: FullDepthPass, model: str = ""):
    """The hindsight exit on ``test`` (``hindsight_exit_at``: its construction per depth chosen on
    ``val``) and the depth where every sample stops as its prediction settles for good (full depth)."""
    return _reference(HINDSIGHT, test, lambda d: hindsight_exit_at(test.preds, test.y, d, val.preds, val.y),
                      settled_exits(test.preds).double().mean().item(), model,
                      "hindsight: stop where the prediction equals the final one from then on")


def model_curves(val: FullDepthPass, test: FullDepthPass, model: str = "", *,
                 calibrator: HaltingCalibrator | None = None, ponder: bool = False):
    """Every curve of one model (THRESHOLDS thresholds a rule): the signal rules, FROST's (given its
    ranking-trained calibrator), PonderNet's (``ponder``: a model trained with PonderNet's loss), our
    settled probe (fitted on ``val``), fixed depth, the oracle and the hindsight exit."""
    rules = list(SIGNAL_RULES) + (["ponder"] if ponder else []) + [fit_settled_probe(val)]
    parts = [curve(test, rule, val=val, model=model) for rule in rules]
    if calibrator is not None:
        parts.append(curve(test, val=val, calibrator=calibrator, quantiles=FROST_QUANTILES, model=model))
    parts += [curve(test, FIXED, val=val, model=model), oracle_curve(test, model),
              hindsight_curve(val, test, model)]
    return pd.concat(parts, ignore_index=True)


def run_rule_curves(result, model: str, *, test, val=None):
    """``model_curves`` of one trained run (``test``, ``val``: its trajectories, ``val`` if at hand), with
    FROST's rule when its score was trained to be thresholded (the ranking losses or a ``loss.halt_target``),
    PonderNet's when with PonderNet's loss."""
    loss = result.config.loss
    return model_curves(run_trajectories(result, "val") if val is None else val, test, model,
                        calibrator=result.calibrator if loss.score_halting else None, ponder=loss.ponder)


# ---------------------------------------------------------------- readings at matched depth
def summarise_sweeps(tables: dict[Any, Any]):
    """Mean and spread (sample std over runs, ddof = 1) of several runs' FROST curves, one row per quantile."""
    g = pd.concat([t.assign(run=k) for k, t in tables.items()]).groupby("quantile")
    return pd.DataFrame({"mean_depth": g["mean_depth"].mean(), "mean_depth_spread": g["mean_depth"].std(ddof=1),
                         "accuracy": g["accuracy"].mean(), "accuracy_spread": g["accuracy"].std(ddof=1),
                         "runs": g["run"].nunique()}).reset_index()


def versus_fixed_depth(sweep, fixed, rival=None, rival_name: str = "rival"):
    """Each row of a FROST curve beside the fixed-depth curve read at its mean depth (``read_at``):
    ``gain``, with the curve's ``random_accuracy`` split into ``spread`` and ``ranking`` (``gain_split``);
    with ``rival`` (another rule's curve), ``<rival_name>_accuracy`` and ``gain_over_<rival_name>``."""
    table = sweep[["quantile", "mean_depth", "accuracy"]].copy()
    table["fixed_depth_accuracy"] = read_at(fixed, table["mean_depth"])
    random = sweep["random_accuracy"].to_numpy() if "random_accuracy" in sweep else None
    split = gain_split(table["accuracy"], table["fixed_depth_accuracy"], random)
    table["gain"] = split["gain"]
    if random is not None:
        table["random_accuracy"], table["spread"], table["ranking"] = random, split["spread"], split["ranking"]
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


def side_by_side(groups: dict[str, dict[Any, Any]], rivals: dict[str, dict[Any, Any]]):
    """Groups of runs (group -> run label -> ``exits.ExitCache`` of the test split) at PAPER_QUANTILES,
    one row per group and quantile, means over the group's runs: ``mean_depth``, ``std_depth``
    (per-sample spread), ``accuracy``, ``kept`` (share of full depth), ``gain`` over a fixed depth,
    ``gain_over_confidence`` (``rivals``: group -> label -> the confidence rule's curve); ``runs``."""
    parts = []
    for group, caches in groups.items():
        for label, cache in caches.items():
            sweep = curve(cache.outputs, calibrator=cache.calibrator, quantiles=PAPER_QUANTILES)
            fixed = curve(cache.outputs, FIXED)
            rival = rivals[group][label]
            table = versus_fixed_depth(sweep, fixed, rival, "confidence")
            parts.append(table.assign(std_depth=sweep["std_depth"].to_numpy(),
                                      kept=table["accuracy"] / float(fixed["accuracy"].iloc[-1]),
                                      group=group, run=str(label)))
    columns = ["mean_depth", "std_depth", "accuracy", "kept", "gain", "gain_over_confidence"]
    by = pd.concat(parts).groupby(["group", "quantile"], sort=False)
    return by[columns].mean().assign(runs=by["run"].nunique()).reset_index()


def split_summary(curves, steps: int, depths: Sequence[float] | None = None):
    """Per (model, rule) of ``curves`` (``model_curves`` tables), ``gain_split`` of its curve and its random
    exits against the fixed depth, read at the mean ``depths`` (default 2..T-1) it reaches (never
    extended): the means over those depths, and how many there were."""
    depths = np.arange(2.0, steps) if depths is None else np.asarray(depths, dtype=float)
    rows = []
    rules = curves[~curves["rule"].isin(REFERENCES)]
    for (model, rule), part in rules.groupby(["model", "rule"], sort=False):
        fixed = curves[(curves["model"] == model) & (curves["rule"] == FIXED)]
        lo, hi = reach(part)
        at = depths[(depths >= lo - 1e-9) & (depths <= hi + 1e-9)]
        if not at.size:
            continue
        split = gain_split(read_at(part, at), read_at(fixed, at),
                           read_at(part.assign(accuracy=part["random_accuracy"]), at))
        rows.append({"model": model, "rule": rule, "depths": int(at.size),
                     **{k: float(np.mean(v)) for k, v in split.items()}})
    return pd.DataFrame(rows, columns=["model", "rule", "depths", "gain", "spread", "ranking"])


def share(part: float, whole: float) -> float:
    """``part / whole``, NaN where ``whole`` is 0 up to float noise (no gap to close: predictions that never
    change across steps leave the oracle, the hindsight exit and a fixed depth level) or either is NaN."""
    return part / whole if abs(whole) > 1e-12 else math.nan  # areas of accuracies: below 1e-12 is float noise


def halting_gains(curves, steps: int, quantiles: Sequence[float] = PAPER_QUANTILES[:-1], rule: str = FROST,
                  budgets: Sequence[float] | None = None):
    """One row per model of ``curves`` (``model_curves`` tables) for ``rule``; areas are ``curve_auc`` over
    the depths the rule reaches. ``closed``: the share of the fixed-depth-to-oracle gap closed (above 1
    is a bug, and raises). Claim 16's targets (docs/method.md section 14): ``ranking`` and ``spread``
    (``versus_fixed_depth``), means over the budgets (a quantile rule's ``budgets``, default
    ``quantiles``; another rule's points between depths 1 and T); ``steps_saved``, the fixed depth's
    minus the rule's ``depth_within`` (WITHIN of full depth); ``closed_hindsight``, the share of the gap
    to the hindsight exit closed up to its full-accuracy depth, ``hindsight_depth``. Shares are NaN
    where the gap is 0 (``share``). Also ``gap_q<q>`` per quantile, ``worst_gap`` and ``mean_gain``."""
    rows = []
    for model, part in curves.groupby("model", sort=False):
        own, fixed, oracle, hindsight = (part[part["rule"] == name]
                                         for name in (rule, FIXED, ORACLE, HINDSIGHT))
        if own.empty:
            continue
        lo, hi = reach(own)
        auc, fixed_auc, oracle_auc = (curve_auc(c, steps, (lo, hi)) for c in (own, fixed, oracle))
        closed = share(auc - fixed_auc, oracle_auc - fixed_auc)
        if closed > 1 + 1e-3:
            raise ValueError(f"{model}, {rule}: the share of the oracle gap closed is {closed:.4f} > 1; the oracle "
                             f"bounds every exit assignment, so the curves or their areas are wrong")
        full = float(fixed.loc[fixed["mean_depth"] == steps, "accuracy"].iloc[0]) if len(fixed) else math.nan
        table = versus_fixed_depth(own, fixed)
        among = lambda qs: table[np.isin(table["quantile"].to_numpy(), np.asarray(qs, dtype=float))]
        at = (among(quantiles if budgets is None else budgets) if own["quantile"].notna().any()
              else table[(table["mean_depth"] > 1) & (table["mean_depth"] < steps)])
        gaps = among(quantiles).set_index("quantile")["gain"]
        hindsight_depth = depth_to_reach(hindsight, full - 1e-12) if len(hindsight) else math.nan
        window = (lo, min(hi, hindsight_depth))
        h_own, h_fixed, h_hind = (curve_auc(c, steps, window) if window[0] < window[1] else math.nan
                                  for c in (own, fixed, hindsight))
        within, fixed_within = (depth_to_reach(c, full - WITHIN) for c in (own, fixed))
        rows.append({"model": model, "rule": rule, "auc": auc, "fixed_auc": fixed_auc,
                     "oracle_auc": oracle_auc, "closed": closed, "full_depth": full,
                     "spread": float(at["spread"].mean()), "ranking": float(at["ranking"].mean()),
                     "mean_gain": float(at["gain"].mean()), "depth_within": within,
                     "fixed_depth_within": fixed_within, "steps_saved": fixed_within - within,
                     "hindsight_depth": hindsight_depth, "hindsight_auc": h_hind,
                     "closed_hindsight": share(h_own - h_fixed, h_hind - h_fixed),
                     **{f"gap_q{q:g}": float(gaps.get(q, math.nan)) for q in quantiles},
                     "worst_gap": float(gaps.min()) if len(gaps) else math.nan})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- what the score knows
def settled_summary(passes: dict[Any, FullDepthPass]):
    """Per model (label -> its test pass): full-depth accuracy, ``settled_depth`` (the mean step from which
    predictions have settled for good), a fixed depth's accuracy there, and the AUROC of the halting
    score and of the confidence for "settled for good by t" (``settled_auroc``). Returns (summary,
    per-step AUROC table)."""
    rows, per_step = [], []
    for label, p in passes.items():
        depth = settled_exits(p.preds).double().mean().item()
        score_steps, score = settled_auroc(p.scores, p.preds)
        conf_steps, conf = settled_auroc(confidence_signal(p), p.preds)
        rows.append({"model": label, "full_depth": p.accuracy, "settled_depth": depth,
                     "fixed_at_settled_depth": float(fixed_accuracy_at(p.correct, [depth])[0]),
                     "score_auroc": score, "confidence_auroc": conf})
        per_step += [{"model": label, "step": t + 1, "score_auroc": float(a), "confidence_auroc": float(c)}
                     for t, (a, c) in enumerate(zip(score_steps, conf_steps))]
    return pd.DataFrame(rows), pd.DataFrame(per_step)


def split_by_quantile(tables: dict[Any, Any]):
    """``versus_fixed_depth`` tables of several seeds (label -> table) to one row per quantile: the
    means of mean depth, gain, spread and ranking, and the least and largest spread and ranking."""
    g = pd.concat([t.assign(run=k) for k, t in tables.items()]).groupby("quantile")
    out = g[["mean_depth", "accuracy", "random_accuracy", "fixed_depth_accuracy", "gain", "spread", "ranking"]].mean()
    for column in ("spread", "ranking"):
        out[f"{column}_min"], out[f"{column}_max"] = g[column].min(), g[column].max()
    return out.assign(runs=g["run"].nunique()).reset_index()


def quantile_split(curves, quantiles: Sequence[float] = PAPER_QUANTILES[:-1], *, group, rule: str = FROST):
    """``split_by_quantile`` of one quantile ``rule`` in ``curves`` (``model_curves`` tables), its
    models gathered by ``group`` (model -> group name; ``lambda m: m``: each its own), a ``group`` column."""
    own = curves[(curves["rule"] == rule) & np.isin(curves["quantile"].to_numpy(), np.asarray(quantiles, dtype=float))]
    fixed = curves[curves["rule"] == FIXED]
    parts = [split_by_quantile({m: versus_fixed_depth(part[part["model"] == m], fixed[fixed["model"] == m])
                                for m in dict.fromkeys(part["model"])}).assign(group=name)
             for name, part in own.groupby(own["model"].map(group), sort=False, dropna=False)]
    return pd.concat(parts, ignore_index=True)


def area_gap_bootstrap(curves, table, test: FullDepthPass, val: FullDepthPass, model: str, steps: int,
                       rule: str = FROST, draws: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Test-set noise of one model's area gap: ``rule``'s area minus its best rival's (``summary``'s
    ``table``: the largest area but the references'), over the table's window, with the thresholds of
    ``curves`` (the settled probe fitted again on ``val``) and the exits on ``test`` held fixed, on
    ``draws`` resamples of the test images (drawn from ``seed``: models of one test split share
    them): the estimate, its 95% percentile interval and the resampled gaps (``values``)."""
    own = table[table["model"] == model].set_index("rule")
    rival = own["auc"].drop([rule, *REFERENCES], errors="ignore").idxmax()
    named = {FIXED: FIXED_RULE, PROBE: fit_settled_probe(val) if PROBE in (rule, rival) else None, **RULES}
    window = (float(own["window_lo"].iloc[0]), float(own["window_hi"].iloc[0]))
    n, parts = len(test), []
    for r in (rule, rival):
        shift, signal = (0.5 if named[r] is FIXED_RULE else 0.0), named[r].signal(test)
        thresholds = curves[(curves["model"] == model) & (curves["rule"] == r)]["threshold"].to_numpy()
        exits = torch.stack([rule_exits(named[r], signal, float(t) - shift) for t in thresholds])  # (J, N)
        parts.append((exits.double().numpy(), test.correct.gather(1, (exits - 1).T).T.double().numpy()))

    def gap(w: np.ndarray) -> float:  # w (N,): each image's share of the resample
        curves = [pd.DataFrame({"mean_depth": depth @ w, "accuracy": hit @ w}) for depth, hit in parts]
        lo, hi = common_window(curves, steps)
        lo, hi = max(lo, window[0]), min(hi, window[1])
        return curve_auc(curves[0], steps, (lo, hi)) - curve_auc(curves[1], steps, (lo, hi))

    g = np.random.default_rng(seed)
    values = np.array([gap(np.bincount(g.integers(0, n, n), minlength=n) / n) for _ in range(draws)])
    return {"model": model, "rule": rule, "rival": rival, "gap": gap(np.full(n, 1.0 / n)),
            "low": float(np.nanpercentile(values, 2.5)), "high": float(np.nanpercentile(values, 97.5)),
            "draws": draws, "values": values}


def rival_gap_bootstrap(curves, table, tests: dict, vals: dict, steps: int) -> tuple[dict[str, dict], float]:
    """Claim 15 on several seeds of one model (label -> test and held-out pass): per label
    ``area_gap_bootstrap`` of FROST's rule without its draws, and the bootstrap half-width of the seeds'
    mean gap with the test images resampled jointly across seeds (the same draws for every label);
    ``stats.IMAGE_RESAMPLES`` draws, since the half-width feeds claim 15's verdict."""
    each = {label: area_gap_bootstrap(curves, table, tests[label], vals[label], label, steps,
                                      draws=IMAGE_RESAMPLES) for label in tests}
    mean = np.mean([b.pop("values") for b in each.values()], axis=0)
    return each, float(np.diff(np.nanpercentile(mean, [2.5, 97.5]))[0] / 2)


# ---------------------------------------------------------------- stored by column
def by_column(table: pd.DataFrame) -> dict[str, Any]:
    """``table`` as a metrics file stores rule curves: column -> list of values (NaN as None), or
    ``{"runs": [[value, count], ...]}`` where runs of equal values (a curve's rule and model, repeated
    row after row) take at most half the bytes. Lossless: ``from_columns`` gives the table back."""
    size = lambda v: len(json.dumps(v, separators=(",", ":"), default=float))
    out: dict[str, Any] = {}
    for name in table.columns:
        values = [None if isinstance(v, float) and math.isnan(v) else v for v in table[name].tolist()]
        runs = [[v, len(list(same))] for v, same in itertools.groupby(values)]
        out[name] = {"runs": runs} if 2 * size(runs) <= size(values) else values
    return out


def from_columns(columns: dict[str, Any]) -> pd.DataFrame:
    """The table ``by_column`` stored (a plain dict of lists reads as it is)."""
    return pd.DataFrame({name: [v for v, n in col["runs"] for _ in range(n)] if isinstance(col, dict) else col
                         for name, col in columns.items()})
