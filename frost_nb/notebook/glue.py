"""Notebook glue (docs/architecture.md): parameter validation, the smoke switch (``FROST_SMOKE=1``:
nbval cannot pass parameters), the environment record, metrics JSON and byte-stable figures."""

from __future__ import annotations

import io
import json
import math
import platform
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import torch

from ..checkpoint import checkpoint_config, load_model
from ..config import BACKBONES, MODELS, SEED_MAX, SIZES, make_config
from ..data.datasets import DATASETS
from ..inputs import ParameterError
from ..models import create_model
from ..paths import cache_dir, check_writable, outputs_dir, smoke_mode, write_atomic
from ..repro import provenance as provenance
from ..repro.grids import BUNDLES
from ..runs import train_or_load
from ..training import pick_device


def _count(most: int, what: str, note: str = "") -> tuple[type, Any, str]:
    """The rule of a count from 1 to ``most``: past it a value is a typo, not a setting (unchecked,
    examples=-3 drew a 50,902 px wide figure in notebook 05)."""
    return int, lambda v: 1 <= v <= most, f"a number of {what} from 1 to {most}{note}"


# notebook 04's sections, each reading its own grid of runs ("alpha": the frost runs of 02)
ABLATION_SECTIONS = ("alpha", "hurst", "loss", "tuning", "update", "conflict", "adopted")


def sections_suffix(sections: tuple[str, ...]) -> str:
    """What notebook 04 appends to its metrics name when it runs only some sections
    (``_alpha-loss``): a partial file never replaces a whole one."""
    return "" if set(sections) == set(ABLATION_SECTIONS) else "_" + "-".join(sections)


# name -> (type, check, what is expected): every parameter of every notebook. The check runs only
# on a value of the right type; a notebook's parameters cell annotates each parameter with one of
# these types (tests/test_notebook_params.py holds the two together).
_RULES: dict[str, tuple[type | tuple[type, ...], Any, str]] = {
    "dataset": (str, lambda v: v in DATASETS, f"one of the data sets {tuple(DATASETS)}"),
    "model": (str, lambda v: v in MODELS, f"one of {MODELS}"),
    "backbone": (str, lambda v: v in BACKBONES, f"one of {BACKBONES}"),
    "size": (str, lambda v: v in SIZES, f"one of {SIZES}"),
    "epochs": ((int, type(None)), lambda v: v is None or v >= 1,
               "a positive number of epochs, or None for the size's default"),
    "seed": (int, lambda v: 0 <= v <= SEED_MAX, f"a seed from 0 to {SEED_MAX} (2**64 - 1)"),
    "quantile": ((int, float), lambda v: 0.0 <= v <= 1.0, "a quantile in [0, 1]"),  # NaN fails both
    "retrain": (bool, lambda v: True, "True or False"),
    "checkpoint": ((str, type(None)), lambda v: v is None or v.strip() != "",
                   "the path of a checkpoint file (.pt), or None"),
    "seeds": _count(10, "seeds"),  # per model family: each one trains every family again
    "samples": ((int, type(None)), lambda v: v is None or v >= 1,
                "a positive number of test images, or None for the whole test split"),
    # images per run whose step Jacobians 02 estimates (at most a CIFAR test split)
    "jvp_samples": _count(10_000, "test images", " (each costs a power iteration per step)"),
    "bundle": (str, lambda v: v in BUNDLES, f"one of {BUNDLES} (docs/method.md section 5.5)"),
    "compare_bundle": ((str, type(None)), lambda v: v is None or v in BUNDLES,
                        f"one of {BUNDLES} to set beside the model's own bundle, or None"),
    # every part a section, none twice: as many distinct known parts as parts (commas + 1)
    "sections": (str, lambda v: len({p.strip() for p in v.split(",")} & {*ABLATION_SECTIONS}) > v.count(","),
                 f"a comma-separated subset of {ABLATION_SECTIONS}"),
    "models": ((str, type(None)), lambda v: v is None or all(p.strip() for p in v.split(",")),
               "comma-separated model families of the grid (e.g. 'frost,basic_ssm'), or None for all"),
    "vit_checkpoint": ((str, type(None)), lambda v: v is None or v.strip() != "",
                       "the path of a ViT frost checkpoint file (.pt), or None"),
    "examples": _count(64, "images"),  # per row of 05's earliest / latest exits
    "windows": _count(16, "test windows (a panel each)"),
    "batch_size": _count(256, "images per batch"),  # timed in 06 (the paper's training batch)
    "repeats": _count(20, "timed rounds"),  # in 06 (medians: a few suffice)
    "throughput_samples": (int, lambda v: v >= 1, "a positive number of test images"),
}
_RULES.update({alias: _RULES[name] for alias, name in (("collapse_dataset", "dataset"), ("twin_size", "size"),
               ("throughput_dataset", "dataset"), ("throughput_repeats", "repeats"))})  # renamed rules


