"""Which runs a metrics file was computed from: its ``provenance`` record (a CSV's in a sidecar), with
``commit``, ``runs`` (named in ``RUN_FIELDS`` or handed out since the last write) and their ``settings``."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Iterable

from ..config import RunConfig
from ..paths import cache_dir, committed_runs_dir, repo_root
from ..runs import read_config, run_folder
from ..runs import take_read as _take_read
from .grids import bundle_of, family_of

# the fields that tell the committed runs apart (section.field of RunConfig), besides the bundle
SETTINGS = ("data.name", "size", "model.name", "model.backbone", "model.update", "model.init_state",
            "model.alpha_param", "model.learn_hurst", "model.hurst_param", "model.hurst",
            "model.scaled_inside", "model.steps", "loss.ranking", "loss.lambda_rel", "loss.lambda_abs",
            "loss.rank_pairs", "loss.rank_frac", "train.epochs", "train.seed")
RUN_FIELDS = ("key", "checkpoint", "name", "run")  # fields of a metrics record that may name a run


def commit() -> str:
    """``git describe --always --dirty`` of the repository ("unknown" outside git)."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=repo_root(),
                              capture_output=True, text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def as_run_name(value: Any) -> str | None:
    """``value`` as a stored run's name: a ``<grid>/<label>`` or a path to a run's ``model.pt``."""
    if not isinstance(value, str) or "/" not in value or "\n" in value or len(value) > 300:
        return None
    path = Path(value)
    path = path.parent if path.name == "model.pt" else path
    name = "/".join(path.parts[-2:])
    return name if len(path.parts) >= 2 and run_folder(name) is not None else None


def settings_of(cfg: RunConfig, label: str | None = None) -> dict[str, Any]:
    """The settings that tell ``cfg``'s run apart from the others, with its bundle and ``label``
    (the grid label the metrics give it, when known)."""
    flat, short = cfg.flat(), {"data.name": "dataset", "model.name": "model", "size": "size"}
    return {"label": label, "bundle": bundle_of(cfg),
            **{short.get(key, key.partition(".")[2]): flat[key] for key in SETTINGS}}


def config_of(name: str) -> RunConfig:
    """The config of the stored run ``name``; a damaged one is a ``DamagedInput`` naming its file
    (a metrics file is never written with a run's settings missing)."""
    if (folder := run_folder(name)) is None:
        raise FileNotFoundError(f"no stored run {name!r} in {committed_runs_dir()} or {cache_dir()}")
    return read_config(folder / "config.json")


def named_runs(record: Any) -> dict[str, str | None]:
    """run name -> label of every run ``record`` names (walking dicts and lists); the label is
    the ``run`` or ``model`` field beside the name, without its seed tag."""
    found: dict[str, str | None] = {}
    if isinstance(record, dict):
        here = record.get("run") if isinstance(record.get("run"), str) else record.get("model")
        here = family_of(here) if isinstance(here, str) and as_run_name(here) is None else None
        for key, value in record.items():
            if isinstance(value, (dict, list)):
                found |= {name: lab for name, lab in named_runs(value).items() if name not in found}
            elif (name := as_run_name(value)) is not None:  # beside its label, or a {"label": "<run>"} map
                found.setdefault(name, here if key in RUN_FIELDS else family_of(key))
    elif isinstance(record, list):
        for item in record:
            found |= {name: lab for name, lab in named_runs(item).items() if name not in found}
    return found


def make(record: dict[str, Any], runs: Iterable[str] | dict[str, str | None] = (), *,
         take_read: bool = True) -> dict[str, Any]:
    """The provenance of ``record``: the runs it names, ``runs`` (names, or name -> label) and, with
    ``take_read``, those handed out since the last call (then forgotten)."""
    found = named_runs(record)
    extra = runs if isinstance(runs, dict) else dict.fromkeys(runs)
    # a run read from a store no longer in reach (FROST_CACHE changed since) is not this record's
    read = [n for n in (_take_read() if take_read else []) if run_folder(n) is not None]
    found |= {n: label for n, label in {**dict.fromkeys(read), **extra}.items() if found.get(n) is None}
    names = sorted(found)
    return {"commit": commit(), "runs": names,
            "settings": {n: settings_of(config_of(n), found[n]) for n in names}}
