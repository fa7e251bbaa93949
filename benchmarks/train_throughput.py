"""Training throughput (images/s) and peak memory of the trainer, eager against compiled, fp32 against
bf16 autocast and ``channels_last`` off against on, side by side in one process.

Runs the trainer itself (``training.Trainer``: the training forward pass, compiled or eager, the
optimiser, the step history kept on the device, the epoch's end with its one read of the device and
the KLL sketch fed from its buffer) on synthetic data of a set's shape: the data set need not be
present (the paper's ImageNet-100 at 224 px is not, here). Each variant trains a warm-up epoch of
``--steps`` optimiser steps (compilation and cuDNN's autotuning happen there: ``warmup_s``, which
is a bare host's compile time only when torch's compile cache is empty) and then a timed epoch of the
same steps: ``images_per_s`` is batch_size x steps over that epoch's wall time (the device
synchronised before and after), ``peak_mem_gib`` the device memory it peaked at (CUDA only; empty
elsewhere). ``kll_share`` is the fraction of the timed epoch spent feeding its halting scores to
the KLL sketch (``training.running_medians``, timed once more on its own). The epoch time of a real
run follows as training images / images_per_s plus the held-out pass, which this does not run.
Example (a GPU, the cifar size: 2 x 2 variants of FROST):

    python benchmarks/train_throughput.py --device cuda --size cifar --metrics train_throughput_cuda

A CPU, the scale ladder's top rung, eager and compiled, fp32 and bf16, at one thread (run two such
processes at once to see two single-thread jobs side by side; docs/scaling.md):

    python benchmarks/train_throughput.py --size ladder128 --amp off bf16 --channels-last off --threads 1

Prints one row per (backbone, model, compile, channels_last) as it goes, then a markdown table;
``--csv`` writes the rows, ``--metrics`` also ``outputs/metrics/bench_<name>.json`` (default name
``train_throughput``), which ``python -m frost_nb verdicts`` reads (the KLL row of the verdict table).
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time

import pandas as pd
import torch

from frost_nb.analysis.complexity import flops_per_image
from frost_nb.config import SIZES, make_config, parse_settings
from frost_nb.halting import HaltingCalibrator
from frost_nb.models import create_model
from frost_nb.repro.verdicts import _markdown
from frost_nb.runs import load_teacher
from frost_nb.training import Trainer, pick_device, running_medians

# the printed table's columns and their formats (the metrics keep every column)
TABLE = {"size": "{}", "model": "{}", "backbone": "{}", "amp_bf16": "{}", "compile": "{}", "channels_last": "{}", "images_per_s": "{:,.0f}",
         "ms_per_step": "{:.2f}", "peak_mem_gib": "{:.2f}", "warmup_s": "{:.1f}", "kll_share": "{:.2%}"}


class SyntheticBatches:
    """``steps`` batches of one fixed random batch of the config's shape, on ``device``."""

    def __init__(self, cfg, steps: int, device: torch.device) -> None:
        n, m = cfg.train.batch_size, cfg.model
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, m.in_channels, m.image_size, m.image_size, generator=g).to(device)
        self.y = torch.randint(0, m.num_classes, (n,), generator=g).to(device)
        self.steps, self.batch_size = steps, n

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        return iter([(self.x, self.y)] * self.steps)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(size: str, dataset: str | None, model: str, backbone: str, batch_size: int | None,
            steps: int, amp: str, compile_: str, channels_last: str, device: str,
            settings: dict | None = None) -> dict:
    overrides = {**(settings or {}), "train.amp": amp, "train.channels_last": channels_last,
                 "train.compile": compile_, "train.device": device, "train.epochs": 2, "train.warmup_epochs": 0.0}
    if batch_size:
        overrides["train.batch_size"] = batch_size
    cfg = make_config(size, dataset, model, backbone, **overrides)
    dev = pick_device(cfg.train.device)
    torch.manual_seed(0)
    torch._dynamo.reset()  # each variant compiles afresh (and none runs into the recompile limit)
    teacher = load_teacher(cfg, dev) if cfg.loss.teacher is not None else None  # a student's, run on every batch
    trainer = Trainer(cfg, create_model(cfg.model).to(dev), SyntheticBatches(cfg, steps, dev), progress=False,
                      teacher=teacher)
    start = time.perf_counter()
    trainer.fit(until_epoch=1)  # warm-up: compilation, cuDNN's autotuning
    synchronize(dev)
    warmup = time.perf_counter() - start
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    start = time.perf_counter()
    trainer.fit(until_epoch=2)
    synchronize(dev)
    seconds = time.perf_counter() - start
    # the epoch's KLL work alone: its halting scores (steps of (B, T)) fed as the trainer feeds them
    scores = [torch.rand(cfg.train.batch_size, cfg.model.steps, device=dev) for _ in range(steps)]
    synchronize(dev)
    kll_start = time.perf_counter()
    running_medians(HaltingCalibrator(cfg.halting.sketch_k), scores)
    kll_seconds = time.perf_counter() - kll_start
    m = cfg.model
    fixed, per_step = flops_per_image(create_model(m), (m.in_channels, m.image_size, m.image_size))
    return {"size": size, "dataset": cfg.data.name, "backbone": backbone, "model": model,
            "update": m.update, "params_m": trainer.model.num_parameters() / 1e6,
            "mflop_per_image": (fixed + m.steps * per_step) / 1e6,
            "batch_size": cfg.train.batch_size, "image_size": m.image_size, "steps_T": m.steps,
            "amp_bf16": trainer.amp, "compile": trainer.compiled, "channels_last": trainer.channels_last,
            "timed_steps": steps, "warmup_s": warmup, "ms_per_step": 1e3 * seconds / steps,
            "images_per_s": cfg.train.batch_size * steps / seconds,
            "peak_mem_gib": torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else math.nan,
            "kll_ms_per_step": 1e3 * kll_seconds / steps, "kll_share": kll_seconds / seconds,
            "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else str(dev),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="paper", choices=SIZES)
    p.add_argument("--dataset", default=None, help="shape of this set (default: the size's)")
    p.add_argument("--models", nargs="+", default=["frost"])
    p.add_argument("--backbones", nargs="+", default=["resnet"])
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--steps", type=int, default=50, help="optimiser steps of the warm-up and the timed epoch")
    p.add_argument("--amp", nargs="+", default=["auto"], choices=("auto", "bf16", "off"),
                   help="train.amp, each measured (auto: bf16 on CUDA, fp32 elsewhere)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch's intra-op threads (default: torch's own, one per core)")
    p.add_argument("--compile", nargs="+", default=["off", "on"], choices=("off", "on"),
                   help="torch.compile of the training forward (train.compile), each measured")
    p.add_argument("--channels-last", nargs="+", default=["off", "on"], choices=("off", "on"),
                   help="the channels_last layout (train.channels_last; ResNet only), each measured")
    p.add_argument("--device", default="auto")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="any other config field, as the command line's --set (repeatable), e.g. a student: "
                        "--models vanilla --set model.branch_steps=6,10 --set loss.teacher=GRID/LABEL")
    p.add_argument("--csv", default=None)
    p.add_argument("--metrics", nargs="?", const="train_throughput", default=None, metavar="NAME",
                   help="also write outputs/metrics/bench_NAME.json (default NAME: train_throughput)")
    a = p.parse_args(argv)
    if a.steps < 1:
        p.error(f"--steps {a.steps}: give at least 1 optimiser step per epoch")
    if a.threads is not None:
        if a.threads < 1:
            p.error(f"--threads {a.threads}: give at least 1")
        torch.set_num_threads(a.threads)
    rows = []
    variants = itertools.product(a.backbones, a.models, a.amp, a.compile, a.channels_last)
    for backbone, model, amp, compile_, layout in variants:
        if backbone != "resnet" and layout == "on":
            continue  # a ViT has no channels_last layout
        try:
            rows.append(measure(a.size, a.dataset, model, backbone, a.batch_size, a.steps, amp, compile_,
                                layout, a.device, parse_settings(a.set)))
        except torch.OutOfMemoryError as err:  # a row that says so; the others still run
            rows.append({"size": a.size, "backbone": backbone, "model": model, "amp": amp,
                         "compile": compile_ == "on",
                         "channels_last": layout == "on", "batch_size": a.batch_size,
                         "images_per_s": math.nan,
                         "error": f"out of memory: {str(err).splitlines()[0][:120]}"})
            torch.cuda.empty_cache()
        print(pd.DataFrame(rows[-1:]).to_string(index=False, float_format="%.2f"), flush=True)
        if a.csv:  # after every row: a run cut short keeps what it measured
            pd.DataFrame(rows).to_csv(a.csv, index=False)
    table = pd.DataFrame(rows).reindex(columns=list(TABLE))
    cells = (tuple("" if pd.isna(v) else form.format(v) for v, form in zip(r, TABLE.values()))
             for r in table.itertuples(index=False))
    print(_markdown(tuple(TABLE), cells))
    if a.metrics:
        from frost_nb.notebook.glue import write_metrics

        settings = {k: getattr(a, k) for k in ("size", "dataset", "batch_size", "steps", "amp", "compile",
                                               "channels_last", "device", "threads", "set")}
        path = write_metrics(f"bench_{a.metrics}", {"benchmark": "train_throughput", **settings,
                                                     "rows": pd.DataFrame(rows).to_dict(orient="records")},
                             device=str(pick_device(a.device)))
        print(f"metrics: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
