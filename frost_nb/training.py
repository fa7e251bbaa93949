"""The training loop: final-step task loss plus the ranking halting losses (docs/method.md section 6),
or PonderNet's loss (``loss.ponder``, section 10); API and reporting: docs/architecture.md,
"Training" and "Multi-process training".

No framework: a plain loop over device-resident batches; a checkpoint every epoch (atomic, checked
before any work, rescued to the temporary folder when the write is refused); a NaN guard that stops
before the last good checkpoint is touched; per optimiser step, the data of the paper's figures 1
(alpha) and 2 (halting scores, median threshold).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint, stored_config
from .config import ConfigError, RunConfig, config_difference
from .data.datasets import load_dataset, make_batches
from .distributed import join_process_group, parallel, sum_over_ranks
from .halting import HaltingCalibrator
from .losses import gradient_conflict, total_loss
from .models import create_model, gap
from .paths import OutputError, check_writable

log = logging.getLogger("frost_nb")

LOGGED_PARTS = ("task", "rel", "abs", "easy_score", "hard_score")  # of the loss, per step
# train.diagnostics_every; step_grad_cosine: per probe, one cosine per step t (Definition D.1)
DIAGNOSTICS = ("step", "grad_cosine", "task_grad_norm", "rank_grad_norm", "step_grad_cosine")
NAN = float("nan")
_DEVICES = {"cuda": (lambda: torch.cuda.is_available(), "no CUDA device is visible"),
            "mps": (lambda: torch.backends.mps.is_available(), "MPS is not available")}


class TrainingError(RuntimeError):
    """Training cannot go on (a NaN or infinite loss, a checkpoint of another run)."""


def load_split(config: RunConfig, split: str, root: str | os.PathLike | None = None):
    """The ``split`` ("train", "val", "test") of the data set ``config`` trains on, with its
    held-out rule (the same images the trainer used); ``root`` overrides ``data.root``."""
    d = config.data
    return load_dataset(d.name, split, root=root or d.root, val_fraction=d.val_fraction,
                        split_seed=d.split_seed, download=d.download, limit=d.limit)


def pick_device(preference: str = "auto") -> torch.device:
    """CUDA, then Apple's MPS, then the CPU (or exactly the one asked for)."""
    if preference == "auto":
        return torch.device(next((name for name, (ok, _) in _DEVICES.items() if ok()), "cpu"))
    if preference in _DEVICES and not _DEVICES[preference][0]():
        raise TrainingError(f"train.device={preference!r} but {_DEVICES[preference][1]}; use 'auto' or 'cpu'")
    return torch.device(preference)


def show_progress(progress: bool | None) -> bool:
    """Progress bars in a terminal or a notebook, not in logs (``FROST_PROGRESS`` overrides)."""
    if os.environ.get("FROST_PROGRESS"):
        return os.environ["FROST_PROGRESS"] not in ("0", "false", "no")
    if progress is not None:
        return progress
    with contextlib.suppress(ImportError):  # a Jupyter kernel: tqdm.auto draws a widget
        from IPython import get_ipython
        if get_ipython() is not None and "IPKernelApp" in get_ipython().config:
            return True
    return sys.stderr.isatty()


def lr_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up to 1, then cosine decay to 0 (per optimiser step)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def make_optimizer(model: torch.nn.Module, cfg) -> torch.optim.Optimizer:
    """No weight decay on norms, biases and the FROST scalars (alpha, H): decay would bias them."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.ndim > 1], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.ndim <= 1], "weight_decay": 0.0}]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.momentum > 0)
    return torch.optim.AdamW(groups, lr=cfg.lr)


def forward_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: RunConfig, *,
                 amp: bool, channels_last: bool):
    """One training forward pass: the model's outputs, the total loss and its parts."""
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=amp):
        out = model(x, detach_halt_input=not cfg.loss.rank_grad_to_backbone)
        loss, parts = total_loss(out.logits, out.halt_logits, y, cfg.loss)
    return out, loss, parts


def optimizer_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
                   grad_clip: float = 0.0) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()


