"""The tables the analysis notebooks show, from trained runs (pandas frames with units in the column names)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..analysis.curves import curve
from ..analysis.fractal import project, summarise_dimensions, trajectory_dimensions
from ..analysis.trajectories import run_trajectories, scale_consistency_rows
from ..halting import PAPER_QUANTILES
from ..paper import TABLE1_STEPS, table1_rows
from ..repro.grids import family_of
from ..runs import run_name
from ..training import evaluate, load_split


def run_summary(result, sweeps: dict[str, Any]) -> dict[str, Any]:
    """What the ablation tables show of one trained run: per split, accuracies (full depth, q = 0.125 and
    0.5) and the selection score; final alpha, H and scores. ``sweeps`` receives each split's curve."""
    cfg, steps = result.config, result.history["steps"]
    row: dict[str, Any] = {"key": run_name(result.checkpoint), "epochs": cfg.train.epochs,
                           "seed": cfg.train.seed}  # and the last logged value of each series:
    row |= {k: steps[k][-1] for k in ("alpha", "hurst", "easy_score", "hard_score", "threshold_median")}
    for split in ("val", "test"):
        out = evaluate(result.model, load_split(cfg, split), batch_size=cfg.train.eval_batch_size)
        full = curve(out, calibrator=result.calibrator, quantiles=PAPER_QUANTILES)
        sweeps[split] = full
        table = full.set_index("quantile")
        row[f"{split}_accuracy"] = out.accuracy
        for q in (0.125, 0.5):
            row.update({f"{split}_accuracy_q{q}": float(table.loc[q, "accuracy"]),
                        f"{split}_depth_q{q}": float(table.loc[q, "mean_depth"])})
        row[f"{split}_score"] = float(table["accuracy"].mean())  # the tuning score
    return row


# the columns notebook 04's tables show for every run (``summarise_runs``)
ABLATION_COLUMNS = ["alpha", "hurst", "val_accuracy", "val_score", "test_accuracy", "test_accuracy_q0.125",
                    "test_depth_q0.125", "test_accuracy_q0.5", "test_depth_q0.5"]


def summarise_runs(results: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """One ``run_summary`` row per run (label -> TrainResult; held-out and test numbers), indexed
    by label, and each run's test FROST curve (label -> ``curves.curve`` table)."""
    per_split: dict[str, Any] = {label: {} for label in results}
    rows = [{"run": label, **run_summary(r, sweeps=per_split[label])} for label, r in results.items()]
    return pd.DataFrame(rows).set_index("run"), {label: s["test"] for label, s in per_split.items()}


def alpha_summary(results: dict[str, Any]) -> pd.DataFrame:
    """alpha over each run's training (the paper's figure 1): start, minimum and where in training
    it falls (fraction of the logged steps), end, recovery (end - minimum) and maximum."""
    rows = []
    for label, r in results.items():
        a = pd.Series(r.history["steps"]["alpha"])
        rows.append({"run": label, "key": run_name(r.checkpoint), "seed": r.config.train.seed,
                     "start": a.iloc[0],
                     "min": a.min(), "min at (fraction of training)": a.idxmin() / max(len(a) - 1, 1),
                     "end": a.iloc[-1], "recovery (end - min)": a.iloc[-1] - a.min(), "max": a.max()})
    return pd.DataFrame(rows).set_index("run")


def alpha_series(results: dict[str, Any], every: int = 25) -> list[dict[str, Any]]:
    """alpha at every ``every``-th logged step of each run, as records (run, step, alpha)."""
    return [{"run": label, "step": s, "alpha": a} for label, r in results.items()
            for s, a in list(zip(r.history["steps"]["step"], r.history["steps"]["alpha"]))[::every]]


def conflict_summary(results: dict[str, Any]) -> pd.DataFrame:
    """The gradient-conflict probes of each run (``train.diagnostics_every``): mean cosines over training
    and its halves, the share of negative probes, Definition D.1's per-step cosine, test accuracy."""
    rows = []
    for label, r in results.items():
        d = pd.DataFrame(r.history["diagnostics"])
        half, per_step = d["step"] >= d["step"].max() / 2, d.get("step_grad_cosine")
        logged = per_step is not None and per_step.map(len).all()
        rows.append({"model": label, "key": run_name(r.checkpoint), "mean cosine": d["grad_cosine"].mean(),
                     "first half": d.loc[~half, "grad_cosine"].mean(),
                     "second half": d.loc[half, "grad_cosine"].mean(),
                     "share negative": (d["grad_cosine"] < 0).mean(),
                     "per-step cosine": per_step.map(lambda c: sum(c) / len(c)).mean() if logged else float("nan"),
                     "test accuracy": r.metrics["test_accuracy"]})
    return pd.DataFrame(rows).set_index("model")


def conflict_series(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every gradient-conflict probe of each run, as records (model, step, cosine)."""
    return [{"model": label, "step": s, "cosine": c} for label, r in results.items()
            for s, c in zip(r.history["diagnostics"]["step"], r.history["diagnostics"]["grad_cosine"])]


def trajectory_dimension_table(results: dict[str, Any], samples: int | None) -> tuple[pd.DataFrame, dict]:
    """Notebook 03's measurement: each run's box-counting dimension on its first ``samples`` test images,
    and at seed 0 the correlation dimension; (one row per run, model -> projected states)."""
    planar, rows = {}, []
    for label, r in results.items():
        states = run_trajectories(r, "test", samples).pooled.numpy()  # (n, T+1, D)
        model, seed = family_of(label), r.config.train.seed
        row = {"model": model, "seed": seed}
        for m in ("box", "correlation") if seed == 0 else ("box",):
            row |= {f"{m} {k}": v for k, v in summarise_dimensions(trajectory_dimensions(states, m)).items()}
        if seed == 0:
            planar[model] = project(states)  # (n, T+1, 2)
        rows.append(row)
    return pd.DataFrame(rows), planar


def scale_consistency_table(results: dict[str, Any], trajectories: dict[str, Any]):
    """Table 1 rows for every run: model, seed, step, mean and std of cos(GAP(h_t), GAP(h_T))."""
    return pd.DataFrame([{"model": family_of(label), "seed": results[label].config.train.seed, **row}
                         for label, traj in trajectories.items()
                         for row in scale_consistency_rows(traj.pooled)])


def beside_paper_table1(table, steps=None):
    """Ours (mean over seeds of the per-run mean, with the seeds' spread and the mean
    within-run std) next to the paper's Table 1, one row per model and step."""
    g = table[table["step"].isin(TABLE1_STEPS if steps is None else steps)].groupby(["model", "step"])
    ours = pd.DataFrame({"mean": g["mean"].mean(), "spread over seeds": g["mean"].std(ddof=1),
                         "std over samples": g["std"].mean(), "seeds": g["seed"].nunique()})
    paper = pd.DataFrame(table1_rows()).set_index(["model", "step"]).add_prefix("paper ")
    return ours.join(paper).reset_index()
