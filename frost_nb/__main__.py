"""Command line: ``python -m frost_nb {demo,config,train,grid,evaluate,sweep,export,verdicts,forecast} ...``.

``demo`` is the project's main job: train FROST on the embedded digits, run the halting quantile
sweep and write figures and metrics to ``outputs/``; each command's ``--help`` says what it does.

A damaged input (a metrics file, a run's config or weights, the runs' index, a prepared data file) stops
every command with one line naming the file, what is wrong and how to restore it, and exit status 2,
before anything is written; ``--skip-damaged`` (demo, config, train, grid, verdicts) leaves such a file
out instead and says so.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import sys
from pathlib import Path
from typing import Any

import torch

# Modules that --help would load anyway are imported here. The analysis, notebook and verdict
# modules load only in the commands that use them, and checkpoint and training functions are
# looked up on their module when called (tests replace some of them), as are paths' folders.
from . import checkpoint, paths, training
from .config import BACKBONES, MODELS, SIZES, ConfigError, make_config, parse_settings
from .data.datasets import DATASETS, SPLITS, DataError, make_batches
from .distributed import join_process_group, launched_world_size, leave_process_group
from .halting import PAPER_QUANTILES, adaptive_predict, stream_predict
from .inputs import ParameterError, check_split, number_in
from .paths import (DamagedInput, OutputError, check_readable, check_writable, repo_root,
                    shown_path, skip_damaged, skip_or_raise, write_atomic)
from .repro.grids import BUNDLES, GRIDS, Grid, family_of, grid, shard
from .runs import discard_local, export_run, load_teacher, run_name, stored_name, train_or_load


def run_config(args):
    """The config of a run command's parsed ``args`` (scripts/gpu.py builds them too): size, data set,
    model, backbone, the --set overrides (``parse_settings``; size= too), then --epochs, --seed, --root."""
    overrides = parse_settings(args.set)
    given = {"train.epochs": args.epochs, "train.seed": args.seed, "data.root": args.root}
    overrides |= {key: value for key, value in given.items() if value is not None}
    return make_config(overrides.pop("size", args.size), args.dataset, args.model, args.backbone, **overrides)


def _summary(result, where: bool = True) -> dict[str, Any]:
    """What a run is and what it reached, the same trained or loaded; ``where`` adds where the model came
    from this time (printed only: metrics files must not depend on it)."""
    c, metrics = result.config, result.metrics
    origin = {"checkpoint": shown_path(result.checkpoint), "from_cache": result.from_cache} if where else {}
    return {"dataset": c.data.name, "model": c.model.name, "backbone": c.model.backbone, "size": c.size,
            "epochs": c.train.epochs, "seed": c.train.seed, "name": run_name(result.checkpoint),
            "params": result.model.num_parameters(), "accuracy": metrics.get("test_accuracy"),
            "train_seconds": metrics.get("train_seconds"), **origin}


def _single_process_only(command: str) -> None:
    """Refuse torchrun's extra processes: each would train the same runs."""
    if (world := launched_world_size()) > 1:
        raise training.TrainingError(f"'{command}' runs in a single process, but torchrun started {world}; "
                                     f"multi-process (DDP) training is what 'train' does: python -m "
                                     f"torch.distributed.run --nproc-per-node {world} -m frost_nb train ... "
                                     f"(or run '{command}' without torchrun)")


def cmd_config(args) -> int:
    """Print the resolved config of a run and the name of its stored run (null when none), as JSON."""
    config = run_config(args)
    print(json.dumps({"run": stored_name(config), **config.flat()}, indent=2))
    return 0


def cmd_train(args) -> int:
    """Train one run; under torchrun every process runs this, with DDP (rank 0 writes and prints)."""
    config = run_config(args)
    progress = False if args.no_progress else None
    setup, _ = join_process_group(training.pick_device(config.train.device))
    try:
        if args.retrain and setup.is_distributed and not args.checkpoint:
            # train_or_load deletes the local run on --retrain: rank 0 does it first, so that
            # the ranks do not race to delete the same files
            if setup.is_main:
                discard_local(config)
            torch.distributed.barrier()
        teacher = load_teacher(config) if args.checkpoint and config.loss.teacher is not None else None
        result = (training.train(config, checkpoint=args.checkpoint, progress=progress, teacher=teacher)
                  if args.checkpoint
                  else train_or_load(config, name=args.name, progress=progress, retrain=args.retrain))
    finally:
        leave_process_group()
    if setup.is_main:
        print(json.dumps(_summary(result), indent=2))
    return 0


