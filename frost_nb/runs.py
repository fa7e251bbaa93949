"""Where trained runs live (docs/architecture.md, "Runs"), and ``train_or_load``: the one way the
notebooks, the command line and the grids get a trained model. Above ``checkpoint.py`` and
``training.py``, so neither imports the other's caller.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pandas as pd
import torch
import torch.distributed as dist

from .checkpoint import CheckpointError, export_lean, load_checkpoint, load_model
from .config import ConfigError, RunConfig, config_difference
from .paths import atomic_path, cache_dir, check_writable, committed_runs_dir
from .training import TrainResult, train

log = logging.getLogger("frost_nb")
CONFIG_FILE, MODEL_FILE, METRICS_FILE = "config.json", "model.pt", "metrics.json"
INDEX_COLUMNS = ("run", "dataset", "model", "backbone", "update", "seed", "epochs", "test_accuracy",
                 "minutes", "hardware")
_READ: dict[str, None] = {}  # run names handed out since the last take_read (what a metrics file read)


@dataclass(frozen=True)
class StoredRun:
    """One run folder: its name (``<grid>/<label>``), where it is, and its config."""

    name: str
    folder: Path
    config: RunConfig
    identity: str  # config.identity() as sorted JSON, what find_run compares

    @property
    def checkpoint(self) -> Path:
        return self.folder / MODEL_FILE

    @property
    def finished(self) -> bool:
        return (self.folder / METRICS_FILE).is_file() and self.checkpoint.is_file()


def write_json(path: Path, data: Any) -> None:
    """``data`` as indented JSON at ``path``, atomically."""
    with atomic_path(path, "set FROST_CACHE to a writable folder") as tmp:
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def identity_key(config: RunConfig) -> str:
    """``config.identity()`` as one string (sorted JSON): equal strings, the same run."""
    return json.dumps(config.identity(), sort_keys=True)


def file_stamp(path: Path) -> tuple[str, tuple[int, int]]:
    """``path`` as a string and what tells a rewritten file from the one read before (modification
    time and size): the arguments of a read cached with ``functools.lru_cache``."""
    st = path.stat()
    return str(path), (st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4096)
def _read_config(path: str, stamp: tuple[int, int]) -> tuple[RunConfig, str] | None:
    """The config in ``path`` and its identity, read again when ``stamp`` (``file_stamp``) changes;
    None, with a warning naming the file, when this code cannot read it."""
    try:
        config = RunConfig.from_dict(json.loads(Path(path).read_text()))
        return config, identity_key(config)
    except (ConfigError, TypeError, ValueError, OSError) as err:
        log.warning("skipping run %s: unreadable config (%s)", Path(path).parent, err)
        return None


def stored_runs(root: Path) -> list[StoredRun]:
    """Every run folder under ``root`` (``<root>/<grid>/<label>/config.json``), by name; a
    config this code cannot read is skipped with a warning naming the file."""
    return [StoredRun(path.parent.relative_to(root).as_posix(), path.parent, *read)
            for path in sorted(root.glob(f"*/*/{CONFIG_FILE}"))
            if (read := _read_config(*file_stamp(path))) is not None]


def find_run(config: RunConfig, *, finished: bool = True) -> StoredRun | None:
    """The stored run of ``config``: the local store first (a run trained here wins), then the
    committed runs (what a fresh clone has); only finished ones unless ``finished=False``."""
    want = identity_key(config)
    return next((run for root in (cache_dir(), committed_runs_dir()) for run in stored_runs(root)
                 if run.identity == want and (run.finished or not finished)), None)


def stored_name(config: RunConfig) -> str | None:
    """The name (``<grid>/<label>``) of ``config``'s finished stored run, or None."""
    return run.name if (run := find_run(config)) is not None else None


def cached_checkpoint(config: RunConfig) -> Path | None:
    """The finished checkpoint of ``config`` (``find_run``), or None."""
    return run.checkpoint if (run := find_run(config)) is not None else None


def default_name(config: RunConfig) -> str:
    """The name of a run trained outside a grid: ``<data set>-<size>-single/<model>-<backbone>-seed<N>``."""
    c = config
    return f"{c.data.name}-{c.size}-single/{c.model.name}-{c.model.backbone}-seed{c.train.seed}"


