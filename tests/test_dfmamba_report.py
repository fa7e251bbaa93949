"""frost_nb.dfmamba: the default run names (ablations apart), the zero-shot evaluation (library and
command line) on a generated series, and notebook 11's numbers and figures (report, plots) on tiny
models and generated run folders."""

import json

import matplotlib
import numpy as np
import pytest
import torch

from frost_nb.__main__ import main
from frost_nb.dfmamba import data, plots, report
from frost_nb.dfmamba import training as forecasting
from frost_nb.dfmamba.model import DFMamba, DFMambaConfig
from frost_nb.inputs import ParameterError
from frost_nb.paper import DFMAMBA_TABLE1_ETTH2, DFMAMBA_TABLE2_ETTM2
from frost_nb.repro import claims
from frost_nb.runs import write_json
from test_dfmamba_protocol import one_thread, tiny_config, write_ett  # noqa: F401 (a fixture)

matplotlib.use("Agg")
# DF-Mamba at a size that trains in seconds
TINY = {"data.lookback": 16, "train.batch_size": 512, "train.epochs": 1, "model.d_model": 4, "model.d_state": 2,
        "model.expand": 1, "model.dt_rank": 1, "model.depth": 1}


def test_default_names_keep_ablations_apart(tmp_path):
    make = forecasting.make_forecast_config
    assert forecasting.default_name(make("etth2", "dfmamba", 96)) == "etth2-L336-H96/dfmamba-seed0"
    assert forecasting.default_name(make("etth2", "rlinear", 720, **{"train.seed": 2})) == \
        "etth2-L336-H720/rlinear-seed2"
    s3 = make("etth2", "dfmamba", 96, **{"model.variant": "S3", "train.seed": 1})
    assert forecasting.default_name(s3) == "etth2-L336-H96-ablations/dfmamba-s3-seed1"  # as the queue names it
    root = write_ett(tmp_path / "data")
    full, ablation = (forecasting.train_or_load(tiny_config(root, "dfmamba", **TINY, **extra), progress=False)
                      for extra in ({}, {"model.variant": "S3"}))  # no --name: they used to collide
    store = tmp_path / "cache" / "forecast"
    assert full.folder == store / "etth2-L16-H4" / "dfmamba-seed0"
    assert ablation.folder == store / "etth2-L16-H4-ablations" / "dfmamba-s3-seed0"
    assert ablation.metrics["variant"] == "S3" and ablation.metrics["params"] > full.metrics["params"]