def cmd_grid(args) -> int:
    """Train (or find in the cache) every run of a named grid, or one shard of it."""
    _single_process_only("grid")
    try:
        index, count = (int(v) for v in args.shard.split("/"))
    except ValueError:
        raise ParameterError(f"--shard {args.shard!r} must look like INDEX/COUNT, e.g. 0/2") from None
    try:
        runs = grid(args.name, args.size, args.dataset, tuple(args.seeds), bundle=args.bundle)
        if args.labels:  # only these rows (family_of: the label without its seed tag)
            if unknown := sorted(set(args.labels) - {family_of(label) for label in runs}):
                raise ValueError(f"--labels {unknown} not in grid {args.name!r}; its labels: "
                                 f"{sorted({family_of(label) for label in runs})}")
            runs = Grid({k: v for k, v in runs.items() if family_of(k) in args.labels}, runs.folder)
        runs = shard(runs, index, count)
        if args.compile is not None:  # a where field: the runs' identities, and so their names, stay
            runs = Grid({k: v.replace(**{"train.compile": args.compile}) for k, v in runs.items()}, runs.folder)
    except ValueError as err:
        raise ParameterError(str(err)) from None
    progress = False if args.no_progress else None
    for label, config in runs.items():
        result = train_or_load(config, name=runs.run_name(label), progress=progress)
        print(json.dumps({"run": label, **_summary(result)}), flush=True)
    return 0


def _load(args):
    config = checkpoint.checkpoint_config(args.checkpoint)
    model, calibrator = checkpoint.load_model(args.checkpoint)
    model.to(training.pick_device(config.train.device))  # the GPU when there is one
    dataset = training.load_split(config, args.split, args.root)
    check_split(model, dataset)  # a DataError (reported) rather than a shape error mid-run
    return config, model, calibrator, dataset


def cmd_evaluate(args) -> int:
    from .analysis.exits import ExitCache
    from .notebook.glue import validate_params

    validate_params(quantile=args.quantile)
    config, model, calibrator, dataset = _load(args)
    stream = {}
    if args.stream:  # continuous batching: weight-tied families only
        slots = config.train.eval_batch_size if args.slots is None else args.slots
        number_in("--slots", slots, 1, 2**31, integer=True, error=ParameterError)
        number_in("--refill-at", args.refill_at, 1, slots, integer=True, error=ParameterError,
                  hint=f": a number of free slots, from 1 to --slots {slots}")
        if config.model.name == "vanilla":
            raise ParameterError("--stream needs a weight-tied step (recurrent, basic_ssm, frost); vanilla's "
                                 "step depends on t: drop --stream (batch-at-a-time adaptive_predict)")
        stream = {"stream": {"slots": slots, "refill_at": args.refill_at}}
    budget = {}
    if args.budget_depth is not None:  # the quantile whose held-out mean depth meets the budget
        number_in("--budget-depth", args.budget_depth, 1, config.model.steps, error=ParameterError,
                  hint=f": a mean depth in steps, from 1 to this model's T = {config.model.steps}")
        held_out = ExitCache.from_model(model, calibrator, training.load_split(config, "val", args.root),
                                        batch_size=config.train.eval_batch_size)
        found = held_out.quantile_for_depth(args.budget_depth)
        args.quantile = found.quantile
        budget = {"budget_depth": found.budget, "val_mean_depth": found.mean_depth}
    tau = calibrator.threshold(args.quantile)
    device = next(model.parameters()).device
    batches = make_batches(dataset, config.train.eval_batch_size, shuffle=False, augment=False, device=device)
    images = (x for x, _ in batches)  # in the split's order (no shuffle), so dataset.y labels them
    if stream:  # one result for the whole split, in input order
        parts = [stream_predict(model, images, tau, slots=slots, refill_at=args.refill_at)]
    else:
        parts = [adaptive_predict(model, x, tau) for x in images]
    correct = (torch.cat([res.logits.argmax(-1).cpu() for res in parts]) == dataset.y).float()
    depths = torch.cat([res.depth.cpu() for res in parts]).float()
    print(json.dumps({"checkpoint": args.checkpoint, "split": args.split, **budget, "quantile": args.quantile,
                      "threshold": tau, **stream, "accuracy": correct.mean().item(),
                      "mean_depth": depths.mean().item(), "std_depth": depths.std().item(),
                      "steps": config.model.steps}, indent=2))
    return 0


