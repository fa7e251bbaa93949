"""What the README's commands promise: the main job leaves the working tree as it found it, and
`make lab` starts JupyterLab with the project's environment.

Each test uses the environment it runs in (``sys.executable``; ``make`` gets ``VENV=`` of it), so
the suite passes wherever the project is installed (``.venv``, ``make test VENV=...``, a conda
environment, ``pip install -e .`` into one's own); what it cannot find it skips, saying why."""

import hashlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from frost_nb.paths import repo_root

ROOT = repo_root()


def _tree_state() -> tuple[str, dict[str, str]]:
    """git's view of the tree and a hash of every file under outputs/ (the cache aside)."""
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    hashes = {str(p.relative_to(ROOT)): hashlib.sha256(p.read_bytes()).hexdigest()
              for p in sorted((ROOT / "outputs").rglob("*")) if p.is_file() and "cache" not in p.parts}
    return status, hashes


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_demo_leaves_the_working_tree_clean(tmp_path):
    """`make demo`'s job on a clone (the committed digits run is loaded, not retrained) rewrites
    nothing git tracks: same metrics, byte-stable figures."""
    env = {k: v for k, v in os.environ.items() if k not in ("FROST_SMOKE", "FROST_OUTPUTS")}
    env.update(FROST_CACHE=str(tmp_path / "cache"), FROST_PROGRESS="0", MPLBACKEND="Agg", OMP_NUM_THREADS="1")
    before = _tree_state()
    run = subprocess.run([sys.executable, "-m", "frost_nb", "demo"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert '"from_cache": true' in run.stdout, "the demo trained: its committed run no longer matches the defaults"
    after = _tree_state()
    assert after[0] == before[0], f"git status changed:\n{before[0]}\n->\n{after[0]}"
    changed = [p for p in after[1] if after[1][p] != before[1].get(p)]
    assert not changed, f"the demo rewrote {changed}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _this_environment() -> str:
    """The environment this test runs in, as ``make``'s ``VENV=`` (``$(VENV)/bin/python`` is this
    interpreter, or one of the same environment)."""
    return sys.prefix


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.skipif(not (ROOT / "Makefile").is_file(), reason=f"needs the checkout's Makefile (not in {ROOT})")
def test_make_lab_starts_jupyterlab(tmp_path):
    """`make lab VENV=<this environment>` serves JupyterLab from the environment the tests run in
    (on the loopback address here, with a token, every Jupyter folder temporary), then shuts down;
    it neither makes an environment nor installs anything into this one."""
    venv = _this_environment()
    if not (Path(venv) / "bin" / "jupyter").exists() or not (Path(venv) / "bin" / "python").exists():
        pytest.skip(f"make lab runs $(VENV)/bin/jupyter: this environment ({venv}) has none "
                    "(pip install -e '.[notebooks]' into it, or run the tests from .venv: make test)")
    found = subprocess.run([sys.executable, "-I", "-c", "import frost_nb; print(frost_nb.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path).stdout.strip()
    if not found or Path(found).resolve().parent.parent != ROOT.resolve():
        pytest.skip(f"make lab refuses this environment ({venv}): it imports frost_nb from "
                    f"{found or 'nowhere'}, not from this checkout {ROOT}")
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_DATA_DIR": str(tmp_path / "data"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "IPYTHONDIR": str(tmp_path / "ipython")}
    args = f"--no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token={token} --ServerApp.port_retries=0"
    proc = subprocess.Popen(["make", "-s", "-C", str(ROOT), "lab", f"VENV={venv}", f"LAB_ARGS={args}"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, status = time.monotonic() + 120, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents?token={token}", timeout=2) as r:
                    status = r.status, r.read().decode()
                    break
            except OSError:
                time.sleep(1)
        assert status is not None, f"JupyterLab did not answer: {proc.stdout.read().decode()[-2000:] if proc.poll() is not None else 'still starting'}"
        code, listing = status
        assert code == 200 and "05_halting.ipynb" in listing  # served from notebooks/
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab?token={token}", timeout=10) as r:
            assert r.status == 200 and "JupyterLab" in r.read().decode()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
