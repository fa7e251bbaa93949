"""What a run will cost, said before it starts: parameters, FLOPs per image, memory and time per epoch,
from the config alone on PyTorch's ``meta`` device. Memory counts weights, gradients, optimiser state,
the tensors saved for the backward pass (fp32: an upper bound under bf16), the device-resident split and
a teacher; time scales the FLOP rate measured on this kind of machine (docs/scaling.md)."""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from .checkpoint import save_checkpoint
from .config import RunConfig, replace_model
from .data.prepare import DATASETS
from .losses import teacher_losses, total_loss
from .models import create_model
from .training import Trainer, TrainingError, pick_device, use_amp, use_compile

# training images per data set (the held-out share is taken from them; the trainer's per-epoch
# held-out pass runs the forward pass alone, about a third of a training step's work)
TRAIN_IMAGES = {"digits": 1438, "fashion-mnist": 60000, "cifar10": 50000, "cifar100": 50000,
                "imagenet100": 126689}
FORWARD_SHARE = 1 / 3  # a forward pass's share of a training step's FLOPs (forward + backward)
GIB = 2**30


def _size(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / 2**20:.1f} MiB"


@dataclass(frozen=True)
class RunCost:
    params: int
    flops_per_image: int  # forward, full depth
    memory: dict[str, int]  # bytes: weights, gradients, optimizer, activations, a student's teacher, data
    epoch_seconds: float | None  # best case on this machine; None without a measurement to scale
    basis: str  # what the time rests on

    @property
    def memory_bytes(self) -> int:
        return sum(self.memory.values())

    def text(self) -> str:
        """Three lines for a person about to wait for the run."""
        parts = ", ".join(f"{k} {_size(v)}" for k, v in self.memory.items())
        time = (f"about {self.epoch_seconds / 60:.1f} min per epoch at best ({self.basis})"
                if self.epoch_seconds is not None else f"time per epoch unknown ({self.basis})")
        return (f"cost: {self.params:,} parameters, {self.flops_per_image / 1e6:,.1f} MFLOP per image "
                f"(forward, full depth)\ncost: memory about {_size(self.memory_bytes)} ({parts})\n"
                f"cost: {time}")


def flops_per_image(model: torch.nn.Module, input_shape: Sequence[int]) -> tuple[int, int]:
    """(C_fixed, C_step) of one image of shape ``input_shape`` (C, H, W): ``prologue``, then step 0 and
    its readout (every step costs the same); no gradient, the model's device and mode."""
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"input_shape={input_shape!r} must be (C, H, W) of one image, "
                         f"e.g. (1, 28, 28); the batch axis is added here")
    device = next(model.parameters(), torch.empty(0)).device  # a model without weights: the CPU
    x = torch.zeros((1, *shape), device=device)  # (1, C, H, W)
    with torch.no_grad(), FlopCounterMode(display=False) as fixed:
        h, ctx = model.prologue(x)
    with torch.no_grad(), FlopCounterMode(display=False) as per_step:
        model.readout(model.step(h, ctx, 0), ctx)
    return fixed.get_total_flops(), per_step.get_total_flops()  # FlopCounterMode's counts


def _batch_bytes(model, config: RunConfig, teacher=None) -> tuple[int, int]:
    """(bytes of the tensors one training batch's forward pass keeps for the backward pass, bytes of
    the frozen ``teacher``'s outputs the student's loss reads), fp32, as ``training.forward_loss``."""
    m, n = config.model, config.train.batch_size
    x = torch.zeros(n, m.in_channels, m.image_size, m.image_size, device="meta")
    y = torch.zeros(n, dtype=torch.long, device="meta")
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        if not isinstance(t, torch.nn.Parameter):  # weights are counted once, as weights
            seen.setdefault(id(t), t.numel() * 4)
        return t

    held = 0
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x, detach_halt_input=not config.loss.rank_grad_to_backbone, return_states=teacher is not None)
        total_loss(out.logits, out.halt_logits, y, config.loss)
        if teacher is not None:
            with torch.no_grad():
                ref = teacher(x, return_states=True)
            held = (ref.states.numel() + ref.logits.numel()) * 4
            teacher_losses(out.states, out.logits, ref.states, ref.logits)
    return sum(seen.values()), held


def _measured_rates(device_type: str) -> list[dict]:
    """Rows of the committed throughput benchmarks measured on ``device_type`` with a FLOP count (``paths``
    imported per call: tests replace ``paths.repo_root``)."""
    from .paths import DamagedInput, one_line, repo_root, restore_hint, shown_path, skip_or_raise

    rows = []  # the committed measurements (not $FROST_OUTPUTS': a smoke run's are not this machine's)
    for path in sorted((repo_root() / "outputs" / "metrics").glob("bench_train_throughput*.json")):
        try:
            rows += [r for r in json.loads(path.read_text()).get("rows", [])
                     if str(r.get("device", "")).split(":")[0] == device_type
                     and (r.get("mflop_per_image") or 0) > 0 and (r.get("images_per_s") or 0) > 0]  # NaN too
        except (OSError, ValueError, AttributeError, TypeError) as err:  # said (--skip-damaged: left out)
            skip_or_raise(DamagedInput(f"{shown_path(path)} is no throughput record ({one_line(err)}); "
                                       f"{restore_hint(path, 'python benchmarks/train_throughput.py --metrics')}"))
    return rows


