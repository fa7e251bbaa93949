"""The drivers of the fidelity experiments (docs/fidelity.md, which states each design): each reads
trained runs only and returns the metrics record its notebook or script writes."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pandas as pd

from ..analysis import fractal, trajectories
from ..analysis.curves import by_column, run_rule_curves
from ..analysis.exits import ExitCache
from ..analysis.halting_rules import COLLAPSE_QUANTILE, FIXED, collapsed, summary
from ..analysis.head_refit import TRAIN_SAMPLES, RefitSettings, margins, refit_backbone
from ..data.datasets import make_batches
from ..losses import gradient_conflict
from ..runs import run_name, train_or_load
from ..training import evaluate, load_split
from .grids import LOSS_STRENGTHS, family_of, grid, load_runs, require_trained


def collapse_row(result, reference) -> dict[str, Any]:
    """The collapse verdict (``halting_rules.collapsed``) of a run with the ranking losses against its
    task-only ``reference`` on the test split, and both models' gradient-conflict cosine."""
    cfg = result.config
    test = load_split(cfg, "test")
    cache = ExitCache.from_model(result.model, result.calibrator, test, batch_size=cfg.train.eval_batch_size)
    reference_accuracy = evaluate(reference.model, test, batch_size=cfg.train.eval_batch_size).accuracy
    histogram = cache.at(COLLAPSE_QUANTILE).histogram()
    flag, reasons = collapsed(cache.outputs.accuracy, reference_accuracy, histogram)
    x, y = next(iter(make_batches(load_split(cfg, "val"), cfg.train.batch_size, shuffle=False,
                                  augment=False, device=next(result.model.parameters()).device)))
    cosine = [gradient_conflict(r.model, x, y, cfg.loss)["cosine"] for r in (result, reference)]
    return {"model": cfg.model.name, "seed": cfg.train.seed, "collapsed": flag, "reasons": "; ".join(reasons),
            "accuracy": cache.outputs.accuracy, "reference_accuracy": reference_accuracy,
            "one_step_share": float(histogram.max() / histogram.sum()),
            "gradient_cosine": cosine[0], "reference_gradient_cosine": cosine[1]}


def strength_row(result, reference) -> dict[str, Any]:
    """Experiment (c) on one run of the ``loss_strength`` grid: its ``collapse_row`` and, from the probes
    of training's second half, the gradient conflict (overall, per step) and the norm ratio."""
    cfg = result.config
    row = {"model": cfg.model.name, "lambda_rel": cfg.loss.lambda_rel, "lambda_abs": cfg.loss.lambda_abs,
           "key": run_name(result.checkpoint), **collapse_row(result, reference)}
    d, last = result.history["diagnostics"], result.history["steps"]["step"][-1]
    if not (late := [i for i, s in enumerate(d["step"]) if s >= last / 2]) or not d.get("step_grad_cosine"):
        raise ValueError(f"run {run_name(result.checkpoint)} has no gradient probes in its second half; "
                         "experiment (c) needs train.diagnostics_every > 0 (its grid sets it)")
    per_step = np.asarray([d["step_grad_cosine"][i] for i in late], dtype=float)  # (probes, T)
    ratio = [d["rank_grad_norm"][i] / d["task_grad_norm"][i] for i in late]
    return row | {"probes": len(late), "probe_cosine": float(np.nanmean([d["grad_cosine"][i] for i in late])),
                  "step_cosine": float(np.nanmean(per_step)),
                  "step_cosine_profile": [float(c) for c in np.nanmean(per_step, axis=0)],
                  "rank_task_ratio": float(np.mean(ratio))}


