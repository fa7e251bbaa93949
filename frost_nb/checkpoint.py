"""Checkpoints: the file format, atomic saves, loading, and the lean exports that ``outputs/runs/``
commits (they load and evaluate, but do not resume), as docs/architecture.md, "Checkpoints" describes."""

from __future__ import annotations

import hashlib
import io
import lzma
import os
import re
from pathlib import Path
from typing import Any, NamedTuple

import torch

from .config import ConfigError, ModelConfig, RunConfig
from .halting import HaltingCalibrator
from .models import create_model
from .paths import OutputError, atomic_path, check_readable, repo_root, restore_hint

FORMAT = 2  # bump when the layout of the checkpoint dict changes (2: the config stored whole, every field)
XZ_MAGIC = b"\xfd7zXZ\x00"  # the first bytes of an xz stream: a compressed checkpoint
LEAN_STEP_POINTS = 1000  # per-step history points kept in a lean export
_RESUME_ONLY = ("optimizer", "scheduler", "rng", "within_epoch")  # what only resuming needs
LEAN_WEIGHTS = ("float32", "bfloat16")  # how a lean export may store the floating-point weights
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# sentences of torch's load errors that advise what we refuse on purpose (weights_only=False
# runs the file's code) or what only a library author can do
_ADVICE = ("weights_only", "safe_globals", "please", "documentation", "file an issue", "trusted source")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, damaged, or not the one that was asked for."""


def weights_digest(model: torch.nn.Module) -> str:
    """SHA-256 of ``model``'s state dict (every tensor's name, dtype, shape and bytes): what a
    student's checkpoint records of its teacher, so that resuming against other weights is refused."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any], *, compress: bool = False) -> Path:
    """Write ``state`` to ``path`` atomically; ``OutputError`` naming ``path`` when the system refuses
    the write. ``compress``: torch's bytes xz-compressed (lean exports; ``XZ_MAGIC`` marks them)."""
    try:
        # through a Python file, so that a failed write is the system's error (a full disk says so),
        # not the "unexpected pos" of torch's own file writer; the bytes are the same
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            buffer = io.BytesIO() if compress else f
            torch.save({"format": FORMAT, **state}, buffer)
            if compress:
                f.write(lzma.compress(buffer.getvalue()))
    except RuntimeError as err:  # torch's file writer reports a refused write so
        raise OutputError(f"cannot write checkpoint {path} ({_torch_reason(err)}): choose a "
                          "writable place") from err
    return Path(path)


def _torch_reason(err: BaseException) -> str:
    """The first meaningful line of a torch error, without colour codes or advice; else the error's type."""
    text = _ANSI.sub("", str(err))
    _, marker, detail = text.partition("WeightsUnpickler error:")  # what the unpickler refused
    for line in (detail if marker else text).splitlines():
        sentences = [s for s in re.split(r"(?<=\.)\s+", line.strip())
                     if s and not any(a in s.lower() for a in _ADVICE)]
        if sentences:
            return " ".join(sentences)
    return type(err).__name__


def lean_state(state: dict[str, Any], weights: str = "float32") -> dict[str, Any]:
    """A finished run's checkpoint dict without what only resuming needs, its history thinned to
    ``LEAN_STEP_POINTS`` steps; ``weights="bfloat16"`` rounds the weights (``load_model`` widens them)."""
    if not state.get("complete"):
        raise CheckpointError("only a finished run can be exported lean (this one would need resuming)")
    if weights not in LEAN_WEIGHTS:
        raise CheckpointError(f"weights={weights!r}: a lean export stores them as one of {LEAN_WEIGHTS}")
    steps = state["history"].get("steps", {})
    n = len(steps.get("step", ()))
    if n > LEAN_STEP_POINTS and not state.get("lean"):  # a lean export is thinned once (idempotent)
        keep = {round(i * (n - 1) / (LEAN_STEP_POINTS - 1)) for i in range(LEAN_STEP_POINTS)}
        for key in ("alpha", "hurst"):  # their extremes are what the alpha tables report
            if series := [v for v in steps.get(key, ()) if v == v]:  # NaN-free (hurst is NaN when fixed)
                keep |= {steps[key].index(min(series)), steps[key].index(max(series))}
        steps = {k: [v[i] for i in sorted(keep)] for k, v in steps.items()}
    # as tensors, losslessly (float32 where every value is one: half the bytes of pickled floats);
    # load_checkpoint turns them back into lists
    history = {**state["history"], "steps": {k: _as_tensor(v) for k, v in steps.items()}}
    lean = {k: v for k, v in state.items() if k not in _RESUME_ONLY and k != "format"}
    if weights == "bfloat16":
        lean["model"] = {k: v.to(torch.bfloat16) if v.is_floating_point() else v
                         for k, v in state["model"].items()}
        lean["weights"] = weights
    return {**lean, "history": history, "lean": True}


def _as_tensor(series: list) -> torch.Tensor | list:
    """A numeric series as a tensor giving back exactly its values (int64, float32 or float64), else as is."""
    if not series or not all(type(v) in (int, float) for v in series):  # bools, None, lists: as they are
        return series
    try:
        wide = torch.tensor(series, dtype=torch.float64 if float in map(type, series) else None)
    except (TypeError, ValueError, RuntimeError):
        return series
    narrow = wide.float().double()
    if wide.dtype == torch.float64 and ((narrow == wide) | (wide.isnan() & narrow.isnan())).all():
        return wide.float()
    return wide


