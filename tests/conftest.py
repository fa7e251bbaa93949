"""Shared fixtures: every test writes outputs and caches into its own temporary folder, and leaves torch's
thread count as it found it.

(The repository's top-level ``conftest.py`` hides every real data set from tests and notebooks.)"""

import contextlib

import pytest
import torch

from frost_nb.config import make_config


@pytest.fixture(autouse=True)
def isolated_outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("FROST_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.setenv("FROST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FROST_PROGRESS", "0")
    from frost_nb.runs import take_read

    take_read()  # the runs an earlier test read are not this test's (provenance's read log)
    threads = torch.get_num_threads()  # nor the thread count it set (a benchmark's main run in-process)
    yield tmp_path
    torch.set_num_threads(threads)


@pytest.fixture
def tiny_config():
    """FROST on a slice of digits: a couple of seconds on two CPU cores."""
    return make_config("smoke", **{"train.epochs": 10, "train.batch_size": 64,
                                   "train.device": "cpu"})


@pytest.fixture
def make_trainer():
    """``make_trainer(config, checkpoint)``: the Trainer ``training.train`` fits
    (``training.build_trainer``), for the tests that stop it early (``fit(until_epoch=...)``) or
    look inside it before it trains; the resume tests finish with ``train`` what this started."""
    from frost_nb.training import build_trainer

    def build(config, checkpoint=None):
        return build_trainer(config, checkpoint)

    return build


@pytest.fixture
def interrupted_after():
    """``with interrupted_after(n):`` train in it: a checkpoint is due after every step
    (``training.MID_EPOCH_SECONDS`` 0) and the optimiser step after the first ``n`` raises
    KeyboardInterrupt, as a kill would; both are restored when the block ends."""
    from frost_nb import training

    @contextlib.contextmanager
    def interrupt(steps: int):
        real, calls = training.optimizer_step, []

        def step(*args, **kwargs):
            if len(calls) == steps:
                raise KeyboardInterrupt
            calls.append(1)
            return real(*args, **kwargs)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(training, "MID_EPOCH_SECONDS", 0.0)
            mp.setattr(training, "optimizer_step", step)
            with pytest.raises(KeyboardInterrupt):
                yield

    return interrupt
