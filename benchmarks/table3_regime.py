"""Table 3's throughput as a regime question: the paper-size families at several batch sizes.

The paper's throughput ratios fit "time = mean depth x basic_ssm's per-step latency" almost
exactly (ViT: 42.4 images/s predicted from basic_ssm's 16.0 at 12 steps and frost's 4.53,
42.3 reported), which is what an overhead-bound device (a GPU at small batch, where a step
costs the same whatever its FLOPs) gives. On a compute-bound device the time follows the
FLOPs instead. This measures, side by side in one process on random weights at the paper's
ImageNet-100 settings (224 px; `make_config("paper", ...)`), the fixed part and the per-step
time of every family at each batch size, and from them the images/s at full depth and of
frost at the paper's mean depths (7.56 of 16, ResNet; 4.53 of 12, ViT), relative to vanilla.
Per regime (device, batch size) it reports how far each ratio is from the paper's.

    python benchmarks/table3_regime.py --metrics              # CPU: batch 1 and 4
    python benchmarks/table3_regime.py --device cuda --batch-sizes 1 8 64 --metrics

``--metrics`` writes ``outputs/metrics/bench_table3_regime[_<device>].json``, which
``python -m frost_nb verdicts`` reads (the Table 3 regime rows).
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd
import torch

from frost_nb.analysis.complexity import images_per_second, relative_to_vanilla, seconds_per_image
from frost_nb.config import BACKBONES, make_config
from frost_nb.models import create_model
from frost_nb.paper import TABLE3
from frost_nb.repro.grids import FAMILIES


def measure(batch_sizes: list[int], backbones: list[str], repeats: int, device: str,
            size: str = "paper") -> pd.DataFrame:
    """One row per (batch size, backbone, family, depth): seconds per image of the fixed part
    and of one step, and images/s at the depth (frost: also at the paper's mean depth)."""
    paper = {(r["backbone"], r["model"]): r for r in TABLE3}
    dataset = "imagenet100" if size == "paper" else None
    rows = []
    for backbone in backbones:
        models = {}
        for name in FAMILIES:
            cfg = make_config(size, dataset, name, backbone)
            torch.manual_seed(0)
            models[name] = (cfg, create_model(cfg.model).to(device).eval())
        for batch in batch_sizes:  # every family at one batch size back to back: a ratio's two
            for name, (cfg, model) in models.items():  # timings are seconds apart
                shape = (cfg.model.in_channels, cfg.model.image_size, cfg.model.image_size)
                fixed_s, step_s = seconds_per_image(model, shape, batch_size=batch, repeats=repeats)
                steps = cfg.model.steps
                depths = {"full depth": float(steps)}
                if name == "frost":
                    paper_depth = paper[backbone, "frost"]["mean_depth"] / paper[backbone, "vanilla"]["mean_depth"]
                    depths = {"paper's mean depth": paper_depth * steps, **depths}
                for label, depth in depths.items():
                    rows.append({"device": device, "batch_size": batch, "backbone": backbone, "model": name,
                                 "update": cfg.model.update if name == "frost" else "", "depth": label,
                                 "mean_depth": depth, "fixed_ms": 1e3 * fixed_s, "step_ms": 1e3 * step_s,
                                 "images_per_s": images_per_second(fixed_s, step_s, depth)})
                print(f"{device} batch {batch:>3} {backbone:6} {name:9}: fixed {1e3 * fixed_s:8.2f} ms, "
                      f"step {1e3 * step_s:8.2f} ms per image", file=sys.stderr, flush=True)
    return pd.DataFrame(rows)


def ratios(table: pd.DataFrame) -> pd.DataFrame:
    """Per (batch size, backbone): images/s over vanilla's, beside the paper's ratio; and the
    overhead-bound prediction of the paper's own numbers (time = depth x basic_ssm's step)."""
    paper = relative_to_vanilla(pd.DataFrame(TABLE3)).set_index(["backbone", "model"])
    out = []
    for (batch, backbone), part in table.groupby(["batch_size", "backbone"], sort=True):
        rel = relative_to_vanilla(part.reset_index(drop=True))
        for r in rel.to_dict(orient="records"):
            if r["model"] == "vanilla" or (r["model"] == "frost" and r["depth"] != "paper's mean depth"):
                continue
            theirs = float(paper.loc[(backbone, r["model"]), "images_per_s / vanilla"])
            ours = r["images_per_s / vanilla"]
            out.append({"device": r["device"], "batch_size": batch, "backbone": backbone, "model": r["model"],
                        "depth": r["depth"], "ours": ours, "paper": theirs, "relative_error": ours / theirs - 1})
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=None,
                   help="default: 1 4 on the CPU, 1 8 64 on a GPU")
    p.add_argument("--backbones", nargs="+", default=list(BACKBONES))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--size", default="paper", choices=("smoke", "paper"), help="smoke: tiny models (tests)")
    p.add_argument("--metrics", action="store_true", help="write outputs/metrics/bench_table3_regime*.json")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device here; leave it out to measure the CPU")
    batches = args.batch_sizes or ([1, 8, 64] if device.type == "cuda" else [1, 4])
    if any(b < 1 for b in batches):
        p.error(f"--batch-sizes {batches}: each must be a positive integer")
    table = measure(batches, args.backbones, args.repeats, str(device), args.size)
    rel = ratios(table)
    pd.set_option("display.width", 160)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(rel.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if args.metrics:
        from frost_nb.notebook.glue import write_metrics

        name = "bench_table3_regime" + ("" if device.type == "cpu" else f"_{device.type}")
        path = write_metrics(name, {"size": args.size, "repeats": args.repeats, "batch_sizes": batches,
                                    "rows": table.to_dict(orient="records"),
                                    "ratios": rel.to_dict(orient="records")}, device=str(device))
        print(f"written {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
