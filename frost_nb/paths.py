"""Folders of the project, resolved from the package location and moved by environment variables;
``FROST_OFFLINE=1`` refuses every download. Every path goes through one diagnosis, ``path_problem``,
raised before the work as one line naming the path, the cause and the fix."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def shown_path(path: str | os.PathLike | None) -> str | None:
    """``path`` relative to the repository when inside it (metrics stay machine-independent)."""
    if path is None:
        return None
    path, root = Path(path).resolve(), repo_root().resolve()
    return str(path.relative_to(root) if path.is_relative_to(root) else path)


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
    """Where Debian's data set packages install: ``$FROST_SYSTEM_DATA``, else ``/usr/share/datasets``."""
    return Path(os.environ.get("FROST_SYSTEM_DATA") or "/usr/share/datasets").expanduser()


def downloads_allowed() -> bool:
    """False when ``FROST_OFFLINE`` is set to a true value (``make test`` sets it)."""
    return not _env_true("FROST_OFFLINE")


class OutputError(OSError):
    """A destination (a folder, or a file to write) cannot be written; the message names it and
    the fix. An ``OSError``, so code that handles failed writes keeps handling it."""


class DamagedInput(Exception):
    """A file a result or a verdict is read from cannot be read; the message names it, what is wrong and
    how to restore it. Not an ``OSError`` or ``ValueError``, so no handler takes it for a missing input."""


def restore_hint(path: str | os.PathLike, regenerate: str | None = None) -> str:
    """How to get a good ``path`` back: ``git checkout -- FILE`` when git tracks it (FILE relative
    to the repository), else, or besides, ``regenerate`` (the command that writes it again)."""
    path, root = Path(os.path.abspath(path)), repo_root()
    ways = [regenerate] if regenerate else []
    if path.is_relative_to(root):  # any file tracked at or under path (a run folder counts)
        with suppress(OSError, subprocess.SubprocessError):
            if subprocess.run(["git", "ls-files", "--error-unmatch", "--", str(path)], cwd=root,
                              capture_output=True, timeout=10).returncode == 0:
                ways.insert(0, f"git checkout -- {path.relative_to(root).as_posix()}")
    return "restore it: " + " or ".join(ways) if ways else "replace it with a good copy"


def _reason(err: OSError) -> str:  # the system's words, without the path (the message names it)
    known = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk is full",
             errno.EROFS: "a read-only file system"}
    return known.get(err.errno) or err.strerror or str(err) or type(err).__name__


def nearest_existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor; never raises (behind a closed folder counts as missing)."""
    return next(p for p in (path, *path.parents) if os.path.lexists(p) or p == p.parent)


def _unwritable(folder: Path) -> str | None:
    """Why no file can be made in the existing folder ``folder``, or None: probed with a file made
    and deleted (permission bits do not stop root; a read-only file system does)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".frost_nb_write_test", dir=folder)
    except PermissionError:
        return f"no permission to write in {folder}"
    except OSError as err:
        return f"{folder} cannot be written into ({_reason(err)})"
    os.close(fd)
    os.unlink(probe)
    return None


def path_problem(path: str | os.PathLike, *, folder: bool = False, write: bool = True,
                 must_exist: bool = False) -> str | None:
    """Why ``path`` (a file, or with ``folder`` a folder) cannot be written or read, naming the place at
    fault, or None when it can; makes nothing, never raises."""
    path = Path(os.path.abspath(Path(path).expanduser()))
    chain = [*reversed(path.parents), path]
    for parent, place in zip(chain, chain[1:]):
        last = place == path
        try:
            st = os.lstat(place)
        except PermissionError:
            return f"no permission to enter {parent}"
        except FileNotFoundError:
            if must_exist:
                return f"{place} does not exist" if last else f"its folder {place} does not exist"
            return _unwritable(parent) if write else None  # made by the write, in parent
        except OSError as err:
            return f"{place} cannot be looked at ({_reason(err)})"
        if stat.S_ISLNK(st.st_mode):
            try:
                st = os.stat(place)
            except FileNotFoundError:
                return f"{place} is a symbolic link to {os.readlink(place)}, which does not exist"
            except PermissionError:
                return f"no permission to follow the symbolic link {place} (to {os.readlink(place)})"
            except OSError as err:  # a loop of links
                return f"{place} is a symbolic link that cannot be followed ({_reason(err)})"
        if (is_dir := stat.S_ISDIR(st.st_mode)) != (folder or not last):
            return f"{place} is a {'folder, not a file' if is_dir else 'file, not a folder'}"
    # read: the real user's permissions (os.access)
    if (not write or must_exist) and not os.access(path, os.R_OK | (os.X_OK if folder else 0)):
        return f"no permission to read {'the folder ' if folder else ''}{path}"
    return _unwritable(path if folder else path.parent) if write else None


