"""Bad paths, one table: every path the command line, the notebooks and the library read or write
(outputs, cache, data root, ``--checkpoint``, ``--csv``, ``verdicts --write``) against every way a
path goes wrong (no permission on it or on a parent, a missing parent, a file where a folder
should be and the reverse, a dangling symbolic link, a full disk during a write). Each gives one
line naming the path, the cause and the fix, before any work; a failed write keeps the previous
file whole (issue 35).

The tests run as root, where permission bits do not bind: the permission cases run in a
subprocess that has dropped root's privileges (``setpriv``: user 65534, else root without its
capabilities), or run directly for an ordinary user. A full disk is Linux's ``/dev/full`` (every
write fails with ENOSPC) linked where the write's temporary file goes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import pytest

from frost_nb.paths import repo_root

OTHER_UID = 12345  # owns the folders the unprivileged user may not enter (no such user needed)

# where each path comes from, what it is, the words of its fix, and the command that uses it
#   kind: "folder" (written into), "root" (a folder read), "file" (written), "read" (a file read),
#   "readwrite" (a file read, then replaced)
PLACES = {
    "outputs": ("folder", "FROST_OUTPUTS"),
    "notebook outputs": ("folder", "FROST_OUTPUTS"),
    "cache": ("folder", "FROST_CACHE"),
    "data root": ("root", "FROST_DATA"),
    "train --checkpoint": ("file", ".pt file"),
    "evaluate --checkpoint": ("read", ".pt file"),
    "sweep --csv": ("file", "--csv"),
    "verdicts --write": ("readwrite", "--write"),
}

# the words each cause must be reported with
CAUSES = {
    "untraversable parent": "no permission to enter",
    "no permission on the path": "no permission to",
    "missing parent": "does not exist",
    "file for a folder": "is a file, not a folder",
    "folder for a file": "is a folder",  # a checkpoint may be a run folder: "is a folder without a model.pt"
    "dangling link": "a symbolic link to",
}


def _target(place: str, cause: str, base: Path) -> tuple[Path | None, str]:
    """The bad path for ``place`` and ``cause`` under ``base`` (made here), and the outcome wanted:
    "error", "work" (a missing parent of something written is made: the work starts), or a
    reason the combination does not exist (returned with path None)."""
    kind = PLACES[place][0]
    name = {"folder": "out", "root": "data", "file": "out.pt", "read": "model.pt",
            "readwrite": "README.md"}[kind]
    if cause == "untraversable parent":
        return base / "locked" / "sub" / name, "error"
    if cause == "no permission on the path":
        if kind == "folder":
            return base / "readonly", "error"  # exists, may be entered, not written into
        if kind in ("file", "readwrite"):
            return base / "readonly" / ("README.md" if kind == "readwrite" else name), "error"
        if kind == "root":
            return base / "locked", "error"  # may not be entered
        return base / "unreadable.pt", "error"
    if cause == "missing parent":
        return base / "missing" / "deeper" / name, ("error" if kind in ("read", "readwrite") else "work")
    if cause == "file for a folder":
        if kind in ("folder", "root"):
            return base / "a-file", "error"
        return base / "a-file" / name, "error"
    if cause == "folder for a file":
        if kind in ("folder", "root"):
            return None, "a folder is what is wanted there"
        return base / "a-folder", "error"
    if cause == "dangling link":
        return base / "dangling", "error"
    raise AssertionError(cause)


def _make_fixtures(base: Path, permissions: str | None) -> None:
    """The folders and files every case points into. ``permissions``: None (no permission cases),
    "root" (they belong to another user: root without privileges, or user 65534, is a stranger to
    them) or "user" (an ordinary user's own, their permission bits removed: those bind it)."""
    for folder in ("locked/sub", "readonly", "a-folder", "good"):
        (base / folder).mkdir(parents=True)
    (base / "readonly" / "README.md").write_text((repo_root() / "README.md").read_text())
    (base / "unreadable.pt").write_bytes(b"not read")
    (base / "a-file").write_text("a file, not a folder")
    (base / "good" / "model.pt").write_bytes(b"read only once the checks pass")
    (base / "dangling").symlink_to(base / "gone")
    if permissions is None:
        return
    modes = {"root": {"locked": 0o700, "readonly": 0o755, "readonly/README.md": 0o644, "unreadable.pt": 0o600},
             "user": {"locked": 0o000, "readonly": 0o555, "readonly/README.md": 0o444, "unreadable.pt": 0o000}}
    for p, mode in modes[permissions].items():
        if permissions == "root":
            os.chown(base / p, OTHER_UID, OTHER_UID)
        (base / p).chmod(mode)


def _case(place: str, target: Path, base: Path) -> dict:
    """The command (argv for ``python -m frost_nb``, or "setup" for a notebook's preamble) and the
    environment that point ``place`` at ``target``; every other path is a good one."""
    env = {"FROST_OUTPUTS": str(base / "good" / "outputs"), "FROST_CACHE": str(base / "good" / "cache")}
    train = ["train", "--size", "smoke", "--epochs", "1", "--no-progress"]
    if place == "outputs":
        return {"argv": ["demo", "--size", "smoke", "--epochs", "1", "--no-progress"],
                "env": {**env, "FROST_OUTPUTS": str(target)}}
    if place == "notebook outputs":
        return {"argv": "setup", "env": {**env, "FROST_OUTPUTS": str(target)}}
    if place == "cache":
        return {"argv": train, "env": {**env, "FROST_CACHE": str(target)}}
    if place == "data root":
        return {"argv": train + ["--dataset", "fashion-mnist", "--root", str(target)], "env": env}
    if place == "train --checkpoint":
        return {"argv": train + ["--checkpoint", str(target)], "env": env}
    if place == "evaluate --checkpoint":
        return {"argv": ["evaluate", "--checkpoint", str(target)], "env": env}
    if place == "sweep --csv":
        return {"argv": ["sweep", "--checkpoint", str(base / "good" / "model.pt"), "--csv", str(target)],
                "env": env}
    return {"argv": ["verdicts", "--write", str(target)], "env": env}


class Work(BaseException):
    """Raised where a command's work begins (a data set or a checkpoint is read); not an Exception, which
    load_checkpoint turns into its damaged-file error whatever torch.load raises."""


def run_cases(cases: list[dict]) -> list[dict]:
    """Run each case in this process; how it ended: "exit" (with rc and stderr), "work" (it got
    past every check), or "raised" (a traceback, with its last line)."""
    import torch

    from frost_nb.__main__ import main
    from frost_nb.data import datasets as data
    from frost_nb.notebook.glue import setup

    def work(*args, **kwargs):
        raise Work()

    real = data._load_part, torch.load
    data._load_part, torch.load = work, work  # the first reads of a data set and of a checkpoint
    results = []
    try:
        for case in cases:
            results.append(_run_case(case, main, setup))
    finally:
        data._load_part, torch.load = real
    return results


def _run_case(case: dict, main, setup) -> dict:
    from frost_nb.paths import OutputError

    saved = {k: os.environ.get(k) for k in case["env"]}
    os.environ.update(case["env"])
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            if case["argv"] == "setup":
                setup("01")
                raise Work()
            rc = main(case["argv"])
        return {"end": "exit", "rc": rc, "stderr": err.getvalue()}
    except Work:
        return {"end": "work", "stderr": err.getvalue()}
    except OutputError as e:  # a notebook shows the library's error: its message is the line
        return {"end": "message", "stderr": f"error: {e}"}
    except BaseException as e:  # noqa: BLE001 - a traceback is what this test looks for
        return {"end": "raised", "stderr": "".join(traceback.format_exception(e))}
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _table(causes: list[str], base: Path) -> list[tuple[str, str, Path, str, dict]]:
    rows = []
    for cause in causes:
        for place in PLACES:
            target, want = _target(place, cause, base)
            if target is not None:
                rows.append((place, cause, target, want, _case(place, target, base)))
    return rows


def _unprivileged() -> tuple[list[str], str] | str:
    """The command prefix that runs this interpreter as someone permission bits bind, and who
    that is; or the reason there is none."""
    if os.geteuid() != 0:
        return [], "this user"
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return "needs setpriv (util-linux) to run as a user that permission bits bind"
    tried = []
    for prefix, who in (([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"], "user 65534"),
                        ([setpriv, "--inh-caps=-all", "--bounding-set=-all"], "root without capabilities")):
        probe = subprocess.run(prefix + [sys.executable, "-c", "import torch, frost_nb.__main__"],
                               capture_output=True, text=True, timeout=120, cwd=tempfile.gettempdir())
        if probe.returncode == 0:
            return prefix, who
        tried.append(f"{who}: {(probe.stderr.strip().splitlines() or ['exit %d' % probe.returncode])[-1]}")
    return "cannot run this interpreter without root's privileges (" + "; ".join(tried) + ")"


def _check(rows, results, who: str = "") -> None:
    failures = []
    for (place, cause, target, want, _), got in zip(rows, results):
        line = got["stderr"].strip()
        label = f"{place} / {cause} ({target}){who}"
        if want == "work":
            if got["end"] != "work":
                failures.append(f"{label}: wanted the work to start, got {got['end']}: {line[-600:]}")
            continue
        fix, words = PLACES[place][1], CAUSES[cause]
        ok = (got["end"] in ("exit", "message") and got.get("rc", 2) == 2 and len(line.splitlines()) == 1
              and line.startswith("error: ") and str(target) in line and words in line and fix in line)
        if not ok:
            failures.append(f"{label}: wanted one line naming the path, {words!r} and {fix!r}; got "
                            f"{got['end']}: {line[-600:]}")
    assert not failures, f"{len(failures)} of {len(rows)} cases:\n" + "\n".join(failures)


def test_bad_paths_give_one_line_before_any_work(tmp_path):
    """Every place against every cause that root meets too (permission bits aside)."""
    _make_fixtures(tmp_path, None)
    rows = _table([c for c in CAUSES if c not in ("untraversable parent", "no permission on the path")], tmp_path)
    _check(rows, run_cases([r[4] for r in rows]))


def test_bad_permissions_give_one_line_before_any_work():
    """No permission on the path or on a parent, for a user that permission bits bind."""
    how = _unprivileged()
    if isinstance(how, str):
        pytest.skip(how)
    prefix, who = how
    base = Path(tempfile.mkdtemp(prefix="frost_nb_bad_paths_"))
    try:
        base.chmod(0o777)  # the unprivileged user makes its good folders here
        (base / "home").mkdir(mode=0o777)
        (base / "home").chmod(0o777)
        _make_fixtures(base, "root" if os.geteuid() == 0 else "user")
        (base / "good").chmod(0o777)
        rows = _table(["untraversable parent", "no permission on the path"], base)
        env = {**os.environ, "HOME": str(base / "home"), "MPLCONFIGDIR": str(base / "home"),
               "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}
        # matplotlib's font cache is built first, so that its note is not in the first case's stderr
        script = ("import json, sys, matplotlib.font_manager; sys.path.insert(0, sys.argv[1]); "
                  "import test_bad_paths as t; "
                  "print('RESULTS' + json.dumps(t.run_cases(json.loads(sys.stdin.read()))))")
        run = subprocess.run(prefix + [sys.executable, "-c", script, str(Path(__file__).parent)],
                             input=json.dumps([r[4] for r in rows]), capture_output=True, text=True,
                             timeout=300, env=env, cwd=base)
        assert run.returncode == 0 and "RESULTS" in run.stdout, run.stderr[-3000:]
        _check(rows, json.loads(run.stdout.split("RESULTS", 1)[1]), f" as {who}")
    finally:
        for p in base.rglob("*"):
            if not p.is_symlink():
                with contextlib.suppress(OSError):
                    p.chmod(0o700)
        shutil.rmtree(base, ignore_errors=True)


# --- A full disk during a write: one line, the previous file whole ---------------------------

def _full_disk_at(path: Path) -> None:
    """Make the next atomic write of ``path`` in this process hit a full disk: its temporary file
    (``paths.atomic_path``: ``.<name>.tmp<pid>`` beside it) is a link to ``/dev/full``."""
    if not Path("/dev/full").exists():
        pytest.skip("needs Linux's /dev/full to fill the disk")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_name(f".{path.name}.tmp{os.getpid()}").symlink_to("/dev/full")


def _write_metrics(tmp_path):
    from frost_nb.notebook.glue import write_metrics
    from frost_nb.paths import outputs_dir

    return outputs_dir() / "metrics" / "m.json", "FROST_OUTPUTS", lambda: write_metrics("m", {"x": 1})


def _save_figure(tmp_path):
    import matplotlib.pyplot as plt

    from frost_nb.notebook.glue import save_figure
    from frost_nb.paths import outputs_dir

    return outputs_dir() / "figures" / "f.png", "FROST_OUTPUTS", lambda: save_figure(plt.figure(), "f")


def _cache_json(tmp_path):
    from frost_nb.paths import cache_dir
    from frost_nb.runs import write_json

    path = cache_dir() / "grid" / "run" / "config.json"
    return path, "FROST_CACHE", lambda: write_json(path, {"x": 1})


def _checkpoint(tmp_path):
    from frost_nb.checkpoint import save_checkpoint

    path = tmp_path / "run.pt"
    return path, "choose", lambda: save_checkpoint(path, {"config": {}, "model": {}})


def _prepared(tmp_path):
    from test_data import make_cifar10_pickles

    from frost_nb.data.prepare import prepare

    make_cifar10_pickles(tmp_path / "copy" / "cifar-10-batches-py")
    path = tmp_path / "data" / "prepared" / "cifar10" / "train.npz"
    return path, "FROST_DATA", lambda: prepare("cifar10", tmp_path / "data", source=tmp_path / "copy")


def _csv(tmp_path):
    from frost_nb.__main__ import main
    from frost_nb.config import make_config
    from frost_nb.training import train

    ckpt = tmp_path / "smoke.pt"
    train(make_config("smoke", **{"train.epochs": 1, "data.limit": 64, "train.device": "cpu"}), checkpoint=ckpt)
    path = tmp_path / "sweep.csv"
    return path, "--csv", lambda: main(["sweep", "--checkpoint", str(ckpt), "--csv", str(path)])


def _verdicts(tmp_path):
    from frost_nb.__main__ import main

    path = tmp_path / "README.md"
    return path, "--write", lambda: main(["verdicts", "--write", str(path)])


@pytest.mark.parametrize("writer", [_write_metrics, _save_figure, _cache_json, _checkpoint, _prepared, _csv,
                                    _verdicts], ids=lambda w: w.__name__.strip("_"))
def test_full_disk_keeps_the_previous_file_and_says_so(writer, tmp_path, capsys):
    path, fix, write = writer(tmp_path)
    previous = (repo_root() / "README.md").read_bytes() if path.name == "README.md" else b"the previous file"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(previous)
    capsys.readouterr()
    _full_disk_at(path)
    try:
        rc = write()
    except OSError as err:  # the library raises; the command line prints
        line, rc = f"error: {err}", 2
    else:
        line = capsys.readouterr().err.strip()
    assert rc == 2 and len(line.splitlines()) == 1, line
    assert str(path) in line and "disk is full" in line and fix in line and ".tmp" not in line, line
    assert path.read_bytes() == previous  # the previous file whole
    assert not [p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}")]  # no temporary file
