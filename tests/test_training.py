"""The training loop: history, resuming, NaN guard, atomic checkpoints, the model cache."""

import hashlib
import json
import math
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from frost_nb import training
from frost_nb.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_model,
    save_checkpoint,
)
from frost_nb.config import ConfigError, make_config
from frost_nb.runs import train_or_load
from frost_nb.training import TrainingError, lr_factor, train


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_lr_schedule_warms_up_then_decays():
    f = [lr_factor(s, 10, 100) for s in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(f[10:], f[11:])) and f[-1] < 0.01


def test_training_learns_and_logs_history(tiny_config, tmp_path):
    result = train(tiny_config, checkpoint=tmp_path / "run.pt")
    steps = result.history["steps"]
    n = len(steps["step"])
    assert n == 10 * (1294 // 64) and all(len(v) == n for v in steps.values())
    assert all(a > 0 for a in steps["alpha"])  # frost logs alpha every step
    assert 0 <= min(steps["threshold_median"]) and max(steps["threshold_median"]) <= 1
    # 10 classes: chance is 0.1; the tiny run is far from converged but must learn something
    assert result.metrics["test_accuracy"] > 0.5
    assert result.calibrator.n > 0 and result.calibrator.threshold(1.0) == float("inf")
    assert load_checkpoint(tmp_path / "run.pt")["complete"]


def test_resumed_run_matches_uninterrupted_run(tiny_config, tmp_path, make_trainer):
    whole = train(tiny_config, checkpoint=tmp_path / "whole.pt")
    make_trainer(tiny_config, checkpoint=tmp_path / "split.pt").fit(until_epoch=1)  # "interrupted"
    state = load_checkpoint(tmp_path / "split.pt")
    assert state["epoch"] == 1 and not state["complete"]
    resumed = train(tiny_config, checkpoint=tmp_path / "split.pt")
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    # the KLL sketch compacts with its own unseeded coin flips (datasketches offers no seed), so
    # thresholds agree within the sketch's rank error, not bit for bit; everything else is exact
    a, b = dict(whole.history["steps"]), dict(resumed.history["steps"])
    assert a.pop("threshold_median") == pytest.approx(b.pop("threshold_median"), abs=0.02)
    assert a == b
    for key in ("epoch", "train_loss", "train_accuracy", "val_accuracy"):  # not wall-clock seconds
        assert whole.history["epochs"][key] == resumed.history["epochs"][key]
    assert whole.calibrator.n == resumed.calibrator.n
    assert whole.calibrator.threshold(0.5) == pytest.approx(resumed.calibrator.threshold(0.5), abs=0.02)


def test_a_run_interrupted_within_an_epoch_resumes_at_its_next_batch(tiny_config, tmp_path, make_trainer,
                                                                     interrupted_after):
    """A long epoch checkpoints every MID_EPOCH_SECONDS (here: after every step); a run stopped in
    the middle of its second epoch resumes at the next batch of the same pass, to the weights, the
    step rows and the epoch rows of the uninterrupted run."""
    config = tiny_config.replace(**{"train.epochs": 3})
    whole = train(config, checkpoint=tmp_path / "whole.pt")
    per_epoch = len(whole.history["steps"]["step"]) // 3
    stop_at = per_epoch + 7  # the 8th step of epoch 2 never runs
    with interrupted_after(stop_at):
        train(config, checkpoint=tmp_path / "split.pt")
    state = load_checkpoint(tmp_path / "split.pt")
    assert state["epoch"] == 1 and state["step"] == stop_at and state["within_epoch"]["done"] == 7
    resumed = train(config, checkpoint=tmp_path / "split.pt")
    before = state["train_seconds"] + state["within_epoch"]["seconds"]  # the epoch's first part counts
    assert 0 < state["train_seconds"] < before < resumed.metrics["train_seconds"]
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    a, b = dict(whole.history["steps"]), dict(resumed.history["steps"])
    assert a.pop("threshold_median") == pytest.approx(b.pop("threshold_median"), abs=0.02)  # KLL's coins
    assert a == b
    for key in ("epoch", "train_loss", "train_accuracy", "val_accuracy"):
        assert whole.history["epochs"][key] == resumed.history["epochs"][key]
    assert whole.calibrator.n == resumed.calibrator.n  # the sketch kept the scores before the interruption
    assert load_checkpoint(tmp_path / "split.pt")["within_epoch"] is None  # saved at the end
    # such a checkpoint resumes only where a pass can restart at a batch
    with interrupted_after(stop_at):
        train(config, checkpoint=tmp_path / "again.pt")
    shutil.copy(tmp_path / "again.pt", tmp_path / "deadline.pt")
    trainer = make_trainer(config, checkpoint=tmp_path / "deadline.pt")
    trainer.fit(until_epoch=2)  # the rest of epoch 2: its time, scaled to a whole epoch, for the deadline
    assert trainer.epoch == 2 and trainer.epoch_seconds > 0
    trainer.fit(deadline=time.monotonic() + 1e-3)  # no epoch fits
    assert trainer.epoch == 2
    trainer = make_trainer(config, checkpoint=tmp_path / "again.pt")
    trainer.batches = list(trainer.batches)  # a pass that cannot start at a given batch
    with pytest.raises(CheckpointError, match="saved within epoch 2.*in-memory data only"):
        trainer.fit()


def test_a_run_interrupted_within_its_first_epoch_resumes(tiny_config, tmp_path, interrupted_after):
    """Saved within epoch 1 the calibrator is still empty: such a checkpoint loads and resumes, to the
    weights of the uninterrupted run."""
    config = tiny_config.replace(**{"train.epochs": 2})
    whole = train(config, checkpoint=tmp_path / "whole.pt")
    with interrupted_after(3):
        train(config, checkpoint=tmp_path / "first.pt")
    state = load_checkpoint(tmp_path / "first.pt")
    assert state["epoch"] == 0 and state["within_epoch"]["done"] == 3 and not state["calibrator"]
    resumed = train(config, checkpoint=tmp_path / "first.pt")
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    # a checkpoint that stored the empty calibrator as empty bytes (as before) loads too
    save_checkpoint(tmp_path / "bytes.pt", {**state, "calibrator": b""})
    assert load_checkpoint(tmp_path / "bytes.pt")["calibrator"] == b""


@pytest.mark.parametrize("mid_epoch_seconds", [600.0, 0.0])  # 0: a checkpoint is due after every step
def test_nan_loss_stops_with_last_good_checkpoint_intact(tiny_config, tmp_path, monkeypatch, make_trainer,
                                                         mid_epoch_seconds):
    path = tmp_path / "run.pt"
    make_trainer(tiny_config, checkpoint=path).fit(until_epoch=1)
    before = _digest(path)
    monkeypatch.setattr(training, "MID_EPOCH_SECONDS", mid_epoch_seconds)
    real = training.total_loss

    def poisoned(*args, **kwargs):
        loss, parts = real(*args, **kwargs)
        return loss * float("nan"), parts

    monkeypatch.setattr(training, "total_loss", poisoned)
    with pytest.raises(TrainingError, match="loss became nan.*checkpoint.*intact.*train.lr"):
        train(tiny_config, checkpoint=path)
    assert _digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.pt"]  # nothing half-written


def test_nan_guard_names_only_checkpoints_that_exist(tiny_config, tmp_path, monkeypatch):
    real = training.total_loss

    def poisoned(*args, **kwargs):
        loss, parts = real(*args, **kwargs)
        return loss * float("nan"), parts

    monkeypatch.setattr(training, "total_loss", poisoned)
    for path in (tmp_path / "run.pt", None):  # a path not written yet (stopped in epoch 1), or none
        with pytest.raises(TrainingError, match="loss became nan at epoch 1") as err:
            train(tiny_config, checkpoint=path)
        assert "intact" not in str(err.value) and "No checkpoint of this run was written" in str(err.value)
    assert not (tmp_path / "run.pt").exists()


@pytest.mark.parametrize("complete", [True, False])
def test_refused_checkpoint_write_saves_the_run_in_the_temporary_folder(complete, tiny_config, tmp_path,
                                                                         monkeypatch):
    import shutil
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # gettempdir(), inside tmp_path
    (tmp_path / "tmp").mkdir()
    folder = tmp_path / "runs"
    real = training.save_checkpoint

    def folder_replaced_by_a_file(path, state):  # after the check before training: e.g. a disk gone
        if state["complete"] == complete and not folder.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.write_text("a file, not a folder")
        return real(path, state)

    monkeypatch.setattr(training, "save_checkpoint", folder_replaced_by_a_file)
    config = tiny_config.replace(**{"train.epochs": 2})
    with pytest.raises(TrainingError) as err:
        train(config, checkpoint=folder / "run.pt")
    message = str(err.value)
    rescued = list((tmp_path / "tmp").glob("frost_nb_run_*.pt"))
    assert len(rescued) == 1 and f"saved in {rescued[0]} instead" in message
    assert f"cannot write {folder / 'run.pt'}" in message and ".tmp" not in message
    state = load_checkpoint(rescued[0])
    assert state["complete"] == complete and state["epoch"] == (2 if complete else 1)
    if complete:
        assert "test_accuracy" in state["metrics"] and "to load it without training again" in message
        load_model(rescued[0])
    else:  # moved back into place, the run resumes and finishes
        folder.unlink()
        folder.mkdir()
        shutil.move(rescued[0], folder / "run.pt")
        monkeypatch.setattr(training, "save_checkpoint", real)
        assert train(config, checkpoint=folder / "run.pt").metrics["epochs"] == 2


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, {"config": {}, "model": {}, "x": 1})
    before = _digest(path)

    def broken_save(obj, f, *a, **k):  # save_checkpoint hands torch an open temporary file
        (f if hasattr(f, "write") else open(f, "wb")).write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, {"config": {}, "model": {}, "x": 2})
    assert _digest(path) == before and [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def test_load_model_rebuilds_the_same_model(tiny_config, tmp_path):
    result = train(tiny_config, checkpoint=tmp_path / "run.pt")
    model, calibrator = load_model(tmp_path / "run.pt")
    x = torch.randn(5, 1, 8, 8)
    with torch.no_grad():
        assert torch.allclose(model(x).logits, result.model(x).logits)
    assert calibrator.threshold(0.3) == result.calibrator.threshold(0.3)


def test_bad_checkpoints_give_clear_errors(tiny_config, tmp_path, make_trainer):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_model(tmp_path / "missing.pt")
    path = tmp_path / "run.pt"
    make_trainer(tiny_config, checkpoint=path).fit(until_epoch=1)
    with pytest.raises(CheckpointError, match="model.name: checkpoint 'frost' vs expected 'vanilla'"):
        load_model(path, expect=make_config("smoke", model="vanilla"))
    with pytest.raises(CheckpointError, match="holds a 'frost' model, not the expected 'vanilla'"):
        load_model(path, expect="vanilla")
    other = tiny_config.replace(**{"model.width": 32})
    with pytest.raises(CheckpointError, match="model.width"):
        load_model(path, expect=other)
    with pytest.raises(CheckpointError, match="another run"):
        train(other, checkpoint=path)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="damaged"):
        load_model(truncated)


