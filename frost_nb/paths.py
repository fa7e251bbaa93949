"""Folders of the project, resolved from the package location (never the working directory).

Environment variables move them (each function below names its own); ``FROST_OFFLINE=1``
refuses every download (``make test`` sets it: docs/testing.md). Smoke runs (``FROST_SMOKE=1``)
write to a temporary folder unless ``FROST_OUTPUTS`` is set, so tests and CI never overwrite the
committed demo-size outputs. A destination that cannot be written is an ``OutputError`` naming
it and the fix, raised by ``check_writable`` before the work, and by the writes themselves.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def shown_path(path: str | os.PathLike | None) -> str | None:
    """``path`` relative to the repository when inside it (metrics stay machine-independent)."""
    if path is None:
        return None
    path = Path(path).resolve()
    try:
        return str(path.relative_to(repo_root().resolve()))
    except ValueError:
        return str(path)


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def smoke_mode() -> bool:
    """True when ``FROST_SMOKE`` is set to a true value (1, true, yes)."""
    return _env_true("FROST_SMOKE")


def data_root(root: str | os.PathLike | None = None) -> Path:
    """The data root: the argument, then ``$FROST_DATA``, then ``<repo>/data``."""
    root = root if root is not None else os.environ.get("FROST_DATA") or repo_root() / "data"
    return Path(root).expanduser()


def system_data_dir() -> Path:
    """Where Debian's data set packages install (``dataset-fashion-mnist``): ``$FROST_SYSTEM_DATA``,
    else ``/usr/share/datasets``."""
    return Path(os.environ.get("FROST_SYSTEM_DATA") or "/usr/share/datasets").expanduser()


def downloads_allowed() -> bool:
    """False when ``FROST_OFFLINE`` is set to a true value (``make test`` sets it)."""
    return not _env_true("FROST_OFFLINE")


class OutputError(OSError):
    """A destination (a folder, or a file to write) cannot be written; the message names it and
    the fix. An ``OSError``, so code that handles failed writes keeps handling it."""


def _reason(err: OSError) -> str:  # the system's words, without the path (the message names it)
    return err.strerror or str(err) or type(err).__name__


def nearest_existing(path: Path) -> Path:
    """``path`` if it exists, else its nearest ancestor that does."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _why(folder: Path, err: OSError) -> str:
    """Why ``folder`` could not be made or written into: a file in the way, else the system's words."""
    place = nearest_existing(folder)
    return f"{place} is a file, not a folder" if not place.is_dir() else _reason(err)


def _make_dir(path: Path, variable: str) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"cannot make the folder {path} ({_why(path, err)}): set {variable} to a "
                          "writable folder") from err
    return path


def outputs_dir() -> Path:
    """``$FROST_OUTPUTS``, else a temporary folder in smoke mode, else ``<repo>/outputs``."""
    if os.environ.get("FROST_OUTPUTS"):
        path = Path(os.environ["FROST_OUTPUTS"]).expanduser()
    elif smoke_mode():
        path = Path(tempfile.gettempdir()) / "frost_nb_smoke_outputs"
    else:
        path = repo_root() / "outputs"
    return _make_dir(path, "FROST_OUTPUTS")


def cache_dir() -> Path:
    """Trained-model cache: ``$FROST_CACHE``, else ``<outputs>/cache`` (git-ignored)."""
    if os.environ.get("FROST_CACHE"):
        return _make_dir(Path(os.environ["FROST_CACHE"]).expanduser(), "FROST_CACHE")
    return _make_dir(outputs_dir() / "cache", "FROST_CACHE (or FROST_OUTPUTS)")


def check_writable(path: str | os.PathLike, what: str, fix: str, *, folder: bool = False) -> Path:
    """Raise ``OutputError`` (naming ``what``, saying ``fix``) unless the file ``path`` (with
    ``folder``: files in the folder ``path``) can be written. Makes nothing: the nearest existing
    folder is probed with a file written and deleted (permission bits do not stop root)."""
    path = Path(path).expanduser()
    if not folder and path.is_dir():
        raise OutputError(f"{what} {path} is a folder, not a file: {fix}")
    place = nearest_existing(path if folder else path.parent)
    if not place.is_dir():
        raise OutputError(f"cannot write {what} {path}: {place} is a file, not a folder; {fix}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".frost_nb_write_test", dir=place)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise OutputError(f"cannot write {what} {path}: {place} is not writable ({_reason(err)}); "
                          f"{fix}") from err
    return path


def committed_runs_dir() -> Path:
    """The runs committed with the repo, lean exports (``runs.py``; read-only for training)."""
    return repo_root() / "outputs" / "runs"


@contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path beside ``path``; on success it replaces ``path`` in one rename. A
    failed write leaves ``path`` as it was and no temporary file behind; a refused one raises
    ``OutputError`` naming ``path`` (not the temporary file)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        os.replace(tmp, path)
    except OutputError:
        raise
    except OSError as err:
        raise OutputError(f"cannot write {path} ({_why(path.parent, err)}): choose a writable place") from err
    finally:
        if tmp.exists():  # only when the write or the rename failed
            tmp.unlink()
