"""Lean exports: what is committed loads and evaluates exactly like the full checkpoint, is small,
and refuses to be resumed with a message that says why."""

import pytest
import torch

from frost_nb.checkpoint import (LEAN_STEP_POINTS, CheckpointError, export_lean, lean_state, load_checkpoint,
                                 load_model)
from frost_nb.paths import committed_checkpoints_dir
from frost_nb.training import Trainer


def test_lean_export_keeps_weights_calibrator_and_history_ends(tiny_config, tmp_path, monkeypatch):
    import frost_nb.checkpoint as ckpt

    monkeypatch.setattr(ckpt, "LEAN_STEP_POINTS", 7)  # the smoke run logs fewer steps than 1000
    full = tmp_path / "run.pt"
    Trainer(tiny_config, checkpoint=full).fit()
    lean = export_lean(full, tmp_path / "lean" / "run.pt")
    a, b = load_checkpoint(full), load_checkpoint(lean)
    assert {"optimizer", "scheduler", "rng"} <= set(a) and not {"optimizer", "scheduler", "rng"} & set(b)
    assert b["lean"] and b["complete"] and b["metrics"] == a["metrics"] and b["config"] == a["config"]
    assert b["history"]["epochs"] == a["history"]["epochs"]
    steps_a, steps_b = a["history"]["steps"], b["history"]["steps"]
    assert 7 <= len(steps_b["step"]) <= 7 + 2 < len(steps_a["step"])  # + where alpha is lowest / highest
    assert min(steps_b["alpha"]) == min(steps_a["alpha"]) and max(steps_b["alpha"]) == max(steps_a["alpha"])
    for key in steps_a:  # first and last entries kept exactly (tables read the last alpha)
        assert steps_b[key][0] == steps_a[key][0] and steps_b[key][-1] == steps_a[key][-1]
    assert steps_b["step"] == sorted(steps_b["step"])
    (m1, c1), (m2, c2) = load_model(full), load_model(lean)
    x = torch.randn(5, 1, 8, 8)
    with torch.no_grad():
        assert torch.equal(m1(x).logits, m2(x).logits)
    assert c1.threshold(0.5) == c2.threshold(0.5)
    assert lean.stat().st_size < full.stat().st_size


def test_lean_checkpoint_is_not_resumed(tiny_config, tmp_path):
    full = tmp_path / "run.pt"
    Trainer(tiny_config, checkpoint=full).fit()
    lean = export_lean(full, tmp_path / "lean.pt")
    longer = tiny_config.replace(**{"train.epochs": tiny_config.train.epochs})
    with pytest.raises(CheckpointError, match="lean export.*not resumed"):
        Trainer(longer, checkpoint=lean).fit()


def test_unfinished_run_is_not_exported(tiny_config, tmp_path):
    path = tmp_path / "run.pt"
    Trainer(tiny_config, checkpoint=path).fit(until_epoch=1)
    with pytest.raises(CheckpointError, match="only a finished run"):
        lean_state(load_checkpoint(path))


def test_committed_checkpoints_are_lean_and_load():
    """Every committed checkpoint is a lean export that rebuilds its model (keeps the repository
    small enough to travel to a GPU machine with room to spare)."""
    files = sorted(committed_checkpoints_dir().glob("*.pt"))
    assert files, "no committed checkpoints found"
    total = 0
    for path in files:
        state = load_checkpoint(path)
        assert state.get("lean") and "optimizer" not in state, f"{path.name} is not a lean export"
        assert len(state["history"]["steps"].get("step", ())) <= LEAN_STEP_POINTS + 4  # + the extremes of alpha, H
        load_model(path)
        total += path.stat().st_size
    # 32 MiB: the 63 digits runs of issue 15's loss-strength grid took the checkpoints to 25.5 MiB;
    # with the rest of the tracked tree (about 7 MiB) that leaves half of the 64 MiB a call to the
    # GPU machine may carry
    assert total < 32 * 2**20, f"committed checkpoints take {total / 2**20:.1f} MiB"