def test_cache_returns_the_trained_model(tiny_config):
    first = train_or_load(tiny_config)
    again = train_or_load(tiny_config)
    assert not first.from_cache and again.from_cache
    assert again.metrics["test_accuracy"] == first.metrics["test_accuracy"]
    assert again.checkpoint == first.checkpoint


def test_store_order_names_retrain_and_damaged_entries(tiny_config, tmp_path, monkeypatch):
    from frost_nb import paths, runs
    from frost_nb.paths import cache_dir

    config = tiny_config.replace(**{"train.epochs": 1})
    committed = tmp_path / "committed"
    for module in (paths, runs):  # the stores' lookup (paths.run_stores) and runs' own uses
        monkeypatch.setattr(module, "committed_runs_dir", lambda: committed)
    first = train_or_load(config, name="grid/first")
    assert first.checkpoint == cache_dir() / "grid" / "first" / "model.pt"
    assert json.loads((first.checkpoint.parent / "config.json").read_text()) == config.to_dict()
    assert json.loads((first.checkpoint.parent / "metrics.json").read_text())["test_accuracy"] == \
        first.metrics["test_accuracy"]
    runs.export_run(first.checkpoint.parent, committed)  # what gets committed: lean, with an index
    assert list(pd.read_csv(committed / "index.csv")["run"]) == ["grid/first"]
    shutil.rmtree(first.checkpoint.parent)
    loaded = train_or_load(config.replace(**{"train.device": "cpu"}))  # found by config, not by name
    assert loaded.checkpoint == committed / "grid" / "first" / "model.pt" and loaded.from_cache
    retrained = train_or_load(config, retrain=True)
    assert committed not in retrained.checkpoint.parents and not retrained.from_cache
    assert runs.run_name(retrained.checkpoint) == "grid/first"  # retrained here, under its committed name
    assert train_or_load(config).checkpoint == retrained.checkpoint  # the retrained local run wins
    assert (committed / "grid" / "first" / "model.pt").is_file()  # the committed run is never touched
    other = train_or_load(config.replace(**{"train.seed": 1}), name=runs.run_name(retrained.checkpoint))
    assert other.checkpoint.parent.name.endswith("-2")  # a taken name gets a suffix, never overwritten
    retrained.checkpoint.write_bytes(b"not a checkpoint")
    assert train_or_load(config).checkpoint.parent == committed / "grid" / "first"  # damaged: skipped
    shutil.rmtree(committed / "grid")
    again = train_or_load(config)  # nothing good left: the damaged file is set aside, trained again
    assert again.checkpoint == retrained.checkpoint and not again.from_cache
    assert retrained.checkpoint.with_suffix(".pt.damaged").read_bytes() == b"not a checkpoint"
    for bad in ("single", "a/b/c", "../escaped", "/abs/x", "grid/.."):  # GRID/LABEL only, never outside
        with pytest.raises(ConfigError, match="expected GRID/LABEL"):
            train_or_load(config.replace(**{"train.seed": 2}), name=bad)
    clash = tmp_path / "clash"
    runs.export_run(again.checkpoint.parent, clash)  # grid/first, seed 0
    impostor = _renamed(other.checkpoint.parent, "first")  # seed 1 under the same name
    with pytest.raises(CheckpointError, match="holds another run .*train.seed"):  # never over another run
        runs.export_run(impostor, clash)
    (again.checkpoint.parent / "metrics.json").unlink()
    with pytest.raises(CheckpointError, match="lacks metrics.json"):  # unfinished: nothing written
        runs.export_run(again.checkpoint.parent, tmp_path / "unfinished")
    assert not (tmp_path / "unfinished").exists()


