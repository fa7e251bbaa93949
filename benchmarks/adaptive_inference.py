"""Adaptive inference against full depth: how much of the ideal FLOP speed-up is real (CPU).

For a trained checkpoint and real test images, at each halting quantile q and batch size,
in one process and side by side:

    mean_depth   mean exit depth at tau_q = calibrator.threshold(q); accuracy at the exits
    ideal        FLOPs at full depth / FLOPs at the measured exit depths, the fixed part
                 (stem, B(e), GAP(D(e))) and the readout heads of every step included
                 (``frost_nb.analysis.complexity``)
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

``--stream`` adds rows with ``mode = stream``: continuous batching (``halting.stream_steps``, what
``stream_predict`` runs) over all the images at once, ``B`` = the batch size slots, refilled once
``--refill-at`` slots are free, the next images embedded ``--embed-batch`` at a time ahead of
their admission (several values of either: measured side by side), timed in the same
rounds right after the batch-at-a-time passes of that round. Its time is the median over rounds
of the whole stream's time, and so are its full-depth reference (batch-at-a-time at tau = +inf,
batches of B: with nothing exiting the stream is that) and fixed part, the per-round totals of
those passes; ``exits_match`` is the share of images whose exit depth equals batch-at-a-time's.

Throughput ``images_per_s`` (this row's adaptive or stream pass; ``full_images_per_s`` full
depth; ``ideal_images_per_s`` full depth's times ``ideal``) and per-image latency ``latency_p50_ms``, ``latency_p95_ms``: for the stream from an
image's admission into a slot (before its stem runs) to its exit, read with
``time.perf_counter`` at each admission and each exit step (median over rounds of each
round's percentiles); batch-at-a-time returns a batch's results together, so there an image's
latency is its batch's wall time (median over rounds per batch).

``--dataset`` picks the committed frost of Fashion-MNIST (the default) or CIFAR-100 (``DEFAULT_RUNS``);
``--images`` larger than the test split takes all of it; ``--threads`` takes several counts,
measured one after the other, each row naming its own.

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

from frost_nb.analysis.complexity import flops_per_image, ideal_speedup
from frost_nb.checkpoint import checkpoint_config, load_model
from frost_nb.data.datasets import make_batches
from frost_nb.halting import _select, adaptive_predict, stream_ahead, stream_steps
from frost_nb.paths import committed_runs_dir
from frost_nb.training import load_split

# frost, seed 0, of Fashion-MNIST (the default) and CIFAR-100: the first committed of the adopted
# bundle's run (global ranking sets) and the per-step bundle's, until the former lands
DEFAULT_RUNS = {"fashion-mnist": ("fashion-mnist-demo-families/frost-seed0",
                                  "fashion-mnist-demo-families-per-step/frost-seed0"),
                "cifar100": ("cifar100-demo-families/frost-seed0",
                             "cifar100-demo-families-per-step/frost-seed0")}


def default_run(dataset: str) -> str:
    """The committed frost the benchmark measures on ``dataset`` (``DEFAULT_RUNS``)."""
    for name in DEFAULT_RUNS[dataset]:
        if (committed_runs_dir() / name / "model.pt").is_file():
            return name
    raise FileNotFoundError(f"none of {DEFAULT_RUNS[dataset]} is committed in {committed_runs_dir()}: "
                            "pass --checkpoint")


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
        h, ctx = model.prologue(x[: sizes[-1]])
        seconds: dict[int, list[float]] = {b: [] for b in sizes}
        for r in range(warmup + repeats):
            for b in sizes:
                cb = _select(ctx, torch.arange(b), sizes[-1])  # its first b rows, as compaction copies them
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


def timed_stream(model, x: torch.Tensor, tau: float, slots: int, refill_at: int,
                 embed_batch: int | None = None) -> dict:
    """One pass of continuous batching over ``x``: its wall time, each image's exit depth and
    prediction, and each image's latency from entering the stream (before its stem runs) to its
    exit (seconds, (N,) float64)."""
    n = x.shape[0]
    admits, exits = [], []  # (event, time): put in input order once, at the end, as stream_predict does
    start = time.perf_counter()
    for event in stream_steps(model, x, tau, slots=slots, refill_at=refill_at, embed_batch=embed_batch):
        (admits if event.kind == "admit" else exits).append((event, time.perf_counter()))  # CPU: done
    rows = torch.cat([e.rows for e, _ in exits])  # (N,) each image once
    depth, pred = torch.empty(n, dtype=torch.int64), torch.empty(n, dtype=torch.int64)
    depth[rows] = torch.cat([e.depth for e, _ in exits])
    pred[rows] = torch.cat([e.logits for e, _ in exits]).argmax(1)
    seconds = time.perf_counter() - start
    at = lambda events: torch.tensor([now for e, now in events], dtype=torch.float64).repeat_interleave(
        torch.tensor([e.rows.numel() for e, _ in events]))  # each image's time, in event order
    admitted, exited = torch.empty(n, dtype=torch.float64), torch.empty(n, dtype=torch.float64)
    admitted[torch.cat([e.rows for e, _ in admits])], exited[rows] = at(admits), at(exits)
    return {"seconds": seconds, "depth": depth, "pred": pred, "latency": exited - admitted}


def _embed_batch(text: str) -> int | None:
    """``--embed-batch`` values: a positive count, "slots" (0: the batch size) or "default" (None: the
    stream's own, ``halting.stream_ahead``)."""
    if text in ("slots", "default"):
        return 0 if text == "slots" else None
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of images, 'slots' or 'default', "
                                         f"got {text!r}")
    return int(text)


