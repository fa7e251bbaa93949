"""The training loop: final-step task loss plus the ranking halting losses (docs/method.md section 6),
or PonderNet's loss (section 10); API, checkpoints and reporting: docs/architecture.md, "Training".
No framework: device-resident batches, read at each epoch's end and mid-epoch save (the NaN guards)."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .checkpoint import (CheckpointError, load_checkpoint, progress_of, save_checkpoint, stored_config,
                         weights_digest)
from .config import ConfigError, RunConfig, config_difference
from .data.datasets import load_dataset, make_batches
from .distributed import join_process_group, parallel, sum_over_ranks, summed_over_ranks
from .halting import HaltingCalibrator
from .losses import gradient_conflict, teacher_losses, total_loss
from .models import FrostNet, create_model, gap, init_from_teacher
from .paths import OutputError, check_writable

log = logging.getLogger("frost_nb")

LOGGED_PARTS = ("task", "rel", "abs", "easy_score", "hard_score")  # of the loss, per step
# a student's too: its match to the teacher, unweighted (eq. (state) and the KL; method.md section 16)
TEACHER_PARTS = ("teacher_state", "teacher_kl")
# train.diagnostics_every; step_grad_cosine: per probe, one cosine per step t (Definition D.1)
DIAGNOSTICS = ("step", "grad_cosine", "task_grad_norm", "rank_grad_norm", "step_grad_cosine")
NAN = float("nan")
# a one-process run on in-memory data also checkpoints within an epoch this often (seconds): an
# interrupted long epoch loses at most this much, and resumes at the next batch to the same weights
MID_EPOCH_SECONDS = 600.0
# loss.raptor: the teacher-forced share of the state error falls from 1 to 0 over this share of the steps
RAPTOR_FORCED_SPAN = 0.25
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
    """No weight decay on norms, biases and the FROST scalars (alpha, H): decay would bias them; nor on a
    parameter marked ``_no_weight_decay`` (Mamba's A and D)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p.ndim > 1 and not getattr(p, "_no_weight_decay", False) for p in params]
    groups = [{"params": [p for p, d in zip(params, decay) if d], "weight_decay": cfg.weight_decay},
              {"params": [p for p, d in zip(params, decay) if not d], "weight_decay": 0.0}]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.momentum > 0)
    return torch.optim.AdamW(groups, lr=cfg.lr)


def use_amp(cfg: RunConfig, device: torch.device) -> bool:
    """bf16 autocast: ``train.amp`` "bf16", or "auto" on CUDA."""
    return cfg.train.amp == "bf16" or (cfg.train.amp == "auto" and device.type == "cuda")


def use_channels_last(cfg: RunConfig, device: torch.device) -> bool:
    """channels_last layout for a ResNet: only with ``train.channels_last`` "on" ("auto" leaves it off:
    no measurement has shown a gain beside GroupNorm; benchmarks/train_throughput.py)."""
    return cfg.model.backbone == "resnet" and cfg.train.channels_last == "on"


def use_compile(cfg: RunConfig, device: torch.device, world_size: int = 1) -> bool:
    """torch.compile of the training forward pass: ``train.compile`` "on", or "auto" on CUDA in a
    single process (compiled DDP with unused parameters is untested here: "on" forces it)."""
    return cfg.train.compile == "on" or (cfg.train.compile, device.type, world_size) == ("auto", "cuda", 1)


def teacher_forced_share(step: int, total_steps: int) -> float:
    """Raptor's schedule (``loss.raptor``): tf = max(0, 1 - step / (RAPTOR_FORCED_SPAN total_steps)) at
    the 0-based optimiser step ``step``."""
    return max(0.0, 1.0 - step / (RAPTOR_FORCED_SPAN * total_steps))