def _renamed(folder: Path, label: str) -> Path:
    """A copy of the run folder ``folder`` under another label (same grid), in a fresh place."""
    target = folder.parent.parent.parent / "copies" / folder.parent.name / label
    shutil.copytree(folder, target)
    return target


def test_non_finite_weights_with_finite_loss_are_never_checkpointed(tiny_config, tmp_path, make_trainer):
    # an optimiser step can break the weights while the loss of that step was still finite
    path = tmp_path / "run.pt"
    trainer = make_trainer(tiny_config.replace(**{"halting.calibrate_on": "last_epoch"}), checkpoint=path)

    def break_weights(optimizer, args, kwargs):  # after the optimiser's step (a hook: the scheduler's
        if trainer.step + 1 == trainer.steps_per_epoch:  # wrapper of step stays), the last of epoch 1
            with torch.no_grad():
                next(trainer.model.parameters()).fill_(float("inf"))

    trainer.optimizer.register_step_post_hook(break_weights)
    with pytest.raises(TrainingError, match="weights .* non-finite in epoch 1.*No checkpoint of this run"):
        trainer.fit()
    assert not path.exists()  # epoch 1 was never saved with broken weights


def test_ponder_training_trains_the_halting_head(tiny_config, tmp_path, make_trainer):
    config = tiny_config.replace(**{"train.epochs": 1, "loss.ranking": False, "loss.ponder": True})
    trainer = make_trainer(config, checkpoint=tmp_path / "ponder.pt")
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    result = trainer.fit()
    after = dict(result.model.named_parameters())
    assert not torch.equal(before["halt_head.weight"], after["halt_head.weight"])
    assert all(not torch.equal(before[n], after[n]) for n in before), "a parameter got no gradient"
    assert result.calibrator.n > 0 and 0 <= result.calibrator.threshold(0.5) <= 1  # harmless
    assert result.metrics["test_accuracy"] > 0.1