def evaluate(model: torch.nn.Module, dataset, *, batch_size: int = 512, amp: bool = False,
             num_workers: int = 0, trajectories: bool = False,
             max_samples: int | None = None) -> FullDepthPass:
    """``full_depth_pass`` over an ImageData split on the model's device (bf16 autocast with ``amp``)."""
    batches = make_batches(dataset, batch_size, shuffle=False, augment=False,
                           device=next(model.parameters()).device, num_workers=num_workers)
    return full_depth_pass(model, batches, trajectories=trajectories, amp=amp, max_samples=max_samples)


@dataclass
class TrainResult:
    model: torch.nn.Module
    calibrator: HaltingCalibrator
    history: dict[str, Any]
    metrics: dict[str, Any]
    config: RunConfig
    checkpoint: Path | None = None
    from_cache: bool = False


def _new_history() -> dict[str, Any]:
    steps = ("step", "epoch", "lr", "loss", "task", "rel", "abs", "accuracy", "alpha", "hurst",
             "easy_score", "hard_score", "threshold_median")
    epochs = ("epoch", "train_loss", "train_accuracy", "val_accuracy", "seconds")
    return {"steps": {k: [] for k in steps}, "epochs": {k: [] for k in epochs},
            "diagnostics": {k: [] for k in DIAGNOSTICS}}