def loss_strength_experiment(size: str = "demo", dataset: str | None = "digits",
                             seeds: tuple[int, ...] = (0, 1, 2)) -> dict[str, Any]:
    """Experiment (c) from trained runs only: a ``strength_row`` per run of the ``loss_strength`` grid
    with the ranking losses (the record of ``15_loss_strength``)."""
    require_trained(grid("loss_strength", size, dataset, seeds), retrain=False)
    arms = {seed: grid("loss_strength", size, dataset, (seed,)) for seed in seeds}
    load = lambda cfg: train_or_load(cfg, progress=False)
    rows = [{"run": label, **strength_row(load(cfg), load(arms[seed][f"{cfg.model.name} (task only)"]))}
            for seed in seeds for label, cfg in arms[seed].items() if cfg.loss.ranking]
    return {"dataset": dataset, "size": size, "seeds": list(seeds),
            "strengths": [list(s) for s in LOSS_STRENGTHS], "runs": rows}


# ------------------------------------------------------------------ experiment (b): update forms
UPDATE_FORM_STEPS = (1, 3, 6, 9)  # the steps of Table 1 that experiment (b) reports


def update_form_row(result, *, jvp_samples: int = trajectories.JVP_SAMPLES) -> dict[str, Any]:
    """Experiment (b) on one trained run, test split: contraction, Table 1's cosine at UPDATE_FORM_STEPS,
    accuracy per depth, alpha and the areas of FROST's rule and of a fixed depth."""
    cfg = result.config
    traj = trajectories.run_trajectories(result, "test")
    cosine = trajectories.cosine_to_final(traj.pooled).mean(0)  # (T+1,) over samples
    per_step = traj.accuracy_per_step()  # (T,)
    jvp = trajectories.run_jacobian_summary(result, jvp_samples)
    areas = summary(run_rule_curves(result, "m", test=traj), cfg.model.steps).set_index("rule")["auc"]
    alpha = [a for a in result.history["steps"].get("alpha", []) if a == a] or [math.nan]  # NaN: no alpha
    return {"update": cfg.model.update, "init_state": cfg.model.init_state, "seed": cfg.train.seed,
            "epochs": cfg.train.epochs, "key": run_name(result.checkpoint),
            **trajectories.contraction_summary(traj), **jvp,
            **{f"cos t={t}": float(cosine[t]) for t in UPDATE_FORM_STEPS if t <= cfg.model.steps},
            "accuracy per depth": per_step, "accuracy": per_step[-1],
            "alpha start": alpha[0], "alpha min": min(alpha), "alpha end": alpha[-1],
            "area frost": float(areas.get("frost", math.nan)),
            "area fixed": float(areas.get(FIXED, math.nan))}


def update_forms_experiment(size: str = "demo", dataset: str | None = "digits",
                            seeds: tuple[int, ...] = (0, 1, 2), jvp_samples: int = 100) -> dict[str, Any]:
    """Experiment (b) from trained runs only: an ``update_form_row`` per run of the ``update_forms`` grid
    and basic_ssm's Table 1 cosine at t = 3 (the record of ``15_update_forms``)."""
    runs = grid("update_forms", size, dataset, seeds)
    families = {s: grid("families", size, dataset, (s,))["basic_ssm"] for s in seeds}
    require_trained({**runs, **{f"basic_ssm seed {s}": c for s, c in families.items()}}, retrain=False)
    rows = [{"run": label, **update_form_row(train_or_load(cfg, progress=False), jvp_samples=jvp_samples)}
            for label, cfg in runs.items()]
    basic = [float(trajectories.cosine_to_final(trajectories.run_trajectories(
        train_or_load(cfg, progress=False), "test").pooled).mean(0)[3]) for cfg in families.values()]
    epochs = sorted({r["epochs"] for r in rows})
    label = dataset if dataset == "digits" else f"{dataset} ({', '.join(map(str, epochs))} epochs, seeds " \
        f"{', '.join(map(str, seeds))})"
    return {"dataset": dataset, "label": label, "size": size, "seeds": list(seeds),
            "jvp_samples": jvp_samples, "basic_ssm cos t=3": basic, "runs": rows}


