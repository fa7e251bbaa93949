"""Notebook 11's numbers (``plots`` draws them): one input's shapes, forecasts (Figure 4), the gate
(Figure 2), the stored runs (``read_runs``) as Tables 1, 2 and 14 beside the paper's, and the lists that
``repro.claims`` decides claims 20-22 on (``per_seed``, ``window_bootstraps``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..analysis.stats import MOVING_BLOCK, block_bootstrap
from ..inputs import ParameterError
from ..paper import DFMAMBA_TABLE1_ETTH2, DFMAMBA_TABLE2_ETTM2, DFMAMBA_TABLE14_ETTM2
from ..runs import run_folder
from .data import COLUMNS, LOOKBACK, write_generated
from .model import DFMamba, level_lengths, level_scale
from .training import (MODELS, STORE, WEIGHTS, ForecastResult, evaluate, load_run, make_forecast_config,
                       read_config, read_metrics, stored_runs, stores, train_or_load, zero_shot)

RUN_COLUMNS = ("run", "label", "dataset", "model", "variant", "lookback", "horizon", "seed", "test_mse",
               "test_mae", "params", "zs_scales", "zs_mse", "ratio")
ZERO_SHOT_LABELS = ("dfmamba", "dlinear", "rlinear", "S2")  # claim 22's models: Table 14's curve here
# smoke size (FROST_SMOKE=1): look-back 16, one epoch, DF-Mamba at 2 levels of width 4 (seconds a run), and
# of the ablations only those claims 21 and 22 read
SMOKE = {"data.lookback": 16, "train.epochs": 1, "train.batch_size": 1024}
SMOKE_VARIANTS = ("S2", "S3", "T3")
SMOKE_DFMAMBA = {"model.d_model": 4, "model.d_state": 2, "model.expand": 1, "model.dt_rank": 1,
                 "model.depth": 2, "model.min_length": 2}


@torch.no_grad()
def structure(model: DFMamba, x: torch.Tensor) -> pd.DataFrame:
    """``x`` (B, L, C) through ``model``: the shape at each stage, each level's step factor and gate."""
    out, (b, length, c), d = model.eval()(x), x.shape, model.cfg.d_model
    gates = [tuple(g.shape) for g in out.gates]  # none at the last level, none at all without the gate (C3)
    rows = [("input", (b, length, c), ""), ("tokens", (b * c, length, d), "a sequence per variable")]
    rows += [(f"level {k}", (b * c, n, d), f"step x {level_scale(model.cfg.variant, k):g}, "
              f"gate {gates[k] if k < len(gates) else None}") for k, n in enumerate(level_lengths(model.cfg))]
    rows.append(("forecast", tuple(out.prediction.shape), ""))
    return pd.DataFrame(rows, columns=["stage", "shape", "note"])


@torch.no_grad()
def forecast_examples(result: ForecastResult, count: int = 4, seed: int = 0, variable: str = "OT") -> dict:
    """``count`` test windows drawn with ``seed`` (Figure 4): their "index", and "history", "truth" and
    "forecast" of ``variable`` (standardised), each (count, steps)."""
    data, c = result.config.windows("test"), COLUMNS.index(variable)
    index = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))[:count].sort().values
    x, y = data.batch(index)
    return {"index": index.tolist(), "variable": variable, "history": x[..., c].numpy(),
            "truth": y[..., c].numpy(), "forecast": result.model.eval()(x).prediction[..., c].numpy()}


@torch.no_grad()
def gate_map(model: DFMamba, x: torch.Tensor, level: int = 0) -> np.ndarray:
    """Figure 2: level ``level``'s gate g of eq. (9) (0 local, 1 global) for a window (L, C), or the mean
    over a batch (B, L, C), averaged over the features: (C, L_level)."""
    return model.eval()(x.reshape(-1, *x.shape[-2:])).gates[level].mean((0, 3)).numpy()  # (B, C, L, D)