class Trainer:
    """Trains ``model`` (on its device) on ``batches``, the global batches of one epoch with their
    own ``generator`` (saved for resuming); ``val_set`` and ``test_set`` may be None."""

    def __init__(self, config: RunConfig, model: torch.nn.Module, batches, *, val_set=None,
                 test_set=None, checkpoint: str | os.PathLike | None = None,
                 progress: bool | None = None) -> None:
        cfg = self.config = config
        self.val_set, self.test_set, self.progress = val_set, test_set, progress
        self.checkpoint = Path(checkpoint) if checkpoint is not None else None
        self.generator = getattr(batches, "generator", None)
        if self.checkpoint is not None and self.generator is None:
            raise TrainingError("the batches draw from torch's global generator, which a checkpoint "
                                "cannot resume: build them with make_batches(..., generator="
                                "torch.Generator().manual_seed(config.train.seed))")
        if cfg.halting.calibrate_on == "val" and val_set is None:
            raise TrainingError("halting.calibrate_on='val' needs a held-out split: set "
                                "data.val_fraction > 0 (or pass val_set)")
        self.device = next(model.parameters()).device
        on_cuda = self.device.type == "cuda"
        self.amp = cfg.train.amp == "bf16" or (cfg.train.amp == "auto" and on_cuda)
        self.channels_last = cfg.model.backbone == "resnet" and (
            cfg.train.channels_last == "on" or (cfg.train.channels_last == "auto" and on_cuda))
        self.model = model.to(memory_format=torch.channels_last) if self.channels_last else model
        # under torchrun DDP's wrapper and this rank's share; without a halting loss its head gets no gradient
        self.parallel_model, self.batches, self.setup = parallel(
            self.model, batches, find_unused_parameters=not cfg.loss.halting_trained)
        if self.checkpoint is not None and self.setup.is_main:  # before any work
            check_writable(self.checkpoint, "checkpoint", "pass the path of a .pt file in a writable folder")
        self.optimizer = make_optimizer(self.model, cfg.train)
        self.steps_per_epoch = len(self.batches)
        total = cfg.train.epochs * self.steps_per_epoch
        warmup = round(cfg.train.warmup_epochs * self.steps_per_epoch)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(s, warmup, total))
        self.calibrator = HaltingCalibrator(cfg.halting.sketch_k)
        self.history = _new_history()
        self.epoch, self.step, self.train_seconds = 0, 0, 0.0  # epochs and optimiser steps completed

    def fit(self, until_epoch: int | None = None) -> TrainResult:
        """Train to ``train.epochs`` (or stop after ``until_epoch``, as an interruption would)."""
        from tqdm.auto import tqdm

        cfg, main = self.config, self.setup.is_main
        if self._resume() and main:  # every rank reads the same checkpoint
            log.info("resumed %s after epoch %d of %d", self.checkpoint, self.epoch, cfg.train.epochs)
        model, history = self.model, self.history
        last = cfg.train.epochs if until_epoch is None else min(until_epoch, cfg.train.epochs)
        show = show_progress(self.progress) and main  # rank 0 alone shows progress and logs
        bar = tqdm(total=last * self.steps_per_epoch, initial=self.epoch * self.steps_per_epoch,
                   desc=f"{cfg.model.name}/{cfg.model.backbone} on {cfg.data.name}", unit="step",
                   disable=not show or self.epoch >= last, leave=True)
        every, sketch_k, world = cfg.train.diagnostics_every, cfg.halting.sketch_k, self.setup.world_size
        while self.epoch < last:
            start = time.perf_counter()
            model.train()
            sketch = HaltingCalibrator(sketch_k)  # this epoch's training scores (this rank's)
            loss_total, correct, seen = 0.0, 0, 0
            for x, y in self.batches:
                if every and self.step % every == 0:  # gradient conflict at the weights before the step
                    xc = x.contiguous(memory_format=torch.channels_last) if self.channels_last else x
                    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.amp):
                        g = gradient_conflict(model, xc, y, cfg.loss, per_step=True)
                    for key, v in zip(DIAGNOSTICS, (self.step, g["cosine"], g["task_norm"],
                                                    g["rank_norm"], g["step_cosines"])):
                        history["diagnostics"][key].append(v)
                out, loss, parts = forward_loss(self.parallel_model, x, y, cfg, amp=self.amp,
                                                channels_last=self.channels_last)
                scores = torch.sigmoid(out.halt_logits.detach().float())  # (B, T)
                # sums over the ranks' shares in one all-reduce: the history logs the whole batch, and the
                # guards stop every rank at once (one stopping alone would leave the others in backward)
                loss_sum, batch_correct, batch_seen, bad_scores, *part_sums = sum_over_ranks(
                    [loss.detach() * len(y), (out.logits[:, -1].argmax(-1) == y).sum(), len(y),
                     (~torch.isfinite(scores)).sum(), *(parts[k] for k in LOGGED_PARTS)], self.device)
                batch_loss = loss_sum / batch_seen
                at = f"at epoch {self.epoch + 1}, step {self.step + 1}"
                if not math.isfinite(batch_loss):
                    self._stop(f"the loss became {batch_loss} {at} (parts: {parts})")
                if bad_scores:
                    self._stop(f"the halting scores became non-finite {at}")
                optimizer_step(model, self.optimizer, loss, cfg.train.grad_clip)
                self.scheduler.step()
                self.step += 1
                sketch.update(scores)
                loss_total, correct, seen = loss_total + loss_sum, correct + batch_correct, seen + batch_seen
                parts = {k: v / world for k, v in zip(LOGGED_PARTS, part_sums)}  # mean over the ranks
                alpha, hurst = model.alpha(), model.hurst()
                row = {"step": self.step, "epoch": self.epoch, "lr": self.scheduler.get_last_lr()[0],
                       "loss": batch_loss, **parts, "accuracy": batch_correct / batch_seen,
                       "alpha": alpha.item() if alpha is not None else NAN,
                       "hurst": hurst.item() if hurst is not None else NAN,
                       "threshold_median": sketch.threshold(0.5)}  # rank 0's: figure 2
                for key, v in row.items():
                    history["steps"][key].append(int(v) if key in ("step", "epoch") else float(v))
                bar.update(1)
                bar.set_postfix(loss=f"{batch_loss:.3f}", acc=f"{correct / seen:.3f}", refresh=False)

            bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
            if bad:  # never calibrate on or checkpoint broken weights, whatever the loss said
                self._stop(f"the weights {bad[:3]} became non-finite in epoch {self.epoch + 1}")
            # the epoch's calibrator: each rank's training scores, and once the scores every rank holds
            # alike (the run's sketch so far, restored on resume; the held-out pass)
            shared = HaltingCalibrator(sketch_k)
            if cfg.halting.sketch_window == "run":
                shared.merge(self.calibrator)
            val = None if self.val_set is None else self._outputs(self.val_set)  # the whole split, every rank
            if val is not None and "val" in cfg.halting.calibrate_on:
                shared.update(val.scores)
            val_acc = NAN if val is None else val.accuracy
            own = sketch if "last_epoch" in cfg.halting.calibrate_on else HaltingCalibrator(sketch_k)
            self.calibrator = own.merge_across_ranks(shared)  # the same on every rank
            self.train_seconds += time.perf_counter() - start
            self.epoch += 1
            for key, v in zip(_new_history()["epochs"], (self.epoch, loss_total / seen, correct / seen,
                                                         val_acc, self.train_seconds)):
                history["epochs"][key].append(v)
            if self.checkpoint is not None and self.epoch < cfg.train.epochs:
                self._save(complete=False)
            line = (f"epoch {self.epoch}/{cfg.train.epochs}: train loss {loss_total / seen:.4f}, train acc "
                    f"{correct / seen:.4f}, val acc {val_acc:.4f}, {self.train_seconds:.0f} s so far")
            if show:
                bar.write(line)
            elif main:
                log.info(line)
        bar.close()

        metrics = {}
        if self.epoch >= cfg.train.epochs:
            test = self._outputs(self.test_set) if self.test_set is not None else None
            if test is not None:
                metrics = {"test_accuracy": test.accuracy, "test_accuracy_per_step": test.accuracy_per_step()}
            metrics |= {"train_seconds": self.train_seconds, "params": model.num_parameters(),
                        "device": str(self.device), "epochs": self.epoch}
            if self.checkpoint is not None:
                self._save(complete=True, metrics=metrics)
            if test is not None and main:
                log.info("test accuracy at full depth %.4f after %d epochs, %.0f s of training",
                         test.accuracy, self.epoch, self.train_seconds)
        model.eval()
        return TrainResult(model, self.calibrator, history, metrics, cfg, self.checkpoint)

    def _outputs(self, dataset) -> FullDepthPass:
        return evaluate(self.model, dataset, batch_size=self.config.train.eval_batch_size,
                        amp=self.amp, num_workers=self.config.train.num_workers)

    def _stop(self, what: str) -> None:
        kept = (f"The last good checkpoint ({self.checkpoint}) is intact." if self.checkpoint is not None
                and self.checkpoint.is_file() else "No checkpoint of this run was written before it.")
        raise TrainingError(f"{what}; training stopped. {kept} Lower train.lr (now {self.config.train.lr}) "
                            "or set train.grad_clip, then train again.")

    def _resume(self) -> bool:
        """Continue the run in ``checkpoint``, if there is one (every state ``_save`` stores)."""
        if self.checkpoint is None or not self.checkpoint.exists():
            return False
        state = load_checkpoint(self.checkpoint, map_location=self.device)
        theirs = stored_config(self.checkpoint, state)
        if theirs.identity() != self.config.identity():
            raise CheckpointError(f"checkpoint {self.checkpoint} belongs to another run (its config differs "
                                  f"from this one's: {config_difference(theirs, self.config)}); pass "
                                  "another path or delete it")
        if state.get("lean"):
            raise CheckpointError(f"checkpoint {self.checkpoint} is a lean export (weights, calibrator, "
                                  "config and metrics, no optimiser state): it can be loaded and evaluated, "
                                  "not resumed; train into another path to continue")
        for part in ("model", "optimizer", "scheduler"):
            getattr(self, part).load_state_dict(state[part])
        torch.set_rng_state(state["rng"]["torch"].cpu())
        self.generator.set_state(state["rng"]["data"].cpu())
        if state["calibrator"]:
            self.calibrator = HaltingCalibrator.from_bytes(state["calibrator"])
        self.history, self.epoch, self.step = state["history"], state["epoch"], state["step"]
        for key, v in _new_history()["diagnostics"].items():  # older checkpoints
            self.history.setdefault("diagnostics", {}).setdefault(key, v)
        self.train_seconds = state.get("train_seconds", 0.0)
        return True

    def _save(self, complete: bool, metrics: dict | None = None) -> None:
        """Rank 0 checkpoints the run (``_save_or_rescue``); every rank learns whether that worked, so
        all stop together and none goes on before the checkpoint is on disk."""
        error = None
        if self.setup.is_main:
            state = {"config": self.config.to_dict(), "model": self.model.state_dict(),
                     "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                     "rng": {"torch": torch.get_rng_state(), "data": self.generator.get_state()},
                     "calibrator": self.calibrator.to_bytes() if not self.calibrator.is_empty else b"",
                     "history": self.history, "epoch": self.epoch, "step": self.step,
                     "train_seconds": self.train_seconds, "complete": complete, "metrics": metrics or {}}
            try:
                _save_or_rescue(self.checkpoint, state, complete, self.epoch)
            except TrainingError as err:
                error = err
        failed, = sum_over_ranks([error is not None], self.device)
        if error is not None:
            raise error
        if failed:
            raise TrainingError(f"rank 0 could not write the checkpoint {self.checkpoint}; "
                                "its error says where the run was saved instead")


