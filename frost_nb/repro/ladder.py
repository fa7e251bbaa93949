"""The scale ladder's runs and their measures (docs/method.md section 15; notebook 09): which runs it
reads, every quantity of one trained run, and the measures the notebook's metrics keep."""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from pathlib import Path
from typing import Sequence

import numpy as np

from ..analysis import curves, fractal, halting_rules, trajectories
from ..analysis.curves import FIXED, at_depths, curve, versus_fixed_depth
from ..analysis.halting_rules import sorted_points
from ..analysis.ladder import PAPER_DEPTHS
from ..halting import PAPER_QUANTILES
from ..paper import TABLE1_STEP
from ..paths import DamagedInput, outputs_dir, restore_hint
from ..runs import METRICS_FILE, find_run, read_metrics
from .claims import product_rate
from .grids import family_of, grid

RUNGS = ("ladder32", "ladder64", "ladder128")  # the CPU rungs
GPU_RUNGS = ("ladder256",)  # a fourth rung of the fit once a GPU has trained it (its runs read when stored)
FROST_SEEDS = {"ladder32": (0, 1, 2), "ladder64": (0, 1, 2), "ladder128": (0,), "ladder256": (0,)}
BASELINE = "basic_ssm"  # one seed per rung: Table 1 and the Minkowski estimate are frost against it
CONTROL = "demo"  # the committed demo runs (linear B, C, D): shown, never fitted
SMOKE_WIDTHS = {"ladder32": 8, "ladder64": 16, "ladder128": 32}  # FROST_SMOKE: digits, seconds a run