def checkpoint_file(path: str | os.PathLike) -> Path:
    """``path``, a run folder meaning its ``model.pt``; a relative path missing from the working
    directory is looked up in the repository (a notebook in ``notebooks/`` names ``outputs/...``)."""
    path = Path(path).expanduser()  # os.path's tests: False, never an error, behind a folder not to enter
    if not path.is_absolute() and not os.path.lexists(path) and os.path.lexists(repo_root() / path):
        path = repo_root() / path
    return path / "model.pt" if os.path.isdir(path) and os.path.isfile(path / "model.pt") else path


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The checkpoint dict at ``path`` (``checkpoint_file``); CheckpointError if missing or damaged."""
    path = checkpoint_file(path)
    if os.path.isdir(path):
        raise CheckpointError(f"checkpoint {path} is a folder without a model.pt: pass a run folder "
                              "or the path of a .pt file (python -m frost_nb train ... writes one)")
    check_readable(path, "checkpoint", "train a model first (python -m frost_nb train ...) or pass the path "
                   "of an existing .pt file", error=CheckpointError)
    try:
        with open(path, "rb") as f:  # compressed (XZ_MAGIC) or torch's own bytes
            head = f.read(len(XZ_MAGIC))
            data = io.BytesIO(lzma.decompress(head + f.read())) if head == XZ_MAGIC else path
        # weights_only: a checkpoint is data (tensors, numbers, strings, bytes), never code; the
        # global bytes too: pickle writes an empty bytes so (an empty calibrator, saved within epoch 1)
        with torch.serialization.safe_globals([bytes]):
            state = torch.load(data, map_location=map_location, weights_only=True)
        if isinstance(state, dict) and state.get("calibrator"):  # its sketch read here: bytes damaged in an
            HaltingCalibrator.from_bytes(state["calibrator"])  # uncompressed file (no checksum) fail here
    except Exception as err:  # a damaged or foreign file: torch's loader raises almost any type for one
        hint = restore_hint(path)  # git's copy of a committed checkpoint, else a new training
        fix = hint if "git checkout" in hint else "delete it and train again"
        raise CheckpointError(f"checkpoint {path} is damaged or not a frost_nb checkpoint "
                              f"({type(err).__name__}: {_torch_reason(err)}); {fix}") from err
    if not isinstance(state, dict) or "config" not in state or "model" not in state:
        raise CheckpointError(f"checkpoint {path} is not a frost_nb checkpoint (no config or weights)")
    if state.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path} has format {state.get('format')}, this code reads "
                              f"format {FORMAT}; train it again with this version")
    if isinstance(steps := state.get("history", {}).get("steps"), dict):
        state["history"] = {**state["history"], "steps": {  # a lean export's series: back to lists
            k: v.tolist() if isinstance(v, torch.Tensor) else v for k, v in steps.items()}}
    return state


def stored_config(path: str | os.PathLike, state: dict[str, Any]) -> RunConfig:
    """The RunConfig of the checkpoint dict ``state`` read from ``path``; a config this code
    cannot read (an unknown field, a value out of range) is a ``CheckpointError`` naming the file."""
    try:
        return RunConfig.from_dict(state["config"])
    except (ConfigError, TypeError, AttributeError) as err:
        raise CheckpointError(f"checkpoint {path} has an unreadable config: {err}") from err


class Progress(NamedTuple):
    """How far the run of a checkpoint dict got (``progress_of``): epochs and optimiser steps completed
    (a checkpoint saved within an epoch counts the steps of it done), and whether all its epochs are."""
    epoch: int
    step: int
    complete: bool


def progress_of(state: dict[str, Any]) -> Progress:
    return Progress(state["epoch"], state["step"], bool(state.get("complete")))


def load_model(path: str | os.PathLike, *, device: str | torch.device = "cpu",
               expect: str | ModelConfig | RunConfig | None = None):
    """A ready model (eval mode) and its halting calibrator from a checkpoint; ``expect`` (a model
    name or config) makes a checkpoint of another model a clear error."""
    path = checkpoint_file(path)
    state = load_checkpoint(path, map_location=device)
    config = stored_config(path, state)
    if isinstance(expect, str) and config.model.name != expect:
        raise CheckpointError(f"checkpoint {path} holds a '{config.model.name}' model, "
                              f"not the expected '{expect}'")
    if isinstance(expect, (ModelConfig, RunConfig)):
        want = expect.model if isinstance(expect, RunConfig) else expect
        if diff := [f"model.{k}: checkpoint {getattr(config.model, k)!r} vs expected {v!r}"
                    for k, v in want.__dict__.items() if getattr(config.model, k) != v]:
            raise CheckpointError(f"checkpoint {path} holds another model ({', '.join(diff)})")
    model = create_model(config.model)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as err:
        raise CheckpointError(f"checkpoint {path}: its weights do not fit its own config ({err})") from err
    model.to(device).eval()
    return model, (HaltingCalibrator.from_bytes(state["calibrator"]) if state.get("calibrator")
                   else HaltingCalibrator(config.halting.sketch_k))


def checkpoint_config(path: str | os.PathLike) -> RunConfig:
    return stored_config(checkpoint_file(path), load_checkpoint(path))