def _save_or_rescue(path: Path, state: dict, complete: bool, epoch: int) -> None:
    """Save ``state`` to ``path``; when the system refuses the write, save it in the system's
    temporary folder instead and stop, saying where: a finished run is never lost."""
    try:
        save_checkpoint(path, state)
    except OutputError as refused:
        what = "finished run" if complete else f"run after epoch {epoch}"
        try:
            fd, rescue = tempfile.mkstemp(prefix=f"frost_nb_{path.stem}_", suffix=".pt")
            os.close(fd)
            save_checkpoint(rescue, state)
        except OSError as err:
            raise TrainingError(f"{refused}; the {what} could not be saved in the temporary "
                                f"folder either ({err}): it is lost") from refused
        use = "to load it without training again" if complete else "and run the same command to resume"
        raise TrainingError(f"{refused}. The {what} is saved in {rescue} instead: move it to "
                            f"{path} {use}") from refused


def train(config: RunConfig, checkpoint: str | os.PathLike | None = None,
          progress: bool | None = None) -> TrainResult:
    """Train ``config`` (resuming from ``checkpoint`` when it holds the same unfinished run)."""
    return build_trainer(config, checkpoint, progress).fit()


def build_trainer(config: RunConfig, checkpoint: str | os.PathLike | None = None,
                  progress: bool | None = None) -> Trainer:
    """The ``Trainer`` of ``config``: join the torchrun job if there is one, load the splits, build
    the model and the training batches (the one place that does)."""
    cfg, d = config, config.data
    # under torchrun: join the job's process group (each CUDA process takes its own GPU)
    setup, device = join_process_group(pick_device(cfg.train.device))
    if checkpoint is not None and setup.is_main:  # before any work
        check_writable(checkpoint, "checkpoint", "pass the path of a .pt file in a writable folder")
    train_set = load_split(cfg, "train")
    val_set = load_split(cfg, "val") if d.val_fraction > 0 else None
    test_set = load_split(cfg, "test")
    info = train_set.info  # the model's input and classes must be the data set's (make_config sets them so)
    for field_name, want in (("in_channels", info.channels), ("image_size", info.image_size),
                             ("num_classes", info.num_classes)):
        if (have := getattr(cfg.model, field_name)) != want:
            raise ConfigError(f"model.{field_name}={have} does not fit {info.name} ({field_name} "
                              f"{want}): build the config with make_config(size, {info.name!r}, ...) "
                              f"or set model.{field_name}={want}")
    if val_set is not None and len(val_set) == 0:
        raise ConfigError(f"data.val_fraction={d.val_fraction} leaves no image of {d.name} held out "
                          "for calibrating the threshold: raise it (default 0.1) or set it to 0")
    torch.manual_seed(cfg.train.seed)
    model = create_model(cfg.model).to(device)
    # the data order and augmentation come from this generator alone (saved for resuming)
    batches = make_batches(train_set, cfg.train.batch_size, shuffle=True, augment=d.augment, device=device,
                           generator=torch.Generator().manual_seed(cfg.train.seed),
                           drop_last=len(train_set) > cfg.train.batch_size,
                           num_workers=cfg.train.num_workers)
    return Trainer(cfg, model, batches, val_set=val_set, test_set=test_set, checkpoint=checkpoint,
                   progress=progress)