def cmd_sweep(args) -> int:
    from .analysis.curves import SWEEP_COLUMNS, curve
    from .notebook.glue import validate_params
    from .repro import provenance

    for q in args.quantiles:
        validate_params(quantile=q)
    if args.csv:
        check_writable(args.csv, "CSV file", "pass another --csv")
    config, model, calibrator, dataset = _load(args)
    outputs = training.evaluate(model, dataset, batch_size=config.train.eval_batch_size)
    table = curve(outputs, calibrator=calibrator, quantiles=args.quantiles)[list(SWEEP_COLUMNS)]
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    if args.csv:
        # the sidecar <stem>.provenance.json: which run the CSV's numbers come from; made first (it
        # reads the run's config), so that a damaged input leaves both files as they were
        record = {"provenance": provenance.make({"checkpoint": str(args.checkpoint)})}
        write_atomic(args.csv, table.to_csv(index=False).encode(), "pass another --csv")
        write_atomic(Path(args.csv).with_suffix(".provenance.json"), json.dumps(record, indent=2) + "\n")
    return 0


def cmd_demo(args) -> int:
    """Train FROST on the embedded default, sweep the halting quantile, write outputs."""
    from .analysis.curves import SWEEP_COLUMNS, curve
    from .notebook.glue import save_figure, write_metrics
    from .notebook.plotting import plot_alpha, plot_halting_scores, plot_sweep, plot_training

    _single_process_only("demo")
    config = run_config(args)
    for folder in ("figures", "metrics"):  # before training: the demo ends by writing there
        check_writable(paths.outputs_dir() / folder, f"{folder} folder",
                       "set FROST_OUTPUTS to a writable folder", folder=True)
    result = train_or_load(config, progress=False if args.no_progress else None, retrain=args.retrain)
    outputs = training.evaluate(result.model, training.load_split(config, "test"),
                                batch_size=config.train.eval_batch_size)
    table = curve(outputs, calibrator=result.calibrator, quantiles=PAPER_QUANTILES)[list(SWEEP_COLUMNS)]
    name = f"demo_{config.model.name}_{config.data.name}"
    figures = {"training": plot_training(result.history, f"{config.model.name} on {config.data.name}"),
               "alpha": plot_alpha(result.history), "halting_scores": plot_halting_scores(result.history),
               "sweep": plot_sweep(table, f"halting sweep, {config.data.name} test split")}
    saved = [shown_path(save_figure(fig, f"{name}_{kind}")) for kind, fig in figures.items()]
    path = write_metrics(name, {**_summary(result, where=False),
                                "accuracy_per_step": result.metrics.get("test_accuracy_per_step"),
                                "sweep": table.to_dict(orient="records")})
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(json.dumps({**_summary(result), "metrics": shown_path(path), "figures": saved}, indent=2))
    return 0


def cmd_forecast(args) -> int:
    """Train (or load) one forecasting run (frost_nb/dfmamba/training.py)."""
    from .dfmamba import training as forecasting

    return forecasting.command(args)


def cmd_export(args) -> int:
    """Export a finished local run folder, lean, into outputs/runs/ (or --to) and its index; a
    forecasting run into their forecast/ folder and its index."""
    from .dfmamba import training as forecasting

    check_readable(args.run, "the run folder", "pass a finished run folder (<store>/<grid>/<label>/)",
                   folder=True, error=checkpoint.CheckpointError)
    check_writable(args.to or paths.committed_runs_dir(), "the runs folder", "pass another --to", folder=True)
    if forecasting.is_forecast_run(args.run):
        folder = forecasting.export_run(args.run, args.to, weights=args.weights or "float32")
    elif args.weights is not None:
        raise ParameterError("--weights is for forecasting runs: image runs are exported in float32")
    else:
        folder = export_run(args.run, args.to)
    print(json.dumps({"exported": shown_path(folder),
                      "index": shown_path(folder.parent.parent / "index.csv")}))
    return 0