# ------------------------------------------------------------------ experiment 3(d): Minkowski protocols
def minkowski_protocol_rows(results: dict[str, Any], samples: int | None) -> list[dict]:
    """Every protocol's dimension (``fractal.minkowski_protocols``) on the trajectories of the first
    ``samples`` test images of each loaded run (label -> result): one row per run and protocol."""
    return [{"run": label, "model": family_of(label), "seed": result.config.train.seed,
             "key": run_name(result.checkpoint), "protocol": name, **r}
            for label, result in results.items()  # each run's states: (n, T+1, D)
            for name, r in fractal.minkowski_protocols(
                trajectories.run_trajectories(result, "test", samples).pooled.numpy()).items()]


def minkowski_protocol_summary(rows: list[dict]) -> dict[str, Any]:
    """What experiment 3(d) records beside its ``rows``: the protocols, the sets of known dimension under
    each window, and per protocol and seed whether frost lies above vanilla and basic_ssm."""
    protocols = {fractal.protocol_name(*p): p for p in fractal.PROTOCOLS}
    tables: dict[str, dict[str, dict[int, float]]] = {name: {} for name in protocols}
    for r in rows:  # protocol -> family -> seed -> dimension
        tables[r["protocol"]].setdefault(r["model"], {})[r["seed"]] = r["dimension"]
    scales, reference = np.asarray(fractal.PROTOCOL_SCALES), {}
    # sets of known dimension as 8192-point polylines, under each window
    for name, (vertices, truth) in {"straight line": (fractal.straight_line(2), 1.0),
                                    "Koch curve": (fractal.koch_curve(7), np.log(4) / np.log(3))}.items():
        counts = fractal.box_counts(fractal.resample_polyline(vertices, 8192), scales)
        reference[name] = {"known": float(truth), **fractal.window_dimensions(counts)}
    return {"reference": reference,
            "protocols": {name: {"point_set": p[0], "dims": p[1], "window": p[2],
                                 "box_scales": list(fractal.WINDOWS[p[2]])} for name, p in protocols.items()},
            "box_offsets": fractal.BOX_OFFSETS, "polyline_points": 8192,
            "frost_above_vanilla_and_basic_ssm": {n: fractal.protocol_order(t) for n, t in tables.items()}}


def run_head_refit(size: str = "demo", dataset: str | None = "fashion-mnist",
                   seeds: tuple[int, ...] = (0, 1, 2), train_samples: int = TRAIN_SAMPLES,
                   settings: RefitSettings = RefitSettings(), retrain: bool = False):
    """Experiment 3(a) on the families grid's frost at ``seeds`` and "frost (adopted defaults)" at the
    first: (metrics record, curves)."""
    families = grid("families", size, dataset, seeds=seeds, bundle="residual")
    runs = {label: cfg for family in ("frost", "frost (adopted defaults)")
            for label, cfg in families.items() if family_of(label) == family}
    require_trained(runs, retrain)
    results = load_runs(runs, progress=False)
    for result in results.values():
        result.model.requires_grad_(False)  # frozen: only the new heads learn
    refits = [refit_backbone(result, label, train_samples, settings) for label, result in results.items()]
    curves = pd.concat([part for part, _, _ in refits], ignore_index=True)
    diagnostics = [row for _, _, diag in refits for row in diag]
    first = next(iter(runs.values()))
    table = summary(curves, first.model.steps)
    return {
        "dataset": first.data.name, "size": size, "seeds": list(seeds), "steps": first.model.steps,
        "train_samples": train_samples, "refit": dataclasses.asdict(settings),
        "backbones": {label: {"key": run_name(results[label].checkpoint), "update": cfg.model.update,
                              "seed": cfg.train.seed, "epochs": cfg.train.epochs,
                              "loss": {f: getattr(cfg.loss, f) for f in ("lambda_rel", "lambda_abs", "margin",
                                                                         "rank_frac")},
                              "test_accuracy": float(results[label].metrics.get("test_accuracy", math.nan))}
                      for label, cfg in runs.items()},
        "summary": table.to_dict(orient="records"), "diagnostics": diagnostics,
        "curves": by_column(curves[["rule", "model", "threshold", "mean_depth", "accuracy"]].round(6)),
        **margins(table)}, curves
