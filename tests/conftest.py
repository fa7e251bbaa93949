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
