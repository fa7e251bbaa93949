"""One-off: add ``provenance`` to the committed files of outputs/metrics/, checked.

    .venv/bin/python scripts/backfill_provenance.py          # check and write
    .venv/bin/python scripts/backfill_provenance.py --dry    # check only

The runs of a file are those it names (``provenance.named_runs``) and, for the files that name
none or only some, the runs listed in EXTRA below, each found once by hand from the file's own
numbers (its accuracy, its thresholds, the 02 file of the same bundle that names the same
families runs). Every run must be committed in outputs/runs/ with a config that agrees with what
the file records (data set, size, seed, epochs, bundle); for EXTRA runs the file's accuracy or
first threshold must also equal the run's own. A named run that is not committed (a run trained
elsewhere and never exported) is reported and left out: its numbers then name no run, and the
verdict engine does not use them.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from frost_nb.paths import repo_root
from frost_nb.repro import provenance

METRICS = repo_root() / "outputs" / "metrics"


def families_keys(name: str) -> dict[str, str]:
    """run -> label of an 02 file's runs (the families runs its 03 / 04 sibling measured)."""
    d = json.loads((METRICS / name).read_text())
    return {r["key"]: r["model"] for r in d["runs"]}


EXTRA: dict[str, dict[str, str]] = {
    "01_training.json": {"fashion-mnist-demo-families-per-step/frost-seed0": "frost"},
    "01_training_pre_reading.json": {
        "fashion-mnist-demo-families-residual/frost-adopted-defaults-seed0": "frost (adopted defaults)"},
    "03_minkowski_fashion-mnist_per-step.json": families_keys("02_scale_consistency_fashion-mnist_per-step.json"),
    "03_minkowski_fashion-mnist_residual.json": families_keys("02_scale_consistency_fashion-mnist_residual.json"),
    "04_alpha_H_ablation_residual.json": {k: v for k, v in families_keys(
        "02_scale_consistency_fashion-mnist_residual.json").items() if v == "frost"},
    # the gradient-conflict section names its runs by family: the conflict grid of the per-step
    # bundle (frost: the ablation reference, the loss grid's "both")
    "04_alpha_H_ablation_per-step.json": {
        "fashion-mnist-demo-conflict-per-step/vanilla-seed0": "vanilla", "fashion-mnist-demo-conflict-per-step/recurrent-seed0":
        "recurrent", "fashion-mnist-demo-conflict-per-step/basic-ssm-seed0": "basic_ssm"},
    # notebook 05 names the run of seed 0; its sweep and fixed-depth curves cover seeds 0-2
    **{f"05_halting{tag}.json": {f"{grid}/frost-seed{s}": "frost" for s in (1, 2)} for tag, grid in (
        ("_per-step", "cifar100-demo-families"), ("_fashion-mnist_per-step", "fashion-mnist-demo-families"),
        ("_fashion-mnist_residual", "fashion-mnist-demo-families-residual"))},
    "sweep_demo_frost_cifar10.csv": {"cifar10-demo-families-residual/frost-seed0": "frost"},
    "sweep_demo_frost_fashion-mnist.csv": {"fashion-mnist-demo-families-residual/frost-seed0": "frost"},
    "sweep_demo_frost_fashion-mnist_adopted.csv": {
        "fashion-mnist-demo-families-residual/frost-adopted-defaults-seed0": "frost (adopted defaults)"},
}


def run_accuracy(name: str) -> float:
    return json.loads((provenance.run_folder(name) / "metrics.json").read_text())["test_accuracy"]


def check(file: str, record: dict, prov: dict, sweep_rows: list[dict] | None) -> list[str]:
    problems = []
    for name, s in prov["settings"].items():
        for field in ("dataset", "size"):
            # a file's top-level data set names its main runs; 07 measures collapse on digits
            allowed = {record.get(field), record.get("collapse_dataset"), (record.get("vit") or {}).get(field),
                       (record.get("throughput") or {}).get(field), (record.get("demo") or {}).get(field)}
            if record.get(field) is not None and s[field] not in allowed and not (
                    field == "size" and (record.get("demo") or {}).get("key") == name):
                problems.append(f"{name}: {field} {s[field]} not {record.get(field)}")
        bundle = record.get("bundle")
        if bundle and s["label"] == "frost" and s["bundle"] != bundle:
            problems.append(f"{name}: bundle {s['reading']} in a {bundle} file")
    for name in EXTRA.get(file, {}):
        if name not in prov["runs"]:
            problems.append(f"{name}: not committed")
            continue
        ours = run_accuracy(name)
        if "accuracy" in record and record.get("model") == "frost" and abs(record["accuracy"] - ours) > 1e-4:
            problems.append(f"{name}: accuracy {ours} against the file's {record['accuracy']}")
        if sweep_rows is not None:
            full = max(sweep_rows, key=lambda r: float(r["quantile"]))
            if abs(float(full["accuracy"]) - ours) > 1e-4:
                problems.append(f"{name}: accuracy {ours} against the CSV's {full['accuracy']}")
        fixed = (record.get("fixed_depth") or {}).get(f"seed {provenance.config_of(name).train.seed}")
        if fixed and abs(fixed[-1] - ours) > 1e-4:
            problems.append(f"{name}: full-depth accuracy {ours} against the file's {fixed[-1]}")
        if "seed" in record and "fixed_depth" not in record and provenance.settings_of(provenance.config_of(name))["seed"] != record["seed"]:
            problems.append(f"{name}: seed differs from the file's {record['seed']}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dry", action="store_true")
    args = parser.parse_args()
    failed, commit = False, provenance.commit()  # once: the files written below dirty the tree
    for path in sorted(METRICS.iterdir()):
        if path.name.endswith(".provenance.json"):
            continue
        if path.suffix == ".json":
            record = json.loads(path.read_text())
            sweep_rows = None
        elif path.suffix == ".csv":
            record = {}
            with open(path) as f:
                sweep_rows = list(csv.DictReader(f))
        else:
            continue
        named = {n for n in _names(record)}
        prov = provenance.make({k: v for k, v in record.items() if k not in ("provenance", "env")},
                               EXTRA.get(path.name, {}), take_read=False)
        prov["commit"] = commit
        missing = sorted(named - set(prov["runs"]))
        problems = check(path.name, record, prov, sweep_rows)
        print(f"{path.name}: {len(prov['runs'])} runs" + (f"; named but not committed: {missing}" if missing else ""))
        for p in problems:
            print("   PROBLEM", p)
        failed |= bool(problems)
        if args.dry or problems:
            continue
        if path.suffix == ".json":
            out = {k: v for k, v in record.items() if k not in ("provenance", "env")}
            out = {**out, "provenance": prov, **({"env": record["env"]} if "env" in record else {})}
            path.write_text(json.dumps(out, indent=2, allow_nan=False))
        else:
            path.with_suffix(".provenance.json").write_text(json.dumps({"provenance": prov}, indent=2) + "\n")
    return 1 if failed else 0


def _names(record) -> set[str]:
    """Every string under a run-naming field that looks like <grid>/<label>-seedN."""
    import re

    out = set()
    if isinstance(record, dict):
        for k, v in record.items():
            if isinstance(v, str) and re.fullmatch(r"[a-z0-9-]+/[a-z0-9.-]+-seed\d+", v):
                out.add(v)
            elif isinstance(v, str) and v.endswith("/model.pt"):
                out.add("/".join(Path(v).parts[-3:-1]))
            else:
                out |= _names(v)
    elif isinstance(record, list):
        for v in record:
            out |= _names(v)
    return out


if __name__ == "__main__":
    sys.exit(main())
