"""The forecasting protocol (frost_nb/dfmamba/data.py), the linear baselines and the forecasting
trainer: window counts, borders and standardisation on the real ETTh2 (read from ../shared/data/ett,
which CI has beside the clone), the closed-form least-squares pin that checks the protocol, DLinear's
decomposition, the best validation epoch kept, resuming, the command line on a generated series, and the
one error line of a damaged stored run (copies of committed runs in the test's local store)."""

import hashlib
import json
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from frost_nb.__main__ import main
from frost_nb.data.prepare import DataError
from frost_nb.dfmamba import data
from frost_nb.dfmamba import training as forecasting
from frost_nb.dfmamba.baselines import DLinear, DLinearConfig, RLinear, RLinearConfig
from frost_nb.dfmamba.model import Forecast
from frost_nb.paths import DamagedInput, repo_root

SHARED = repo_root().parent / "shared" / "data"  # the data root holding ett/
COMMITTED = repo_root() / "outputs" / "runs" / "forecast"  # read here, never written
needs_ett = pytest.mark.skipif(not (SHARED / "ett" / "ETTh2.csv").is_file(),
                               reason="../shared/data/ett is not beside this checkout")


@pytest.fixture(autouse=True)
def one_thread():
    """One thread, as the runs train: these models are tiny, and a busy machine makes threads wait."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def write_ett(root, rows=data.BORDERS[-1] + 20, seed=0):
    """A generated ETTh2.csv (daily cycles and noise in 7 columns) and its SHA256SUMS under ``root/ett``."""
    return data.write_generated(root, rows, seed)


@needs_ett
def test_window_counts_borders_and_standardisation():
    counts = {h: len(data.windows("etth2", "test", horizon=h, root=SHARED)) for h in data.HORIZONS}
    assert counts == {96: 2785, 192: 2689, 336: 2545, 720: 2161}  # every test window, none dropped
    train, val = (data.windows("etth2", s, root=SHARED) for s in ("train", "val"))
    assert (len(train), len(val)) == (8209, 2785)
    series = data.load_series("etth2", SHARED)
    z = series.values
    x, y = data.windows("etth2", "test", root=SHARED).batch(torch.tensor([0, 2784]))
    assert torch.equal(y[0, 0], z[11520]) and torch.equal(x[0, 0], z[11520 - 336])  # first target: the border
    assert torch.equal(y[1, -1], z[14399])  # the last target: the last test row
    x, y = train.batch(torch.tensor([0, 8208]))
    assert torch.equal(x[0, 0], z[0]) and torch.equal(y[1, -1], z[8639])
    # the training rows' mean and population std (ddof 0), as scikit-learn's StandardScaler
    import pandas as pd
    from sklearn.preprocessing import StandardScaler

    raw = pd.read_csv(SHARED / "ett" / "ETTh2.csv").iloc[:, 1:].to_numpy()
    scaler = StandardScaler().fit(raw[:8640])
    np.testing.assert_allclose(series.mean, scaler.mean_, rtol=1e-12)
    np.testing.assert_allclose(series.std, scaler.scale_, rtol=1e-12)
    np.testing.assert_allclose(z.numpy(), scaler.transform(raw), atol=1e-5)
    assert series.sha256 == "a3dc2c597b9218c7ce1cd55eb77b283fd459a1d09d753063f944967dd6b9218b"


@needs_ett
def test_coarse_series_borders_and_counts():
    assert [data.split_rows(s, 336, 2) for s in data.SPLITS] == [(0, 4320), (3984, 5760), (5424, 7200)]
    assert [data.split_rows(s, 336, 4) for s in data.SPLITS] == [(0, 2160), (1824, 2880), (2544, 3600)]
    two, four = (data.windows("etth2", "test", scale=f, root=SHARED) for f in (2, 4))
    assert (len(two), len(four)) == (1345, 625)
    z = data.load_series("etth2", SHARED).values
    pooled = data.coarse(z, 2)
    assert pooled.shape == (8710, 7)
    torch.testing.assert_close(pooled[2880], (z[5760] + z[5761]) / 2)  # blocks aligned to row 0
    torch.testing.assert_close(data.coarse(z, 4)[1], z[4:8].mean(0))
    x, y = two.batch(torch.tensor([0, 1344]))  # targets inside the pooled test period, look-backs reach before
    assert torch.equal(y[0, 0], pooled[5760]) and torch.equal(x[0, 0], pooled[5760 - 336])
    assert torch.equal(y[1, -1], pooled[7199])
    x, y = four.batch(torch.tensor([0, 624]))
    assert torch.equal(y[0, 0], data.coarse(z, 4)[2880]) and torch.equal(x[0, 0], data.coarse(z, 4)[2880 - 336])
    assert torch.equal(y[1, -1], data.coarse(z, 4)[3599])


class SharedLinear(torch.nn.Module):
    def __init__(self, lookback, horizon):
        super().__init__()
        self.linear = torch.nn.Linear(lookback, horizon)

    def forward(self, x):
        return Forecast(self.linear(x.transpose(1, 2)).transpose(1, 2), {})


@torch.no_grad()
def least_squares(train, batch_size=1024):
    """The ``SharedLinear`` (with a bias) of least squared error over every window and variable of
    ``train``: the normal equations summed in float64 a batch at a time, then solved."""
    gram = cross = 0
    for x, y in train.batches(batch_size):
        a = F.pad(x.transpose(1, 2).reshape(-1, train.lookback).double(), (0, 1), value=1.0)  # (B C, L + 1)
        gram, cross = gram + a.T @ a, cross + a.T @ y.transpose(1, 2).reshape(-1, train.horizon).double()
    solution = torch.linalg.solve(gram, cross)  # (L + 1, H): the weights, then the bias
    model = SharedLinear(train.lookback, train.horizon)
    model.linear.weight.copy_(solution[:-1].T)
    model.linear.bias.copy_(solution[-1])
    return model.eval()


@needs_ett
def test_closed_form_least_squares_pins_the_protocol():
    """The protocol check: the channel-independent least-squares map 336 -> 96 with a
    bias, fitted on the 8,209 training windows x 7 variables, gives 0.302 / 0.365 on the test windows."""
    model = least_squares(data.windows("etth2", "train", root=SHARED))
    test = forecasting.evaluate(model, data.windows("etth2", "test", root=SHARED))
    assert test["mse"] == pytest.approx(0.302, abs=0.002) and test["mae"] == pytest.approx(0.365, abs=0.002)


def test_files_are_checked_against_their_sums(tmp_path):
    root = write_ett(tmp_path)
    (root / "ett" / "SHA256SUMS").write_text(f"{'0' * 64}  ETTh2.csv\n")
    with pytest.raises(DataError) as err:
        data.load_series("etth2", root)
    message = str(err.value)
    assert "\n" not in message and "make data" in message
    assert "ETTh2.csv does not match its SHA256SUMS" in message
    with pytest.raises(DataError, match=r"not found: no file .*ETTh1.csv; link the shared copy"):
        data.load_series("etth1", root)


def row(line):  # a damage of the generated CSV: its line 4 (the row of t2) replaced by ``line``
    return lambda raw: b"\n".join(raw.split(b"\n")[:3] + [line] + raw.split(b"\n")[4:])


@pytest.mark.parametrize("csv, sums, problem", [  # each with a SHA256SUMS made for it, as HOW_TO_GET says
    (lambda raw: raw[:-37], b"", r"ETTh2.csv, line 14421: [2-7] fields, expected 8"),  # cut mid-row
    (row(b"t2,1,2,,4,5,6,7"), b"", r"ETTh2.csv, line 4: cell '' is not a finite number"),
    (row(b"t2,1,2,abc,4,5,6,7"), b"", r"ETTh2.csv, line 4: cell 'abc' is not a finite number"),
    (row(b"t2,1,2,nan,4,5,6,7"), b"", r"ETTh2.csv, line 4: cell 'nan' is not a finite number"),
    (row(b"t2,1,2,3,4,5,6,7,8"), b"", r"ETTh2.csv, line 4: 9 fields, expected 8"),
    (lambda raw: b"", b"", r"ETTh2.csv is empty"),
    (row(b"t2,1,2,\xff3,4,5,6,7"), b"", r"ETTh2.csv, line 4: byte 0xff is not UTF-8"),
    (lambda raw: raw, b"\xff\n", r"SHA256SUMS, line 1: byte 0xff is not UTF-8"),
], ids=["cut-mid-row", "empty-cell", "text-cell", "nan-cell", "extra-column", "empty-file", "not-utf8",
        "sums-not-utf8"])
def test_damaged_csvs_with_matching_sums_are_one_line_errors(tmp_path, csv, sums, problem):
    folder = write_ett(tmp_path) / "ett"
    raw = csv((folder / "ETTh2.csv").read_bytes())
    (folder / "ETTh2.csv").write_bytes(raw)
    (folder / "SHA256SUMS").write_bytes(sums + f"{hashlib.sha256(raw).hexdigest()}  ETTh2.csv\n".encode())
    with pytest.raises(DataError, match=problem) as err:
        data.load_series("etth2", tmp_path)
    assert "\n" not in str(err.value) and "make data" in str(err.value)  # the fix: HOW_TO_GET


def test_dlinear_decomposition_on_a_ramp_and_a_cycle():
    t = torch.arange(48, dtype=torch.float64)
    x = torch.stack([2.0 * t + 1.0, torch.sin(2 * np.pi * t / 25)], 1)[None]  # (1, 48, 2)
    model = DLinear(DLinearConfig(lookback=48, horizon=4)).double()
    remainder, trend = model.decompose(x)
    torch.testing.assert_close(remainder + trend, x)
    # reference: the ends repeated 12 times, then the mean of each 25 consecutive values
    ends = np.repeat(x[0, :1].numpy(), 12, 0), np.repeat(x[0, -1:].numpy(), 12, 0)
    padded = np.concatenate([ends[0], x[0].numpy(), ends[1]])
    ref = np.stack([np.convolve(padded[:, c], np.ones(25) / 25, "valid") for c in range(2)], 1)
    np.testing.assert_allclose(trend[0].numpy(), ref, atol=1e-12)
    torch.testing.assert_close(trend[0, 12:36, 0], x[0, 12:36, 0])  # a ramp is its own centred mean inside
    assert trend[0, 0, 0].item() == pytest.approx(1.0 + 2.0 * 78 / 25)  # at the start: 13 copies of x_0
    assert trend[0, 12:36, 1].abs().max() < 1e-12  # a whole cycle of 25 steps averages out: all remainder
    out = model(x).prediction  # one shared map each for the remainder and the trend
    want = model.seasonal(remainder.transpose(1, 2)) + model.trend(trend.transpose(1, 2))
    torch.testing.assert_close(out, want.transpose(1, 2))


def test_rlinear_normalises_each_window():
    torch.manual_seed(0)
    model = RLinear(RLinearConfig(lookback=32, horizon=8, channels=3)).eval()
    with torch.no_grad():
        model.weight.uniform_(0.5, 2.0)
        model.bias.normal_()
    x = torch.randn(4, 32, 3)
    torch.testing.assert_close(model(3 * x + 5).prediction, 3 * model(x).prediction + 5, rtol=1e-4, atol=1e-4)


def tiny_config(root, model="dlinear", **overrides):
    return forecasting.make_forecast_config("etth2", model, 4, **{
        "data.root": str(root), "data.lookback": 16, "train.batch_size": 256, **overrides})


def test_the_best_validation_epoch_is_kept(tmp_path, monkeypatch):
    root = write_ett(tmp_path / "data")
    real, snapshots = forecasting.evaluate, []

    def scripted(model, windows, batch_size=256):  # the validation MSE of each epoch as written here
        if "val" not in windows.name:
            return real(model, windows, batch_size)
        snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
        return {"mse": [0.5, 0.3, 0.4, 0.45, 0.2][len(snapshots) - 1], "mae": 0.0}

    monkeypatch.setattr(forecasting, "evaluate", scripted)
    cfg = tiny_config(root, **{"train.epochs": 5, "train.patience": 2})
    result = forecasting.ForecastTrainer(cfg, tmp_path / "run.pt").fit()
    m = result.metrics
    assert (m["best_epoch"], m["epochs_run"], m["stopped"], m["val_mse"]) == (2, 4, "early", 0.3)
    assert not m["capped_before_convergence"] and len(snapshots) == 4
    kept = result.model.state_dict()
    assert all(torch.equal(kept[k], snapshots[1][k]) for k in kept)  # epoch 2's weights, not epoch 4's
    assert not torch.equal(kept["seasonal.weight"], snapshots[3]["seasonal.weight"])
    stored = forecasting.load_checkpoint(tmp_path / "run.pt")
    assert stored["complete"]
    assert torch.equal(stored["model"]["seasonal.weight"], snapshots[1]["seasonal.weight"])
    # stopped by the cap while still falling by more than 1% over the last two epochs
    snapshots.clear()
    m = forecasting.ForecastTrainer(cfg.replace(**{"train.epochs": 3})).fit().metrics
    assert (m["stopped"], m["best_epoch"], m["capped_before_convergence"]) == ("cap", 2, True)


def test_a_run_interrupted_within_an_epoch_resumes_to_the_same_result(tmp_path, interrupted_after):
    root = write_ett(tmp_path / "data")
    cfg = tiny_config(root, "rlinear", **{"train.epochs": 3})  # dropout: the random state is resumed too
    whole = forecasting.ForecastTrainer(cfg, tmp_path / "whole.pt").fit()
    steps = forecasting.ForecastTrainer(cfg).steps
    with interrupted_after(2 * steps + 5):  # within epoch 3, after epoch 2's checkpoint
        forecasting.ForecastTrainer(cfg, tmp_path / "cut.pt").fit()
    assert forecasting.load_checkpoint(tmp_path / "cut.pt")["epoch"] == 2
    resumed = forecasting.ForecastTrainer(cfg, tmp_path / "cut.pt").fit()
    assert resumed.metrics["test_mse"] == whole.metrics["test_mse"]
    assert resumed.history["val_mse"] == whole.history["val_mse"]
    assert all(torch.equal(v, whole.model.state_dict()[k]) for k, v in resumed.model.state_dict().items())


def test_command_line_trains_loads_and_exports(tmp_path, capsys):
    root = write_ett(tmp_path / "data")
    args = ["forecast", "--model", "dlinear", "--horizon", "4", "--root", str(root), "--epochs", "2",
            "--set", "data.lookback=16", "--set", "train.batch_size=256", "--no-progress"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["from_store"] is False and first["epochs_run"] == 2 and first["params"] == 2 * (16 * 4 + 4)
    folder = tmp_path / "cache" / "forecast" / "etth2-L16-H4" / "dlinear-seed0"
    assert {p.name for p in folder.iterdir()} >= {"config.json", "model.pt", "metrics.json"}
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["test_windows"] == 2880 - 4 + 1 and metrics["hardware"].startswith("cpu")
    assert main(args) == 0  # the second time: from the store
    again = json.loads(capsys.readouterr().out)
    assert again["from_store"] is True and again["test_mse"] == first["test_mse"]
    assert main(["export", str(folder), "--to", str(tmp_path / "runs"), "--weights", "float16"]) == 0
    exported = tmp_path / "runs" / "forecast" / "etth2-L16-H4" / "dlinear-seed0"
    lean = forecasting.load_checkpoint(exported / "model.pt")
    assert lean["lean"] and "optimizer" not in lean and lean["model"]["trend.weight"].dtype == torch.float16
    stored = json.loads((exported / "metrics.json").read_text())
    assert stored["test_mse_float32_weights"] == first["test_mse"] and stored["weights"] == "float16"
    index = (tmp_path / "runs" / "forecast" / "index.csv").read_text().splitlines()
    assert index[0].startswith("run,dataset,model")
    assert index[1].startswith("etth2-L16-H4/dlinear-seed0,etth2,dlinear")
    (root / "ett" / "SHA256SUMS").write_text(f"{'0' * 64}  ETTh2.csv\n")
    assert main([*args, "--retrain"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "SHA256SUMS" in err


def local_copy(tmp_path, name):
    """The committed run ``name`` copied into the test's local store (FROST_CACHE), to damage there."""
    folder = tmp_path / "cache" / "forecast" / name
    shutil.copytree(COMMITTED / name, folder)
    return folder


