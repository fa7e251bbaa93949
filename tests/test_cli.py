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
])
def test_bad_input_gives_a_clear_error(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_quantile_outside_unit_interval(tmp_path, capsys):
    ckpt = _train_smoke(tmp_path, capsys)
    assert main(["evaluate", "--checkpoint", str(ckpt), "--quantile", "1.5"]) == 2
    assert "quantile=1.5" in capsys.readouterr().err


def test_grid_and_demo_refuse_several_torchrun_processes(monkeypatch, capsys):
    # only train runs under DDP: N processes of grid or demo would each train the same runs
    monkeypatch.setenv("WORLD_SIZE", "2")
    for command in (["grid", "update", "--size", "smoke"], ["demo", "--size", "smoke"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "runs in a single process" in err and "frost_nb train" in err


def test_grid_trains_its_shard_into_the_cache(capsys):
    args = ["grid", "update", "--size", "smoke", "--dataset", "digits", "--shard", "1/3", "--reading", "residual"]
    assert main(args + ["--no-progress"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["run"] for r in rows] == ["convex"] and not rows[0]["from_cache"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["from_cache"]