# The data set and size each notebook's committed outputs are on (another one's are written beside them).
# Notebook 07's collapse section has its own ("07 collapse", its parameter collapse_dataset): its
# 18 runs stay on digits when the rules move to another data set.
COMMITTED_DATASETS = {"02": "cifar100", "03": "cifar100", "04": "fashion-mnist", "05": "cifar100",
                      "07": "cifar100", "07 collapse": "digits", "08": "cifar100", "09": "cifar100",
                      "10": "cifar100"}
COMMITTED_SIZE = "demo"
# at the paper's structure; demo elsewhere
COMMITTED_SIZES = {"02": "ladder64", "03": "ladder64", "05": "ladder64", "07": "ladder64", "08": "ladder64"}


def output_suffix(notebook: str, dataset: str | None = None, bundle: str = "adopted",
                  size: str | None = None) -> str:
    """What a notebook appends to its figure and metrics names: ``_<dataset>`` off its committed data set
    (COMMITTED_DATASETS), ``_<size>`` off its committed size there (COMMITTED_SIZES, else
    COMMITTED_SIZE), then ``_<bundle>`` off the adopted bundle.

    >>> output_suffix("05", "cifar100"), output_suffix("05", "digits", "residual", size="smoke")
    ('', '_digits_smoke_residual')
    >>> output_suffix("05", "cifar100", size="demo"), output_suffix("05", "cifar100", size="ladder64")
    ('_demo', '')
    """
    given = {"dataset": dataset, "size": size}
    validate_params(bundle=bundle, **{k: v for k, v in given.items() if v is not None})
    other = dataset is not None and dataset != COMMITTED_DATASETS.get(notebook, dataset)
    committed = COMMITTED_SIZE if other else COMMITTED_SIZES.get(notebook, COMMITTED_SIZE)
    return (f"_{dataset}" if other else "") + (f"_{size}" if size not in (None, committed) else "") \
        + ("" if bundle == "adopted" else f"_{bundle}")


def metrics_name(base: str, bundle: str, dataset: str | None = None, size: str | None = None) -> str:
    """The metrics file of notebook ``base`` (e.g. "05_halting") for ``bundle``, ``dataset`` and
    ``size``: ``base`` plus ``output_suffix``."""
    return base + output_suffix(base[:2], dataset, bundle, size)


def validate_params(**params: Any) -> dict[str, Any]:
    """Check notebook parameters by name (``_RULES``), type and range (a wrong type is named too);
    returns them unchanged, else a ``ParameterError`` naming the parameter and what it expects."""
    for name, value in params.items():
        if name not in _RULES:
            raise ParameterError(f"unknown parameter {name!r}; known: {sorted(_RULES)}")
        kind, ok, expected = _RULES[name]
        # True is an int to Python, never an epoch count to us
        wrong_type = not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool)
        if wrong_type or not ok(value):  # the check runs only on a value of the right type
            raise ParameterError(f"parameter {name}={value!r} is invalid: expected {expected}"
                                 + (f", not a {type(value).__name__}" if wrong_type else ""))
    return params


# What FROST_SMOKE=1 sets whatever a notebook's parameters say (a smoke run: seconds, digits
# only, as CI has no other data set) ...
SMOKE_VALUES = {"size": "smoke", "twin_size": "smoke", "dataset": "digits", "collapse_dataset": "digits",
                "throughput_dataset": "digits", "epochs": None}  # epochs: the smoke size's own
# ... and the counts it caps, per notebook (None, "all of them", is capped too)
SMOKE_CAPS = {"02": {"seeds": 1, "jvp_samples": 8}, "03": {"seeds": 1, "samples": 40}, "04": {"seeds": 1},
              "05": {"seeds": 2}, "07": {"seeds": 2, "throughput_samples": 64, "throughput_repeats": 1},
              "08": {"seeds": 1, "throughput_samples": 64, "throughput_repeats": 1},
              "09": {"seeds": 1, "samples": 40, "jvp_samples": 8}, "10": {"seeds": 2, "samples": 64}}


