"""The training loop: final-step task loss plus the ranking halting losses (docs/method.md section 6),
or PonderNet's loss in their place (``loss.ponder``, a baseline of docs/method.md section 10).

No framework: a plain loop over device-resident batches, SGD or AdamW with linear warm-up
and cosine decay per optimiser step, bf16 autocast and channels-last on CUDA, a checkpoint
every epoch (atomic; resuming continues the same run; its destination is checked before any
work, and a write the system still refuses goes to the temporary folder, so a finished run is
never lost), a NaN guard that stops before the last good checkpoint is touched, and a history
with, per optimiser step, the data of the paper's figures 1 (alpha) and 2 (easy / hard halting
scores and the median threshold).

Which halting scores feed the KLL sketch is ``halting.calibrate_on``: the scores of the
last training epoch, those of a pass over the held-out split, or both (the default).
``halting.sketch_window`` says over how long: a fresh sketch every epoch ("epoch", the
default), or one sketch that accumulates those sources over every epoch of the run ("run").

Under torchrun (``distributed.py``) the same loop runs in every process with DDP.
``train.batch_size`` stays the global batch: each of the N ranks trains on its N-th of every
batch, so the steps per epoch, the schedule and the run's identity mean the same for any N. The
history logs the whole batch's loss and accuracy (summed over the ranks) and the mean over
the ranks of the loss parts; the ranking losses themselves rank the entries of each rank's
share, and the per-step median threshold and the gradient diagnostics are rank 0's. Each
epoch the ranks' halting sketches are pooled, so every rank holds the same calibrator. Every
rank evaluates the whole held-out and test splits (the same weights give the same outputs);
rank 0 alone writes checkpoints, logs and progress.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .analysis import gradient_conflict
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint, stored_config
from .config import ConfigError, RunConfig, config_difference
from .data import load_dataset, make_batches
from .distributed import barrier, join_process_group, shard_batches, sum_over_ranks, wrap_model
from .halting import HaltingCalibrator
from .losses import total_loss
from .models import create_model
from .paths import OutputError, check_writable

log = logging.getLogger("frost_nb")

LOGGED_PARTS = ("task", "rel", "abs", "easy_score", "hard_score")  # of the loss, per step


class TrainingError(RuntimeError):
    """Training cannot go on (a NaN or infinite loss, a checkpoint of another run)."""


def _check_model_fits_data(cfg: RunConfig, info) -> None:
    """The model's input and classes must be the data set's (make_config sets them so)."""
    for field_name, want in (("in_channels", info.channels), ("image_size", info.image_size),
                             ("num_classes", info.num_classes)):
        have = getattr(cfg.model, field_name)
        if have != want:
            raise ConfigError(f"model.{field_name}={have} does not fit {info.name} ({field_name} "
                              f"{want}): build the config with make_config(size, {info.name!r}, ...) "
                              f"or set model.{field_name}={want}")


def load_split(config: RunConfig, split: str, root: str | os.PathLike | None = None):
    """The ``split`` ("train", "val", "test") of the data set ``config`` trains on, with its
    held-out rule (the same images the trainer used); ``root`` overrides ``data.root``."""
    d = config.data
    return load_dataset(d.name, split, root=root or d.root, val_fraction=d.val_fraction,
                        split_seed=d.split_seed, download=d.download, limit=d.limit)


def pick_device(preference: str = "auto") -> torch.device:
    """CUDA, then Apple's MPS, then the CPU (or exactly the one asked for)."""
    if preference == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if preference == "cuda" and not torch.cuda.is_available():
        raise TrainingError("train.device='cuda' but no CUDA device is visible; use 'auto' or 'cpu'")
    if preference == "mps" and not torch.backends.mps.is_available():
        raise TrainingError("train.device='mps' but MPS is not available; use 'auto' or 'cpu'")
    return torch.device(preference)


def show_progress(progress: bool | None) -> bool:
    """Progress bars in a terminal or a notebook, not in logs (``FROST_PROGRESS`` overrides)."""
    if os.environ.get("FROST_PROGRESS"):
        return os.environ["FROST_PROGRESS"] not in ("0", "false", "no")
    if progress is not None:
        return progress
    try:  # a Jupyter kernel: tqdm.auto draws a widget
        from IPython import get_ipython
        if get_ipython() is not None and "IPKernelApp" in get_ipython().config:
            return True
    except ImportError:
        pass
    return sys.stderr.isatty()


