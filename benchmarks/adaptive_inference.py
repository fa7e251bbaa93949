"""Adaptive inference against full depth: how much of the ideal FLOP speed-up is real (CPU).

For a trained checkpoint and real test images, at each halting quantile q and batch size,
in one process and side by side:

    mean_depth   mean exit depth at tau_q = calibrator.threshold(q); accuracy at the exits
    ideal        FLOPs at full depth / FLOPs at the measured exit depths, the fixed part
                 (stem, B(e), GAP(D(e))) and the readout heads of every step included
                 (``frost_nb.complexity``)
    measured     full-depth wall time / adaptive wall time
    ratio        measured / ideal (1: the skipped FLOPs come back in full as time)

and, to tell apart the two reasons why ``ratio`` falls short of 1:

    time_ideal   the speed-up if every step cost its full-batch time and the fixed part its
                 measured time: t_full / (t_fixed + mean_depth / T * (t_full - t_fixed)).
                 Below ``ideal`` when the fixed part takes a larger share of the time than
                 of the FLOPs (max-pooling and normalisations count no FLOPs)
    efficiency   measured / time_ideal: what adaptive inference itself loses (compaction of
                 the active batch, late steps on few samples at a fixed per-step overhead)
    fixed_share  t_fixed / t_full, the time share of embed + context + init_state

so that ratio = (time_ideal / ideal) * efficiency.

The full-depth reference is ``adaptive_predict`` itself at tau = +inf: the same code path
(the same step and readout calls, the same per-step exit test and host sync) with nothing
ever exiting, so the ratio measures what skipping costs and nothing else. ``forward_us``,
the model's plain forward at full depth timed in the same rounds, shows that this reference
is not a slowed-down one. Times ``*_us`` are microseconds per image.

Timing (CPU, ``time.perf_counter``): ``--warmup`` untimed rounds, then ``--repeats`` rounds.
Batch by batch, a round runs the fixed part alone and the plain forward, then for every
quantile a full-depth pass and an adaptive pass of that same batch, back to back, so the
slow drifts of a busy machine hit both sides alike. A variant's time is the sum over the
batches of its median over rounds (a preemption spoils one batch of one round, not the
estimate). The images are the first ``--images`` of the test split. Example (the committed
demo checkpoint; about 5 minutes on one busy core, most of it at batch size 1):

    python benchmarks/adaptive_inference.py --threads 1 --images 512 --repeats 5 --csv /tmp/a.csv

``--compile`` adds a second mode, measured in the same rounds: the same model with its
``step`` and ``readout`` compiled (``torch.compile(dynamic=True)``, one graph for every active
batch size), full depth and adaptive alike; each row names its ``mode``. ``--channels-last``
adds another: a copy of the model with its 4-d weights in channels-last layout (so are its
activations), the issue's third route.

``--step-costs`` first times one step and its readout (``model.step``, ``model.readout``) on
1, 2, 4, ... 256 rows of the first images' states, medians over the rounds: the per-call cost
that late steps on few samples pay, which no compaction removes.

Prints the machine, then one table row per (quantile, batch size); ``--csv`` writes them
with the setting of the run on every row; ``--metrics`` also writes them as
``outputs/metrics/bench_<name>.json`` (default name ``adaptive_inference``), which
``python -m frost_nb verdicts`` reads (the adaptive-inference row of the verdict table).
"""

from __future__ import annotations

import argparse
import copy
import math
import platform
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from frost_nb.checkpoint import checkpoint_config, load_model
from frost_nb.complexity import flops_per_image, ideal_speedup, prologue
from frost_nb.data import make_batches
from frost_nb.halting import adaptive_predict
from frost_nb.paths import committed_runs_dir
from frost_nb.training import load_split

# frost, Fashion-MNIST, the adopted defaults (leaky update), seed 0
DEFAULT_CHECKPOINT = committed_runs_dir() / "fashion-mnist-demo-families/frost-seed0/model.pt"


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def compiled(model):
    """A copy of ``model`` whose ``step`` and ``readout`` are compiled, for every batch size."""
    other = copy.deepcopy(model)
    other.step = torch.compile(other.step, dynamic=True)
    other.readout = torch.compile(other.readout, dynamic=True)
    return other


def channels_last(model):
    """A copy of ``model`` with its 4-d weights, and so its activations, in channels-last layout."""
    return copy.deepcopy(model).to(memory_format=torch.channels_last)