def teacher_forced_states(model: torch.nn.Module, teacher_states: Tensor) -> Tensor:
    """(N, T+1, *state) as ``teacher_states``: h'_0, then the student's step t from the teacher's h'_t,
    one step each (t = 0..T-1): what Raptor's teacher-forced loss compares with h'_1 .. h'_T."""
    model, h = getattr(model, "module", model), teacher_states.detach()  # DDP's wrapper: the model's step
    return torch.stack([h[:, 0], *(model.step(h[:, t], h[:, 0], t) for t in range(h.shape[1] - 1))], 1)


def forward_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: RunConfig, *, amp: bool,
                 channels_last: bool, teacher: torch.nn.Module | None = None, forced: Tensor | None = None):
    """One training forward pass: the outputs, the total loss and its parts; a ``teacher`` adds the
    student's match (docs/method.md section 16), which ``loss.raptor`` makes the whole loss."""
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=amp):
        out = model(x, return_states=teacher is not None,
                    detach_halt_input=not cfg.loss.rank_grad_to_backbone)
        loss, parts = total_loss(out.logits, out.halt_logits, y, cfg.loss)
        if teacher is not None:
            with torch.no_grad():
                ref = teacher(x, return_states=True)
            match = teacher_losses(out.states, out.logits, ref.states, ref.logits,
                                   cfg.loss.teacher_state, cfg.loss.teacher_kl)
            loss = loss + match.loss
            if cfg.loss.raptor:
                tf, state = (0.0, match.state) if forced is None else (forced, teacher_losses(
                    teacher_forced_states(model, ref.states), out.logits, ref.states, ref.logits).state)
                state = tf * state + (1 - tf) * match.state  # no task loss
                loss = cfg.loss.teacher_state * state + cfg.loss.teacher_kl * match.kl
            parts |= {"loss": loss.detach(), "teacher_state": match.state.detach(),
                      "teacher_kl": match.kl.detach()}
    return out, loss, parts


