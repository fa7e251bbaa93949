"""Multi-process (DDP) training: sharded batches, pooled halting sketches, torchrun.

The two-process tests run on the CPU with gloo: two spawned processes (one thread each) train
a slice of digits for a few steps; one test starts the command line under torchrun.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from datasketches import kll_floats_sketch

from frost_nb.__main__ import main
from frost_nb.checkpoint import load_checkpoint, load_model
from frost_nb.config import make_config
from frost_nb.distributed import DistributedSetup, ShardedBatches, leave_process_group
from frost_nb.halting import HaltingCalibrator
from frost_nb.models import create_model
from frost_nb.repro.grids import RESIDUAL_SELECTION
from frost_nb.training import build_trainer, load_split, train

WORLD = 2
QS = (0.1, 0.25, 0.5, 0.75, 0.9)
# 192 training images, 3 global batches of 64 (32 per rank) an epoch; 4 steps per sample
FROST = make_config("smoke", **{"train.epochs": 2, "train.batch_size": 64, "train.device": "cpu",
                                "data.limit": 192, **RESIDUAL_SELECTION})  # residual; ADOPTED below
BASELINE = make_config("smoke", model="recurrent", **{"train.epochs": 1, "train.batch_size": 64,
                                                      "train.device": "cpu", "data.limit": 192})
# PonderNet's loss reaches every parameter (DDP without find_unused_parameters)
PONDER = FROST.replace(**{"train.epochs": 1, "loss.ranking": False, "loss.ponder": True})
# the reading of docs/method.md section 5.5: a whole-run sketch must count each rank's scores once
# per epoch, and the leaky update with a normalised halting input leaves no parameter unused
ADOPTED = FROST.replace(**{"model.update": "leaky", "model.halt_norm": True, "loss.rank_pairs": "per_step",
                           "halting.sketch_window": "run"})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _record(result, folder, name: str, rank: int) -> None:
    """What this rank ended with, for the test process to compare across ranks."""
    torch.save({"params": {k: v.clone() for k, v in result.model.state_dict().items()},
                "sketch": result.calibrator.to_bytes(), "n": result.calibrator.n,
                "thresholds": result.calibrator.thresholds(QS), "history": result.history},
               folder / f"{name}_rank{rank}.pt")


def _interrupted(config, checkpoint) -> None:
    """Train ``config`` for one epoch of its run, the way a caller of ``Trainer`` does under
    torchrun: the same model and global batches on every rank, and the trainer takes this rank's
    share."""
    trainer = build_trainer(config, checkpoint)  # joins the job, then builds as train() does
    assert isinstance(trainer.batches, ShardedBatches) and trainer.parallel_model is not trainer.model
    trainer.fit(until_epoch=1)


def _store_before_joining(config, folder, rank: int) -> None:
    """``runs.train_or_load`` called before anything joined the job (as a user's script does under
    torchrun): which ranks write the run's config.json and metrics.json, noted in ``folder``."""
    from frost_nb import runs

    writes = {"write_json": runs.write_json, "store_run": runs.store_run}
    for name, write in writes.items():
        def noted(*args, _name=name, _write=write, **kwargs):
            (folder / f"{_name}_rank{rank}").touch()
            return _write(*args, **kwargs)
        setattr(runs, name, noted)
    try:
        runs.train_or_load(config, name="ddp/before-joining", progress=False)
    finally:
        for name, write in writes.items():
            setattr(runs, name, write)


