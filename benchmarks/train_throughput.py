"""Training throughput (images/s) of the model families, on synthetic data of a set's shape.

Measures what the trainer does per optimiser step (forward, the full loss, backward, the
optimiser, the KLL update) with the trainer's own functions, side by side for the models
asked for, in one process. Synthetic inputs: the data set need not be present (the paper's
ImageNet-100 at 224 px is not, here). Example (a GPU, the paper's settings):

    python benchmarks/train_throughput.py --size paper --models vanilla frost --backbones resnet vit

Prints one row per (backbone, model) and, with ``--csv``, writes them; with ``--metrics``,
also as ``outputs/metrics/bench_<name>.json`` (default name ``train_throughput``), which
``python -m frost_nb verdicts`` reads (the KLL row of the verdict table); ``kll_share`` is the
fraction of the step time spent feeding the halting scores to the KLL sketch (on CUDA the
timed steps synchronise once each for that measurement). The epoch time of
a real run follows as training images / images_per_s (plus evaluation and data loading,
which this does not measure).
"""

from __future__ import annotations

import argparse
import sys
import time

import pandas as pd
import torch

from frost_nb.config import SIZES, make_config
from frost_nb.halting import HaltingCalibrator
from frost_nb.models import create_model
from frost_nb.training import forward_loss, make_optimizer, optimizer_step, pick_device


def measure(size: str, dataset: str | None, model: str, backbone: str, batch_size: int | None,
            steps: int, warmup: int, amp: str, channels_last: str, device: str) -> dict:
    overrides = {"train.amp": amp, "train.channels_last": channels_last, "train.device": device}
    if batch_size:
        overrides["train.batch_size"] = batch_size
    cfg = make_config(size, dataset, model, backbone, **overrides)
    dev = pick_device(cfg.train.device)
    use_amp = cfg.train.amp == "bf16" or (cfg.train.amp == "auto" and dev.type == "cuda")
    use_cl = cfg.model.backbone == "resnet" and (
        cfg.train.channels_last == "on" or (cfg.train.channels_last == "auto" and dev.type == "cuda"))
    torch.manual_seed(0)
    net = create_model(cfg.model).to(dev)
    if use_cl:
        net = net.to(memory_format=torch.channels_last)
    opt = make_optimizer(net, cfg.train)
    n, m = cfg.train.batch_size, cfg.model
    x = torch.randn(n, m.in_channels, m.image_size, m.image_size, device=dev)
    y = torch.randint(0, m.num_classes, (n,), device=dev)
    sketch = HaltingCalibrator(cfg.halting.sketch_k)
    net.train()

    def one_step() -> float:
        """One optimiser step as the trainer takes it; returns the seconds of its KLL update
        (on CUDA measured after a synchronisation, so that it holds the copy of the scores to
        the host and the sketch, not the wait for the step's kernels)."""
        out, loss, _ = forward_loss(net, x, y, cfg, amp=use_amp, channels_last=use_cl)
        optimizer_step(net, opt, loss, cfg.train.grad_clip)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        sketch.update(torch.sigmoid(out.halt_logits.detach().float()))
        return time.perf_counter() - start

    for _ in range(warmup):
        one_step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    kll_seconds = sum(one_step() for _ in range(steps))
    if dev.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    row = {"size": size, "dataset": cfg.data.name, "backbone": backbone, "model": model,
           "update": cfg.model.update,
           "params_m": net.num_parameters() / 1e6, "batch_size": n, "image_size": m.image_size,
           "steps_T": m.steps, "amp_bf16": use_amp, "channels_last": use_cl,
           "ms_per_step": 1e3 * seconds / steps, "images_per_s": n * steps / seconds,
           "kll_ms_per_step": 1e3 * kll_seconds / steps, "kll_share": kll_seconds / seconds,
           "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else str(dev),
           "torch": torch.__version__}
    if dev.type == "cuda":
        row["peak_mem_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="paper", choices=SIZES)
    p.add_argument("--dataset", default=None, help="shape of this set (default: the size's)")
    p.add_argument("--models", nargs="+", default=["vanilla", "recurrent", "basic_ssm", "frost"])
    p.add_argument("--backbones", nargs="+", default=["resnet"])
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--steps", type=int, default=20, help="timed optimiser steps")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--amp", default="auto", choices=("auto", "bf16", "off"))
    p.add_argument("--channels-last", default="auto", choices=("auto", "on", "off"))
    p.add_argument("--device", default="auto")
    p.add_argument("--csv", default=None)
    p.add_argument("--metrics", nargs="?", const="train_throughput", default=None, metavar="NAME",
                   help="also write outputs/metrics/bench_NAME.json (default NAME: train_throughput)")
    a = p.parse_args(argv)
    rows = []
    for backbone in a.backbones:
        for model in a.models:
            try:
                rows.append(measure(a.size, a.dataset, model, backbone, a.batch_size, a.steps,
                                    a.warmup, a.amp, a.channels_last, a.device))
            except torch.OutOfMemoryError as err:  # a row that says so; the others still run
                rows.append({"size": a.size, "backbone": backbone, "model": model,
                             "batch_size": a.batch_size, "images_per_s": float("nan"),
                             "error": f"out of memory: {str(err).splitlines()[0][:120]}"})
                torch.cuda.empty_cache()
            print(pd.DataFrame(rows[-1:]).to_string(index=False, float_format="%.2f"), flush=True)
            if a.csv:  # after every row: a run cut short keeps what it measured
                pd.DataFrame(rows).to_csv(a.csv, index=False)
    print(pd.DataFrame(rows).to_string(index=False, float_format="%.2f"))
    if a.metrics:
        from frost_nb.notebook.glue import write_metrics

        settings = {k: getattr(a, k) for k in ("size", "dataset", "batch_size", "steps", "warmup", "amp",
                                               "channels_last", "device")}
        path = write_metrics(f"bench_{a.metrics}", {"benchmark": "train_throughput", **settings,
                                                     "rows": pd.DataFrame(rows).to_dict(orient="records")},
                             device=str(pick_device(a.device)))
        print(f"metrics: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