def setup(notebook: str, **params: Any) -> SimpleNamespace:
    """The one preamble of every notebook: its parameters checked (``validate_params``), then, under
    ``FROST_SMOKE=1``, shrunk (``SMOKE_VALUES``, ``SMOKE_CAPS``); returned as attributes with ``smoke``."""
    validate_params(**params)
    if typed := params.get("sections"):  # notebook 04: "loss, alpha" -> ("alpha", "loss")
        params["sections"] = tuple(s for s in ABLATION_SECTIONS if s in "".join(typed.split()).split(","))
    if smoke_mode():
        params.update({k: v for k, v in SMOKE_VALUES.items() if k in params})
        params.update({k: cap if params[k] is None else min(params[k], cap)
                       for k, cap in SMOKE_CAPS.get(notebook, {}).items() if k in params})
    # before any work: every notebook writes figures and metrics there, and reads the trained
    # runs from the cache (an OutputError naming the folder, the cause and the variable to set)
    check_writable(outputs_dir(), "outputs folder", "set FROST_OUTPUTS to a writable folder", folder=True)
    cache_dir()
    return SimpleNamespace(notebook=notebook, smoke=smoke_mode(), **params)


def trained_frost(checkpoint: str | None, size: str, dataset: str | None, default=None, *,
                  backbone: str | None = None, param: str = "checkpoint"):
    """``(config, model, calibrator)`` of the model a notebook studies: the checkpoint when one is given,
    else ``default`` (a RunConfig; None: FROST at the size's defaults on ``dataset``) from the stored runs
    (``train_or_load``). A checkpoint that is not FROST with a trained halting head (on ``backbone``, when
    given) is a ``ParameterError`` naming the parameter ``param``. Smoke mode checks the checkpoint, then
    studies ``default`` or the smoke FROST on digits instead (CI has no other data set)."""
    if checkpoint is not None:
        config = checkpoint_config(checkpoint)  # a missing or damaged file is an error, smoke or not
        model = config.model
        held = f"({model.name}/{model.backbone} on {config.data.name})"
        for wrong, holds, instead in (  # the first that is wrong is named
                (model.name != "frost", f"a {model.name!r} model {held}, not 'frost': this notebook studies "
                 "FROST's halting head", "a frost checkpoint"),
                (not config.loss.halting_trained, "a frost model whose halting head was never trained "
                 "(loss.ranking and loss.ponder both off, as in the 'frost (no ranking)' control): its exits "
                 "would come from an untrained head",
                 "a frost checkpoint trained with the ranking losses or PonderNet's"),
                (backbone not in (None, model.backbone), f"frost on the {model.backbone!r} backbone {held}, "
                 f"not {backbone!r}",
                 f"a {backbone} frost checkpoint (frost_nb.repro.grids.grid('{backbone}'))")):
            if wrong:
                raise ParameterError(f"parameter {param}={checkpoint!r} holds {holds}. Pass {instead}, "
                                     f"or {param}=None")
        if not smoke_mode():
            return (config, *load_model(checkpoint))
        print(f"smoke mode: {checkpoint} is not used; a smoke FROST on digits stands in for it")
    config = default if default is not None else make_config(size, None if smoke_mode() else dataset, "frost")
    result = train_or_load(config)
    return config, result.model, result.calibrator


def environment(device: str | None = None) -> dict[str, Any]:
    """What a result was computed with: versions, device, machine, commit."""
    return {"torch": torch.__version__, "python": platform.python_version(),
            "device": device or str(pick_device("auto")),
            "cpu_threads": torch.get_num_threads(), "machine": platform.machine(),
            "commit": provenance.commit()}  # "<commit>-dirty": a result made before its commit


def _atomic_write(path: Path, data: bytes) -> Path:
    return write_atomic(path, data, "set FROST_OUTPUTS to a writable folder")


def metrics_text(record: dict[str, Any]) -> str:
    """``record`` as a metrics file stores it: strict JSON, one line per top-level key, no spaces (a
    third of the bytes of indented JSON; a diff still names the keys that changed)."""
    dump = lambda v: json.dumps(v, separators=(",", ":"), default=float, allow_nan=False)
    return "{\n" + ",\n".join(f"{dump(k)}:{dump(v)}" for k, v in record.items()) + "\n}\n"