def _train_on_each_rank(rank: int, port: int, folder) -> None:
    """One rank of the job, joined the way torchrun's environment makes the trainer join."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(WORLD),
                      RANK=str(rank), LOCAL_RANK=str(rank), FROST_OUTPUTS=str(folder / "outputs"),
                      FROST_CACHE=str(folder / "cache"), FROST_PROGRESS="0")
    torch.set_num_threads(1)
    try:
        _store_before_joining(BASELINE, folder, rank)
        _record(train(FROST, checkpoint=folder / "whole.pt"), folder, "whole", rank)
        _interrupted(FROST, folder / "split.pt")
        _record(train(FROST, checkpoint=folder / "split.pt"), folder, "resumed", rank)
        _record(train(BASELINE), folder, "baseline", rank)
        _record(train(PONDER), folder, "ponder", rank)
        _record(train(ADOPTED), folder, "adopted", rank)
    finally:
        leave_process_group()


@pytest.fixture(scope="module")
def two_rank_runs(tmp_path_factory):
    """What each of two ranks ended with: a whole run, an interrupted and resumed one, a baseline,
    a PonderNet run, a run of the adopted bundle."""
    folder = tmp_path_factory.mktemp("ddp")
    mp.spawn(_train_on_each_rank, args=(_free_port(), folder), nprocs=WORLD)
    return {(name, rank): torch.load(folder / f"{name}_rank{rank}.pt", weights_only=False)
            for name in ("whole", "resumed", "baseline", "ponder", "adopted")
            for rank in range(WORLD)}, folder


def _scores_fed(config) -> int:
    """Halting scores of the last epoch (every training image once) plus the held-out pass."""
    steps = config.model.steps
    train, val = load_split(config, "train"), load_split(config, "val")
    return (len(train) // config.train.batch_size) * config.train.batch_size * steps + len(val) * steps


@pytest.mark.parametrize("name", ["whole", "resumed", "baseline", "ponder", "adopted"])
def test_ranks_end_with_the_same_parameters(two_rank_runs, name):
    runs, _ = two_rank_runs
    a, b = runs[name, 0]["params"], runs[name, 1]["params"]
    assert a.keys() == b.keys()
    for key in a:  # each rank trained on other images: only DDP's gradient sync makes them equal
        assert torch.equal(a[key], b[key]), key


def test_pooled_sketch_counts_every_score_once_and_gives_the_same_threshold(two_rank_runs):
    runs, _ = two_rank_runs
    for name, config in (("whole", FROST), ("resumed", FROST), ("baseline", BASELINE), ("adopted", ADOPTED)):
        expected = _scores_fed(config) * (config.train.epochs if name == "adopted" else 1)  # a run's sketch
        for rank in range(WORLD):  # each rank's share of the epoch, the held-out pass once
            assert runs[name, rank]["n"] == expected, (name, rank)
        # rank 0 merged and sent its sketch: the same bytes, so the same thresholds
        assert runs[name, 0]["sketch"] == runs[name, 1]["sketch"], name
        assert runs[name, 0]["thresholds"] == runs[name, 1]["thresholds"], name


def test_train_or_load_before_joining_writes_the_run_on_rank_zero_alone(two_rank_runs):
    _, folder = two_rank_runs
    for name in ("write_json", "store_run"):
        assert [rank for rank in range(WORLD) if (folder / f"{name}_rank{rank}").exists()] == [0], name


def test_rank_zero_writes_a_checkpoint_that_resumes_exactly(two_rank_runs):
    runs, folder = two_rank_runs
    whole = load_checkpoint(folder / "whole.pt")
    assert whole["complete"] and whole["epoch"] == 2
    assert whole["step"] == 2 * (192 // 64)  # the global batch: 3 steps an epoch, as one process
    model, calibrator = load_model(folder / "whole.pt")
    assert calibrator.n == runs["whole", 0]["n"]
    for key, value in model.state_dict().items():
        assert torch.equal(value, runs["whole", 0]["params"][key]), key
    for key, value in runs["resumed", 0]["params"].items():  # interrupted + resumed == whole
        assert torch.equal(value, runs["whole", 0]["params"][key]), key
    assert runs["resumed", 0]["history"]["steps"]["loss"] == runs["whole", 0]["history"]["steps"]["loss"]
    assert sorted(p.name for p in folder.glob("*.pt") if "rank" not in p.name) == ["split.pt", "whole.pt"]


def _train_with_a_refused_checkpoint(rank: int, port: int, folder) -> None:
    """One rank of a job whose checkpoint folder refuses rank 0's write: what each rank raised."""
    import tempfile

    from frost_nb import training
    from frost_nb.paths import OutputError

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(WORLD),
                      RANK=str(rank), LOCAL_RANK=str(rank), FROST_PROGRESS="0")
    torch.set_num_threads(1)
    tempfile.tempdir = str(folder)  # where the rescued run goes
    real = training.save_checkpoint

    def refused(path, state):
        if Path(path).name == "run.pt":
            raise OutputError(f"cannot write {path}: the disk is gone")
        return real(path, state)

    training.save_checkpoint = refused
    try:
        train(BASELINE, checkpoint=folder / "run.pt")
    except training.TrainingError as err:
        (folder / f"error_rank{rank}.txt").write_text(str(err))
    finally:
        leave_process_group()


def test_every_rank_stops_when_rank_zero_cannot_save(tmp_path):
    """Rank 0 alone writes; when it cannot, the others learn it at once and stop too (rather than
    wait forever for a rank that has stopped)."""
    import time

    context = mp.spawn(_train_with_a_refused_checkpoint, args=(_free_port(), tmp_path), nprocs=WORLD,
                       join=False)
    deadline = time.monotonic() + 240
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail("the ranks did not stop together")
    rescued = list(tmp_path.glob("frost_nb_run_*.pt"))
    assert len(rescued) == 1 and load_checkpoint(rescued[0])["complete"]
    assert f"saved in {rescued[0]} instead" in (tmp_path / "error_rank0.txt").read_text()
    assert "rank 0 could not write the checkpoint" in (tmp_path / "error_rank1.txt").read_text()