def check_name(name: str) -> str:
    """``name`` if it is a run name, ``GRID/LABEL`` (two plain folder names); else ConfigError."""
    parts = PurePosixPath(name).parts
    if len(parts) != 2 or name.startswith("/") or any(p in (".", "..") for p in parts) or "\\" in name:
        raise ConfigError(f"run name {name!r} is invalid: expected GRID/LABEL, two folder names, e.g. "
                          "fashion-mnist-demo-single/frost-resnet-seed0")
    return name


def _taken(name: str, config: RunConfig) -> bool:
    """Whether a stored run of another config holds ``name``, here or among the committed runs."""
    paths = (root / name / CONFIG_FILE for root in (cache_dir(), committed_runs_dir()))
    return any(path.is_file() and ((read := _read_config(*file_stamp(path))) is None
                                   or read[1] != identity_key(config)) for path in paths)


def _local_folder(config: RunConfig, name: str | None) -> tuple[str, Path]:
    """Where ``config`` trains: its unfinished local run (it resumes), else ``name`` in the local
    store (default: its committed run's name, so a retrained run keeps it, else ``default_name``),
    with a suffix when another config holds that name, here or among the committed runs."""
    unfinished = find_run(config, finished=False)
    if unfinished is not None and _is_local(unfinished):
        return unfinished.name, unfinished.folder
    if name is None:
        committed = [r for r in stored_runs(committed_runs_dir()) if r.identity == identity_key(config)]
        name = committed[0].name if committed else default_name(config)
    candidate, n = check_name(name), 1
    while _taken(candidate, config):
        n += 1
        candidate = f"{name}-{n}"
    return candidate, cache_dir() / candidate


def _is_local(run: StoredRun) -> bool:
    return run.folder.parent.parent.resolve() == cache_dir().resolve()


def _set_aside(checkpoint: Path, err: Exception) -> None:
    """Keep a damaged checkpoint for inspection as ``model.pt.damaged``."""
    aside = checkpoint.with_suffix(".pt.damaged")
    try:
        os.replace(checkpoint, aside)
    except FileNotFoundError:  # under torchrun another rank moved it first
        return
    log.warning("%s; moved it to %s and training again", err, aside)


def discard_local(config: RunConfig) -> None:
    """Delete the checkpoint and metrics of ``config``'s run in the local store (before training
    it again); its folder and config stay. Committed runs are never touched."""
    run = find_run(config, finished=False)
    if run is not None and _is_local(run):
        (run.folder / METRICS_FILE).unlink(missing_ok=True)
        run.checkpoint.unlink(missing_ok=True)


def record_read(name: str | None) -> None:
    """Note that run ``name`` was handed out: the next metrics written name it (frost_nb.repro.provenance)."""
    if name:
        _READ.setdefault(name, None)


def take_read() -> list[str]:
    """The runs handed out since the last call, in order; forgotten after."""
    names = list(_READ)
    _READ.clear()
    return names


def train_or_load(config: RunConfig, *, name: str | None = None, progress: bool | None = None,
                  retrain: bool = False) -> TrainResult:
    """A trained model (``TrainResult``) for ``config``: from the store when it was trained before,
    else trained now into the local store as ``name`` (``<grid>/<label>``; default ``default_name``),
    with a checkpoint every epoch, so an interrupted run resumes."""
    if name is not None:
        check_name(name)  # before any work
    while (found := None if retrain else find_run(config)) is not None:
        try:
            model, calibrator = load_model(found.checkpoint, expect=config)
            state = load_checkpoint(found.checkpoint)
            record_read(found.name)
            return TrainResult(model, calibrator, state["history"], state.get("metrics", {}), config,
                               found.checkpoint, from_cache=True)
        except CheckpointError as err:
            if not _is_local(found):
                raise CheckpointError(f"{err}: the committed run {found.name} is damaged; restore it "
                                      f"(git checkout -- {found.folder}) or train it with retrain") from err
            _set_aside(found.checkpoint, err)  # then the next stored run, else training
            (found.folder / METRICS_FILE).unlink(missing_ok=True)
    if (root := cache_dir()).resolve() == committed_runs_dir().resolve():
        raise ConfigError(f"FROST_CACHE={root} is the committed runs' folder: point it at another folder "
                          "(training writes there, and committed runs are never touched)")
    check_writable(root, "trained-model cache", "set FROST_CACHE to a writable folder", folder=True)
    if retrain:
        discard_local(config)
    name, folder = _local_folder(config, name)
    target = folder / MODEL_FILE
    if target.exists():
        try:
            load_checkpoint(target)  # an unfinished run: the trainer resumes it
        except CheckpointError as err:  # damaged: keep it for inspection, train afresh
            _set_aside(target, err)
    main = not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
    if main:  # under torchrun rank 0 alone writes, as it writes the checkpoint
        write_json(folder / CONFIG_FILE, config.to_dict())
    result = train(config, checkpoint=target, progress=progress)
    record_read(name)
    if main:  # metrics.json: the run's metrics and the hardware it ran on
        hardware = torch.cuda.get_device_name() if str(result.metrics.get("device", "")).startswith("cuda") \
            else f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
        write_json(folder / METRICS_FILE, {**result.metrics, "hardware": hardware})
    return result


