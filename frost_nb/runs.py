"""Where trained runs live (docs/architecture.md, "Runs"), and ``train_or_load``: the one way the
notebooks, the command line and the grids get a trained model."""

from __future__ import annotations

import csv
import functools
import json
import logging
import os
import platform
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from .checkpoint import CheckpointError, lean_state, load_checkpoint, load_model, save_checkpoint
from .config import ConfigError, RunConfig, config_difference, is_run_name, replace_model
from .distributed import join_process_group
from .models import FrostNet, create_model
from .paths import (DamagedInput, cache_dir, check_writable, committed_runs_dir, one_line,
                    restore_hint, run_stores, shown_path, skip_damaged, skip_or_raise, write_atomic)
from . import cost
from .training import TrainingError, TrainResult, pick_device, train

log = logging.getLogger("frost_nb")
CONFIG_FILE, MODEL_FILE, METRICS_FILE = "config.json", "model.pt", "metrics.json"
INDEX_COLUMNS = ("run", "dataset", "model", "backbone", "update", "seed", "epochs", "test_accuracy",
                 "minutes", "hardware")
INDEX_FIX = "python -m frost_nb verdicts --write (it writes the index again from the runs)"
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
    """``data`` as JSON at ``path``, atomically: keys sorted, no spaces, a dict one line per key."""
    dump = lambda v: json.dumps(v, separators=(",", ":"), sort_keys=True)
    text = dump(data) if not isinstance(data, dict) else \
        "{\n" + ",\n".join(f"{dump(k)}:{dump(v)}" for k, v in sorted(data.items())) + "\n}"
    write_atomic(path, text + "\n", "set FROST_CACHE to a writable folder")