def test_ponder_loss_reaches_the_backbone_through_the_halting_head(tiny_config):
    from frost_nb.losses import ponder_loss
    from frost_nb.models import create_model

    torch.manual_seed(0)
    model = create_model(tiny_config.model)
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))
    out = model(x, detach_halt_input=not tiny_config.loss.rank_grad_to_backbone)
    kl = ponder_loss(out.logits.detach(), out.halt_logits, y).kl  # the halting path only
    kl.backward()
    stem = next(model.stem.parameters())
    assert stem.grad is not None and stem.grad.abs().sum() > 0


def test_relative_checkpoint_paths_fall_back_to_the_repository(tmp_path, monkeypatch):
    # a notebook runs in notebooks/ and names outputs/runs/<grid>/<label>/model.pt: found in the repo
    from frost_nb.checkpoint import checkpoint_file
    from frost_nb.paths import repo_root

    monkeypatch.chdir(tmp_path)
    assert checkpoint_file("pyproject.toml") == repo_root() / "pyproject.toml"
    (tmp_path / "pyproject.toml").write_text("")  # the working directory wins when it has it
    assert checkpoint_file("pyproject.toml") == Path("pyproject.toml")
    assert checkpoint_file("no/such/file.pt") == Path("no/such/file.pt")
    assert checkpoint_file(tmp_path / "x.pt") == tmp_path / "x.pt"