def _percentiles_ms(latency: torch.Tensor) -> tuple[float, float]:
    """(p50, p95) of per-image latencies in seconds, as milliseconds."""
    p50, p95 = torch.quantile(latency.double(), torch.tensor([0.5, 0.95], dtype=torch.float64)).tolist()
    return 1e3 * p50, 1e3 * p95


def measure(models: dict, x: torch.Tensor, y: torch.Tensor, taus: dict[float, float], batch_size: int,
            repeats: int, warmup: int, costs: tuple[int, int], compact: tuple[float, ...] = (1.0,),
            refill: tuple[int, ...] = (), embed: tuple[int | None, ...] = (None,)) -> list[dict]:
    """Rows of one batch size: for every mode of ``models`` (name -> model), every quantile of
    ``taus`` and compaction setting of ``compact`` (``adaptive_predict``'s ``compact_below``)
    against full depth, interleaved; and for each ``refill_at`` of ``refill`` and ``embed_batch``
    of ``embed`` (0: the slots; None: the stream's default) continuous batching of the eager model in
    ``batch_size`` slots (``mode = stream``), at the end of each round."""
    model = models["eager"]
    steps = int(model.config.steps)
    embed = tuple(dict.fromkeys(batch_size if e == 0 else stream_ahead(batch_size) if e is None else e
                                for e in embed))  # each one once, as the images it embeds ahead
    chunks = list(x.split(batch_size))  # (B, C, H, W) views, the last one may be shorter
    keys = ["fixed", "forward"] + [(mode, *k) for mode in models for q in taus
                                   for k in [("full", q, 1.0)] + [("adaptive", q, c) for c in compact]]
    seconds = {k: [[] for _ in chunks] for k in keys}  # [batch][round]
    exits = {(mode, q, c): [None] * len(chunks) for mode in models for q in taus for c in compact}
    streams = {(q, f, e): [] for q in taus for f in refill for e in embed}  # [round] timed_stream results
    for r in range(warmup + repeats):
        for c, xb in enumerate(chunks):
            for k in keys:
                start = time.perf_counter()
                if k == "fixed":
                    with torch.no_grad():
                        model.prologue(xb)
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
        for (q, f, e), results in streams.items():  # the same round, after its batch-at-a-time passes
            res = timed_stream(model, x, taus[q], batch_size, f, e)
            if r >= warmup:
                results.append(res)
    total = {k: sum(statistics.median(rounds) for rounds in seconds[k]) for k in keys}
    n, t_fixed = x.shape[0], total["fixed"]
    sizes = torch.tensor([len(xb) for xb in chunks])

    def batch_latency_ms(k) -> tuple[float, float]:  # an image waits for its whole batch
        per_batch = torch.tensor([statistics.median(rounds) for rounds in seconds[k]], dtype=torch.float64)
        return _percentiles_ms(per_batch.repeat_interleave(sizes))

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
        p50, p95 = batch_latency_ms((mode, "adaptive", q, cb))
        rows.append({"mode": mode, "quantile": q, "tau": tau, "batch_size": batch_size, "compact_below": cb,
                     "refill_at": math.nan, "embed_batch": math.nan, "mean_depth": mean_depth,
                     "accuracy": (logits.argmax(1) == y).double().mean().item(),
                     "ideal": ideal, "measured": measured, "ratio": measured / ideal,
                     "time_ideal": time_ideal, "efficiency": measured / time_ideal,
                     "fixed_share": t_fixed / t_full,
                     "full_us": 1e6 * t_full / n, "adaptive_us": 1e6 * t_adaptive / n,
                     "forward_us": 1e6 * total["forward"] / n,
                     "images_per_s": n / t_adaptive, "full_images_per_s": n / t_full,
                     "ideal_images_per_s": ideal * n / t_full,
                     "latency_p50_ms": p50, "latency_p95_ms": p95,
                     "full_latency_p50_ms": batch_latency_ms((mode, "full", q, 1.0))[0], "exits_match": 1.0})
    by_round = lambda k: statistics.median(sum(batches[r] for batches in seconds[k]) for r in range(repeats))
    for (q, f, e), results in streams.items():
        t_stream = statistics.median(res["seconds"] for res in results)
        t_full, t_fixed_r = by_round(("eager", "full", q, 1.0)), by_round("fixed")
        depth, pred = results[0]["depth"], results[0]["pred"]  # the same in every round
        batch_depth = torch.cat([res.depth for res in exits["eager", q, compact[0]]])
        latency = [_percentiles_ms(res["latency"]) for res in results]
        mean_depth = depth.double().mean().item()
        ideal, measured = ideal_speedup(depth, steps, *costs), t_full / t_stream
        time_ideal = t_full / (t_fixed_r + mean_depth / steps * (t_full - t_fixed_r))
        rows.append({"mode": "stream", "quantile": q, "tau": taus[q], "batch_size": batch_size,
                     "compact_below": 1.0, "refill_at": f, "embed_batch": e,
                     "mean_depth": mean_depth,
                     "accuracy": (pred == y).double().mean().item(),
                     "ideal": ideal, "measured": measured, "ratio": measured / ideal,
                     "time_ideal": time_ideal, "efficiency": measured / time_ideal,
                     "fixed_share": t_fixed_r / t_full,
                     "full_us": 1e6 * t_full / n, "adaptive_us": 1e6 * t_stream / n,
                     "forward_us": 1e6 * by_round("forward") / n,
                     "images_per_s": n / t_stream, "full_images_per_s": n / t_full,
                     "ideal_images_per_s": ideal * n / t_full,
                     "latency_p50_ms": statistics.median(p for p, _ in latency),
                     "latency_p95_ms": statistics.median(p for _, p in latency),
                     "full_latency_p50_ms": batch_latency_ms(("eager", "full", q, 1.0))[0],
                     "exits_match": (depth == batch_depth).double().mean().item()})
    return rows


