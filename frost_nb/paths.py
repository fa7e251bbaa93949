"""Folders of the project, resolved from the package location (never the working directory).

Environment variables move them: ``FROST_DATA`` (data root), ``FROST_SYSTEM_DATA`` (where
Debian's data set packages live, ``/usr/share/datasets``), ``FROST_OUTPUTS`` (figures,
metrics, checkpoints) and ``FROST_CACHE`` (trained-model cache). ``FROST_OFFLINE=1`` refuses
every download. ``make test`` points both data folders at an empty one and sets
``FROST_OFFLINE``, so a test that reaches for a real data set fails on every machine, not only
on one without the data (docs/testing.md). Smoke runs
(``FROST_SMOKE=1``) write to a temporary folder unless ``FROST_OUTPUTS`` is set, so tests
and CI never overwrite the committed demo-size outputs.
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


def smoke_mode() -> bool:
    """True when ``FROST_SMOKE`` is set to a true value (1, true, yes)."""
    return os.environ.get("FROST_SMOKE", "").strip().lower() in ("1", "true", "yes")


def data_root(root: str | os.PathLike | None = None) -> Path:
    """The data root: the argument, then ``$FROST_DATA``, then ``<repo>/data``."""
    if root is not None:
        return Path(root).expanduser()
    if os.environ.get("FROST_DATA"):
        return Path(os.environ["FROST_DATA"]).expanduser()
    return repo_root() / "data"


def system_data_dir() -> Path:
    """Where Debian's data set packages install (``dataset-fashion-mnist``): ``$FROST_SYSTEM_DATA``,
    else ``/usr/share/datasets``."""
    return Path(os.environ.get("FROST_SYSTEM_DATA") or "/usr/share/datasets").expanduser()


def downloads_allowed() -> bool:
    """False when ``FROST_OFFLINE`` is set to a true value (``make test`` sets it)."""
    return os.environ.get("FROST_OFFLINE", "").strip().lower() not in ("1", "true", "yes")


def outputs_dir() -> Path:
    """``$FROST_OUTPUTS``, else a temporary folder in smoke mode, else ``<repo>/outputs``."""
    if os.environ.get("FROST_OUTPUTS"):
        path = Path(os.environ["FROST_OUTPUTS"]).expanduser()
    elif smoke_mode():
        path = Path(tempfile.gettempdir()) / "frost_nb_smoke_outputs"
    else:
        path = repo_root() / "outputs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_dir() -> Path:
    """Trained-model cache: ``$FROST_CACHE``, else ``<outputs>/cache`` (git-ignored)."""
    path = Path(os.environ["FROST_CACHE"]).expanduser() if os.environ.get("FROST_CACHE") \
        else outputs_dir() / "cache"
    path.mkdir(parents=True, exist_ok=True)
    return path


def committed_checkpoints_dir() -> Path:
    """Small demo checkpoints committed with the repo (read-only for the cache)."""
    return repo_root() / "outputs" / "checkpoints"


@contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path beside ``path``; on success it replaces ``path`` in one rename.

    A failed or interrupted write leaves ``path`` as it was and no temporary file behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():  # only when the write or the rename failed
            tmp.unlink()