def runs_frame(folders=None) -> pd.DataFrame:
    """A row per finished run folder (default ``stored_runs()``; a name held twice, the local run):
    "label" the model or its ablation variant, "zs_*" and "ratio" its kept ``zero_shot`` errors."""
    rows = {}
    for folder in stored_runs() if folders is None else folders:
        cfg, m, name = read_config(folder), read_metrics(folder), f"{folder.parent.name}/{folder.name}"
        zs, d = m.get("zero_shot", {}), cfg.data
        rows.setdefault(name, (name, cfg.model if cfg.variant == "full" else cfg.variant, d.name, cfg.model,
                               cfg.variant, d.lookback, d.horizon, cfg.train.seed, m.get("test_mse"),
                               m.get("test_mae"), m.get("params"), zs.get("scales"), zs.get("mse"),
                               zs.get("ratio")))
    return pd.DataFrame(list(rows.values()), columns=RUN_COLUMNS)


def per_seed(runs: pd.DataFrame, label: str, horizon: int = 96, key: str = "test_mse") -> list[float]:
    """``key`` ("run": their names) of ``label``'s ETTh2 runs at look-back 336 and ``horizon``, by seed: e.g.
    ``claims.zero_shot(per_seed(runs, "dfmamba", key="ratio"), {b: per_seed(runs, b, key="ratio") ...})``."""
    rows = runs[(runs.label == label) & (runs.horizon == horizon) & (runs.dataset == "etth2")
                & (runs.lookback == LOOKBACK)].dropna(subset=[key])
    return rows.sort_values("seed")[key].tolist()


def _mean_sd(runs: pd.DataFrame, by: list[str], keys=("test_mse", "test_mae")) -> pd.DataFrame:
    return runs.groupby(by).agg(seeds=("seed", "size"), **{f"{k[5:]}{s}": (k, f) for k in keys
                                                          for s, f in (("", "mean"), ("_sd", "std"))})


def table1(runs: pd.DataFrame, paper: dict = DFMAMBA_TABLE1_ETTH2, lookback: int = LOOKBACK) -> pd.DataFrame:
    """Table 1 (ETTh2, look-back ``lookback``): per model and horizon, our test MSE and MAE over seeds
    (mean, sd; full models), and the paper's."""
    ours = _mean_sd(runs[(runs.variant == "full") & (runs.dataset == "etth2") & (runs.lookback == lookback)],
                    ["model", "horizon"])
    theirs = pd.DataFrame([(m, h, *v) for m, by in paper.items() for h, v in by.items()],
                          columns=["model", "horizon", "paper_mse", "paper_mae"])
    return theirs.set_index(["model", "horizon"]).join(ours, how="outer").reset_index()


def ablations(runs: pd.DataFrame, paper: dict = DFMAMBA_TABLE2_ETTM2) -> pd.DataFrame:
    """Table 2 (ETTh2, H = 96): per variant, our test MSE and MAE over seeds, the MSE's "change" from the
    full model's, the parameters; the paper's (ETTm2) MSE, MAE, change and millions of parameters."""
    dfm = runs[(runs.model == "dfmamba") & (runs.horizon == 96) & (runs.dataset == "etth2")]
    out = pd.DataFrame.from_dict(paper, orient="index", columns=["paper_mse", "paper_mae", "paper_params_m"])
    out = out.join(_mean_sd(dfm, ["variant"])).join(dfm.groupby("variant")["params"].first())
    out["change"], out["paper_change"] = out.mse - out.mse["full"], out.paper_mse - out.paper_mse["full"]
    return out.rename_axis("variant").reset_index()


def zero_shot_table(runs: pd.DataFrame, paper: dict = DFMAMBA_TABLE14_ETTM2) -> pd.DataFrame:
    """Table 14: per label and pooling factor, the zero-shot test MSE of the runs at H = 96 over seeds
    (mean, sd), then the paper's (ETTm2) as "paper: MODEL"."""
    kept = runs[(runs.horizon == 96) & runs.zs_mse.notna()].itertuples()
    long = pd.DataFrame([(r.label, r.seed, s, v) for r in kept for s, v in zip(r.zs_scales, r.zs_mse)],
                        columns=["label", "seed", "scale", "test_mse"])
    theirs = pd.DataFrame([(f"paper: {m}", s, v) for m, by in paper.items() for s, v in by.items()],
                          columns=["label", "scale", "mse"])
    ours = _mean_sd(long, ["label", "scale"], ("test_mse",)).reset_index()
    return pd.concat([ours, theirs], ignore_index=True)