def ladder_runs(dataset: str = "cifar100", seeds: int = 3, smoke: bool = False) -> dict[str, tuple[str, object]]:
    """label -> (run name, RunConfig) of every run notebook 09 reads: frost at FROST_SEEDS and BASELINE
    at seed 0 per rung and at the demo control (``smoke``: CI's ladder on digits, SMOKE_WIDTHS);
    GPU_RUNGS' runs where they are stored, never in smoke."""
    runs = {}
    for size in RUNGS if smoke else (*RUNGS, *GPU_RUNGS, CONTROL):
        frost_seeds = tuple(range(seeds)) if size == CONTROL else FROST_SEEDS[size][:seeds]
        wanted = {("frost", s) for s in frost_seeds} | {(BASELINE, 0)}
        g = grid("families", "smoke" if smoke else size, "digits" if smoke else dataset, seeds=(0, 1, 2))
        for label, cfg in g.items():
            model, seed = family_of(label), cfg.train.seed
            if (model, seed) not in wanted or (size in GPU_RUNGS and find_run(cfg) is None):
                continue
            name = g.run_name(label)
            if smoke:
                w = SMOKE_WIDTHS[size]
                cfg = cfg.replace(**{"model.width": w, "model.bottleneck": w // 2, "model.norm_groups": 2,
                                     "model.bcd_hidden": w * 7 // 2})
                name = name.replace("-smoke-", f"-smoke-{size}-")
            runs[f"{size} {model} seed {seed}"] = (name, cfg)
    return runs


PRECISION = ("ladder32", 0)  # the precision check's rung and seed: its frost run again in fp32
# fp32 seeds 1 and 2 were trained after the check failed on seed 0 (analysis.ladder.precision_shift)
PRECISION_SEEDS = (0, 1, 2)
PRECISION_NAME = "{dataset}-ladder32-precision/frost-fp32-seed{seed}"  # as exported (outputs/runs/)


def precision_run(dataset: str = "cifar100", seeds: int = 1, smoke: bool = False) -> dict[str, tuple[str, object]]:
    """label -> (run name, RunConfig) of the precision check's fp32 runs: frost at PRECISION's rung at
    the first ``seeds`` PRECISION_SEEDS with bf16 autocast off."""
    size, chosen = PRECISION[0], PRECISION_SEEDS[:seeds]
    bf16 = ladder_runs(dataset, seeds=max(chosen) + 1, smoke=smoke)
    runs = {}
    for seed in chosen:
        name, cfg = bf16[f"{size} frost seed {seed}"]
        fp32_name = name.replace("-families/", "-precision/").replace("frost-", "frost-fp32-") if smoke else \
            PRECISION_NAME.format(dataset=dataset, seed=seed)
        runs[f"{size} frost fp32 seed {seed}"] = (fp32_name, cfg.replace(**{"train.amp": "off"}))
    return runs


KEPT_SHARE = 0.99  # "the depth at which a fixed depth first reaches 99% of full-depth accuracy"


def depth_to_keep(accuracy_by_step: Sequence[float], share: float = KEPT_SHARE) -> int:
    """The first step t (1-based) whose fixed-depth accuracy reaches ``share`` of the last step's."""
    acc = np.asarray(accuracy_by_step, dtype=float)
    return int(np.argmax(acc >= share * acc[-1])) + 1


def halting_measures(outputs, calibrator, quantiles: Sequence[float] = PAPER_QUANTILES[:-1]) -> dict[str, float]:
    """The halting quantities of one run from its test split's full-depth pass and calibrator: full-depth
    accuracy, ``depth_99``, the shares kept at PAPER_DEPTHS by a fixed depth and by FROST's halting (NaN
    at a depth outside the sweep's), and claim 14's gap over ``quantiles`` (Table 2's, q < 1) with its
    spread and ranking (``versus_fixed_depth``), each the mean over the quantiles."""
    fixed = curve(outputs, FIXED)
    sweep = curve(outputs, calibrator=calibrator, quantiles=list(quantiles))
    kept = at_depths(sweep, fixed, PAPER_DEPTHS)
    depths = sorted_points(sweep)[0]  # read_at holds a curve's end outside its depths: not a reading
    kept.loc[(kept["mean_depth"] < depths.min()) | (kept["mean_depth"] > depths.max()), "kept"] = math.nan
    split = versus_fixed_depth(sweep, fixed)
    return {"full_depth": float(outputs.accuracy_per_step()[-1]),
            "depth_99": float(depth_to_keep(outputs.accuracy_per_step())),
            **{f"fixed_kept_{d}": float(v) for d, v in zip(PAPER_DEPTHS, kept["fixed_kept"])},
            **{f"halting_kept_{d}": float(v) for d, v in zip(PAPER_DEPTHS, kept["kept"])},
            "gap": float(split["gain"].to_numpy().mean()), "spread": float(split["spread"].to_numpy().mean()),
            "ranking": float(split["ranking"].to_numpy().mean())}


def run_measures(result, samples: int = 300, jvp_samples: int = 100) -> dict:
    """Every quantity of one trained run (``runs.train_or_load``'s result): who it is, its train and
    held-out accuracy after the last epoch (overfitting shows there), its fixed-depth accuracy by step,
    the halting measures (frost) and the trajectory measures, all from one full-depth pass over the
    test split (with its trajectory)."""
    from ..analysis.trajectories import run_trajectories

    cfg = result.config
    outputs = run_trajectories(result, "test")  # scores, logits and pooled states in one pass
    epochs = result.history["epochs"]
    row = {"size": cfg.size, "model": cfg.model.name, "seed": cfg.train.seed,
           "params": int(result.model.num_parameters()), "test_accuracy": float(outputs.accuracy_per_step()[-1]),
           "train_accuracy": float(epochs["train_accuracy"][-1]), "val_accuracy": float(epochs["val_accuracy"][-1]),
           "accuracy_per_step": [float(a) for a in outputs.accuracy_per_step()],
           "hardware": _hardware(result)}
    if cfg.model.name == "frost":
        row.update(halting_measures(outputs, result.calibrator))
    return {**row, **trajectory_measures(result, outputs.pooled, samples, jvp_samples)}


def _hardware(result) -> str | None:
    """What trained ``result``: its folder's metrics.json says (the checkpoint's metrics name only the
    device), else the device."""
    folder = None if result.checkpoint is None else Path(result.checkpoint).parent
    stored = read_metrics(folder) if folder is not None and (folder / METRICS_FILE).is_file() else {}
    return stored.get("hardware", result.metrics.get("hardware", result.metrics.get("device")))


def measure_code() -> str:
    """A digest of the code that computes a run's measures (``run_measures`` and what it calls for them):
    a cached row measured by other code is measured again."""
    code = (run_measures, trajectory_measures, halting_measures, depth_to_keep, curves.curve,
            curves.at_depths, curves.versus_fixed_depth, halting_rules.random_exit_accuracy, halting_rules.gain_split,
            trajectories.run_trajectories, trajectories.scale_consistency_rows, trajectories.run_jacobian_summary,
            fractal.trajectory_dimensions, fractal.summarise_dimensions, fractal.box_counting_dimension, product_rate)
    return hashlib.sha256("".join(inspect.getsource(f) for f in code).encode()).hexdigest()[:16]


def measured(results: dict[str, tuple[str, object]], cache: dict[str, dict], measure,
             code: str | None = None) -> tuple[list[dict], dict]:
    """(rows, cache) of ``results`` (label -> (run name, run)): each run's measures from ``cache`` when it
    holds them at the same test accuracy and ``code``, else ``measure(result)``."""
    code = measure_code() if code is None else code
    rows, fresh = [], {}
    for label, (name, result) in results.items():
        stored = result.metrics.get("test_accuracy")  # the run's own record: another value, another run
        row = cache.get(name)
        if row is None or row.get("stored_accuracy") != stored or row.get("measured_with") != code:
            row = measure(result)
        else:  # JSON keeps NaN as null: a cached row reads as it was measured
            row = {k: math.nan if v is None else v for k, v in row.items()}
        # the rung from the label (ladder_runs'), not the config's size: smoke rungs share one size
        fresh[name] = {**row, "size": label.split(" ", 1)[0], "name": name, "stored_accuracy": stored,
                       "measured_with": code}
        rows.append(fresh[name])
    return rows, fresh


def trajectory_measures(result, pooled, samples: int = 300, jvp_samples: int = 100) -> dict[str, float]:
    """A run's own trajectory quantities (its side of claims 1, 2 and 3, as notebooks 02 and 03
    measure them), from ``pooled`` (N, T+1, D), GAP(h_t) of its test split: the cosine of GAP(h_t)
    with GAP(h_T) at TABLE1_STEP, the
    8-step Jacobian product rate (median over ``jvp_samples`` test images) and the mean box-counting
    dimension of the first ``samples`` test images' trajectories."""
    from ..analysis.fractal import summarise_dimensions, trajectory_dimensions
    from ..analysis.trajectories import run_jacobian_summary, scale_consistency_rows
    from .claims import product_rate

    cosine = scale_consistency_rows(pooled, [TABLE1_STEP])[0]["mean"]
    box = summarise_dimensions(trajectory_dimensions(pooled[:samples].numpy(), "box"))["mean"]
    jac = run_jacobian_summary(result, jvp_samples)
    return {"cosine": float(cosine), "box_dimension": float(box),
            "product_rate": float(product_rate(jac["product_norm"], jac["product_steps"]))}


def cached_measures(name: str) -> dict[str, dict]:
    """The runs' measures kept in the metrics file ``name`` (run name -> row); {} when there is none."""
    path = outputs_dir() / "metrics" / f"{name}.json"
    if not path.exists():
        return {}
    try:
        runs = json.loads(path.read_text()).get("runs", {})
    except (ValueError, AttributeError) as err:
        raise DamagedInput(f"{path} is not a metrics record ({err}); {restore_hint(path)}") from None
    if not isinstance(runs, dict):
        raise DamagedInput(f"{path}: 'runs' is not a mapping of run names; {restore_hint(path)}")
    return runs