def cmd_verdicts(args) -> int:
    """The verdict tables of the paper's claims from the metrics files (and, without a FILE, the runs'
    index), everything read before the first write: a damaged input leaves every file as it was."""
    from .repro.verdicts import MARKERS, TARGETS, Metrics, current_block, replace_block, tables
    from .runs import index_text, read_index

    option, target = ("--write", args.write) if args.write is not None else ("--check", args.check)
    files = [] if target is None else [target] if target else [str(repo_root() / name) for name in TARGETS]
    texts = {}
    for file in files:  # before the metrics are read
        fix = f"pass {option} an existing file with a verdicts block (README.md, docs/results.md)"
        check_readable(file, "the file", fix, error=ParameterError)
        if args.write is not None:
            check_writable(file, "the file", fix)
        try:
            texts[file] = Path(file).read_text()
        except UnicodeDecodeError as err:
            where = f"{err.reason} at byte {err.start}"
            raise ParameterError(f"{file} is not UTF-8 text ({where}); {fix}") from None
    if args.metrics_dir is not None:
        check_readable(args.metrics_dir, "the metrics folder", "pass --metrics-dir an existing folder",
                       folder=True, error=ParameterError)
    made = tables(Metrics(args.metrics_dir))
    if target is None:  # no file to write or check
        print(made["summary"])
    blocks = {file: {k: b for k in MARKERS if (b := current_block(text, k)) is not None}
              for file, text in texts.items()}  # each file's verdicts blocks, by kind
    if bare := [file for file, found in blocks.items() if not found]:
        raise ParameterError(f"{bare[0]} has no verdicts block ({', '.join(s for s, _ in MARKERS.values())})")
    index, new_index = paths.committed_runs_dir() / "index.csv", None
    if target == "":  # no FILE: the runs' index too, read whole before any write
        try:
            if args.check is not None:
                read_index(index.parent)
            new_index = index_text(index.parent)
        except DamagedInput as err:
            skip_or_raise(err)  # --skip-damaged: the index is neither checked nor written
    if args.write is not None:
        for file, text in texts.items():
            for kind in blocks[file]:
                text = replace_block(text, made[kind], kind)
            write_atomic(file, text, f"pass {option} a writable file")  # an interrupted write keeps the file
        if new_index is not None:
            write_atomic(index, new_index)
        return 0
    pairs = [(f"{file} ({kind} verdicts block)", old, made[kind], "verdict table")
             for file, found in blocks.items() for kind, old in found.items()]
    if new_index is not None:
        pairs.append((str(index), index.read_text(), new_index, "runs' index"))
    for name, old, new, what in pairs:
        if old != new:
            diff = difflib.unified_diff(old.splitlines(), new.splitlines(), name, "generated", lineterm="")
            print("\n".join(diff), file=sys.stderr)
            print(f"{name}: the {what} is stale; refresh it with python -m frost_nb verdicts --write",
                  file=sys.stderr)
    return int(any(old != new for _, old, new, _ in pairs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m frost_nb", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def run_options(p, dataset=None):
        p.add_argument("--size", default="demo", choices=SIZES)
        p.add_argument("--dataset", default=dataset, help=", ".join(DATASETS))
        p.add_argument("--model", default="frost", help=", ".join(MODELS))
        p.add_argument("--backbone", default="resnet", help=" or ".join(BACKBONES))
        training_options(p, "any config field, e.g. --set train.lr=0.1 (repeatable)")
        skip_option(p)

    def training_options(p, set_help, epochs_help=None):
        p.add_argument("--epochs", type=int, default=None, help=epochs_help)
        p.add_argument("--seed", type=int, default=None)
        p.add_argument("--root", default=None, help="data root (default: $FROST_DATA, then data/)")
        p.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE", help=set_help)
        p.add_argument("--retrain", action="store_true", help="train again, ignoring stored runs")
        p.add_argument("--no-progress", action="store_true")

    def skip_option(p):
        p.add_argument("--skip-damaged", action="store_true",
                       help="leave a damaged stored run or metrics file out (and say so) instead of "
                            "stopping; a committed run left out may be trained again")

    run_options(sub.add_parser("demo", help="the main job: FROST on digits + halting sweep"), "digits")
    run_options(sub.add_parser("config", help="print the resolved config of a run and its stored run "
                                              "(trains nothing)"))
    run_options(p := sub.add_parser("train", help="train a model (or load it from the stored runs)"))
    p.add_argument("--checkpoint", default=None, help="write/resume this checkpoint instead of a run folder")
    p.add_argument("--name", default=None, help="the run's name, GRID/LABEL, in the local store "
                   "(default: DATASET-SIZE-single/MODEL-BACKBONE-seedN)")
    p = sub.add_parser("grid", help="train every run of a named grid of experiments (the store keeps them)")
    p.add_argument("name", help=f"one of {', '.join(GRIDS)} (frost_nb/repro/grids.py)")
    p.add_argument("--size", default="demo", choices=SIZES)
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--shard", default="0/1", help="INDEX/COUNT: train every COUNT-th run from INDEX")
    p.add_argument("--labels", nargs="+", default=None,
                   help="only the rows with these labels, without the seed tag (e.g. vanilla recurrent)")
    p.add_argument("--bundle", default="adopted", choices=BUNDLES,
                   help="the bundle of defaults of the grids that have one (grids.BUNDLE_GRIDS): "
                        "adopted (today's), per-step (most committed runs) or residual (the runs before both)")
    p.add_argument("--compile", default=None, choices=("auto", "on", "off"),
                   help="train.compile of every run (default: the grid's, auto: on CUDA only); the runs stay "
                        "the same runs. Whether 'on' pays on a CPU depends on the losses: "
                        "benchmarks/train_throughput.py measures it (docs/scaling.md)")
    p.add_argument("--no-progress", action="store_true")
    skip_option(p)
    for name, helptext in (("evaluate", "adaptive inference at one quantile"),
                           ("sweep", "halting quantile sweep")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--checkpoint", required=True)
        p.add_argument("--split", default="test", choices=SPLITS)
        p.add_argument("--root", default=None)
        if name == "evaluate":
            group = p.add_mutually_exclusive_group()
            group.add_argument("--quantile", type=float, default=0.5)
            group.add_argument("--budget-depth", type=float, default=None, metavar="STEPS",
                               help="a mean depth to meet instead of a quantile: the quantile whose held-out "
                                    "mean depth is closest to it (the depth reached on --split is reported)")
            p.add_argument("--stream", action="store_true",
                           help="continuous batching (halting.stream_predict): refill the slots of exited "
                                "samples with new images; recurrent, basic_ssm and frost only")
            p.add_argument("--slots", type=int, default=None,
                           help="with --stream: samples stepped together (default: the config's eval batch size)")
            p.add_argument("--refill-at", type=int, default=1,
                           help="with --stream: admit new images once this many slots are free (default 1)")
        else:
            p.add_argument("--quantiles", type=float, nargs="+", default=list(PAPER_QUANTILES))
            p.add_argument("--csv", default=None)
    p = sub.add_parser("export", help="copy a finished run folder, lean, into outputs/runs/ (and index it)")
    p.add_argument("run", help="the run folder, e.g. outputs/cache/cifar100-cifar-single/frost-resnet-seed0")
    p.add_argument("--to", default=None, help="the runs folder to export into (default: outputs/runs)")
    p.add_argument("--weights", default=None, choices=("float32", "float16", "none"),
                   help="forecasting runs: the weights as float32, rounded to float16 (the test metrics then "
                        "those of the rounded weights), or left out (config and metrics only)")
    p = sub.add_parser("forecast", help="train (or load from the stored runs) a forecasting run: DF-Mamba, "
                                        "DLinear or RLinear on ETTh1/ETTh2")
    p.add_argument("--dataset", default="etth2", help="etth1 or etth2")
    p.add_argument("--model", default="dfmamba", help="dfmamba, dlinear or rlinear")
    p.add_argument("--horizon", type=int, default=96, help="96, 192, 336 or 720 (look-back 336)")
    training_options(p, "any field of the run's data, model or train section, e.g. --set train.lr=1e-3",
                     epochs_help="the epoch cap (train.epochs)")
    p.add_argument("--name", default=None, help="GRID/LABEL in the local store's forecast/ folder (default: "
                   "DATASET-L336-HH/MODEL-seedN; ablations: DATASET-L336-HH-ablations/dfmamba-VARIANT-seedN)")
    p.add_argument("--zero-shot", action="store_true", help="then evaluate it unchanged on the test series "
                   "average-pooled by 2 and 4 (Table 14), kept in its metrics.json")
    p = sub.add_parser("verdicts", help="the verdict table of the paper's claims, from outputs/metrics/")
    p.add_argument("--metrics-dir", default=None,
                   help="metrics folder (default: the committed outputs/metrics)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="FILE", nargs="?", const="",
                       help="replace the tables between the verdicts markers of FILE (default: README.md "
                            "and docs/results.md, and outputs/runs/index.csv from the runs)")
    group.add_argument("--check", metavar="FILE", nargs="?", const="",
                       help="exit 1 when FILE's tables (default: README.md's and docs/results.md's, and "
                            "outputs/runs/index.csv) differ from the generated ones")
    skip_option(p)
    args = parser.parse_args(argv)
    # one line per epoch on stderr (the progress bar carries it when one is shown)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        with skip_damaged(getattr(args, "skip_damaged", False)) as skipped:
            status = globals()[f"cmd_{args.command}"](args)  # each subcommand's cmd_ function
    except (ConfigError, DataError, ParameterError, checkpoint.CheckpointError, training.TrainingError,
            OutputError, DamagedInput) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for line in skipped:
        print(f"left out (--skip-damaged): {line}", file=sys.stderr)
    if skipped:
        print(f"--skip-damaged: {len(skipped)} damaged input(s) left out of what this command printed or "
              "wrote", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