def lr_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up to 1, then cosine decay to 0 (per optimiser step)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def make_optimizer(model: torch.nn.Module, cfg) -> torch.optim.Optimizer:
    """No weight decay on norms, biases and the FROST scalars (alpha, H): decay would bias them."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (no_decay if p.ndim <= 1 else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
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
    """Backward pass, optional gradient clipping, optimiser step."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()


@dataclass
class StepOutputs:
    """Per-sample, per-step outputs of the full-depth model over a split (on the CPU)."""

    scores: torch.Tensor  # (N, T) halting scores sigmoid(halt_logits)
    preds: torch.Tensor  # (N, T) predicted class at each step
    y: torch.Tensor  # (N,)

    @property
    def correct(self) -> torch.Tensor:
        return self.preds == self.y[:, None]  # (N, T)

    @property
    def accuracy(self) -> float:
        """Full-depth accuracy (the last step)."""
        return self.correct[:, -1].float().mean().item()

    def accuracy_per_step(self) -> list[float]:
        return self.correct.float().mean(0).tolist()


@torch.no_grad()
def collect_outputs(model: torch.nn.Module, batches, *, amp: bool = False) -> StepOutputs:
    """Run the full-depth model over ``batches`` and keep per-step scores and predictions."""
    model.eval()
    scores, preds, ys = [], [], []
    for x, y in batches:
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=amp):
            out = model(x)
        scores.append(torch.sigmoid(out.halt_logits.float()).cpu())  # (B, T)
        preds.append(out.logits.argmax(-1).cpu())  # (B, T)
        ys.append(y.cpu())
    return StepOutputs(torch.cat(scores), torch.cat(preds), torch.cat(ys))