def run_name(checkpoint: str | os.PathLike | None) -> str | None:
    """The name (``<grid>/<label>``) of the run whose ``model.pt`` is ``checkpoint``, else None."""
    path = None if checkpoint is None else Path(checkpoint).absolute()
    if path is None or path.name != MODEL_FILE or not (path.parent / CONFIG_FILE).is_file():
        return None
    return f"{path.parent.parent.name}/{path.parent.name}"


def export_run(source: str | os.PathLike, target_root: str | os.PathLike | None = None) -> Path:
    """Copy the finished local run folder ``source``, lean, into ``target_root/<same name>`` (default
    ``outputs/runs/``, what gets committed), regenerate the index there; return the new folder."""
    source = Path(source).resolve()
    if missing := [f for f in (CONFIG_FILE, MODEL_FILE, METRICS_FILE) if not (source / f).is_file()]:
        raise CheckpointError(f"run {source} lacks {', '.join(missing)}: export a finished run folder "
                              "(<store>/<grid>/<label>/ with config.json, model.pt and metrics.json)")
    root = Path(target_root) if target_root is not None else committed_runs_dir()
    folder = root / source.parent.name / source.name
    if (folder / CONFIG_FILE).is_file():
        theirs = RunConfig.from_dict(json.loads((folder / CONFIG_FILE).read_text()))
        ours = RunConfig.from_dict(json.loads((source / CONFIG_FILE).read_text()))
        if identity_key(theirs) != identity_key(ours):
            raise CheckpointError(f"{folder} holds another run ({config_difference(theirs, ours)}): "
                                  "train this one under another name (--name GRID/LABEL) to export it")
    (folder / METRICS_FILE).unlink(missing_ok=True)  # until the export is whole it reads as unfinished
    export_lean(source / MODEL_FILE, folder / MODEL_FILE)
    for name in (CONFIG_FILE, METRICS_FILE):  # metrics.json last: it marks the run finished
        with atomic_path(folder / name) as tmp:
            shutil.copyfile(source / name, tmp)
    write_index(root)
    return folder


def write_index(root: str | os.PathLike | None = None) -> Path:
    """``index.csv`` of the runs under ``root`` (default ``outputs/runs/``): one row per run
    (INDEX_COLUMNS; minutes of training, test accuracy at full depth), sorted by name."""
    root = Path(root) if root is not None else committed_runs_dir()
    rows = []
    for run in stored_runs(root):
        try:
            m = json.loads((run.folder / METRICS_FILE).read_text()) if run.finished else {}
        except (OSError, ValueError) as err:
            log.warning("index: %s has an unreadable %s (%s)", run.name, METRICS_FILE, err)
            m = {}
        c, accuracy = run.config, m.get("test_accuracy")
        rows.append({"run": run.name, "dataset": c.data.name, "model": c.model.name,
                     "backbone": c.model.backbone, "update": c.model.update, "seed": c.train.seed,
                     "epochs": c.train.epochs,
                     "test_accuracy": None if accuracy is None else round(accuracy, 4),
                     "minutes": round(m["train_seconds"] / 60, 1) if "train_seconds" in m else None,
                     "hardware": m.get("hardware", m.get("device"))})
    path = root / "index.csv"
    with atomic_path(path) as tmp:
        pd.DataFrame(rows, columns=list(INDEX_COLUMNS)).to_csv(tmp, index=False)
    return path