# ---------------------------------------------------------------- the full-depth pass
@dataclass
class FullDepthPass:
    """One full-depth pass of a model over a split, per sample and step (float32, on the CPU;
    ``full_depth_pass``): halting scores, class logits and labels always; the reductions of its
    states (the trajectory) when the pass was asked for them, else None."""

    # (N, T) halting scores sigmoid(halt_logits), taken batch by batch (a sigmoid over the whole
    # split can differ in the last bit): exits read off any pass of a model then agree to the bit
    scores: Tensor
    halt_logits: Tensor  # (N, T)
    logits: Tensor  # (N, T, K) class logits at t = 1..T
    y: Tensor  # (N,)
    pooled: Tensor | None = None  # (N, T+1, D) GAP(h_t) for t = 0..T
    step_norms: Tensor | None = None  # (N, T) ||h_{t+1} - h_t|| over the full state
    state_norms: Tensor | None = None  # (N, T+1) ||h_t||
    dist_to_final: Tensor | None = None  # (N, T+1) ||h_t - h_T||
    second_diff_norms: Tensor | None = None  # (N, T-1) ||(h_{t+1} - h_t) - (h_t - h_{t-1})||, t = 1..T-1

    def __post_init__(self) -> None:
        s, z, lg, y = self.scores, self.halt_logits, self.logits, self.y
        if s.dim() != 2 or z.shape != s.shape or lg.dim() != 3 or lg.shape[:2] != s.shape \
                or y.shape != s.shape[:1]:
            raise ValueError(f"a full-depth pass holds scores and halt_logits (N, T), logits (N, T, K) and "
                             f"labels y (N,), got {tuple(s.shape)}, {tuple(z.shape)}, {tuple(lg.shape)} "
                             f"and {tuple(y.shape)}")

    @property
    def steps(self) -> int:
        return self.scores.shape[1]

    def __len__(self) -> int:
        return self.y.shape[0]

    # derived once per pass: sweeps, exit caches and the rule curves read them again and again
    @cached_property
    def preds(self) -> Tensor:
        return self.logits.argmax(-1)  # (N, T) predicted class at each step

    @cached_property
    def correct(self) -> Tensor:
        return self.preds == self.y[:, None]  # (N, T)

    @property
    def accuracy(self) -> float:
        """Full-depth accuracy (the last step)."""
        return self.correct[:, -1].float().mean().item()

    def accuracy_per_step(self) -> list[float]:
        return self.correct.float().mean(0).tolist()