def train_forward(model: torch.nn.Module, x: Tensor, y: Tensor, cfg: RunConfig, *, amp: bool,
                  channels_last: bool, teacher: torch.nn.Module | None = None,
                  forced: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """The forward pass the trainer runs (and compiles): the loss, the halting scores (B, T) and the
    batch's sums of loss, correct, seen, bad_scores, LOGGED_PARTS then a student's TEACHER_PARTS (float32;
    the trainer sums them over the ranks too, the parts then averaged), all left on the device."""
    out, loss, parts = forward_loss(model, x, y, cfg, amp=amp, channels_last=channels_last, teacher=teacher,
                                    forced=forced)
    scores = torch.sigmoid(out.halt_logits.detach().float())  # (B, T)
    sums = (loss.detach() * len(y), (out.logits[:, -1].argmax(-1) == y).sum(), len(y),
            (~torch.isfinite(scores)).sum(), *(parts[k] for k in logged_parts(teacher is not None)))
    # float32: MPS has no float64; the sums of one batch (and the counts) fit it exactly enough
    return loss, scores, torch.stack([torch.as_tensor(v, dtype=torch.float32, device=x.device).reshape(())
                                      for v in sums])


def running_medians(sketch: HaltingCalibrator, step_scores: list[Tensor]) -> list[float]:
    """Feed ``sketch`` the halting scores of an epoch's steps in order, and return its median after
    each step (figure 2's ``threshold_median``): one copy to the host for the whole epoch."""
    sizes = [s.numel() for s in step_scores]
    parts = torch.cat([s.reshape(-1) for s in step_scores]).cpu().split(sizes) if step_scores else ()
    return [sketch.update(part.numpy()).threshold(0.5) for part in parts]


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


def logged_parts(student: bool) -> tuple[str, ...]:
    """The loss parts a run's history keeps per step: LOGGED_PARTS, and a student's TEACHER_PARTS."""
    return LOGGED_PARTS + (TEACHER_PARTS if student else ())


def _new_history(student: bool = False) -> dict[str, Any]:
    steps = ("step", "epoch", "lr", "loss", "task", "rel", "abs", "accuracy", "alpha", "hurst",
             "easy_score", "hard_score", "threshold_median", *(TEACHER_PARTS if student else ()))
    epochs = ("epoch", "train_loss", "train_accuracy", "val_accuracy", "seconds")
    return {"steps": {k: [] for k in steps}, "epochs": {k: [] for k in epochs},
            "diagnostics": {k: [] for k in DIAGNOSTICS}}


class Trainer:
    """Trains ``model`` on ``batches`` (one epoch's, with their own ``generator``, saved for resuming);
    a student (``loss.teacher``) needs its ``teacher`` (``runs.load_teacher``)."""

    def __init__(self, config: RunConfig, model: torch.nn.Module, batches, *, val_set=None,
                 test_set=None, checkpoint: str | os.PathLike | None = None,
                 progress: bool | None = None, teacher: torch.nn.Module | None = None) -> None:
        cfg = self.config = config
        if (teacher is None) != (cfg.loss.teacher is None):
            raise TrainingError(f"loss.teacher={cfg.loss.teacher!r} but the Trainer got "
                                f"{'no' if teacher is None else 'a'} teacher: pass teacher=runs.load_teacher("
                                "config) with loss.teacher set, none without it")
        self.teacher = teacher
        # what the checkpoint records of the teacher: a resumed student refuses other weights
        self.teacher_digest = None if teacher is None else weights_digest(teacher)
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
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True  # fixed shapes: cuDNN picks its fastest kernels once
        self.amp, self.channels_last = use_amp(cfg, self.device), use_channels_last(cfg, self.device)
        self.model = model.to(memory_format=torch.channels_last) if self.channels_last else model
        # under torchrun DDP's wrapper and this rank's share; without a halting loss its head gets no gradient
        self.parallel_model, self.batches, self.setup = parallel(
            self.model, batches, find_unused_parameters=not cfg.loss.halting_trained)
        self.compiled = use_compile(cfg, self.device, self.setup.world_size)
        # compiled once per process and shape (the first epoch pays for it), shared by every Trainer
        self.forward = torch.compile(train_forward) if self.compiled else train_forward
        if self.checkpoint is not None and self.setup.is_main:  # before any work
            check_writable(self.checkpoint, "checkpoint", "pass the path of a .pt file in a writable folder")
        self.optimizer = make_optimizer(self.model, cfg.train)
        self.steps_per_epoch = len(self.batches)
        total = self.total_steps = cfg.train.epochs * self.steps_per_epoch
        warmup = round(cfg.train.warmup_epochs * self.steps_per_epoch)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer,
                                                           lambda s: lr_factor(s, warmup, total))
        self.calibrator = HaltingCalibrator(cfg.halting.sketch_k)
        self.logged_parts = logged_parts(teacher is not None)
        self.history = _new_history(teacher is not None)
        self.epoch, self.step, self.train_seconds = 0, 0, 0.0  # epochs and optimiser steps completed
        self.resumed = False  # the first fit reads the checkpoint (after a fit that raised: a new Trainer)
        self.epoch_seconds = 0.0  # wall time of the latest epoch (evaluation and checkpoint included)
        self.within_epoch: dict | None = None  # an unfinished epoch's pass and sums (mid-epoch checkpoint)

    @property
    def restartable(self) -> bool:
        """Whether a pass can restart at a batch, as a mid-epoch checkpoint needs: in-memory data, one process."""
        return self.setup.world_size == 1 and hasattr(self.batches, "iterate")

    def fit(self, until_epoch: int | None = None, deadline: float | None = None,
            on_epoch: Callable[[Trainer], None] | None = None) -> TrainResult:
        """Train to ``train.epochs``, ``until_epoch`` or the ``time.monotonic()`` ``deadline``, resuming
        the checkpoint on the first call; ``on_epoch(self)`` runs once each epoch's checkpoint is written."""
        from tqdm.auto import tqdm

        cfg, main = self.config, self.setup.is_main
        if not self.resumed:
            if self._resume() and main:  # every rank reads the same checkpoint
                log.info("resumed %s after epoch %d of %d%s", self.checkpoint, self.epoch, cfg.train.epochs,
                         f" and {self.within_epoch['done']} of its next {self.steps_per_epoch} steps"
                         if self.within_epoch else "")
            self.resumed = True  # after _resume: a checkpoint it refused is refused again, never overwritten
        model, first = self.model, self.epoch
        self.saved_at = time.monotonic()  # of the latest checkpoint (or of this call's start)
        last = cfg.train.epochs if until_epoch is None else min(until_epoch, cfg.train.epochs)
        show = show_progress(self.progress) and main  # rank 0 alone shows progress and logs
        bar = tqdm(total=last * self.steps_per_epoch, initial=self.step,
                   desc=f"{cfg.model.name}/{cfg.model.backbone} on {cfg.data.name}", unit="step",
                   disable=not show or self.epoch >= last, leave=True)
        while self.epoch < last:
            if deadline is not None and time.monotonic() + self.epoch_seconds > deadline:
                if main:
                    log.info("stopped after epoch %d of %d: another epoch (%.0f s) would end after the "
                             "deadline", self.epoch, cfg.train.epochs, self.epoch_seconds)
                break
            started, start = time.monotonic(), time.perf_counter()
            done = self.within_epoch["done"] if self.within_epoch is not None else 0
            start -= self.within_epoch["seconds"] if done else 0.0  # what an interrupted epoch trained counts
            loss_total, correct, seen, sketch = self._train_epoch(bar, start)
            # the epoch's calibrator: each rank's training scores, and once the scores every rank holds
            # alike (the run's sketch so far, restored on resume; the held-out pass)
            shared = HaltingCalibrator(cfg.halting.sketch_k)
            if cfg.halting.sketch_window == "run":
                shared.merge(self.calibrator)
            val = None if self.val_set is None else self._outputs(self.val_set)  # the whole split, every rank
            if val is not None and "val" in cfg.halting.calibrate_on:
                shared.update(val.scores)
            val_acc = NAN if val is None else val.accuracy
            if "last_epoch" not in cfg.halting.calibrate_on:
                sketch = HaltingCalibrator(cfg.halting.sketch_k)
            self.calibrator = sketch.merge_across_ranks(shared)  # the same on every rank
            self.train_seconds += time.perf_counter() - start
            self.epoch += 1
            for key, v in zip(_new_history()["epochs"], (self.epoch, loss_total / seen, correct / seen,
                                                         val_acc, self.train_seconds)):
                self.history["epochs"][key].append(v)
            if self.checkpoint is not None and self.epoch < cfg.train.epochs:
                self._save(complete=False)
            line = (f"epoch {self.epoch}/{cfg.train.epochs}: train loss {loss_total / seen:.4f}, train acc "
                    f"{correct / seen:.4f}, val acc {val_acc:.4f}, {self.train_seconds:.0f} s so far")
            bar.set_postfix(loss=f"{loss_total / seen:.3f}", acc=f"{correct / seen:.3f}", refresh=False)
            if show:
                bar.write(line)
            elif main:
                log.info(line)
            # the deadline reads it: a resumed epoch's rest, scaled to a whole epoch
            self.epoch_seconds = (time.monotonic() - started) * self.steps_per_epoch / (self.steps_per_epoch - done)
            if on_epoch is not None and self.epoch < cfg.train.epochs:  # the last: once the run is saved
                on_epoch(self)
        bar.close()

        metrics = {}
        if self.epoch >= cfg.train.epochs:
            test = self._outputs(self.test_set) if self.test_set else None  # none or empty (gpu.py's host)
            if test is not None:
                metrics = {"test_accuracy": test.accuracy, "test_accuracy_per_step": test.accuracy_per_step()}
            metrics |= {"train_seconds": self.train_seconds, "params": model.num_parameters(),
                        "device": str(self.device), "epochs": self.epoch}
            if self.checkpoint is not None:
                self._save(complete=True, metrics=metrics)
            if test is not None and main:
                log.info("test accuracy at full depth %.4f after %d epochs, %.0f s of training",
                         test.accuracy, self.epoch, self.train_seconds)
            if on_epoch is not None and self.epoch > first:
                on_epoch(self)
        model.eval()
        return TrainResult(model, self.calibrator, self.history, metrics, cfg, self.checkpoint)

    def _train_epoch(self, bar, start: float) -> tuple[float, float, float, HaltingCalibrator]:
        """One epoch of optimiser steps (or its rest after a mid-epoch resume): the loss sum, correct and
        seen counts (all ranks) and the epoch's calibrator (this rank's training scores)."""
        cfg, model, history = self.config, self.model, self.history
        every = cfg.train.diagnostics_every
        model.train()
        if (within := self.within_epoch) is not None:  # the same pass, from its next batch
            self.within_epoch = None
            batches = self.batches.iterate(within["epoch_seed"], within["done"])
            sums, scalars = list(within["sums"].to(self.device)), list(within["scalars"].to(self.device))
            lrs, epoch_seed = list(within["lrs"]), within["epoch_seed"]
            # the scores of the steps before it, as the sketch they fed and its medians after each
            sketch, medians = HaltingCalibrator.from_bytes(within["sketch"]), list(within["medians"])
        else:
            batches = iter(self.batches)  # draws the pass's seed now
            sums, scalars, lrs = [], [], []  # per step: device tensors, and the host's lr
            epoch_seed = getattr(self.batches, "epoch_seed", None)
            sketch, medians = HaltingCalibrator(cfg.halting.sketch_k), []  # this epoch's training scores
        scores = []  # per step since the epoch's start or its resumption: (B, T) on the device
        for x, y in batches:
            if every and self.step % every == 0:  # gradient conflict at the weights before the step
                xc = x.contiguous(memory_format=torch.channels_last) if self.channels_last else x
                with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.amp):
                    g = gradient_conflict(model, xc, y, cfg.loss, per_step=True)
                for key, v in zip(DIAGNOSTICS, (self.step, g["cosine"], g["task_norm"],
                                                g["rank_norm"], g["step_cosines"])):
                    history["diagnostics"][key].append(v)
            tf = teacher_forced_share(self.step, self.total_steps) if cfg.loss.raptor else 0.0
            forced = torch.full((), tf, device=x.device) if tf else None  # a tensor: compiled once
            loss, step_scores, step_sums = self.forward(self.parallel_model, x, y, cfg, amp=self.amp,
                                                        forced=forced, channels_last=self.channels_last,
                                                        teacher=self.teacher)
            optimizer_step(model, self.optimizer, loss, cfg.train.grad_clip)
            lrs.append(self.scheduler.get_last_lr()[0])  # the step's own, before the schedule moves on
            self.scheduler.step()
            self.step += 1
            sums.append(step_sums)
            scalars.append(self._alpha_hurst())  # after the step, as the figure plots them
            scores.append(step_scores)
            bar.update(1)
            due = (self.checkpoint is not None and time.monotonic() - self.saved_at >= MID_EPOCH_SECONDS
                   and self.restartable)
            if due and len(sums) < self.steps_per_epoch:  # the epoch's end saves on its own
                self._guarded(sums, scalars)  # broken weights are never saved
                so_far = HaltingCalibrator.from_bytes(sketch.to_bytes())  # a copy: the live one goes on
                self.within_epoch = {"epoch_seed": epoch_seed, "done": len(sums), "lrs": lrs,
                                     "sums": torch.stack(sums).cpu(), "scalars": torch.stack(scalars).cpu(),
                                     "medians": medians + running_medians(so_far, scores),
                                     "sketch": so_far.to_bytes(), "seconds": time.perf_counter() - start}
                self._save(complete=False)
                self.within_epoch = None

        table = self._guarded(sums, scalars)  # the epoch's one read of the device
        medians += running_medians(sketch, scores)  # this epoch's training scores (this rank's); figure 2
        for step, (row, lr, median) in enumerate(zip(table, lrs, medians), self.step - len(sums) + 1):
            loss_sum, correct, seen, _, *part_sums, alpha, hurst = row
            parts = {k: v / self.setup.world_size for k, v in zip(self.logged_parts, part_sums)}
            values = {"step": step, "epoch": self.epoch, "lr": lr, "loss": loss_sum / seen, **parts,
                      "accuracy": correct / seen, "alpha": alpha, "hurst": hurst, "threshold_median": median}
            for key, v in values.items():
                history["steps"][key].append(int(v) if key in ("step", "epoch") else float(v))
        return sum(r[0] for r in table), sum(r[1] for r in table), sum(r[2] for r in table), sketch

    def _guarded(self, sums: list[Tensor], scalars: list[Tensor]) -> list[list[float]]:
        """The epoch's steps so far as host rows (the step sums over the ranks, alpha, H) in one read; a
        non-finite loss, score or weight stops every rank at once (``_stop``), before any checkpoint."""
        first_step = self.step - len(sums)
        table = torch.cat([summed_over_ranks(torch.stack(sums)), torch.stack(scalars)], 1).tolist()
        for i, (loss_sum, correct, seen, bad_scores, *part_sums, _, _) in enumerate(table):
            at = f"at epoch {self.epoch + 1}, step {first_step + i + 1}"
            if not math.isfinite(loss_sum / seen):
                parts = {k: v / self.setup.world_size for k, v in zip(self.logged_parts, part_sums)}
                self._stop(f"the loss became {loss_sum / seen} {at} (parts: {parts})")
            if bad_scores:
                self._stop(f"the halting scores became non-finite {at}")
        finite = torch.stack([torch.isfinite(p).all() for p in self.model.parameters()]).tolist()  # one read
        if bad := [n for (n, _), ok in zip(self.model.named_parameters(), finite) if not ok]:
            # never calibrate on or checkpoint broken weights, whatever the loss said
            self._stop(f"the weights {bad[:3]} became non-finite in epoch {self.epoch + 1}")
        return table

    @torch.no_grad()
    def _alpha_hurst(self) -> Tensor:
        """(2,) alpha and H of the model as they are now, NaN where it has none; on the device."""
        nan = torch.full((), NAN, device=self.device)
        return torch.stack([nan if v is None else v.detach().float().reshape(())
                            for v in (self.model.alpha(), self.model.hurst())])

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
        if (digest := state.get("teacher_digest")) is not None and digest != self.teacher_digest:
            raise CheckpointError(f"checkpoint {self.checkpoint} was trained against other weights of its "
                                  f"teacher loss.teacher={self.config.loss.teacher!r} than that run holds now "
                                  "(trained again, replaced, or now read from its lean export in "
                                  "outputs/runs/): restore the teacher's weights it started from, or delete "
                                  "the checkpoint to train the student afresh")
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
        self.history, (self.epoch, self.step, _) = state["history"], progress_of(state)
        self.within_epoch = state.get("within_epoch")  # None: saved at an epoch's end
        if self.within_epoch is not None and not self.restartable:
            raise CheckpointError(f"checkpoint {self.checkpoint} was saved within epoch {self.epoch + 1}, which "
                                  "resumes in one process on in-memory data only: finish that epoch so first "
                                  f"(without torchrun; Trainer.fit(until_epoch={self.epoch + 1})), then go on")
        self.train_seconds = state.get("train_seconds", 0.0)
        return True

    def state(self, complete: bool, metrics: dict | None = None) -> dict[str, Any]:
        """The checkpoint dict of the run as it is now: what ``_resume`` reads back."""
        return {"config": self.config.to_dict(), "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "rng": {"torch": torch.get_rng_state(), "data": self.generator.get_state()},
                "calibrator": None if self.calibrator.is_empty else self.calibrator.to_bytes(),
                "history": self.history, "epoch": self.epoch, "step": self.step,
                "train_seconds": self.train_seconds, "complete": complete, "metrics": metrics or {},
                "within_epoch": self.within_epoch, "teacher_digest": self.teacher_digest}

    def _save(self, complete: bool, metrics: dict | None = None) -> None:
        """Rank 0 checkpoints the run (``_save_or_rescue``); every rank learns whether that worked, so
        all stop together and none goes on before the checkpoint is on disk."""
        error = None
        self.saved_at = time.monotonic()
        if self.setup.is_main:
            try:
                _save_or_rescue(self.checkpoint, self.state(complete, metrics), complete, self.epoch)
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
        what = ("finished run" if complete else f"run within epoch {epoch + 1}" if state.get("within_epoch")
                else f"run after epoch {epoch}")
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
          progress: bool | None = None, teacher: FrostNet | None = None, **fit: Any) -> TrainResult:
    """Train ``config`` (resuming from ``checkpoint`` when it holds the same unfinished run); ``teacher``:
    a student's, already loaded (``runs.load_teacher``); ``fit``: ``Trainer.fit``'s options."""
    return build_trainer(config, checkpoint, progress, teacher).fit(**fit)