def test_zero_shot_library_and_command_line(tmp_path, capsys, monkeypatch):
    root = write_ett(tmp_path / "data")  # 14,420 rows: test windows from 16 rows before each pooled border
    args = ["forecast", "--model", "dlinear", "--horizon", "4", "--root", str(root), "--epochs", "1",
            "--set", "data.lookback=16", "--set", "train.batch_size=256", "--no-progress", "--zero-shot"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    zs = out["zero_shot"]
    assert zs["scales"] == [1, 2, 4]
    assert zs["windows"] == [2896 - 20 + 1, (7200 - 5744) - 20 + 1, (3600 - 2864) - 20 + 1]
    assert zs["mse"][0] == pytest.approx(out["test_mse"], rel=1e-12)  # x1: the run's own test windows
    assert zs["ratio"] == zs["mse"][2] / zs["mse"][0]
    folder = tmp_path / "cache" / "forecast" / "etth2-L16-H4" / "dlinear-seed0"
    assert json.loads((folder / "metrics.json").read_text())["zero_shot"] == zs  # kept
    result = forecasting.load_run(folder)  # the model unchanged on the pooled windows
    two = forecasting.evaluate(result.model, data.windows("etth2", "test", 16, 4, scale=2, root=root))
    assert (zs["mse"][1], zs["mae"][1]) == pytest.approx((two["mse"], two["mae"]), rel=1e-12)
    monkeypatch.setattr(forecasting, "evaluate", lambda *a, **k: pytest.fail("evaluated again"))
    assert forecasting.zero_shot(folder) == zs  # read back from metrics.json
    fresh = forecasting.ForecastResult(result.model, {}, result.config)  # not stored: returned only
    monkeypatch.undo()
    assert forecasting.zero_shot(fresh, scales=(2,)) == {"scales": [2], "mse": [zs["mse"][1]],
                                                         "mae": [zs["mae"][1]], "windows": [zs["windows"][1]]}
    per_window = forecasting.evaluate(result.model, result.config.windows("test"), per_window=True)
    assert len(per_window["per_window"]) == 2877 and np.mean(per_window["per_window"]) == \
        pytest.approx(per_window["mse"])


def test_structure_and_gate_map():
    torch.manual_seed(0)
    model = DFMamba(DFMambaConfig(lookback=40, horizon=6, d_model=8, d_state=4, d_conv=3, dt_rank=2))
    x = torch.randn(2, 40, 7)
    table = report.structure(model, x)
    assert table["stage"].tolist() == ["input", "tokens", "level 0", "level 1", "level 2", "level 3", "forecast"]
    assert table["shape"].tolist() == [(2, 40, 7), (14, 40, 8), (14, 40, 8), (14, 20, 8), (14, 10, 8),
                                       (14, 5, 8), (2, 6, 7)]
    assert table["note"][2] == "step x 1, gate (2, 7, 40, 8)" and table["note"][5] == "step x 8, gate None"
    gates = model(x).gates
    one, both = report.gate_map(model, x[0]), report.gate_map(model, x, level=1)
    assert one.shape == (7, 40) and both.shape == (7, 20) and ((one > 0) & (one < 1)).all()
    np.testing.assert_allclose(one, gates[0][0].mean(-1).detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(both, gates[1].mean((0, 3)).detach().numpy(), rtol=1e-6)
    assert isinstance(plots.plot_gate(one), matplotlib.figure.Figure)
    additive = DFMamba(DFMambaConfig(lookback=40, horizon=6, d_model=8, d_state=4, d_conv=3, dt_rank=2,
                                     variant="C3"))
    assert report.structure(additive, x)["note"][2:6].str.endswith("gate None").all()  # C3 has no gate


def test_forecast_examples(tmp_path):
    cfg = tiny_config(write_ett(tmp_path / "data"), **{"train.epochs": 1})
    result = forecasting.ForecastTrainer(cfg, progress=False).fit()
    examples = report.forecast_examples(result, count=3, seed=1)
    index = examples["index"]
    assert index == sorted(set(index)) and len(index) == 3 and max(index) < len(cfg.windows("test"))
    x, y = cfg.windows("test").batch(torch.tensor(index))
    assert examples["history"].shape == (3, 16) and examples["truth"].shape == (3, 4)
    np.testing.assert_array_equal(examples["truth"], y[..., 6].numpy())  # OT, the last column
    np.testing.assert_allclose(examples["forecast"], result.model(x).prediction[..., 6].detach().numpy())
    assert len(plots.plot_forecasts(examples).axes) == 3


def fake_run(store, name, model, seed, mse, horizon=96, variant=None, ratio_scales=None):
    """A run folder with a generated config and metrics (no training): what the frames read."""
    extra = {"model.variant": variant} if variant else {}
    cfg = forecasting.make_forecast_config("etth2", model, horizon, **{"train.seed": seed, **extra})
    folder = store / name
    write_json(folder / "config.json", cfg.to_dict())
    metrics = {"test_mse": mse, "test_mae": mse / 2, "params": 100 + (variant == "S3")}
    if ratio_scales:
        metrics["zero_shot"] = {"scales": [1, 2, 4], "mse": [mse * r for r in ratio_scales],
                                "mae": [0.0] * 3, "windows": [2785, 1345, 625], "ratio": ratio_scales[2]}
    write_json(folder / "metrics.json", metrics)
    return folder


def test_tables_and_claim_inputs_from_run_folders(tmp_path):
    store, folders = tmp_path / "runs", []
    for seed in range(3):
        folders += [fake_run(store, f"etth2-L336-H96/dfmamba-seed{seed}", "dfmamba", seed, 0.30 + seed / 100,
                             ratio_scales=(1, 1.1, 1.2)),
                    fake_run(store, f"etth2-L336-H96/dlinear-seed{seed}", "dlinear", seed, 0.29, ratio_scales=(1, 1.3, 1.6 + seed / 10)),
                    fake_run(store, f"etth2-L336-H96-ablations/dfmamba-s3-seed{seed}", "dfmamba", seed, 0.35,
                             variant="S3")]
    folders.append(fake_run(store, "etth2-L336-H720/dfmamba-seed0", "dfmamba", 0, 0.5, horizon=720))
    runs = report.runs_frame(folders)
    assert len(runs) == 10 and set(runs.label) == {"dfmamba", "dlinear", "S3"}
    assert report.per_seed(runs, "dfmamba") == pytest.approx([0.30, 0.31, 0.32])
    t1 = report.table1(runs).set_index(["model", "horizon"])
    row = t1.loc[("dfmamba", 96)]
    assert (row.seeds, row.paper_mse, row.paper_mae) == (3, *DFMAMBA_TABLE1_ETTH2["dfmamba"][96])
    assert (row.mse, row.mse_sd, row.mae) == pytest.approx((0.31, 0.01, 0.155))
    assert t1.loc[("dfmamba", 720)].seeds == 1 and np.isnan(t1.loc[("dfmamba", 720)].mse_sd)
    assert np.isnan(t1.loc[("rlinear", 96)].mse) and len(t1) == 12  # the paper's rows, ours where run
    ab = report.ablations(runs).set_index("variant")
    assert list(ab.index) == list(DFMAMBA_TABLE2_ETTM2)
    assert ab.loc["S3", "change"] == pytest.approx(0.04) and ab.loc["S3", "params"] == 101
    assert ab.loc["S3", "paper_change"] == pytest.approx(0.180 - 0.158) and np.isnan(ab.loc["T3", "mse"])
    zs = report.zero_shot_table(runs).set_index(["label", "scale"])
    assert zs.loc[("dlinear", 4), "mse"] == pytest.approx(0.29 * 1.7) and zs.loc[("dfmamba", 1), "seeds"] == 3
    assert zs.loc[("paper: affirm", 4), "mse"] == 0.305
    verdict = claims.zero_shot(report.per_seed(runs, "dfmamba", key="ratio"),
                               {b: report.per_seed(runs, b, key="ratio") for b in ("dlinear", "rlinear", "S2")
                                if report.per_seed(runs, b, key="ratio")})
    assert verdict.status == claims.HOLDS  # r 1.2 against DLinear's 1.6-1.8
    assert claims.ablation(report.per_seed(runs, "S3"), report.per_seed(runs, "dfmamba")).status == claims.HOLDS
    for figure in (plots.plot_ablations(report.ablations(runs)), plots.plot_zero_shot(report.zero_shot_table(runs))):
        assert isinstance(figure, matplotlib.figure.Figure)


def test_window_bootstraps_evaluate_a_one_seed_horizon_again(tmp_path):
    """Claim 20's interval at a horizon with one DF-Mamba seed (what notebook 11's metrics keep for the
    verdicts): that run's test windows evaluated again and block-bootstrapped; none at a horizon with 3
    seeds, nor for a run stored without its weights; the run shown needs its weights."""
    from frost_nb.analysis.stats import block_bootstrap

    store = tmp_path / "cache" / "forecast"  # the local store (tests' FROST_CACHE)
    one = forecasting.train_or_load(tiny_config(write_ett(tmp_path / "data"), "dfmamba", **TINY), progress=False)
    folders = [one.folder, fake_run(store, "etth2-L336-H720/dfmamba-seed0", "dfmamba", 0, 0.5, horizon=720)]
    folders += [fake_run(store, f"etth2-L336-H96/dfmamba-seed{s}", "dfmamba", s, 0.24) for s in range(3)]
    runs = report.runs_frame(folders)
    (got,) = report.window_bootstraps(runs)
    errors = forecasting.evaluate(one.model, one.config.windows("test"), per_window=True)["per_window"]
    mean, half = block_bootstrap(errors)
    assert got == {"run": "etth2-L16-H4/dfmamba-seed0", "horizon": 4, "mean": pytest.approx(mean),
                   "half": pytest.approx(half), "windows": 2877, "block": 432}
    assert mean == pytest.approx(one.metrics["test_mse"], rel=1e-5) and half > 0
    refused = r"^parameter seed=0 is invalid: .*with its weights \(stored: \[0, 1, 2\]\)"
    with pytest.raises(ParameterError, match=refused):
        report.shown_run(runs, 0)  # generated folders hold no model.pt