def _folder(name: str) -> Path:
    """The stored run ``name`` (GRID/LABEL) that ``runs_frame`` read: the local store's first."""
    return run_folder(f"{STORE}/{name}", finished=True, local_first=True)


def smoke_runs() -> list[Path]:
    """Notebook 11's runs at smoke size (``SMOKE``), trained (or loaded) into the local store on the series of
    ``data.write_generated`` (in the store's ``generated/``): DF-Mamba, DLinear and RLinear at H = 96, seeds
    0 and 1, and at H = 192, seed 0 (one seed: claim 20's bootstrap); ``SMOKE_VARIANTS`` at H = 96, seed 0."""
    root = write_generated(stores()[0] / "generated")  # no run folder: the store's runs are GRID/LABEL/
    plan = [(m, h, s, "full") for h, seeds in ((96, (0, 1)), (192, (0,))) for m in MODELS for s in seeds]
    plan += [("dfmamba", 96, 0, v) for v in SMOKE_VARIANTS]
    arch = lambda m, v: {**SMOKE_DFMAMBA, "model.variant": v} if m == "dfmamba" else {}
    return [train_or_load(make_forecast_config("etth2", m, h, **SMOKE, **arch(m, v), **{
        "data.root": str(root), "train.seed": s}), progress=False).folder for m, h, s, v in plan]


def read_runs(smoke: bool = False) -> pd.DataFrame:
    """``runs_frame`` of notebook 11's runs: every finished stored run on ETTh2 at look-back 336 (smoke:
    ``smoke_runs``, at 16), after ``training.zero_shot`` on each run of ``ZERO_SHOT_LABELS`` at H = 96 that
    has its weights (x1, x2, x4, kept in its metrics.json: computed once)."""
    runs = runs_frame(smoke_runs() if smoke else None)
    lookback = SMOKE["data.lookback"] if smoke else LOOKBACK
    runs = runs[(runs.dataset == "etth2") & (runs.lookback == lookback)]
    folders = [_folder(name) for name in runs.run]
    for folder, r in zip(folders, runs.itertuples()):
        if r.label in ZERO_SHOT_LABELS and r.horizon == 96 and (folder / WEIGHTS).is_file():
            zero_shot(folder)
    return runs_frame(folders)


def shown_run(runs: pd.DataFrame, seed: int) -> ForecastResult:
    """The DF-Mamba run of ``runs`` at H = 96 and ``seed``, with its weights (Figures 2 and 4)."""
    rows = runs[(runs.label == "dfmamba") & (runs.horizon == 96)]
    result = load_run(_folder(rows.run[rows.seed == seed].iloc[0])) if (rows.seed == seed).any() else None
    if result is None or result.model is None:
        raise ParameterError(f"parameter seed={seed} is invalid: expected the seed of a stored DF-Mamba run "
                             f"at H = 96 with its weights (stored: {sorted(rows.seed.tolist()) or 'none'})")
    return result


def window_bootstraps(runs: pd.DataFrame) -> list[dict]:
    """Claim 20's interval at each horizon of ``runs`` with one DF-Mamba seed (the rule's, for one seed): that
    run evaluated again per test window, ``stats.block_bootstrap`` of those MSEs as "mean" and "half" (the
    verdicts read it from the metrics: they evaluate nothing); none for a run stored without its weights."""
    out = []
    for h, rows in runs[runs.label == "dfmamba"].groupby("horizon"):
        result = load_run(_folder(rows.run.iloc[0])) if len(rows) == 1 else None
        if result is not None and result.model is not None:
            errors = evaluate(result.model, result.config.windows("test"), per_window=True)["per_window"]
            mean, half = block_bootstrap(errors)
            out.append({"run": rows.run.iloc[0], "horizon": int(h), "mean": mean, "half": half,
                        "windows": len(errors), "block": MOVING_BLOCK})
    return out
