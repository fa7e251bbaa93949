"""Trainer: inside an epoch nothing waits for the device (training.py's module docstring). CUDA's
sync debug mode (``torch.cuda.set_sync_debug_mode("error")``) makes every synchronising call raise
(a host read such as ``.item()``, a blocking copy, a stream synchronisation); it is on while each
step runs, and off while the next batch is drawn and at the epoch's end, where the trainer reads
the device once. Where no CUDA device is, both tests are skipped with their reason."""

import pytest
import torch

from frost_nb.config import make_config
from frost_nb.training import build_trainer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="torch.cuda.set_sync_debug_mode checks host syncs on a CUDA device only, and none is here")]


class SyncChecked:
    """The trainer's batches, with the sync debug mode "error" while each batch's step runs."""

    def __init__(self, batches) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        for x, y in self.batches:
            torch.cuda.set_sync_debug_mode("error")
            try:
                yield x, y  # the step runs here
            finally:
                torch.cuda.set_sync_debug_mode("default")


def _warm_trainer():
    """A CUDA trainer (compiled as ``train.compile`` "auto" does there) after one unchecked epoch,
    so that compiling and cuDNN's first choices happen outside the check."""
    config = make_config("smoke", **{"train.epochs": 2, "train.device": "cuda", "train.diagnostics_every": 0})
    trainer = build_trainer(config, progress=False)
    trainer.fit(until_epoch=1)
    trainer.batches = SyncChecked(trainer.batches)
    return trainer


def test_no_host_sync_inside_an_epoch():
    trainer = _warm_trainer()
    try:
        trainer.fit(until_epoch=2)  # a step that waits for the device raises RuntimeError
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert trainer.epoch == 2 and trainer.step == 2 * trainer.steps_per_epoch


def test_the_check_catches_a_host_read():
    """The check can fail: the same epoch, with a step that reads its loss on the host."""
    trainer = _warm_trainer()
    forward = trainer.forward

    def reading(*args, **kwargs):
        loss, scores, sums = forward(*args, **kwargs)
        loss.item()  # waits for the device
        return loss, scores, sums

    trainer.forward = reading
    try:
        with pytest.raises(RuntimeError, match="synchroniz"):
            trainer.fit(until_epoch=2)
    finally:
        torch.cuda.set_sync_debug_mode("default")