def _why(folder: Path, err: OSError) -> str:
    """Why ``folder`` could not be made or written into: a full disk, its path's problem, or the system's."""
    full = err.errno in (errno.ENOSPC, errno.EDQUOT)
    return (None if full else path_problem(folder, folder=True)) or _reason(err)


def _make_dir(path: Path, variable: str) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"cannot make the folder {path} ({_why(path, err)}): set {variable} to a "
                          "writable folder") from err
    return path


def outputs_dir() -> Path:
    """``$FROST_OUTPUTS``, else a temporary folder in smoke mode, else ``<repo>/outputs``."""
    smoke = Path(tempfile.gettempdir()) / "frost_nb_smoke_outputs"
    default = smoke if smoke_mode() else repo_root() / "outputs"
    return _make_dir(Path(os.environ.get("FROST_OUTPUTS") or default).expanduser(), "FROST_OUTPUTS")


def cache_dir() -> Path:
    """Trained-model cache: ``$FROST_CACHE``, else ``<outputs>/cache`` (git-ignored)."""
    if os.environ.get("FROST_CACHE"):
        return _make_dir(Path(os.environ["FROST_CACHE"]).expanduser(), "FROST_CACHE")
    return _make_dir(outputs_dir() / "cache", "FROST_CACHE (or FROST_OUTPUTS)")


def check_writable(path: str | os.PathLike, what: str, fix: str, *, folder: bool = False) -> Path:
    """Raise ``OutputError`` (naming ``what``, saying ``fix``) unless the file ``path`` (with
    ``folder``: files in the folder ``path``) can be written (``path_problem``). Makes nothing."""
    return check_readable(path, what, fix, folder=folder, must_exist=False, write=True)


def check_readable(path: str | os.PathLike, what: str, fix: str, *, folder: bool = False, write: bool = False,
                   must_exist: bool = True, error: type[Exception] | None = None) -> Path:
    """Raise ``error`` (naming ``what``, saying ``fix``) unless ``path`` can be read (with ``write``: written;
    ``path_problem``); without ``must_exist`` a missing one passes."""
    path = Path(path).expanduser()
    if (problem := path_problem(path, folder=folder, write=write, must_exist=must_exist)) is not None:
        raise (error or OutputError)(f"cannot {'write' if write else 'read'} {what} {path}: {problem}; {fix}")
    return path


def committed_runs_dir() -> Path:
    """The runs committed with the repo, lean exports (``runs.py``; read-only for training)."""
    return repo_root() / "outputs" / "runs"


def run_stores() -> tuple[Path, Path]:
    """Where runs are looked up, in order: the local store (a run trained here wins), then the
    committed runs (what a fresh clone has)."""
    return cache_dir(), committed_runs_dir()


# outputs/partial/: full checkpoints of unfinished runs, committed so that a fresh clone resumes them.
# Its size budget (tests/test_repo_size.py), which bounds one run's checkpoint there (scripts/gpu.py)
PARTIAL = "outputs/partial"
PARTIAL_BUDGET = 16 << 20


@contextmanager
def atomic_path(path: str | os.PathLike, fix: str = "choose a writable place"):
    """Yield a temporary path beside ``path``, which replaces ``path`` in one rename on success; a
    failed write leaves ``path`` as it was, no temporary file, and an ``OutputError`` naming ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        os.replace(tmp, path)
    except OutputError:
        raise
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            fix = f"free some space on its disk, or {fix}"
        raise OutputError(f"cannot write {path} ({_why(path.parent, err)}): {fix}") from err
    finally:
        if os.path.lexists(tmp):  # only when the write or the rename failed
            tmp.unlink()


def write_atomic(path: str | os.PathLike, data: str | bytes, fix: str = "choose a writable place") -> Path:
    """Write ``data`` (text, or bytes) to ``path`` through ``atomic_path`` (``fix`` as there); ``path``."""
    with atomic_path(path, fix) as tmp:
        (tmp.write_bytes if isinstance(data, bytes) else tmp.write_text)(data)
    return Path(path)


_SKIPPING: list[dict[str, None] | None] = []  # skip_damaged's stack: what each open one skipped (None: none)


@contextmanager
def skip_damaged(skip: bool = True) -> Iterator[dict[str, None]]:
    """Within it (``skip``), a reader meeting a damaged file leaves it out instead of stopping (the
    ``--skip-damaged`` option); yields the lines left out. ``skip=False`` stops again inside an outer one."""
    skipped: dict[str, None] = {}
    _SKIPPING.append(skipped if skip else None)
    try:
        yield skipped
    finally:
        _SKIPPING.pop()


def skip_or_raise(err: DamagedInput) -> None:
    """Raise ``err``, a damaged input; inside ``skip_damaged()`` note it (once) and return instead."""
    if not _SKIPPING or _SKIPPING[-1] is None:
        raise err
    _SKIPPING[-1][str(err)] = None


def one_line(err: BaseException) -> str:
    """``err`` as ``Type: message`` on one line (a damaged-input message quotes it)."""
    return f"{type(err).__name__}: {' '.join(str(err).split())}"
