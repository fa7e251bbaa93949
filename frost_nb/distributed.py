"""Multi-process training with torch's DistributedDataParallel (DDP), started by torchrun
(docs/architecture.md, "Multi-process training"); without torchrun every function is a no-op."""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .config import ConfigError
from .models import ModelOutput

LEAVE_TIMEOUT = datetime.timedelta(seconds=60)  # how long leave_process_group waits for the other ranks


@dataclass(frozen=True)
class DistributedSetup:
    """Where this process stands in a DDP job (rank 0 of 1 without one)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0  # the GPU of this process on its machine

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:  # rank 0 alone writes checkpoints, logs and progress bars
        return self.rank == 0


def launched_world_size() -> int:
    """How many processes torchrun started for this job (1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def in_process_group() -> bool:
    """True inside an initialised process group of more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def join_process_group(device: torch.device) -> tuple[DistributedSetup, torch.device]:
    """This process's place in the job, and its device: under torchrun the first call joins the group
    (NCCL on CUDA, gloo on the CPU) and a CUDA process takes the GPU of its LOCAL_RANK; idempotent."""
    if not dist.is_available() or (not dist.is_initialized() and launched_world_size() <= 1):
        return DistributedSetup(), device
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")  # env:// rendezvous
    rank, world = dist.get_rank(), dist.get_world_size()
    setup = DistributedSetup(rank, world, int(os.environ.get("LOCAL_RANK", rank)))
    if not setup.is_distributed:
        return setup, device
    if device.type == "mps":
        raise ConfigError("train.device resolves to Apple's MPS, which torch's DDP does not support: "
                          "set train.device='cpu' to train with several processes")
    if device.type == "cuda":
        device = torch.device("cuda", setup.local_rank)
        torch.cuda.set_device(device)  # NCCL and the object collectives use the current device
    return setup, device


def leave_process_group() -> None:
    """Destroy the process group, if there is one; on gloo the ranks first wait for each other (at most
    LEAVE_TIMEOUT): one tearing down early was seen to abort another at exit."""
    if dist.is_available() and dist.is_initialized():
        if dist.get_world_size() > 1 and dist.get_backend() == "gloo":
            with contextlib.suppress(RuntimeError):  # a rank is gone: tear down anyway
                dist.monitored_barrier(timeout=LEAVE_TIMEOUT)
        dist.destroy_process_group()


def summed_over_ranks(values: torch.Tensor) -> torch.Tensor:
    """``values`` summed over all ranks, elementwise, on their device: one all-reduce and no host
    sync (the tensor itself without a process group)."""
    if in_process_group():
        values = values.clone()  # the caller's tensor stays this rank's
        dist.all_reduce(values)  # SUM
    return values


def sum_over_ranks(values: Sequence[torch.Tensor | float], device: torch.device) -> list[float]:
    """The sum over all ranks of each of a few numbers, in one all-reduce and one host sync."""
    # float32: MPS has no float64; the numbers are per-batch losses and counts
    stacked = torch.stack([torch.as_tensor(v, dtype=torch.float32, device=device).reshape(())
                           for v in values])  # (len(values),)
    return summed_over_ranks(stacked).tolist()


@functools.cache
def _let_ddp_see_model_outputs() -> None:
    """Register ``ModelOutput`` with torch's pytree: DDP finds the forward's outputs through it, and
    with ``find_unused_parameters`` an opaque one stops it ("Expected to have finished reduction")."""
    from torch.export import register_dataclass

    with contextlib.suppress(ValueError):  # registered already (elsewhere in this process)
        register_dataclass(ModelOutput)


def parallel(model: torch.nn.Module, batches, *, find_unused_parameters: bool):
    """``(parallel_model, its_batches, setup)``, the wrapper for the training forward only. Some parameters
    get no gradient (``find_unused_parameters``): DDP's warning that it "did not find any unused parameters"
    is a false positive (it searches from every output, not the loss); turning the flag off fails."""
    device = next(model.parameters()).device
    setup, rank_device = join_process_group(device)
    if not setup.is_distributed:
        return model, batches, setup
    if rank_device != device:
        raise ConfigError(f"rank {setup.rank} trains on {rank_device} but its model is on {device}: "
                          "build the model on the device that join_process_group returns")
    size = getattr(batches, "batch_size", None)
    if size is not None and size % setup.world_size:
        raise ConfigError(f"train.batch_size={size} is the global batch, split evenly among the "
                          f"{setup.world_size} processes: make it a multiple of {setup.world_size}")
    _let_ddp_see_model_outputs()
    wrapped = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device] if device.type == "cuda" else None,
        find_unused_parameters=find_unused_parameters)
    return wrapped, ShardedBatches(batches, setup), setup


class ShardedBatches:
    """This rank's share of every batch: every rank draws the same ``batches`` (same generator
    state) and rank r keeps the r-th of ``world_size`` contiguous slices."""

    def __init__(self, batches, setup: DistributedSetup) -> None:
        self.batches, self.setup = batches, setup

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        world, rank = self.setup.world_size, self.setup.rank
        for x, y in self.batches:
            yield x.tensor_split(world)[rank], y.tensor_split(world)[rank]  # (B / world, ...)