def one_error_line(capsys, *parts):
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert all(part in err for part in parts), err
    return err


DLINEAR = ["forecast", "--model", "dlinear", "--no-progress"]  # etth2-L336-H96/dlinear-seed0, committed


def test_a_stored_run_holding_other_weights_is_one_error_line(tmp_path, capsys):
    folder = local_copy(tmp_path, "etth2-L336-H96/dlinear-seed0")
    assert main(DLINEAR) == 0  # the good copy: loaded from the local store, the committed numbers
    out = json.loads(capsys.readouterr().out)
    committed = json.loads((COMMITTED / "etth2-L336-H96/dlinear-seed0/metrics.json").read_text())
    assert out["from_store"] and out["run"].endswith(str(folder)) and out["test_mse"] == committed["test_mse"]
    shutil.copyfile(COMMITTED / "etth2-L336-H192/dfmamba-seed0/model.pt", folder / "model.pt")
    assert main(DLINEAR) == 2  # a DF-Mamba run's weights: used to be load_state_dict's RuntimeError
    one_error_line(capsys, "dlinear-seed0/model.pt: the weights of another run",
                   "model.name 'dfmamba' vs 'dlinear', data.horizon 192 vs 96",
                   "delete the local run")
    state = forecasting.load_checkpoint(COMMITTED / "etth2-L336-H96/dlinear-seed0/model.pt")
    state["model"].pop("trend.bias")  # its own config, weights that do not fit it
    forecasting.save_checkpoint(folder / "model.pt", state, compress=True)
    fits = r"model.pt: weights that do not fit the run's config .*trend.bias.*; restore it: delete the local"
    with pytest.raises(forecasting.CheckpointError, match=fits) as err:
        forecasting.load_run(folder)
    assert "\n" not in str(err.value)


