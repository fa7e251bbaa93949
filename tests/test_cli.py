"""The command line: the main job's pieces and clear errors on bad input."""

import json

import pytest

from frost_nb.__main__ import main


def _train_smoke(tmp_path, capsys):
    ckpt = tmp_path / "smoke.pt"
    assert main(["train", "--size", "smoke", "--epochs", "1", "--set", "data.limit=256",
                 "--checkpoint", str(ckpt)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["dataset"] == "digits" and summary["accuracy"] > 0.1
    return ckpt


def test_train_evaluate_sweep(tmp_path, capsys):
    ckpt = _train_smoke(tmp_path, capsys)
    assert main(["evaluate", "--checkpoint", str(ckpt), "--quantile", "1.0"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["mean_depth"] == result["steps"] == 4 and result["threshold"] == float("inf")
    assert main(["sweep", "--checkpoint", str(ckpt), "--quantiles", "0.25", "1.0"]) == 0
    assert "mean_depth" in capsys.readouterr().out
    # a mean-depth budget instead of a quantile: found on the held-out split, reported on --split
    assert main(["evaluate", "--checkpoint", str(ckpt), "--budget-depth", "2.5"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["budget_depth"] == 2.5 and abs(result["val_mean_depth"] - 2.5) <= 0.5
    assert 0 <= result["quantile"] <= 1 and 1 <= result["mean_depth"] <= 4
    assert main(["evaluate", "--checkpoint", str(ckpt), "--budget-depth", "9"]) == 2
    assert "--budget-depth=9.0 is outside [1, 4]" in capsys.readouterr().err


def test_evaluate_stream_gives_the_exits_of_batch_at_a_time(tmp_path, capsys):
    """``evaluate --stream``: continuous batching over the split, the same accuracy and depths as
    batch-at-a-time (exits equal but for float ties at the threshold: none on this split)."""
    ckpt = _train_smoke(tmp_path, capsys)
    assert main(["evaluate", "--checkpoint", str(ckpt), "--quantile", "0.5"]) == 0
    batch = json.loads(capsys.readouterr().out)
    for slots in ("7", "64"):
        assert main(["evaluate", "--checkpoint", str(ckpt), "--quantile", "0.5", "--stream", "--slots", slots,
                     "--refill-at", "2"]) == 0
        stream = json.loads(capsys.readouterr().out)
        assert stream["stream"] == {"slots": int(slots), "refill_at": 2}
        for key in ("accuracy", "mean_depth", "std_depth", "threshold"):
            assert stream[key] == pytest.approx(batch[key], abs=1e-12), key
    assert main(["evaluate", "--checkpoint", str(ckpt), "--stream", "--slots", "8", "--refill-at", "9"]) == 2
    assert "--refill-at=9.0 is outside [1, 8]" in capsys.readouterr().err
    vanilla = tmp_path / "vanilla.pt"
    assert main(["train", "--size", "smoke", "--model", "vanilla", "--epochs", "1", "--set", "data.limit=64",
                 "--checkpoint", str(vanilla)]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(vanilla), "--stream"]) == 2
    err = capsys.readouterr().err
    assert "vanilla's step depends on t: drop --stream" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    (["train", "--size", "smoke", "--dataset", "mnist-3d"], "dataset"),
    (["train", "--size", "smoke", "--model", "resnet152"], "model.name"),
    (["train", "--size", "smoke", "--epochs", "-2"], "train.epochs"),
    (["train", "--size", "smoke", "--set", "model.steps=0"], "model.steps"),
    (["train", "--size", "smoke", "--set", "train.lr=fast"], "train.lr"),
    (["train", "--size", "smoke", "--dataset", "cifar100", "--root", "/nonexistent",
      "--set", "data.download=false"], "cifar100"),
    (["evaluate", "--checkpoint", "/nonexistent/model.pt"], "does not exist"),
    (["train", "--size", "smoke", "--set", "data.name=mnist-3d"], "mnist-3d"),
    (["train", "--size", "smoke", "--set", "model.num_classes=7"], "model.num_classes=7 does not fit"),
    (["train", "--size", "smoke", "--set", "data.val_fraction=0.0003"], "data.val_fraction"),
    (["grid", "nope", "--size", "smoke"], "unknown grid 'nope'"),
    (["grid", "loss", "--size", "smoke", "--shard", "2/2"], "shard 2/2"),
    (["grid", "loss", "--size", "smoke", "--shard", "half"], "INDEX/COUNT"),
    (["train", "--size", "smoke", "--seed", "-1"], "train.seed=-1 is invalid: expected a seed >= 0"),
    (["grid", "loss", "--size", "smoke", "--seeds", "0", "-2"], "train.seed=-2"),
    (["train", "--size", "smoke", "--set", "train.lr"], "--set 'train.lr': expected section.field=value"),
    (["train", "--size", "smoke", "--set", "train.lr=1e300"], "expected a learning rate in (0, 10]"),
    (["train", "--size", "smoke", "--set", "train.lr=Infinity"], "train.lr=inf"),
    (["train", "--size", "smoke", "--set", "loss.margin=Infinity"], "expected a margin in [0, 1000]"),
    (["train", "--size", "smoke", "--set", "loss.lambda_rel=Infinity"],
     "expected a loss weight in [0, 1000]"),
    (["train", "--size", "smoke", "--set", "model.branch_steps=8,\u2078"], "model.branch_steps"),  # a Unicode digit
    (["train", "--size", "smoke", "--set", "train.seed=" + "9" * 5000], "train.seed"),  # past int()'s 4,300 digits
    (["train", "--size", "smoke", "--set", "train.lr=" + "[" * 100_000], "train.lr"),  # too deep for JSON
])
def test_bad_input_gives_a_clear_error(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_config_prints_the_resolved_config_and_its_stored_run(capsys):
    """Every field after the presets and the overrides, and the stored run that holds it."""
    from frost_nb.config import make_config

    assert main(["config", "--dataset", "cifar100", "--seed", "2", "--set", "train.lr=0.01"]) == 0
    shown = json.loads(capsys.readouterr().out)
    expected = make_config("demo", "cifar100", **{"train.seed": 2, "train.lr": 0.01})
    assert shown == {"run": None, **expected.flat()}  # no run of this config is stored
    assert main(["config", "--dataset", "digits"]) == 0  # the committed digits frost, seed 0
    assert json.loads(capsys.readouterr().out)["run"] == "digits-demo-families/frost-seed0"
    # the committed CIFAR-100 frost of the per-step bundle: found by its settings, not its name
    assert main(["config", "--dataset", "cifar100", "--set", "loss.rank_pairs=per_step"]) == 0
    assert json.loads(capsys.readouterr().out)["run"] == "cifar100-demo-families-per-step/frost-seed0"
    assert shown["model.stem_stride"] == 2 and shown["train.epochs"] == 20  # CIFAR-100's demo preset
    assert len(shown) == 1 + 1 + sum(len(v) for k, v in expected.to_dict().items() if k != "size")
    assert main(["config", "--set", "model.depth=3"]) == 2  # an unknown field: named, as for train
    assert "unknown parameter" in capsys.readouterr().err
    assert main(["config", "--dataset", "digits", "--set", "size=smoke"]) == 0  # the size, as --size gives it
    assert json.loads(capsys.readouterr().out) == {"run": None, **make_config("smoke", "digits").flat()}
    assert main(["config", "--set", "size=huge"]) == 2 and "huge" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["16", '"16"'])
def test_set_keeps_text_for_a_text_setting(value, capsys):
    """A text setting given digits stays text (model.branch_steps=16 is one branch for 16 steps); a
    number setting still parses, and a quoted value is the same text."""
    assert main(["config", "--dataset", "cifar100", "--model", "vanilla", "--set", f"model.branch_steps={value}",
                 "--set", "train.epochs=3"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["model.branch_steps"] == "16" and shown["train.epochs"] == 3
    assert main(["config", "--set", f"data.root={value}"]) == 0  # a text setting that may be None
    assert json.loads(capsys.readouterr().out)["data.root"] == "16"


def test_quantile_outside_unit_interval(tmp_path, capsys):
    ckpt = _train_smoke(tmp_path, capsys)
    assert main(["evaluate", "--checkpoint", str(ckpt), "--quantile", "1.5"]) == 2
    assert "quantile=1.5" in capsys.readouterr().err



def test_a_checkpoint_saved_within_its_first_epoch_has_no_threshold_yet(tmp_path, capsys):
    """No halting scores yet (the calibrator is saved once an epoch ends): one error line, and full depth
    (q = 1) still evaluates."""
    from frost_nb.checkpoint import load_checkpoint, save_checkpoint
    from frost_nb.paths import committed_runs_dir

    state = load_checkpoint(committed_runs_dir() / "digits-demo-families" / "frost-seed0")
    state.pop("format")
    save_checkpoint(tmp_path / "early.pt", {**state, "calibrator": None, "complete": False})
    for argv in (["evaluate", "--quantile", "0.5"], ["sweep"]):
        assert main([*argv, "--checkpoint", str(tmp_path / "early.pt")]) == 2
        assert "error: no halting scores were fed to the calibrator" in capsys.readouterr().err
    assert main(["evaluate", "--quantile", "1", "--checkpoint", str(tmp_path / "early.pt")]) == 0

def test_grid_and_demo_refuse_several_torchrun_processes(monkeypatch, capsys):
    # only train runs under DDP: N processes of grid or demo would each train the same runs
    monkeypatch.setenv("WORLD_SIZE", "2")
    for command in (["grid", "update", "--size", "smoke"], ["demo", "--size", "smoke"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "runs in a single process" in err and "frost_nb train" in err


def test_grid_trains_its_shard_into_the_cache(capsys):
    args = ["grid", "update", "--size", "smoke", "--dataset", "digits", "--shard", "1/3", "--bundle", "residual"]
    assert main(args + ["--no-progress"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["run"] for r in rows] == ["convex"] and not rows[0]["from_cache"]
    assert rows[0]["name"] == "digits-smoke-update-residual/convex-seed0"  # its folder in the store
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["from_cache"]


def test_grid_compile_option_reaches_the_runs_and_keeps_them_the_same_runs(monkeypatch, capsys):
    import frost_nb.__main__ as cli

    seen, train_or_load = [], cli.train_or_load
    monkeypatch.setattr(cli, "train_or_load", lambda config, **kw: seen.append(config) or train_or_load(config, **kw))
    args = ["grid", "update", "--size", "smoke", "--dataset", "digits", "--labels", "convex", "--no-progress"]

    def cached():
        return [json.loads(line)["from_cache"] for line in capsys.readouterr().out.splitlines()]

    assert main(args) == 0 and cached() == [False]
    assert main(args + ["--compile", "off"]) == 0 and cached() == [True]  # a where field: the same run
    assert [c.train.compile for c in seen] == ["auto", "off"]
    with pytest.raises(SystemExit):  # argparse: not one of auto, on, off
        main(args + ["--compile", "sometimes"])


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a command loads data or a checkpoint: its destinations must be checked first."""
    from frost_nb import checkpoint, training

    def work(*args, **kwargs):
        raise AssertionError("work started before the destination was checked")

    monkeypatch.setattr(training, "load_split", work)
    monkeypatch.setattr(checkpoint, "checkpoint_config", work)


def _blocked(tmp_path):
    """A regular file where a folder should be: unwritable for root too (chmod does not stop root)."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    return blocker


@pytest.mark.parametrize("case", ["cache", "outputs", "checkpoint", "checkpoint_is_folder", "figures", "csv"])
def test_unwritable_destinations_stop_before_the_work(case, tmp_path, monkeypatch, capsys, no_work):
    blocker = _blocked(tmp_path)
    train = ["train", "--size", "smoke", "--epochs", "1"]
    if case == "cache":
        monkeypatch.setenv("FROST_CACHE", str(blocker / "cache"))
        argv, named, fix = train, blocker / "cache", "FROST_CACHE"
    elif case == "outputs":  # the cache inside the outputs folder, which is a file
        monkeypatch.delenv("FROST_CACHE")
        monkeypatch.setenv("FROST_OUTPUTS", str(blocker))
        argv, named, fix = train, blocker, "FROST_OUTPUTS"
    elif case == "checkpoint":
        argv, named, fix = train + ["--checkpoint", str(blocker / "run.pt")], blocker / "run.pt", "is a file"
    elif case == "checkpoint_is_folder":
        argv, named, fix = train + ["--checkpoint", str(tmp_path)], tmp_path, ".pt file"
    elif case == "figures":
        monkeypatch.setenv("FROST_OUTPUTS", str(tmp_path))
        (tmp_path / "figures").write_text("a file, not a folder")
        argv, named, fix = ["demo", "--size", "smoke", "--epochs", "1"], tmp_path / "figures", "FROST_OUTPUTS"
    else:
        argv = ["sweep", "--checkpoint", str(tmp_path / "run.pt"), "--csv", str(blocker / "sweep.csv")]
        named, fix = blocker / "sweep.csv", "--csv"
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ") and str(named) in err and fix in err


def test_checkpoint_folder_and_unknown_config_field_are_named(tmp_path, capsys):
    from frost_nb.checkpoint import save_checkpoint
    from frost_nb.config import make_config

    assert main(["evaluate", "--checkpoint", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"checkpoint {tmp_path} is a folder without a model.pt" in err and ".pt file" in err
    config = make_config("smoke").to_dict()
    config["train"]["speed"] = "fast"  # a field this code does not know
    path = save_checkpoint(tmp_path / "other.pt", {"config": config, "model": {}})
    for command in ("evaluate", "sweep"):
        assert main([command, "--checkpoint", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"checkpoint {path} has an unreadable config" in err and "['speed']" in err


def test_train_under_a_name_then_export_it(tmp_path, capsys):
    """``train --name GRID/LABEL`` stores the run in that folder; ``export`` copies it lean into a
    runs folder with its index; a name that is not GRID/LABEL is refused before any work."""
    import pandas as pd

    from frost_nb.paths import cache_dir

    args = ["train", "--size", "smoke", "--epochs", "1", "--no-progress", "--set", "data.limit=64"]
    assert main(args + ["--name", "my-grid/first-try"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["name"] == "my-grid/first-try" and not shown["from_cache"]
    folder = cache_dir() / "my-grid" / "first-try"
    assert {p.name for p in folder.iterdir()} >= {"config.json", "model.pt", "metrics.json"}
    assert main(["export", str(folder), "--to", str(tmp_path / "runs")]) == 0
    assert list(pd.read_csv(tmp_path / "runs" / "index.csv")["run"]) == ["my-grid/first-try"]
    # an empty --to is the default runs folder, the one checked for writing (not the working folder)
    default, elsewhere = tmp_path / "default-runs", tmp_path / "working-folder"
    elsewhere.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("frost_nb.paths.committed_runs_dir", lambda: default)
        mp.setattr("frost_nb.runs.committed_runs_dir", lambda: default)
        mp.chdir(elsewhere)
        assert main(["export", str(folder), "--to", ""]) == 0
    assert (default / "my-grid" / "first-try" / "model.pt").is_file() and not any(elsewhere.iterdir())
    assert main(args + ["--name", "../outside"]) == 2
    assert "expected GRID/LABEL" in capsys.readouterr().err