def evaluate(model: torch.nn.Module, dataset, *, batch_size: int = 512,
             device: torch.device | str | None = None) -> StepOutputs:
    """Full-depth outputs of ``model`` on an ImageData split (no augmentation), on ``device``
    (default: where the model's weights are)."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.to(device)
    batches = make_batches(dataset, batch_size, shuffle=False, augment=False, device=device)
    return collect_outputs(model, batches)


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
    # train.diagnostics_every; step_grad_cosine: per probe, one cosine per step t (Definition D.1)
    diagnostics = ("step", "grad_cosine", "task_grad_norm", "rank_grad_norm", "step_grad_cosine")
    return {"steps": {k: [] for k in steps}, "epochs": {k: [] for k in epochs},
            "diagnostics": {k: [] for k in diagnostics}}


@dataclass
class Trainer:
    """Trains one RunConfig; ``fit()`` resumes from ``checkpoint`` when it holds the same run."""

    config: RunConfig
    checkpoint: Path | str | None = None
    progress: bool | None = None
    device: torch.device = field(init=False)

    def __post_init__(self) -> None:
        cfg = self.config
        # under torchrun: join the job's process group (each CUDA process takes its own GPU)
        self.distributed, self.device = join_process_group(pick_device(cfg.train.device))
        world = self.distributed.world_size
        if cfg.train.batch_size % world:
            raise ConfigError(f"train.batch_size={cfg.train.batch_size} is the global batch, split "
                              f"evenly among the {world} processes: make it a multiple of {world}")
        self.checkpoint = Path(self.checkpoint) if self.checkpoint is not None else None
        if self.checkpoint is not None and self.distributed.is_main:  # before any work
            check_writable(self.checkpoint, "checkpoint", "pass the path of a .pt file in a writable folder")
        on_cuda = self.device.type == "cuda"
        self.amp = cfg.train.amp == "bf16" or (cfg.train.amp == "auto" and on_cuda)
        self.channels_last = cfg.model.backbone == "resnet" and (
            cfg.train.channels_last == "on" or (cfg.train.channels_last == "auto" and on_cuda))
        d = cfg.data
        self.train_set = load_split(cfg, "train")
        self.val_set = load_split(cfg, "val") if d.val_fraction > 0 else None
        self.test_set = load_split(cfg, "test")
        _check_model_fits_data(cfg, self.train_set.info)
        if self.val_set is not None and len(self.val_set) == 0:
            raise ConfigError(f"data.val_fraction={d.val_fraction} leaves no image of {d.name} held out "
                              "for calibrating the threshold: raise it (default 0.1) or set it to 0")

        torch.manual_seed(cfg.train.seed)
        self.model = create_model(cfg.model).to(self.device)
        if self.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        # the training forward runs through DDP's wrapper (its backward averages the gradients
        # over the ranks); without a halting loss (ranking or PonderNet's) the halting head gets
        # no gradient
        self.parallel_model = wrap_model(self.model, self.distributed, self.device,
                                         find_unused_parameters=not cfg.loss.halting_trained)
        self.optimizer = make_optimizer(self.model, cfg.train)
        # the data order and augmentation come from this generator alone (saved for resuming);
        # every rank draws the same global batches and trains on its share of each
        self.generator = torch.Generator().manual_seed(cfg.train.seed)
        self.batches = shard_batches(
            make_batches(self.train_set, cfg.train.batch_size, shuffle=True, augment=d.augment,
                         device=self.device, generator=self.generator,
                         drop_last=len(self.train_set) > cfg.train.batch_size,
                         num_workers=cfg.train.num_workers),
            self.distributed)
        self.steps_per_epoch = len(self.batches)
        total = cfg.train.epochs * self.steps_per_epoch
        warmup = round(cfg.train.warmup_epochs * self.steps_per_epoch)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(s, warmup, total))
        self.calibrator = HaltingCalibrator(cfg.halting.sketch_k)
        self.history = _new_history()
        self.epoch = 0  # epochs completed
        self.step = 0  # optimiser steps completed
        self.train_seconds = 0.0

    # ------------------------------------------------------------------ state
    def state(self, complete: bool, metrics: dict | None = None) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "rng": {"torch": torch.get_rng_state(), "data": self.generator.get_state()},
                "calibrator": self.calibrator.to_bytes() if not self.calibrator.is_empty else b"",
                "history": self.history, "epoch": self.epoch, "step": self.step,
                "train_seconds": self.train_seconds, "complete": complete, "metrics": metrics or {}}

    def _resume(self) -> bool:
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
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"]["torch"].cpu())
        self.generator.set_state(state["rng"]["data"].cpu())
        if state["calibrator"]:
            self.calibrator = HaltingCalibrator.from_bytes(state["calibrator"])
        self.history, self.epoch, self.step = state["history"], state["epoch"], state["step"]
        for k, v in _new_history()["diagnostics"].items():  # older checkpoints
            self.history.setdefault("diagnostics", {}).setdefault(k, v)
        self.train_seconds = state.get("train_seconds", 0.0)
        return True

    # ------------------------------------------------------------------ loop
    def _log_step(self, epoch: int, loss: float, parts: dict, acc: float, threshold: float) -> None:
        model = self.model
        alpha, hurst = model.alpha(), model.hurst()
        row = {"step": self.step, "epoch": epoch, "lr": self.scheduler.get_last_lr()[0], "loss": loss,
               "task": parts["task"], "rel": parts.get("rel", float("nan")),
               "abs": parts.get("abs", float("nan")), "accuracy": acc,
               "alpha": alpha.item() if alpha is not None else float("nan"),
               "hurst": hurst.item() if hurst is not None else float("nan"),
               "easy_score": parts.get("easy_score", float("nan")),
               "hard_score": parts.get("hard_score", float("nan")), "threshold_median": threshold}
        for k, v in row.items():
            self.history["steps"][k].append(float(v) if k not in ("step", "epoch") else int(v))

    def _train_epoch(self, epoch: int, bar) -> tuple[float, float, HaltingCalibrator]:
        cfg = self.config
        self.model.train()
        sketch = HaltingCalibrator(cfg.halting.sketch_k)  # this epoch's training scores (this rank's)
        total_loss_sum, correct, seen = 0.0, 0, 0
        every = cfg.train.diagnostics_every
        for x, y in self.batches:
            if every and self.step % every == 0:
                self._diagnose(x, y)
            out, loss, parts = forward_loss(self.parallel_model, x, y, cfg, amp=self.amp,
                                            channels_last=self.channels_last)
            scores = torch.sigmoid(out.halt_logits.detach().float())  # (B, T)
            # Sums over the ranks' shares of the batch, in one all-reduce: the history logs the
            # whole batch, and the guards below stop every rank at once (a rank stopping alone
            # would leave the others waiting in backward).
            loss_sum, batch_correct, batch_seen, bad_scores, *part_sums = sum_over_ranks(
                [loss.detach() * len(y), (out.logits[:, -1].argmax(-1) == y).sum(), len(y),
                 (~torch.isfinite(scores)).sum(), *(parts[k] for k in LOGGED_PARTS)], self.device)
            batch_loss = loss_sum / batch_seen
            if not math.isfinite(batch_loss):
                self._stop(f"the loss became {batch_loss} at epoch {epoch + 1}, step {self.step + 1} "
                           f"(parts: {parts})")
            if bad_scores:
                self._stop(f"the halting scores became non-finite at epoch {epoch + 1}, "
                           f"step {self.step + 1}")
            optimizer_step(self.model, self.optimizer, loss, cfg.train.grad_clip)
            self.scheduler.step()
            self.step += 1
            sketch.update(scores)
            correct, seen = correct + batch_correct, seen + batch_seen
            total_loss_sum += loss_sum
            world = self.distributed.world_size
            parts = {k: v / world for k, v in zip(LOGGED_PARTS, part_sums)}  # mean over the ranks
            self._log_step(epoch, batch_loss, parts, batch_correct / batch_seen, sketch.threshold(0.5))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{batch_loss:.3f}", acc=f"{correct / seen:.3f}", refresh=False)
        return total_loss_sum / seen, correct / seen, sketch

    def _diagnose(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Gradient conflict on this batch at the current weights (before the step)."""
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.amp):
            g = gradient_conflict(self.model, x, y, self.config.loss, per_step=True)
        d = self.history["diagnostics"]
        for k, v in (("step", self.step), ("grad_cosine", g["cosine"]),
                     ("task_grad_norm", g["task_norm"]), ("rank_grad_norm", g["rank_norm"]),
                     ("step_grad_cosine", g["step_cosines"])):
            d[k].append(v)

    def _stop(self, what: str) -> None:
        if self.checkpoint is not None and self.checkpoint.is_file():
            kept = f"The last good checkpoint ({self.checkpoint}) is intact."
        else:
            kept = "No checkpoint of this run was written before it."
        raise TrainingError(
            f"{what}; training stopped. {kept} "
            f"Lower train.lr (now {self.config.train.lr}) or set train.grad_clip, then train again.")

    def _save(self, complete: bool, metrics: dict | None = None) -> None:
        """Checkpoint the run; when the system refuses the write, save it in the system's
        temporary folder instead and stop, saying where: a finished run is never lost."""
        state = self.state(complete, metrics)
        try:
            save_checkpoint(self.checkpoint, state)
            return
        except OutputError as err:
            refused = err
        what = "finished run" if complete else f"run after epoch {self.epoch}"
        try:
            fd, rescue = tempfile.mkstemp(prefix=f"frost_nb_{self.checkpoint.stem}_", suffix=".pt")
            os.close(fd)
            save_checkpoint(rescue, state)
        except OSError as err:
            raise TrainingError(f"{refused}; the {what} could not be saved in the temporary "
                                f"folder either ({err}): it is lost") from refused
        use = "to load it without training again" if complete else "and run the same command to resume"
        raise TrainingError(f"{refused}. The {what} is saved in {rescue} instead: move it to "
                            f"{self.checkpoint} {use}") from refused

    def _calibrate(self, train_sketch: HaltingCalibrator) -> tuple[HaltingCalibrator, float]:
        """The epoch's calibrator from the sources in halting.calibrate_on (with
        sketch_window="run", added to the sketch of the epochs before); val accuracy."""
        source = self.config.halting.calibrate_on
        calibrator = HaltingCalibrator(self.config.halting.sketch_k)
        if self.config.halting.sketch_window == "run" and self.distributed.is_main:
            # the run's sketch so far (already pooled over the ranks, and restored on resume):
            # folded in on one rank only, so that merging across ranks counts it once
            calibrator.merge(self.calibrator)
        if "last_epoch" in source:
            calibrator.merge(train_sketch)  # this rank's share of the epoch's scores
        val_acc = float("nan")
        if self.val_set is not None:
            outputs = self.outputs(self.val_set)  # the whole split, on every rank
            val_acc = outputs.accuracy
            if "val" in source and self.distributed.is_main:  # held-out scores count once
                calibrator.update(outputs.scores)
        calibrator.merge_across_ranks()  # every rank: the same sketch, each score once
        if calibrator.is_empty:  # calibrate_on="val" without a held-out split
            raise TrainingError("halting.calibrate_on='val' needs data.val_fraction > 0")
        return calibrator, val_acc

    def outputs(self, dataset) -> StepOutputs:
        """Full-depth outputs of the whole ``dataset`` (on every rank of a DDP job)."""
        batches = make_batches(dataset, self.config.train.eval_batch_size, shuffle=False,
                               augment=False, device=self.device,
                               num_workers=self.config.train.num_workers)
        return collect_outputs(self.model, batches, amp=self.amp)

    def fit(self, until_epoch: int | None = None) -> TrainResult:
        """Train to ``train.epochs`` (or stop after ``until_epoch``, as an interruption would)."""
        from tqdm.auto import tqdm

        cfg, main = self.config, self.distributed.is_main
        resumed = self._resume()  # every rank reads the same checkpoint
        if resumed and main:
            log.info("resumed %s after epoch %d of %d", self.checkpoint, self.epoch, cfg.train.epochs)
        last = cfg.train.epochs if until_epoch is None else min(until_epoch, cfg.train.epochs)
        show = show_progress(self.progress) and main
        bar = tqdm(total=last * self.steps_per_epoch, initial=self.epoch * self.steps_per_epoch,
                   desc=f"{cfg.model.name}/{cfg.model.backbone} on {cfg.data.name}", unit="step",
                   disable=not show, leave=True) if self.epoch < last else None
        while self.epoch < last:
            start = time.perf_counter()
            train_loss, train_acc, sketch = self._train_epoch(self.epoch, bar)
            bad = [n for n, p in self.model.named_parameters() if not torch.isfinite(p).all()]
            if bad:  # never calibrate on or checkpoint broken weights, whatever the loss said
                self._stop(f"the weights {bad[:3]} became non-finite in epoch {self.epoch + 1}")
            self.calibrator, val_acc = self._calibrate(sketch)
            self.train_seconds += time.perf_counter() - start
            self.epoch += 1
            for k, v in zip(("epoch", "train_loss", "train_accuracy", "val_accuracy", "seconds"),
                            (self.epoch, train_loss, train_acc, val_acc, self.train_seconds)):
                self.history["epochs"][k].append(v)
            if self.checkpoint is not None and self.epoch < cfg.train.epochs and main:
                self._save(complete=False)
            line = (f"epoch {self.epoch}/{cfg.train.epochs}: train loss {train_loss:.4f}, "
                    f"train acc {train_acc:.4f}, val acc {val_acc:.4f}, "
                    f"{self.train_seconds:.0f} s so far")
            if show:
                bar.write(line)
            elif main:
                log.info(line)
        if bar is not None:
            bar.close()
        metrics = {}
        if self.epoch >= cfg.train.epochs:
            test = self.outputs(self.test_set)
            metrics = {"test_accuracy": test.accuracy, "test_accuracy_per_step": test.accuracy_per_step(),
                       "train_seconds": self.train_seconds, "params": self.model.num_parameters(),
                       "device": str(self.device), "epochs": self.epoch}
            if self.checkpoint is not None and main:
                self._save(complete=True, metrics=metrics)
            if main:
                log.info("test accuracy at full depth %.4f after %d epochs, %.0f s of training",
                         test.accuracy, self.epoch, self.train_seconds)
        barrier()  # rank 0's checkpoint is on disk before any rank returns (and may read it)
        self.model.eval()
        return TrainResult(self.model, self.calibrator, self.history, metrics, cfg, self.checkpoint)


def train(config: RunConfig, checkpoint: str | os.PathLike | None = None,
          progress: bool | None = None) -> TrainResult:
    """Train ``config`` (resuming from ``checkpoint`` when it holds the same unfinished run)."""
    return Trainer(config, checkpoint=checkpoint, progress=progress).fit()