def test_a_refused_checkpoint_is_refused_again_and_the_lr_logged_is_the_steps_own(tiny_config, tmp_path,
                                                                                   make_trainer):
    """Defects: a second fit after the checkpoint was refused trained from scratch over it; the history's
    lr of step s was step s + 1's (read after the schedule moved on)."""
    path = tmp_path / "run.pt"
    first = make_trainer(tiny_config, checkpoint=path)
    first.fit(until_epoch=1)
    lr = first.history["steps"]["lr"]
    warmup, total = round(tiny_config.train.warmup_epochs * first.steps_per_epoch), first.total_steps
    assert lr == pytest.approx([tiny_config.train.lr * lr_factor(s, warmup, total) for s in range(len(lr))])
    kept = _digest(path)
    other = make_trainer(tiny_config.replace(**{"train.seed": 1}), checkpoint=path)
    for _ in range(2):
        with pytest.raises(CheckpointError, match="another run"):
            other.fit(until_epoch=1)
    assert _digest(path) == kept


def test_run_sketch_counts_every_score_of_every_epoch_and_survives_resume(tiny_config, tmp_path,
                                                                          make_trainer):
    # sketch_window="run": one KLL sketch over the whole run, fed each epoch with that epoch's
    # training scores and its held-out pass (calibrate_on's sources); "epoch" starts afresh
    cfg = tiny_config.replace(**{"train.epochs": 3, "halting.sketch_window": "epoch"})
    run_cfg = cfg.replace(**{"halting.sketch_window": "run"})  # the default
    epoch = make_trainer(cfg, checkpoint=tmp_path / "epoch.pt")
    per_epoch = epoch.steps_per_epoch * cfg.train.batch_size * 4 + len(epoch.val_set) * 4  # T = 4
    assert per_epoch == 20 * 64 * 4 + 144 * 4  # 20 full batches of 64 (drop_last), 144 held out
    assert epoch.fit().calibrator.n == per_epoch
    whole = train(run_cfg, checkpoint=tmp_path / "whole.pt")
    assert whole.calibrator.n == 3 * per_epoch
    make_trainer(run_cfg, checkpoint=tmp_path / "split.pt").fit(until_epoch=2)  # "interrupted"
    assert load_model(tmp_path / "split.pt")[1].n == 2 * per_epoch  # the checkpoint keeps the sketch
    resumed = train(run_cfg, checkpoint=tmp_path / "split.pt")
    assert resumed.calibrator.n == 3 * per_epoch
    assert resumed.calibrator.threshold(0.5) == pytest.approx(whole.calibrator.threshold(0.5), abs=0.02)
    val_only = make_trainer(run_cfg.replace(**{"halting.calibrate_on": "val"}), checkpoint=tmp_path / "v.pt")
    assert val_only.fit().calibrator.n == 3 * len(val_only.val_set) * 4