def step_costs(model, x: torch.Tensor, repeats: int, warmup: int) -> pd.DataFrame:
    """Seconds of one step plus its readout on b rows (b = 1, 2, 4, ... up to 256 or the images
    there are), the median over rounds of the mean over 256 / b calls, and per row."""
    sizes = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= x.shape[0]]
    with torch.no_grad():
        h, ctx = prologue(model, x[: sizes[-1]])
        seconds: dict[int, list[float]] = {b: [] for b in sizes}
        for r in range(warmup + repeats):
            for b in sizes:
                cb = ctx.select(torch.arange(b)) if hasattr(ctx, "select") else ctx[:b]  # StepContext or e
                hb, calls = h[:b].contiguous(), max(1, 256 // b)
                start = time.perf_counter()
                for _ in range(calls):
                    model.readout(model.step(hb, cb, 0), cb)
                if r >= warmup:
                    seconds[b].append((time.perf_counter() - start) / calls)
    rows = [{"rows": b, "step_us": 1e6 * statistics.median(v)} for b, v in seconds.items()]
    table = pd.DataFrame(rows)
    table["per_row_us"] = table["step_us"] / table["rows"]
    table["per_row_vs_largest"] = table["per_row_us"] / table["per_row_us"].iloc[-1]
    return table


def measure(models: dict, x: torch.Tensor, y: torch.Tensor, taus: dict[float, float], batch_size: int,
            repeats: int, warmup: int, costs: tuple[int, int], compact: tuple[float, ...] = (1.0,)) -> list[dict]:
    """Rows of one batch size: for every mode of ``models`` (name -> model), every quantile of
    ``taus`` and compaction setting of ``compact`` (``adaptive_predict``'s ``compact_below``)
    against full depth, interleaved."""
    model = models["eager"]
    steps = int(model.config.steps)
    chunks = list(x.split(batch_size))  # (B, C, H, W) views, the last one may be shorter
    keys = ["fixed", "forward"] + [(mode, *k) for mode in models for q in taus
                                   for k in [("full", q, 1.0)] + [("adaptive", q, c) for c in compact]]
    seconds = {k: [[] for _ in chunks] for k in keys}  # [batch][round]
    exits = {(mode, q, c): [None] * len(chunks) for mode in models for q in taus for c in compact}
    for r in range(warmup + repeats):
        for c, xb in enumerate(chunks):
            for k in keys:
                start = time.perf_counter()
                if k == "fixed":
                    with torch.no_grad():
                        prologue(model, xb)
                elif k == "forward":
                    with torch.no_grad():
                        model(xb)
                else:
                    mode, kind, q, cb = k
                    res = adaptive_predict(models[mode], xb, math.inf if kind == "full" else taus[q],
                                           compact_below=cb)
                    if kind == "adaptive":
                        exits[mode, q, cb][c] = res
                elapsed = time.perf_counter() - start  # CPU: a call returns when it is done
                if r >= warmup:
                    seconds[k][c].append(elapsed)
    total = {k: sum(statistics.median(rounds) for rounds in seconds[k]) for k in keys}
    n, t_fixed = x.shape[0], total["fixed"]
    rows = []
    for (mode, q, cb), results in exits.items():
        tau = taus[q]
        depth = torch.cat([res.depth for res in results])  # (N,)
        logits = torch.cat([res.logits for res in results])  # (N, K)
        t_full, t_adaptive = total[(mode, "full", q, 1.0)], total[(mode, "adaptive", q, cb)]
        mean_depth = depth.double().mean().item()
        ideal = ideal_speedup(depth, steps, *costs)
        measured = t_full / t_adaptive
        time_ideal = t_full / (t_fixed + mean_depth / steps * (t_full - t_fixed))
        rows.append({"mode": mode, "quantile": q, "tau": tau, "batch_size": batch_size, "compact_below": cb,
                     "mean_depth": mean_depth,
                     "accuracy": (logits.argmax(1) == y).double().mean().item(),
                     "ideal": ideal, "measured": measured, "ratio": measured / ideal,
                     "time_ideal": time_ideal, "efficiency": measured / time_ideal,
                     "fixed_share": t_fixed / t_full,
                     "full_us": 1e6 * t_full / n, "adaptive_us": 1e6 * t_adaptive / n,
                     "forward_us": 1e6 * total["forward"] / n})
    return rows


def _table(rows: list[dict], images: int, a: argparse.Namespace) -> pd.DataFrame:
    """The rows with the setting of the run on each (so that a CSV stands on its own)."""
    df = pd.DataFrame(rows)
    df["images"], df["repeats"], df["threads"] = images, a.repeats, torch.get_num_threads()
    df["cpu"], df["torch"], df["checkpoint"] = cpu_name(), torch.__version__, Path(a.checkpoint).name
    return df


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT),
                   help="a trained frost_nb checkpoint (.pt) with its halting calibrator")
    p.add_argument("--quantiles", nargs="+", type=float, default=[0.25, 0.5, 0.75])
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 16, 64, 256])
    p.add_argument("--compact-below", nargs="+", type=float, default=[1.0],
                   help="adaptive_predict's compact_below values, measured side by side (1: compact at every exit)")
    p.add_argument("--compile", action="store_true",
                   help="also measure the model with step and readout compiled (torch.compile), side by side")
    p.add_argument("--channels-last", action="store_true",
                   help="also measure the model in channels-last layout, side by side")
    p.add_argument("--step-costs", action="store_true",
                   help="first time one step and its readout on 1, 2, 4, ... 256 rows")
    p.add_argument("--images", type=int, default=512, help="test images (the first N)")
    p.add_argument("--repeats", type=int, default=5, help="timed rounds (medians over them)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--csv", default=None)
    p.add_argument("--metrics", nargs="?", const="adaptive_inference", default=None, metavar="NAME",
                   help="also write outputs/metrics/bench_NAME.json (default NAME: adaptive_inference)")
    a = p.parse_args(argv)
    for name in ("images", "repeats", "threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(a, name)}")
    if a.warmup < 0 or min(a.batch_sizes) < 1:
        p.error("--warmup must be >= 0 and every --batch-sizes value >= 1")
    if not all(0.0 <= c <= 1.0 for c in a.compact_below):
        p.error(f"--compact-below values must lie in [0, 1], got {a.compact_below}")
    if (a.compile or a.channels_last) and a.metrics:
        p.error("--metrics records the eager mode the verdict table reads: run it without --compile "
                "and --channels-last")
    if not all(0.0 <= q <= 1.0 for q in a.quantiles):
        p.error(f"--quantiles must lie in [0, 1], got {a.quantiles}")

    torch.set_num_threads(a.threads)
    model, calibrator = load_model(a.checkpoint)  # eval mode, CPU
    config = checkpoint_config(a.checkpoint)
    data = load_split(config, "test")
    batches = make_batches(data, min(a.images, len(data)), shuffle=False, augment=False,
                           device="cpu")
    x, y = next(iter(batches))  # (N, C, H, W) float32, normalised as in training; (N,)
    costs = flops_per_image(model, x.shape[1:])
    taus = {float(q): calibrator.threshold(q) for q in a.quantiles}

    m, full = config.model, costs[0] + config.model.steps * costs[1]
    print(f"machine: {cpu_name()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s)")
    print(f"model: {m.name} {m.backbone}, T={m.steps}, width {m.width}, {a.checkpoint}")
    print(f"data: {x.shape[0]} {config.data.name} test images; {a.repeats} timed round(s) "
          f"after {a.warmup} warm-up")
    print(f"FLOPs per image: fixed {costs[0] / 1e6:.3f} M, per step {costs[1] / 1e6:.3f} M, "
          f"full depth {full / 1e6:.3f} M (fixed share {costs[0] / full:.3f})", flush=True)
    models = {"eager": model, **({"compiled": compiled(model)} if a.compile else {}),
              **({"channels-last": channels_last(model)} if a.channels_last else {})}
    for mode, other in models.items() if a.step_costs else ():
        print(f"one step and its readout on b rows ({mode}):")
        print(step_costs(other, x, a.repeats, a.warmup).to_string(index=False, float_format="%.2f"), flush=True)
    rows = []
    for batch_size in a.batch_sizes:
        rows += measure(models, x, y, taus, batch_size, a.repeats, a.warmup, costs, tuple(a.compact_below))
        latest = rows[-len(models) * len(taus) * len(a.compact_below):]
        print(pd.DataFrame(latest).to_string(index=False, float_format="%.3f"),
              flush=True)
        if a.csv:  # after every batch size: a run cut short keeps what it measured
            _table(rows, x.shape[0], a).to_csv(a.csv, index=False)
    table = pd.DataFrame(rows).sort_values(["mode", "quantile", "batch_size", "compact_below"], kind="stable")
    print(table.to_string(index=False, float_format="%.3f"))
    if a.metrics:
        from frost_nb.notebook import write_metrics

        run = {"benchmark": "adaptive_inference", "checkpoint": Path(a.checkpoint).name,
               "dataset": config.data.name, "model": m.name, "update": m.update, "steps": m.steps,
               "images": int(x.shape[0]), "repeats": a.repeats, "warmup": a.warmup,
               "threads": torch.get_num_threads(), "cpu": cpu_name()}
        path = write_metrics(f"bench_{a.metrics}", {**run, "rows": table.to_dict(orient="records")},
                             device="cpu")
        print(f"metrics: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
