"""Notebook 11's numbers (``plots`` draws them): one input's shapes, forecasts (Figure 4), the gate
(Figure 2), and the stored runs as Table 1, 2 and 14 beside the paper's; ``per_seed`` gives the lists
that ``repro.claims`` decides claims 20-22 on."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..paper import DFMAMBA_TABLE1_ETTH2, DFMAMBA_TABLE2_ETTM2, DFMAMBA_TABLE14_ETTM2
from .data import COLUMNS
from .model import DFMamba, level_scale
from .training import ForecastResult, read_config, read_metrics, stored_runs

RUN_COLUMNS = ("run", "label", "dataset", "model", "variant", "lookback", "horizon", "seed", "test_mse",
               "test_mae", "params", "zs_scales", "zs_mse", "ratio")


@torch.no_grad()
def structure(model: DFMamba, x: torch.Tensor) -> pd.DataFrame:
    """``x`` (B, L, C) through ``model``: the shape at each stage, each level's step factor and gate."""
    out, (b, length, c), d = model.eval()(x), x.shape, model.cfg.d_model
    gates = [tuple(g.shape) for g in out.gates] + [None]  # the last level has none
    rows = [("input", (b, length, c), ""), ("tokens", (b * c, length, d), "a sequence per variable")]
    rows += [(f"level {k}", (b * c, n, d), f"step x {level_scale(model.cfg.variant, k):g}, gate {gates[k]}")
             for k, n in enumerate(out.lengths)]
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
    """``key`` of ``label``'s runs on ETTh2 (look-back 336) at ``horizon``, by seed: e.g.
    ``claims.zero_shot(per_seed(runs, "dfmamba", key="ratio"), {b: per_seed(runs, b, key="ratio") ...})``."""
    rows = runs[(runs.label == label) & (runs.horizon == horizon) & (runs.dataset == "etth2")
                & (runs.lookback == 336)].dropna(subset=[key])
    return rows.sort_values("seed")[key].tolist()


def _mean_sd(runs: pd.DataFrame, by: list[str], keys=("test_mse", "test_mae")) -> pd.DataFrame:
    return runs.groupby(by).agg(seeds=("seed", "size"), **{f"{k[5:]}{s}": (k, f) for k in keys
                                                          for s, f in (("", "mean"), ("_sd", "std"))})


def table1(runs: pd.DataFrame, paper: dict = DFMAMBA_TABLE1_ETTH2) -> pd.DataFrame:
    """Table 1 (ETTh2, look-back 336): per model and horizon, our test MSE and MAE over seeds (mean, sd;
    full models), and the paper's."""
    ours = _mean_sd(runs[(runs.variant == "full") & (runs.dataset == "etth2") & (runs.lookback == 336)],
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
