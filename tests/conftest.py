"""Shared fixtures: every test writes outputs and caches into its own temporary folder.

(The repository's top-level ``conftest.py`` hides every real data set from tests and notebooks.)"""

import pytest

from frost_nb.config import make_config


@pytest.fixture(autouse=True)
def isolated_outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("FROST_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.setenv("FROST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FROST_PROGRESS", "0")
    return tmp_path


@pytest.fixture
def tiny_config():
    """FROST on a slice of digits: a couple of seconds on two CPU cores."""
    return make_config("smoke", **{"train.epochs": 10, "train.batch_size": 64,
                                   "train.device": "cpu"})


@pytest.fixture
def make_trainer():
    """``make_trainer(config, checkpoint)``: a Trainer built from ``config`` as ``training.train``
    builds it (splits, seeded model, batches with their own generator), for the tests that stop
    it early (``fit(until_epoch=...)``) or look inside it before it trains. ``train`` and this
    must agree: the resume tests finish with ``train`` what this started."""
    import torch

    from frost_nb.data import make_batches
    from frost_nb.models import create_model
    from frost_nb.training import Trainer, load_split, pick_device

    def build(config, checkpoint=None):
        device = pick_device(config.train.device)
        train_set = load_split(config, "train")
        torch.manual_seed(config.train.seed)
        model = create_model(config.model).to(device)
        batches = make_batches(train_set, config.train.batch_size, shuffle=True, augment=config.data.augment,
                               device=device, generator=torch.Generator().manual_seed(config.train.seed),
                               drop_last=len(train_set) > config.train.batch_size)
        val_set = load_split(config, "val") if config.data.val_fraction > 0 else None
        return Trainer(config, model, batches, val_set=val_set, test_set=load_split(config, "test"),
                       checkpoint=checkpoint)

    return build
