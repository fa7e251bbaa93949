"""DF-Mamba's selective scan: the chunked scan the model runs against the per-step loop, forward plus
backward, side by side in one process.

At each length (96, 336 and 720 by default), 448 sequences (a batch of 64 windows x 7 variables),
inner width 128, state 16, float32, one thread: the inputs are those of a fresh block at level 0 (the
step log-uniform in [1e-3, 1e-1], A = -(1..16), x, B, C and the incoming gradient standard normal).
Each repeat times the loop and then the fast scan (wall clock); the medians and their ratio are
reported per length, with the check that the fast scan grows linearly: time(longest) <= 1.3 x
(longest / shortest) x time(shortest), i.e. time(720) <= 1.3 x 7.5 x time(96) at the defaults.
``peak_rss_fast_gib`` is the process's peak resident memory after the fast scan alone has run at every
length, ``peak_rss_start_gib`` the same before it (torch's own); the loop runs after it: at 720 it
holds about 5 GiB of per-step states for its backward.

    python benchmarks/dfmamba_scan.py                      # the committed numbers: pause training first
    python benchmarks/dfmamba_scan.py --lengths 16 32 --batch 8 --repeats 2 --out /tmp/bench.json
"""

from __future__ import annotations

import argparse
import math
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from frost_nb.dfmamba.scan import chunked_scan, sequential_scan
from frost_nb.notebook.glue import metrics_text
from frost_nb.paths import atomic_path, outputs_dir, repo_root

IMPLS = {"loop": sequential_scan, "fast": chunked_scan}


def inputs(batch: int, length: int, inner: int, state: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g)
    log_dt = torch.rand(batch, length, inner, generator=g) * math.log(100) + math.log(1e-3)
    A = -torch.arange(1, state + 1, dtype=torch.float32).repeat(inner, 1)
    return [r(batch, length, inner), log_dt.exp(), A, r(batch, length, state), r(batch, length, state),
            torch.ones(inner), r(batch, length, inner)]  # x, dt, A, B, C, D, dL/dy


def forward_backward(impl: str, data: list[torch.Tensor]) -> float:
    *args, gy = [t.detach().requires_grad_(i < 6) for i, t in enumerate(data)]
    start = time.perf_counter()
    y = IMPLS[impl](*args)
    torch.autograd.grad(y, args, gy)
    return time.perf_counter() - start


def commit() -> str:  # read-only: rev-parse touches neither the index nor the work tree
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo_root(), capture_output=True,
                              text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[96, 336, 720], help="sequence lengths")
    p.add_argument("--batch", type=int, default=448, help="sequences (64 windows x 7 variables)")
    p.add_argument("--inner", type=int, default=128, help="inner width E")
    p.add_argument("--state", type=int, default=16, help="state size S")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per implementation and length")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=None, help="default outputs/metrics/bench_dfmamba_scan.json")
    a = p.parse_args(argv)
    if min(a.lengths) < 1 or a.batch < 1 or a.repeats < 1 or a.threads < 1:
        p.error("lengths, batch, repeats and threads must be positive")
    torch.set_num_threads(a.threads)
    lengths = sorted(set(a.lengths))
    data = {n: inputs(a.batch, n, a.inner, a.state) for n in lengths}
    peak_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # GiB (KiB on Linux)
    for n in lengths:  # warm-up, fast scan alone first: its memory peak is read before the loop runs
        forward_backward("fast", data[n])
    peak_fast = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    rows = []
    for n in lengths:
        forward_backward("loop", data[n])
        times = {impl: [] for impl in IMPLS}
        for _ in range(a.repeats):  # alternating: both see the same machine state
            for impl in IMPLS:
                times[impl].append(forward_backward(impl, data[n]))
        med = {impl: statistics.median(t) for impl, t in times.items()}
        ratio = med["loop"] / med["fast"]
        rows.append({"length": n, "loop_s": med["loop"], "fast_s": med["fast"], "ratio": ratio,
                     "loop_repeats_s": times["loop"], "fast_repeats_s": times["fast"]})
        print(f"L={n:5d}  loop {med['loop']:8.3f} s  fast {med['fast']:8.3f} s  x{ratio:.2f}", flush=True)
    short, long = rows[0], rows[-1]
    bound = 1.3 * long["length"] / short["length"] * short["fast_s"]
    check = {"rule": f"fast time({long['length']}) <= 1.3 x ({long['length']}/{short['length']}) x "
                     f"fast time({short['length']})",
             "bound_s": bound, "linear": long["fast_s"] <= bound,
             "faster_at_every_length": all(r["ratio"] > 1 for r in rows)}
    print(f"linear growth: {long['fast_s']:.3f} s <= {bound:.3f} s: {check['linear']}; "
          f"faster at every length: {check['faster_at_every_length']}")
    record = {"benchmark": "dfmamba_scan", "what": "the scan's forward + backward, median wall clock",
              "shapes": {"batch": a.batch, "inner": a.inner, "state": a.state, "lengths": lengths,
                         "dtype": "float32"},
              "repeats": a.repeats, "rows": rows, "check": check, "peak_rss_start_gib": peak_start,
              "peak_rss_fast_gib": peak_fast,
              "provenance": {"commit": commit(), "runs": [], "settings": {}},  # synthetic inputs: no run
              "env": {"torch": torch.__version__, "python": platform.python_version(), "threads": a.threads,
                      "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                      "machine": platform.machine(), "commit": commit()}}
    out = a.out or outputs_dir() / "metrics" / "bench_dfmamba_scan.json"
    with atomic_path(out) as tmp:
        tmp.write_text(metrics_text(record))  # one line per top-level key, as every metrics file
    print(f"metrics: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