def build_trainer(config: RunConfig, checkpoint: str | os.PathLike | None = None,
                  progress: bool | None = None, teacher: FrostNet | None = None) -> Trainer:
    """The ``Trainer`` of ``config`` (the one place that builds one): joins a torchrun job, loads the
    splits, builds the model and the training batches."""
    cfg, d = config, config.data
    # under torchrun: join the job's process group (each CUDA process takes its own GPU)
    setup, device = join_process_group(pick_device(cfg.train.device))
    if checkpoint is not None and setup.is_main:  # before any work
        check_writable(checkpoint, "checkpoint", "pass the path of a .pt file in a writable folder")
    if cfg.loss.teacher is not None and teacher is None:  # before any work too
        raise TrainingError(f"loss.teacher={cfg.loss.teacher!r}: a student trains against its teacher: "
                            "pass teacher=runs.load_teacher(config)")
    teacher = teacher.to(device) if cfg.loss.teacher is not None else None
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
    if teacher is not None:  # a student starts from its teacher (a resumed run then loads its own weights)
        init_from_teacher(model, teacher)
    if cfg.loss.raptor:  # Raptor's readout: the teacher's classifier head, frozen
        model.head_norm.requires_grad_(False), model.head.requires_grad_(False)
    # the data order and augmentation come from this generator alone (saved for resuming)
    batches = make_batches(train_set, cfg.train.batch_size, shuffle=True, augment=d.augment, device=device,
                           generator=torch.Generator().manual_seed(cfg.train.seed),
                           drop_last=len(train_set) > cfg.train.batch_size, num_workers=cfg.train.num_workers)
    return Trainer(cfg, model, batches, val_set=val_set, test_set=test_set, checkpoint=checkpoint,
                   progress=progress, teacher=teacher)


# ---------------------------------------------------------------- the full-depth pass
@dataclass
class FullDepthPass:
    """One full-depth pass of a model over a split, per sample and step (float32, on the CPU): scores,
    logits and labels, and the reductions of its states when asked for (else None)."""

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
        if (s.dim() != 2 or z.shape != s.shape or lg.dim() != 3 or lg.shape[:2] != s.shape
                or y.shape != s.shape[:1]):
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
    """The ``FullDepthPass`` of ``model`` over the first ``max_samples`` of ``batches`` ((x, y) pairs), under
    bf16 autocast with ``amp``; ``trajectories`` adds the states' GAP (N, T+1, D) and norms, reduced batch
    by batch so memory stays O(N T D) (keeping every state instead: about 11 GB at CIFAR size)."""
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
        raise ValueError(f"full_depth_pass got no samples (an empty split, or max_samples={max_samples})")
    return FullDepthPass(**{k: torch.cat(v) for k, v in parts.items()})