def hardware(device: torch.device | str) -> str:
    """What a run trained on (``metrics.json``, the index): the GPU's name, else the CPU's and its threads."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def identity_key(config: RunConfig) -> str:
    """``config.identity()`` as one string (sorted JSON): equal strings, the same run."""
    return json.dumps(config.identity(), sort_keys=True)


def file_stamp(path: Path) -> tuple[str, tuple[int, int]]:
    """``path`` as a string and its modification time and size: the key of a read cached with lru_cache."""
    st = path.stat()
    return str(path), (st.st_mtime_ns, st.st_size)


def damaged_run_file(path: Path, problem: str) -> DamagedInput:
    """The ``DamagedInput`` of ``path``, a file of a run folder (or the folder itself)."""
    folder = path.parent if path.name in (CONFIG_FILE, MODEL_FILE, METRICS_FILE) else path
    fix = (f"delete the local run {shown_path(folder)} (it trains again on its next use)" if _is_local(folder)
           else "train the run again and export it (python -m frost_nb export RUN_FOLDER)")
    return DamagedInput(f"{shown_path(path)}: {problem}; {restore_hint(path, fix)}")


@functools.lru_cache(maxsize=4096)
def _read_config(path: str, stamp: tuple[int, int]) -> tuple[RunConfig, str]:
    """The config in ``path`` and its identity, read again when ``stamp`` changes; else DamagedInput."""
    try:
        config = RunConfig.from_dict(json.loads(Path(path).read_text()))
    except (ConfigError, AttributeError, TypeError, ValueError, OSError, RecursionError) as err:
        raise damaged_run_file(Path(path), f"unreadable run config ({one_line(err)})") from err
    return config, identity_key(config)


def read_config(path: str | os.PathLike) -> RunConfig:
    """The run config in the file ``path`` (a run's ``config.json``); else ``DamagedInput``."""
    return _read_config(*file_stamp(Path(path)))[0]


def read_metrics(folder: str | os.PathLike) -> dict[str, Any]:
    """The ``metrics.json`` of the run folder ``folder``, a dict; else ``DamagedInput``."""
    path = Path(folder) / METRICS_FILE
    try:
        metrics = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as err:  # RecursionError: JSON nested too deep
        raise damaged_run_file(path, f"unreadable run metrics ({one_line(err)})") from err
    if not isinstance(metrics, dict):
        raise damaged_run_file(path, f"run metrics that are a {type(metrics).__name__}, not a JSON object")
    return metrics


def stored_runs(root: Path) -> list[StoredRun]:
    """Every run folder under ``root`` (``<root>/<grid>/<label>/config.json``), by name; an unreadable
    config is a ``DamagedInput`` (inside ``skip_damaged()``: left out, and said so)."""
    found = []  # sorted by name as a string (Path order differs between Python versions)
    for path in sorted(root.glob(f"*/*/{CONFIG_FILE}"), key=lambda p: p.relative_to(root).as_posix()):
        try:
            found.append(StoredRun(path.parent.relative_to(root).as_posix(), path.parent,
                                   *_read_config(*file_stamp(path))))
        except DamagedInput as err:
            skip_or_raise(err)
    return found


def find_run(config: RunConfig, *, finished: bool = True) -> StoredRun | None:
    """The stored run of ``config``, local store first (only finished ones unless ``finished=False``);
    a committed one lacking weights or metrics is a ``DamagedInput``, never silently retrained."""
    want = identity_key(config)
    for run in (r for root in run_stores() for r in stored_runs(root) if r.identity == want):
        if run.finished or not finished:
            return run
        if not _is_local(run.folder):
            missing = [f for f in (MODEL_FILE, METRICS_FILE) if not (run.folder / f).is_file()]
            skip_or_raise(damaged_run_file(run.folder / missing[0], f"the committed run {run.name} "
                                           f"lacks its {' and '.join(missing)}"))
    return None


def run_folder(name: str, *, finished: bool = False, local_first: bool = False) -> Path | None:
    """The folder of the stored run ``name`` (``GRID/LABEL``; with ``finished``, its metrics written):
    the committed one first, or the local one when ``local_first``; None if neither holds it."""
    roots, marker = run_stores()[::1 if local_first else -1], METRICS_FILE if finished else CONFIG_FILE
    return next((root / name for root in roots if (root / name / marker).is_file()), None)


def teacher_folder(config: RunConfig) -> Path:
    """The finished run folder of ``config``'s teacher (``loss.teacher``), local first; else TrainingError."""
    name = config.loss.teacher
    if (folder := run_folder(name, finished=True, local_first=True)) is not None:
        return folder
    raise TrainingError(f"loss.teacher={name!r}: no finished run of that name in the local store "
                        f"({shown_path(cache_dir())}) or in outputs/runs/; train the teacher first (a "
                        "vanilla run of the student's model config, e.g. python -m frost_nb grid families "
                        "--labels vanilla ...) or set loss.teacher to a finished run")


def load_teacher(config: RunConfig, device: str | torch.device = "cpu") -> FrostNet:
    """The frozen teacher of the student ``config`` (docs/method.md section 16), checked to be the
    student's model with one branch per step."""
    try:
        teacher, _ = load_model(teacher_folder(config), device=device)
    except CheckpointError as err:
        raise TrainingError(f"loss.teacher={config.loss.teacher!r} cannot be loaded: {err}") from err
    want = replace_model(config.model, branch_steps="")
    if teacher.config != want:
        differ = config_difference(RunConfig(model=teacher.config), RunConfig(model=want))
        raise ConfigError(f"loss.teacher={config.loss.teacher!r} is not the student's model with one branch "
                          f"per step ({differ}): name a vanilla run of the student's model config")
    return teacher.eval().requires_grad_(False)


def stored_name(config: RunConfig) -> str | None:
    """The name (``<grid>/<label>``) of ``config``'s finished stored run, or None."""
    return run.name if (run := find_run(config)) is not None else None


def default_name(config: RunConfig) -> str:
    """The name of a run trained outside a grid: ``<data set>-<size>-single/<model>-<backbone>-seed<N>``."""
    c = config
    return f"{c.data.name}-{c.size}-single/{c.model.name}-{c.model.backbone}-seed{c.train.seed}"


def check_name(name: str) -> str:
    """``name`` if it is a run name, ``GRID/LABEL`` (two plain folder names); else ConfigError."""
    if not is_run_name(name):
        raise ConfigError(f"run name {name!r} is invalid: expected GRID/LABEL, two folder names, e.g. "
                          "fashion-mnist-demo-single/frost-resnet-seed0")
    return name


def _taken(name: str, config: RunConfig) -> bool:
    """Whether a stored run of another config holds ``name``, here or among the committed runs."""
    for path in (root / name / CONFIG_FILE for root in run_stores()):
        try:
            if path.is_file() and _read_config(*file_stamp(path))[1] != identity_key(config):
                return True
        except DamagedInput as err:
            skip_or_raise(err)  # skipped: the name stays taken
            return True
    return False


def _local_folder(config: RunConfig, name: str | None) -> tuple[str, Path]:
    """Where ``config`` trains: its unfinished local run, else ``name`` (default: its committed run's,
    else ``default_name``) in the local store, with a suffix when another config holds that name."""
    found = find_run(config, finished=False)  # the local store first: a committed one when not local
    if found is not None and _is_local(found.folder):
        return found.name, found.folder
    if name is None:
        name = default_name(config) if found is None else found.name
    candidate, n = check_name(name), 1
    while _taken(candidate, config):
        n += 1
        candidate = f"{name}-{n}"
    return candidate, cache_dir() / candidate


def _is_local(folder: Path) -> bool:  # in the local store (a forecasting run: in its forecast/), not committed
    return folder.parent.parent.resolve() in (cache_dir().resolve(), (cache_dir() / "forecast").resolve())


def _set_aside(checkpoint: Path, err: Exception) -> None:
    """Keep a damaged checkpoint for inspection as ``model.pt.damaged``."""
    aside = checkpoint.with_suffix(".pt.damaged")
    with suppress(FileNotFoundError):  # under torchrun another rank moved it first
        os.replace(checkpoint, aside)
        log.warning("%s; moved it to %s and training again", err, aside)


def discard_local(config: RunConfig) -> None:
    """Delete the checkpoint and metrics of ``config``'s local run (committed runs are never touched)."""
    run = find_run(config, finished=False)
    if run is not None and _is_local(run.folder):
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
    """A trained model (``TrainResult``) for ``config``: from the store, else trained now into the local
    store as ``name`` (``<grid>/<label>``) with a checkpoint every epoch, so an interrupted run resumes."""
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
            if not _is_local(found.folder):
                raise CheckpointError(f"{err} (the committed run {found.name}; retrain=True, --retrain, "
                                      "trains it again in the local store instead)") from err
            _set_aside(found.checkpoint, err)  # then the next stored run, else training
            (found.folder / METRICS_FILE).unlink(missing_ok=True)
    # a student: its teacher is there and fits, before any write (loaded once, handed to the trainer)
    teacher = load_teacher(config) if config.loss.teacher is not None else None
    if (root := cache_dir()).resolve() == committed_runs_dir().resolve():
        raise ConfigError(f"FROST_CACHE={root} is the committed runs' folder: point it at another folder "
                          "(training writes there, and committed runs are never touched)")
    check_writable(root, "trained-model cache", "set FROST_CACHE to a writable folder", folder=True)
    device = pick_device(config.train.device)
    run_cost = cost.estimate(config, device)  # said, and checked against the free memory, before any work
    cost.refuse_if_too_big(config, run_cost, device)
    if retrain:
        discard_local(config)
    name, folder = _local_folder(config, name)
    log.info("%s", "\n".join(f"{name}: {line}" for line in run_cost.text().splitlines()))
    target = folder / MODEL_FILE
    if target.exists():
        try:
            load_checkpoint(target)  # an unfinished run: the trainer resumes it
        except CheckpointError as err:  # damaged: keep it for inspection, train afresh
            _set_aside(target, err)
    main = join_process_group(device)[0].is_main  # under torchrun joined here (train would) before any write
    if main:  # under torchrun rank 0 alone writes, as it writes the checkpoint
        write_json(folder / CONFIG_FILE, config.to_dict())
    result = train(config, checkpoint=target, progress=progress, teacher=teacher)
    record_read(name)
    if main:  # metrics.json: the run's metrics and the hardware it ran on
        store_run(folder, {**result.metrics, "hardware": hardware(result.metrics.get("device", "cpu"))})
    return result


def store_run(folder: Path, metrics: dict[str, Any], *, state: dict[str, Any] | None = None,
              config_file: Path | None = None, files: dict[str, Any] | None = None) -> dict[str, Any]:
    """Store a finished run in ``folder``: its checkpoint ``state`` (tested on the CPU if it lacks test
    metrics), ``config_file`` (never over another run's: CheckpointError), ``files`` (JSON), last
    ``metrics.json`` (``metrics`` over the state's), which marks it finished (returned)."""
    if config_file is not None and (folder / CONFIG_FILE).is_file():
        theirs, ours = read_config(folder / CONFIG_FILE), read_config(config_file)
        if identity_key(theirs) != identity_key(ours):
            raise CheckpointError(f"{folder} holds another run ({config_difference(theirs, ours)}): store "
                                  "it elsewhere (train --name GRID/LABEL, export --to DIR) or move that away")
    (folder / METRICS_FILE).unlink(missing_ok=True)  # until the run is whole it reads as unfinished
    if state is not None:
        if "test_accuracy" not in state["metrics"]:
            state = {**state, "metrics": {**state["metrics"], **_test_metrics(state)}}
        metrics = {**state["metrics"], **metrics}
        save_checkpoint(folder / MODEL_FILE, state, compress=bool(state.get("lean")))
    if config_file is not None:
        write_atomic(folder / CONFIG_FILE, Path(config_file).read_bytes())
    for name, data in (files or {}).items():
        write_json(folder / name, data)
    write_json(folder / METRICS_FILE, metrics)
    return metrics


def run_name(checkpoint: str | os.PathLike | None) -> str | None:
    """The name (``<grid>/<label>``) of the run whose ``model.pt`` is ``checkpoint``, else None."""
    path = None if checkpoint is None else Path(checkpoint).absolute()
    if path is None or path.name != MODEL_FILE or not (path.parent / CONFIG_FILE).is_file():
        return None
    return f"{path.parent.parent.name}/{path.parent.name}"


def export_run(source: str | os.PathLike, target_root: str | os.PathLike | None = None, *,
               weights: str = "float32") -> Path:
    """Copy the finished run folder ``source``, lean, into ``target_root`` (default ``outputs/runs/``)
    and index it; ``weights="bfloat16"`` stores rounded weights with their own test metrics (the float32
    weights' test accuracy kept as ``test_accuracy_float32_weights``)."""
    source = Path(source).resolve()
    if missing := [f for f in (CONFIG_FILE, MODEL_FILE, METRICS_FILE) if not (source / f).is_file()]:
        raise CheckpointError(f"run {source} lacks {', '.join(missing)}: export a finished run folder "
                              "(<store>/<grid>/<label>/ with config.json, model.pt and metrics.json)")
    root = Path(target_root or committed_runs_dir())  # an empty target: the default, as forecasting runs
    folder = root / source.parent.name / source.name
    metrics = read_metrics(source)
    state = load_checkpoint(source / MODEL_FILE, map_location="cpu")
    lean = lean_state(state, weights)
    index_rows(root, but=f"{source.parent.name}/{source.name}")  # the index's other runs, before any write
    if lean.get("weights", "float32") != state.get("weights", "float32"):  # rounded here
        metrics = lean["metrics"] = {**metrics, **_test_metrics(lean),
                                     "test_accuracy_float32_weights": metrics.get("test_accuracy")}
    store_run(folder, metrics, state=lean, config_file=source / CONFIG_FILE)
    write_index(root)
    return folder


def _test_metrics(state: dict[str, Any]) -> dict[str, Any]:
    """The test metrics of the weights in the checkpoint dict ``state``, evaluated on the CPU."""
    from .training import evaluate, load_split, use_amp  # per call: tests patch training.evaluate

    config = RunConfig.from_dict(state["config"])
    model = create_model(config.model)
    model.load_state_dict(state["model"])
    test = evaluate(model.eval(), load_split(config, "test"), batch_size=config.train.eval_batch_size,
                    amp=use_amp(config, torch.device("cpu")))
    return {"test_accuracy": test.accuracy, "test_accuracy_per_step": test.accuracy_per_step(),
            "test_evaluated_on": "cpu", **({"weights": state["weights"]} if "weights" in state else {})}


def index_rows(root: str | os.PathLike, *, but: str | None = None) -> list[dict[str, Any]]:
    """The rows of ``root``'s index (INDEX_COLUMNS), ``but`` left out; a damaged or unfinished run is a
    ``DamagedInput``, even inside ``skip_damaged()``."""
    rows = []
    with skip_damaged(False):
        for run in (r for r in stored_runs(Path(root)) if r.name != but):
            if not run.checkpoint.is_file():
                raise damaged_run_file(run.checkpoint, f"run {run.name} lacks its {MODEL_FILE}")
            m, c = read_metrics(run.folder), run.config
            number = lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))
            if bad := [k for k in ("test_accuracy", "train_seconds") if not number(m.get(k))]:
                raise damaged_run_file(run.folder / METRICS_FILE, f"its {bad[0]} is not a number")
            rows.append({"run": run.name, "dataset": c.data.name, "model": c.model.name,
                         "backbone": c.model.backbone, "update": c.model.update,
                         "seed": c.train.seed, "epochs": c.train.epochs,
                         "test_accuracy": None if (a := m.get("test_accuracy")) is None else round(a, 4),
                         "minutes": None if (s := m.get("train_seconds")) is None else round(s / 60, 1),
                         "hardware": m.get("hardware", m.get("device"))})
    return rows