def test_a_null_zero_shot_in_stored_metrics_is_one_error_line(tmp_path, capsys):
    folder = local_copy(tmp_path, "etth2-L336-H96/dlinear-seed0")
    metrics = json.loads((folder / "metrics.json").read_text())
    for damaged in (None, [1, 2, 4], "x"):
        (folder / "metrics.json").write_text(json.dumps({**metrics, "zero_shot": damaged}))
        assert main([*DLINEAR, "--zero-shot"]) == 2  # null used to be an AttributeError
        one_error_line(capsys, "dlinear-seed0/metrics.json: a zero_shot entry that is",
                       "not a JSON object; restore it: delete the local run")
        with pytest.raises(DamagedInput):
            forecasting.zero_shot(folder)


@pytest.mark.parametrize("text", ["null", "[1, 2]", '"forecast"', '{"kind": "forecast", "model": null}',
                                  '{"kind": "forecast", "model": {"name": "dlinear"}, "data": "etth2"}'],
                         ids=["null", "list", "string", "null-model", "string-data"])
def test_any_damaged_stored_config_is_one_error_line(tmp_path, capsys, text):
    folder = local_copy(tmp_path, "etth2-L336-H720/rlinear-seed2")  # another run: every config is read
    (folder / "config.json").write_text(text)
    assert main(DLINEAR) == 2  # used to be an AttributeError (or TypeError) in ForecastConfig.from_dict
    one_error_line(capsys, "rlinear-seed2/config.json: unreadable forecasting run config (ConfigError: ",
                   "delete the local run")
    with pytest.raises(forecasting.ConfigError, match="forecasting"):
        forecasting.ForecastConfig.from_dict(json.loads(text))


def test_a_seed_past_torchs_range_is_refused_before_anything_is_written(tmp_path, capsys):
    root = write_ett(tmp_path / "data")
    args = ["forecast", "--model", "dlinear", "--horizon", "4", "--root", str(root), "--epochs", "1",
            "--set", "data.lookback=16", "--name", "fz/seed", "--no-progress"]
    assert main([*args, "--seed", str(2**64)]) == 2  # used to be torch's overflow, after config.json
    one_error_line(capsys, f"train.seed={2**64} is invalid: expected a seed >= 0 and <= {2**64 - 1}")
    assert main([*args, "--set", f"train.seed={2**64}"]) == 2
    one_error_line(capsys, f"train.seed={2**64} is invalid: expected a seed >= 0 and <= {2**64 - 1}")
    assert not (tmp_path / "cache" / "forecast").exists()  # nothing written
    cfg = tiny_config(root, **{"train.seed": 2**64 - 1})  # torch's largest seed
    assert forecasting.ForecastConfig.from_dict(cfg.to_dict()).train.seed == 2**64 - 1