def write_metrics(name: str, metrics: dict[str, Any], device: str | None = None) -> Path:
    """Write ``outputs/metrics/<name>.json`` atomically (``metrics_text``; non-finite numbers as null) with
    the environment (``env``) and the runs it was computed from (``provenance.make``). A file that holds
    the same results already keeps its record, so a re-executed notebook leaves the tree clean."""
    record = {**metrics, "provenance": provenance.make(metrics), "env": environment(device)}
    scalar = lambda v: v.item() if getattr(v, "ndim", 1) == 0 else float(v)  # numpy / torch scalars
    record = json.loads(json.dumps(record, default=scalar), parse_constant=lambda _: None)  # non-finite: null
    path = outputs_dir() / "metrics" / f"{name}.json"
    if path.is_file():
        try:
            old = json.loads(text := path.read_text())
        except (OSError, ValueError):
            old = None
        # equal once the environment is set aside, numbers within float32 rounding (a reduction on
        # another thread count or device moves the last digits, not the result)
        # the commit aside too: the same runs and numbers at a later commit are the same record
        # both are JSON values already (the record through its round trip above)
        strip = lambda d: {k: ({f: v.get(f) for f in ("runs", "settings")} if k == "provenance"
                               and isinstance(v, dict) else v) for k, v in d.items() if k != "env"}
        if isinstance(old, dict) and _close(strip(old), strip(record)):
            return path if metrics_text(old) == text else _atomic_write(path, metrics_text(old).encode())
    return _atomic_write(path, metrics_text(record).encode())


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
        return numbers and math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    return a == b


def records(table) -> list[dict[str, Any]]:
    """A table (pandas) as JSON-ready records, its index as the first column(s)."""
    return table.reset_index().to_dict(orient="records")


def figure_png(fig, dpi: int = 110, compact: bool = True) -> bytes:
    """A matplotlib figure as PNG bytes, byte-stable (no date, no version), whatever the backend. ``compact``,
    for what is stored (a widget's live redraw skips it): 256 colours (median cut, no dither: a plot's flat
    colours and a colormap's 256 steps survive) recompressed by oxipng, half the bytes, deterministic."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    if not compact:
        return buf.getvalue()
    import oxipng
    from PIL import Image

    image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
        buf := io.BytesIO(), format="png")
    return oxipng.optimize_from_memory(buf.getvalue(), level=2)


def save_figure(fig, name: str) -> Path:
    """Save a figure as ``outputs/figures/<name>.png`` (``figure_png``), close it, and show that
    PNG inline in a notebook kernel, so a committed notebook holds every figure it saves (closed
    first: matplotlib's inline backend would otherwise show it a second time)."""
    import matplotlib.pyplot as plt

    png = figure_png(fig)
    plt.close(fig)
    path = _atomic_write(outputs_dir() / "figures" / f"{name}.png", png)
    ipython = sys.modules.get("IPython")  # imported wherever a kernel runs; a script need not import it
    if ipython is not None and getattr(ipython.get_ipython(), "kernel", None) is not None:  # not a terminal
        from IPython.display import Image, display

        display(Image(data=png, format="png"))
    return path


def forward_check(size: str = "demo", dataset: str | None = None, batch: int = 2):
    """A forward pass of every model family and backbone on random input: shapes and sizes, as a
    pandas table (one row per model) for notebook 00."""
    rows = []
    for backbone in BACKBONES:
        for name in MODELS:
            cfg = make_config(size, dataset, name, backbone).model
            torch.manual_seed(0)
            model = create_model(cfg).eval()
            with torch.no_grad():
                out = model(torch.randn(batch, cfg.in_channels, cfg.image_size, cfg.image_size))
            alpha = model.alpha()
            rows.append({"backbone": backbone, "model": name, "steps": cfg.steps,
                         "params": model.num_parameters(),
                         "logits": tuple(out.logits.shape), "halting": tuple(out.halt_logits.shape),
                         "alpha": None if alpha is None else round(alpha.item(), 4)})
    return pd.DataFrame(rows)


def strip_execution_metadata(path) -> bool:
    """Drop the per-cell run timestamps (and any papermill metadata) that executing a notebook
    adds, so that committed notebooks differ only where their outputs do. True if it changed."""
    path = Path(path)
    nb = json.loads(path.read_text())
    changed = nb.get("metadata", {}).pop("papermill", None) is not None
    for cell in nb["cells"]:
        for key in ("execution", "papermill"):
            changed |= cell.get("metadata", {}).pop(key, None) is not None
    if changed:
        _atomic_write(path, (json.dumps(nb, indent=1, ensure_ascii=False) + "\n").encode())
    return changed