def index_text(root: str | os.PathLike) -> str:
    """``index.csv`` of the runs under ``root`` as text: a row per run (``index_rows``), sorted by name."""
    return pd.DataFrame(index_rows(root), columns=list(INDEX_COLUMNS)).to_csv(index=False)


def write_index(root: str | os.PathLike) -> Path:
    """Write ``index_text(root)`` to ``root/index.csv``, read whole first."""
    root = Path(root)
    text = index_text(root)
    return write_atomic(root / "index.csv", text)


def read_index(root: str | os.PathLike) -> pd.DataFrame:
    """``root``'s ``index.csv``, checked against its runs (header, whole rows, one per run folder; not
    its values); else a ``DamagedInput``."""
    path = Path(root) / "index.csv"
    damaged = lambda problem: DamagedInput(f"{shown_path(path)}: {problem}; {restore_hint(path, INDEX_FIX)}")
    try:
        lines = list(csv.reader(path.read_text().splitlines(), strict=True))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise damaged(f"unreadable run index ({one_line(err)})") from err
    if not lines or tuple(lines[0]) != INDEX_COLUMNS:
        raise damaged(f"its header is not {','.join(INDEX_COLUMNS)}")
    if short := [i + 1 for i, line in enumerate(lines) if len(line) != len(INDEX_COLUMNS)]:
        raise damaged(f"line {short[0]} has not the {len(INDEX_COLUMNS)} fields of a row (cut off or edited)")
    listed = [line[0] for line in lines[1:]]
    with skip_damaged(False):
        held = [run.name for run in stored_runs(path.parent)]
    if listed != held:
        gone, new = sorted(set(held) - set(listed)), sorted(set(listed) - set(held))
        what = "; ".join(filter(None, (gone and f"{len(gone)} of its runs missing, e.g. {gone[0]}",
                                       new and f"{len(new)} runs that do not exist, e.g. {new[0]}")))
        raise damaged(f"its rows are not the run folders beside it ({what or 'out of order'})")
    try:
        return pd.read_csv(path)
    except (ValueError, pd.errors.ParserError) as err:
        raise damaged(f"unreadable run index ({one_line(err)})") from err
