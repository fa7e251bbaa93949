"""CPU training with glibc's default allocator against one that keeps freed memory: images/s and the
share of CPU time spent in the kernel, side by side in one run.

A training step on a CPU allocates and frees tensors of hundreds of MB (the states h_0..h_T of a
batch; a student's and its teacher's both). glibc serves each from a fresh ``mmap`` and returns it
on free, so every step maps, zero-fills and unmaps them again: kernel time, not arithmetic. Two
environment variables, read by glibc at process start (so they cannot be set from within Python),
keep such blocks in the heap instead (``ALLOCATOR_ENV``; ``scripts/train_queue.sh`` sets them). The
price is memory: a process keeps its peak heap until it exits.

Each round starts two ``train_throughput.py`` processes at the same time, one per setting, each on
one thread (as two workers of ``train_queue.sh`` run), with the same arguments (``--`` and what
follows: size, models, --set ...); the rounds alternate which starts first. Per setting: images/s
(the timed epoch, as ``train_throughput.py`` measures it), the child's user and system CPU seconds,
and the ratio of images/s, tuned over default, per round. Example (the block-recurrent rewrite's
k = 2 student and the ladder's top rung):

    python benchmarks/cpu_allocator.py --rounds 2 -- --size demo --dataset cifar100 --models vanilla \\
        --compile off --channels-last off --steps 20 --set model.update=canonical --set model.halt_norm=false \\
        --set model.branch_steps=6,10 --set loss.teacher=cifar100-demo-families/vanilla-seed0
    python benchmarks/cpu_allocator.py -- --size ladder128 --amp bf16 --compile on --channels-last off --steps 10

``--metrics NAME`` also writes outputs/metrics/bench_NAME.json.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

# glibc: blocks up to 4 GiB come from the heap (not a fresh mmap), and freed heap memory is kept
ALLOCATOR_ENV = {"MALLOC_MMAP_THRESHOLD_": str(4 * 2**30), "MALLOC_TRIM_THRESHOLD_": str(64 * 2**30)}
SETTINGS = {"default": {}, "keep freed memory": ALLOCATOR_ENV}
THROUGHPUT = Path(__file__).resolve().parent / "train_throughput.py"


def run_round(args: list[str], order: list[str], folder: Path) -> list[dict]:
    """Both settings at once, one process each (started in ``order``): one row per setting."""
    children = {}
    for name in order:
        env = {k: v for k, v in os.environ.items() if k not in ALLOCATOR_ENV} | SETTINGS[name]
        env["OMP_NUM_THREADS"] = "1"
        csv, log = folder / f"{len(children)}.csv", folder / f"{len(children)}.log"
        with log.open("w") as err:  # a file, not a pipe: a chatty child never blocks on a full pipe
            proc = subprocess.Popen([sys.executable, str(THROUGHPUT), *args, "--threads", "1", "--csv", str(csv)],
                                    env=env, stdout=subprocess.DEVNULL, stderr=err)
        children[proc.pid] = (name, log, csv)
    rows = []
    for _ in order:
        pid, status, usage = os.wait4(-1, 0)
        name, log, csv = children[pid]
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"train_throughput.py ({name}) failed: {log.read_text()[-2000:]}")
        measured = pd.read_csv(csv)
        for r in measured.to_dict(orient="records"):
            rows.append({"setting": name, "size": r["size"], "model": r["model"], "amp_bf16": r["amp_bf16"],
                         "compile": r["compile"], "images_per_s": r["images_per_s"],
                         "user_s": usage.ru_utime, "system_s": usage.ru_stime,
                         "system_share": usage.ru_stime / (usage.ru_utime + usage.ru_stime)})
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2, help="rounds of both settings side by side")
    p.add_argument("--metrics", default=None, metavar="NAME", help="also write outputs/metrics/bench_NAME.json")
    a = p.parse_args(own)
    if a.rounds < 1:
        p.error(f"--rounds {a.rounds}: give at least 1")
    if sys.platform != "linux":
        p.error("the allocator settings are glibc's: this compares them on Linux only")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.rounds):
            order = list(SETTINGS) if i % 2 == 0 else list(SETTINGS)[::-1]
            for r in run_round(args, order, Path(tmp)):
                rows.append({"round": i + 1, **r})
                print(pd.DataFrame(rows[-1:]).to_string(index=False, float_format="%.3f"), flush=True)
    table = pd.DataFrame(rows)
    keys = ["round", "size", "model", "amp_bf16", "compile"]
    wide = table.pivot_table(index=keys, columns="setting", values="images_per_s").reset_index()
    wide["ratio"] = wide["keep freed memory"] / wide["default"]
    print(wide.to_string(index=False, float_format="%.3f"))
    print(f"images/s, keep freed memory over default: {wide['ratio'].mean():.3f} (mean of {len(wide)} rounds); "
          "system share of CPU time: " + ", ".join(f"{k} {v:.1%}" for k, v in
                                                   table.groupby("setting")["system_share"].mean().items()))
    if a.metrics:
        from frost_nb.notebook.glue import write_metrics

        path = write_metrics(f"bench_{a.metrics}", {"benchmark": "cpu_allocator", "arguments": args,
                                                    "allocator_env": ALLOCATOR_ENV, "rounds": a.rounds,
                                                    "rows": rows, "ratios": wide.to_dict(orient="records")},
                             device="cpu")
        print(f"metrics: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