def test_unused_halting_head_of_a_baseline_stays_untouched(two_rank_runs):
    """Without the ranking loss the halting head gets no gradient: DDP must leave its grad None
    (as one process does, so AdamW skips it) instead of decaying it or waiting for it."""
    runs, _ = two_rank_runs
    torch.manual_seed(BASELINE.train.seed)
    initial = create_model(BASELINE.model).state_dict()
    trained = runs["baseline", 0]["params"]
    for key in ("halt_head.weight", "halt_head.bias"):
        assert torch.equal(trained[key], initial[key]), key
    assert not torch.equal(trained["head.weight"], initial["head.weight"])


# --- without processes ----------------------------------------------------------------------

def test_sharded_batches_are_disjoint_and_make_the_batch():
    batches = [(torch.arange(10.0).view(10, 1), torch.arange(10)),
               (torch.arange(10.0, 15.0).view(5, 1), torch.arange(10, 15))]  # a short last batch
    shares = [list(ShardedBatches(batches, DistributedSetup(rank, WORLD))) for rank in range(WORLD)]
    assert all(len(ShardedBatches(batches, DistributedSetup(r, WORLD))) == 2 for r in range(WORLD))
    for b, (x, y) in enumerate(batches):
        assert torch.equal(torch.cat([s[b][0] for s in shares]), x)
        assert torch.equal(torch.cat([s[b][1] for s in shares]), y)
    assert [len(s[0][1]) for s in shares] == [5, 5] and [len(s[1][1]) for s in shares] == [3, 2]


def test_pooled_serialised_sketches_count_each_score_once_and_match_the_union():
    rng = np.random.default_rng(7)
    shares = [rng.beta(0.5, 2.0, 30_000).astype(np.float32), rng.beta(4.0, 1.0, 50_000).astype(np.float32)]
    calibrators = [HaltingCalibrator(200).update(s) for s in shares]
    pooled = HaltingCalibrator.pooled([c.to_bytes() for c in calibrators])
    assert pooled.n == 80_000 and [c.n for c in calibrators] == [30_000, 50_000]  # sources untouched
    union = np.concatenate(shares)
    eps = kll_floats_sketch.get_normalized_rank_error(pooled.k, False)
    for q in QS:  # in rank, as the sketch guarantees (about 1.3% at k = 200), not in value
        assert abs(np.mean(union <= pooled.threshold(q)) - q) < 2 * eps
        assert abs(np.mean(union <= pooled.threshold(q)) - np.mean(union <= np.quantile(union, q))) < 2 * eps
    with pytest.raises(ValueError, match="at least one"):
        HaltingCalibrator.pooled([])


def test_merge_across_ranks_without_a_process_group_changes_nothing():
    cal = HaltingCalibrator().update(np.linspace(0.0, 1.0, 1000))
    before = cal.to_bytes()
    assert cal.merge_across_ranks() is cal and cal.to_bytes() == before


def test_merge_across_ranks_without_a_process_group_adds_the_shared_sketch_once():
    own, shared = HaltingCalibrator().update(np.linspace(0.0, 0.5, 1000)), HaltingCalibrator().update([0.9] * 500)
    assert own.merge_across_ranks(shared) is own and own.n == 1500 and shared.n == 500


@pytest.mark.parametrize("command", [["grid", "loss", "--size", "smoke"], ["demo", "--size", "smoke"]])
def test_single_process_commands_refuse_torchrun(command, monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(command) == 2
    err = capsys.readouterr().err
    assert f"'{command[0]}' runs in a single process" in err and "-m frost_nb train" in err


# --- the command line under torchrun -------------------------------------------------------

def test_torchrun_train_on_two_cpu_processes(tmp_path):
    ckpt = tmp_path / "ddp.pt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(WORLD),
           "-m", "frost_nb", "train", "--size", "smoke", "--epochs", "1", "--set", "data.limit=192",
           "--set", "train.device=cpu", "--checkpoint", str(ckpt), "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)  # one JSON object: rank 0 alone prints
    assert summary["dataset"] == "digits" and summary["epochs"] == 1
    assert proc.stderr.count("epoch 1/1:") == 1  # and logs
    state = load_checkpoint(ckpt)
    assert state["complete"] and state["step"] == 192 // 64
    config = make_config("smoke", **{"train.epochs": 1, "data.limit": 192, "train.device": "cpu"})
    assert HaltingCalibrator.from_bytes(state["calibrator"]).n == _scores_fed(config)