def first_batches(batches, max_samples: int | None):
    """The (x, y) batches cut to their first ``max_samples`` samples in all (None: every one)."""
    seen = 0
    for x, y in batches:
        if max_samples is not None and seen >= max_samples:
            return
        if max_samples is not None:
            x, y = x[: max_samples - seen], y[: max_samples - seen]
        seen += len(y)
        yield x, y


@torch.no_grad()
def full_depth_pass(model: torch.nn.Module, batches, *, trajectories: bool = False, amp: bool = False,
                    max_samples: int | None = None) -> FullDepthPass:
    """The ``FullDepthPass`` of ``model`` over ``batches`` ((x, y) pairs; the first ``max_samples``
    samples), under bf16 autocast with ``amp``; with ``trajectories`` also the reductions of its
    states. Reads ``model.trajectory``, the loop its forward runs; full states are reduced to norms
    batch by batch, so memory stays O(N T D) (every state of a CIFAR-size split: about 11 GB)."""
    model.eval()
    parts: dict[str, list[Tensor]] = defaultdict(list)
    for x, y in first_batches(batches, max_samples):
        states, logits, halts = [], [], []
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=amp):
            for s in model.trajectory(x):
                if trajectories:
                    states.append(s.h.float())
                if s.t:
                    logits.append(s.logits.float())
                    halts.append(s.halt_logit.float())
        halt = torch.stack(halts, 1)  # (B, T)
        batch = {"scores": torch.sigmoid(halt), "halt_logits": halt, "y": y,
                 "logits": torch.stack(logits, 1)}  # (B, T, K)
        if trajectories:
            hs = torch.stack(states, 1)  # (B, T+1, *state)
            diffs = hs[:, 1:] - hs[:, :-1]  # (B, T, *state)
            norms = lambda v: v.flatten(2).norm(dim=2)  # (B, n, *state) -> (B, n)
            batch |= {"pooled": torch.stack([gap(s) for s in states], 1),  # (B, T+1, D)
                      "step_norms": norms(diffs), "state_norms": norms(hs),
                      "dist_to_final": norms(hs - hs[:, -1:]),
                      "second_diff_norms": norms(diffs[:, 1:] - diffs[:, :-1])}
        for key, value in batch.items():
            parts[key].append(value.cpu())
    if not parts:
        raise ValueError("full_depth_pass got no batches (an empty split?)")
    return FullDepthPass(**{k: torch.cat(v) for k, v in parts.items()})