def _epoch_seconds(config: RunConfig, flops: int, device: torch.device, amp: bool,
                   compiled: bool, teacher_flops: int = 0) -> tuple[float | None, str]:
    rows = _measured_rates(device.type)
    if not rows:
        return None, f"no throughput measured on a {device.type} here: benchmarks/train_throughput.py --metrics"
    threads = torch.get_num_threads()

    def distance(r: dict) -> tuple:  # same precision and compilation, then a size within 2x, then threads
        far = abs(math.log(r["mflop_per_image"] * 1e6 / flops))
        return (bool(r.get("amp_bf16")) != amp, bool(r.get("compile")) != compiled, far > math.log(2),
                r.get("threads", threads) != threads, far)

    best = min(rows, key=distance)
    # forward FLOPs per second of training; another thread count scales it in proportion (two
    # single-thread jobs at once each ran at 0.47 of one two-thread job: docs/scaling.md)
    measured_threads = best.get("threads") or threads
    rate = best["mflop_per_image"] * 1e6 * best["images_per_s"] * min(threads, measured_threads) / measured_threads
    n = TRAIN_IMAGES[config.data.name]  # every data set's (config.data.name is one of DATASETS)
    held_out = n * config.data.val_fraction
    # a student's teacher runs forward on every training batch: a third of a step at its FLOPs
    seconds = ((n - held_out) * (flops + teacher_flops * FORWARD_SHARE) + held_out * FORWARD_SHARE * flops) / rate
    return seconds, (f"scaled from {best['size']} {'bf16' if best.get('amp_bf16') else 'fp32'} "
                     f"{'compiled' if best.get('compile') else 'eager'} at {measured_threads} thread(s), "
                     f"{best['images_per_s']:.0f} images/s")


def estimate(config: RunConfig, device: torch.device | None = None) -> RunCost:
    """The cost of training ``config`` on ``device`` (default: the one it would train on)."""
    device = device or pick_device(config.train.device)
    with torch.device("meta"):
        model = create_model(config.model)
        # a student's teacher: the student's model with one branch per step, as runs.load_teacher requires
        teacher = (None if config.loss.teacher is None else
                   create_model(replace_model(config.model, branch_steps="")).eval().requires_grad_(False))
    params = model.num_parameters()
    m = config.model
    fixed, per_step = flops_per_image(model, (m.in_channels, m.image_size, m.image_size))
    flops = fixed + m.steps * per_step  # a teacher has the same shapes, so the same FLOPs (flops_per_image)
    moments = 2 if config.train.optimizer == "adamw" else 1
    saved, held = _batch_bytes(model, config, teacher)
    memory = {"weights": params * 4, "gradients": params * 4, "optimizer": params * 4 * moments,
              "activations": saved}
    if teacher is not None:  # its weights, and the states and logits of one batch the loss reads
        memory["teacher"] = teacher.num_parameters() * 4 + held
    if DATASETS[config.data.name].in_memory:
        memory["data"] = TRAIN_IMAGES[config.data.name] * m.in_channels * m.image_size ** 2
    seconds, basis = _epoch_seconds(config, flops, device, use_amp(config, device), use_compile(config, device),
                                    flops if teacher is not None else 0)
    return RunCost(params, flops, memory, seconds, basis)


def checkpoint_bytes(config: RunConfig, train_images: int) -> int:
    """Bytes of ``config``'s resumable checkpoint at its last epoch (``train_images`` training images):
    ``Trainer.state`` after one optimiser step, a fed halting sketch and every step's history, written."""
    steps = max(1, train_images // config.train.batch_size)
    trainer = Trainer(config, create_model(config.model), range(steps), val_set=())
    trainer.generator = torch.Generator()  # the batches' own, saved in the state
    for p in trainer.model.parameters():
        p.grad = torch.zeros_like(p)
    trainer.optimizer.step()
    trainer.calibrator.update(torch.linspace(0, 1, 100_000, dtype=torch.float64).numpy())
    trainer.epoch, trainer.step = config.train.epochs, config.train.epochs * steps
    for part, n in (("steps", trainer.step), ("epochs", trainer.epoch)):
        trainer.history[part] = {k: [0.123456789 * (i % 97) for i in range(n)] for k in trainer.history[part]}
    with tempfile.TemporaryDirectory() as tmp:
        return save_checkpoint(Path(tmp) / "full.pt", trainer.state(complete=False)).stat().st_size


def free_memory(device: torch.device) -> int | None:
    """Bytes the device has free now (CUDA: the driver's count; CPU: MemAvailable), None if unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    with suppress(OSError):
        if found := re.search(r"^MemAvailable:\s+(\d+)", Path("/proc/meminfo").read_text(), re.MULTILINE):
            return int(found[1]) * 1024
    with suppress(ValueError, OSError, AttributeError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return None


def refuse_if_too_big(config: RunConfig, cost: RunCost, device: torch.device) -> None:
    """A ``TrainingError`` naming the shortfall and the fix when ``cost`` cannot fit in ``device``'s free
    memory."""
    free = free_memory(device)
    if free is not None and cost.memory_bytes > free:
        raise TrainingError(
            f"the run needs about {cost.memory_bytes / GIB:.1f} GiB ({cost.memory['activations'] / GIB:.1f} "
            f"of them activations of a batch of {config.train.batch_size}) and {device.type} has "
            f"{free / GIB:.1f} GiB free: lower train.batch_size (--set train.batch_size=...) or free memory")