def test_adopted_reading_trains(tiny_config, tmp_path, make_trainer):
    # leaky update, per-step pairs, normalised halting input, whole-run sketch: every parameter
    # is trained (none that no loss reaches), alpha stays in (0, 1) and the training loss falls
    cfg = tiny_config.replace(**{"train.epochs": 3, "model.update": "leaky", "model.halt_norm": True,
                                 "loss.rank_pairs": "per_step", "halting.sketch_window": "run"})
    assert cfg.model.alpha_param == "sigmoid"
    trainer = make_trainer(cfg, checkpoint=tmp_path / "run.pt")
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    result = trainer.fit()
    after = dict(result.model.named_parameters())
    assert "halt_head_norm.weight" in after
    assert [n for n in before if torch.equal(before[n], after[n])] == []
    assert all(0 < a < 1 for a in result.history["steps"]["alpha"])
    losses = result.history["epochs"]["train_loss"]
    assert losses[-1] < losses[0]


def test_trainer_takes_what_the_caller_built_and_refuses_what_it_cannot_resume(tiny_config, tmp_path):
    from frost_nb.data.datasets import make_batches
    from frost_nb.models import create_model
    from frost_nb.training import Trainer, load_split

    cfg = tiny_config.replace(**{"train.epochs": 1})
    model = create_model(cfg.model)
    train_set = load_split(cfg, "train")
    unseeded = make_batches(train_set, 64, shuffle=True, augment=False, device="cpu")
    with pytest.raises(TrainingError, match="global generator.*generator=torch.Generator"):
        Trainer(cfg, model, unseeded, checkpoint=tmp_path / "run.pt")  # its data order is not saved
    with pytest.raises(TrainingError, match="calibrate_on='val' needs a held-out split.*data.val_fraction"):
        Trainer(cfg.replace(**{"halting.calibrate_on": "val"}), model, unseeded)
    assert not (tmp_path / "run.pt").exists()
    result = Trainer(cfg, model, unseeded).fit()  # no checkpoint, no held-out or test split
    assert result.model is model and result.metrics["epochs"] == 1 and "test_accuracy" not in result.metrics
    assert math.isnan(result.history["epochs"]["val_accuracy"][0])
    assert result.calibrator.n == len(train_set) * cfg.model.steps  # the last epoch's scores alone