def _table(rows: list[dict], images: int, a: argparse.Namespace) -> pd.DataFrame:
    """The rows with the setting of the run on each (so that a CSV stands on its own)."""
    df = pd.DataFrame(rows)
    df["images"], df["repeats"] = images, a.repeats
    df["cpu"], df["torch"], df["checkpoint"] = cpu_name(), torch.__version__, Path(a.checkpoint).name
    return df


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", choices=sorted(DEFAULT_RUNS), default="fashion-mnist",
                   help="the committed frost of this data set (seed 0, adopted defaults; the per-step "
                        "bundle's until the adopted one is committed), unless --checkpoint")
    p.add_argument("--checkpoint", default=None,
                   help="a trained frost_nb checkpoint (.pt or run folder) with its halting calibrator")
    p.add_argument("--quantiles", nargs="+", type=float, default=[0.25, 0.5, 0.75])
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 16, 64, 256])
    p.add_argument("--compact-below", nargs="+", type=float, default=[1.0],
                   help="adaptive_predict's compact_below values, measured side by side (1: compact at every exit)")
    p.add_argument("--stream", action="store_true",
                   help="also measure continuous batching (halting.stream_predict), the batch size as its slots")
    p.add_argument("--refill-at", nargs="+", type=int, default=[1],
                   help="with --stream: refill the slots once this many are free (several: side by side)")
    p.add_argument("--embed-batch", nargs="+", type=_embed_batch, default=[None], metavar="N|slots|default",
                   help="with --stream: embed the next images this many at a time ahead of admission "
                        "('default': the stream's, halting.stream_ahead; 'slots': the batch "
                        "size; 1: exactly the rows admitted; several: side by side)")
    p.add_argument("--compile", action="store_true",
                   help="also measure the model with step and readout compiled (torch.compile), side by side")
    p.add_argument("--channels-last", action="store_true",
                   help="also measure the model in channels-last layout, side by side")
    p.add_argument("--step-costs", action="store_true",
                   help="first time one step and its readout on 1, 2, 4, ... 256 rows")
    p.add_argument("--images", type=int, default=512, help="test images (the first N; more than the split: all)")
    p.add_argument("--repeats", type=int, default=5, help="timed rounds (medians over them)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    p.add_argument("--threads", nargs="+", type=int, default=[1], help="torch.set_num_threads, each in turn")
    p.add_argument("--csv", default=None)
    p.add_argument("--metrics", nargs="?", const="adaptive_inference", default=None, metavar="NAME",
                   help="also write outputs/metrics/bench_NAME.json (default NAME: adaptive_inference)")
    a = p.parse_args(argv)
    for name in ("images", "repeats"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(a, name)}")
    if min(a.threads) < 1:
        p.error(f"every --threads value must be at least 1, got {a.threads}")
    if a.warmup < 0 or min(a.batch_sizes) < 1:
        p.error("--warmup must be >= 0 and every --batch-sizes value >= 1")
    if not all(0.0 <= c <= 1.0 for c in a.compact_below):
        p.error(f"--compact-below values must lie in [0, 1], got {a.compact_below}")
    if a.stream and not all(1 <= f <= min(a.batch_sizes) for f in a.refill_at):
        p.error(f"--refill-at values must lie in [1, the smallest batch size {min(a.batch_sizes)}], got {a.refill_at}")
    if (a.compile or a.channels_last) and a.metrics:
        p.error("--metrics records the eager mode the verdict table reads: run it without --compile "
                "and --channels-last")
    if not all(0.0 <= q <= 1.0 for q in a.quantiles):
        p.error(f"--quantiles must lie in [0, 1], got {a.quantiles}")
    run_name = a.checkpoint or default_run(a.dataset)  # a committed run by its name
    if a.checkpoint is None:
        a.checkpoint = str(committed_runs_dir() / run_name / "model.pt")

    model, calibrator = load_model(a.checkpoint)  # eval mode, CPU
    config = checkpoint_config(a.checkpoint)
    data = load_split(config, "test")
    batches = make_batches(data, min(a.images, len(data)), shuffle=False, augment=False,
                           device="cpu")
    x, y = next(iter(batches))  # (N, C, H, W) float32, normalised as in training; (N,)
    costs = flops_per_image(model, x.shape[1:])
    taus = {float(q): calibrator.threshold(q) for q in a.quantiles}

    m, full = config.model, costs[0] + config.model.steps * costs[1]
    print(f"machine: {cpu_name()}, torch {torch.__version__}, thread counts {a.threads}")
    print(f"model: {m.name} {m.backbone}, T={m.steps}, width {m.width}, {a.checkpoint}")
    print(f"data: {x.shape[0]} {config.data.name} test images; {a.repeats} timed round(s) "
          f"after {a.warmup} warm-up")
    print(f"FLOPs per image: fixed {costs[0] / 1e6:.3f} M, per step {costs[1] / 1e6:.3f} M, "
          f"full depth {full / 1e6:.3f} M (fixed share {costs[0] / full:.3f})", flush=True)
    models = {"eager": model, **({"compiled": compiled(model)} if a.compile else {}),
              **({"channels-last": channels_last(model)} if a.channels_last else {})}
    refill = tuple(a.refill_at) if a.stream else ()
    embed = tuple(dict.fromkeys(a.embed_batch))
    rows = []
    for threads in a.threads:
        torch.set_num_threads(threads)
        for mode, other in models.items() if a.step_costs else ():
            print(f"one step and its readout on b rows ({mode}, {threads} thread(s)):")
            print(step_costs(other, x, a.repeats, a.warmup).to_string(index=False, float_format="%.2f"),
                  flush=True)
        for batch_size in a.batch_sizes:
            latest = measure(models, x, y, taus, batch_size, a.repeats, a.warmup, costs, tuple(a.compact_below),
                             refill, embed)
            for row in latest:
                row["threads"] = threads
            rows += latest
            print(pd.DataFrame(latest).to_string(index=False, float_format="%.3f"), flush=True)
            if a.csv:  # after every batch size: a run cut short keeps what it measured
                _table(rows, x.shape[0], a).to_csv(a.csv, index=False)
    table = pd.DataFrame(rows).sort_values(["threads", "mode", "quantile", "batch_size", "compact_below",
                                            "refill_at", "embed_batch"], kind="stable")
    print(table.to_string(index=False, float_format="%.3f"))
    if a.metrics:
        from frost_nb.notebook.glue import write_metrics

        run = {"benchmark": "adaptive_inference", "checkpoint": Path(a.checkpoint).name,
               "run": run_name,
               "dataset": config.data.name, "model": m.name, "update": m.update, "steps": m.steps,
               "images": int(x.shape[0]), "repeats": a.repeats, "warmup": a.warmup,
               "threads": list(a.threads), "cpu": cpu_name(),
               "stream_ahead": {str(b): stream_ahead(b) for b in a.batch_sizes}}
        path = write_metrics(f"bench_{a.metrics}", {**run, "rows": table.to_dict(orient="records")},
                             device="cpu")
        print(f"metrics: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
