"""A real kill: ``python -m frost_nb train`` is SIGKILLed after its first checkpoint, the same
command is run again, and the run it finishes has bit for bit the weights of an uninterrupted
run. Through ``--checkpoint`` and through the trained-model cache (``FROST_CACHE``).

Every run is a subprocess with one thread, so the reference and the resumed run compute the
same way whatever the test process's own thread settings.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from frost_nb.checkpoint import load_checkpoint

REPO = Path(__file__).resolve().parent.parent
EPOCHS = 6  # the first checkpoint comes after epoch 1: five epochs of margin to kill the run
TRAIN = [sys.executable, "-m", "frost_nb", "train", "--size", "smoke", "--dataset", "digits",
         "--epochs", str(EPOCHS), "--no-progress"]


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            "OMP_NUM_THREADS": "1", "FROST_PROGRESS": "0", "FROST_OUTPUTS": str(tmp_path / "outputs"),
            "FROST_CACHE": str(tmp_path / "cache")}


def _run(args: list[str], tmp_path: Path, log: str) -> str:
    """Run the command to the end; its stderr (the epoch log)."""
    with open(tmp_path / log, "w+") as err:
        done = subprocess.run(TRAIN + args, env=_env(tmp_path), cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=err, timeout=300)
        err.seek(0)
        text = err.read()
    assert done.returncode == 0, text
    return text


def _kill_after_first_checkpoint(args: list[str], tmp_path: Path, folder: Path) -> Path:
    """Start the command, SIGKILL it once a checkpoint file appears in ``folder``; that file."""
    with open(tmp_path / "killed.log", "w") as err:
        proc = subprocess.Popen(TRAIN + args, env=_env(tmp_path), cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=err)
        try:
            deadline = time.monotonic() + 300
            while not list(folder.rglob("*.pt")) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, (tmp_path / "killed.log").read_text()
    (path,) = folder.rglob("*.pt")  # the cache keeps it in its run folder, <grid>/<label>/model.pt
    state = load_checkpoint(path)
    assert not state["complete"] and 1 <= state["epoch"] < EPOCHS  # killed mid-run, not after it
    return path


def _same_weights(a: Path, b: Path) -> None:
    wa, wb = load_checkpoint(a)["model"], load_checkpoint(b)["model"]
    assert wa.keys() == wb.keys()
    for name in wa:
        assert torch.equal(wa[name], wb[name]), name


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The uninterrupted run (one for both tests)."""
    folder = tmp_path_factory.mktemp("reference")
    _run(["--checkpoint", str(folder / "reference.pt")], folder, "reference.log")
    return folder / "reference.pt"


@pytest.mark.parametrize("through", ["checkpoint", "cache"])
def test_killed_training_resumes_to_the_uninterrupted_weights(through, reference, tmp_path):
    if through == "checkpoint":
        folder = tmp_path / "runs"
        args = ["--checkpoint", str(folder / "run.pt")]
    else:
        folder, args = tmp_path / "cache", []
    killed = _kill_after_first_checkpoint(args, tmp_path, folder)
    log = _run(args, tmp_path, "resumed.log")
    assert f"resumed {killed} after epoch" in log  # resumed, not trained afresh
    state = load_checkpoint(killed)
    assert state["complete"] and state["epoch"] == EPOCHS
    _same_weights(killed, reference)
