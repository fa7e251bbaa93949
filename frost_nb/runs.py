"""Where trained runs live, and ``train_or_load``: the one way the notebooks, the command line
and the grids get a trained model.

The trained-model cache (``outputs/cache/``, or ``$FROST_CACHE``) maps ``RunConfig.key()`` (a
hash of everything that changes the trained model) to ``<key>.pt``; the committed lean exports
in ``outputs/checkpoints/`` are found under the same name. This module sits above
``checkpoint.py`` (the file format) and ``training.py`` (the trainer), so neither imports the
other's caller.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .checkpoint import CheckpointError, load_checkpoint, load_model
from .config import RunConfig
from .paths import cache_dir, check_writable, committed_checkpoints_dir
from .training import TrainResult, train


def cache_path(config: RunConfig) -> Path:
    """Where the trained-model cache keeps ``config``'s run (finished or not)."""
    return cache_dir() / f"{config.key()}.pt"


def cached_checkpoint(config: RunConfig) -> Path | None:
    """The finished checkpoint of ``config``: the local cache first (a retrained run wins), then
    the committed ones (what a fresh clone has)."""
    for path in (cache_path(config), committed_checkpoints_dir() / cache_path(config).name):
        if path.is_file():
            try:
                if load_checkpoint(path).get("complete"):
                    return path
            except CheckpointError:
                continue  # damaged: train_or_load sets it aside and trains again
    return None


def train_or_load(config: RunConfig, *, progress: bool | None = None, retrain: bool = False):
    """A trained model for ``config``: from the cache when it was trained before, else trained now.

    Training writes its checkpoint into the cache every epoch, so an interrupted run resumes.
    Returns a ``TrainResult`` (model, calibrator, history, metrics, checkpoint path, cached flag).
    """
    path = None if retrain else cached_checkpoint(config)
    if path is not None:
        model, calibrator = load_model(path, expect=config)
        state = load_checkpoint(path)
        return TrainResult(model=model, calibrator=calibrator, history=state["history"],
                           metrics=state.get("metrics", {}), config=config, checkpoint=path,
                           from_cache=True)
    target = cache_path(config)
    check_writable(target.parent, "trained-model cache", "set FROST_CACHE to a writable folder", folder=True)
    if retrain and target.exists():
        target.unlink()
    elif target.exists():
        try:
            load_checkpoint(target)  # an unfinished run: the trainer resumes it
        except CheckpointError as err:  # damaged: keep it for inspection, train afresh
            aside = target.with_suffix(".pt.damaged")
            os.replace(target, aside)
            logging.getLogger("frost_nb").warning("%s; moved it to %s and training again", err, aside)
    return train(config, checkpoint=target, progress=progress)
