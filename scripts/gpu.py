"""Train a run on a lent GPU machine in the calls of one session: the device path of docs/scaling.md
("The cifar size on a lent GPU").

The device tool runs one command per call on a copy of this checkout, and what limits it shapes
every step here (/work/.library/device/README.md; the numbers are the constants below):

- each call sends the working tree, the tracked files included, plus the ignored paths named in
  ``carry``: 64 MiB in all, so CIFAR-100 (135 MB) travels in parts over several calls;
- what comes back is what the command leaves under ``$OUT``: at most 8 files of 16 MiB each,
  no deeper than ``$OUT/a/b/file``;
- a command runs at most 10 minutes, a session has 30 device-minutes, and a machine comes back
  bare after 30 minutes held: training stops on a time budget and the resumable checkpoint
  comes back after every call, so the next call, or a later session, continues it.

Subcommands, in the order a session uses them (``plan`` prints the exact calls):

  here   plan     measure what travels, size the parts, print the calls with their ``carry``
  here   wheels   download the pinned wheels the device lacks (datasketches) into .whl/
  here   pack     cut the data set into parts (.gpu/parts/callNN/) with manifests (.gpu/manifests/)
  there  receive  check the parts that arrived, keep them aside, join and prepare the set once whole
  there  train    resume the run, train epochs until the time budget, leave it under $OUT
  here   fetch    take a call's files back into the local store (outputs/cache/), the finished
                  run's lean export (bf16 weights, metrics recomputed) into outputs/runs/

The device has torch and no install of this package: the commands there run as ``python3
scripts/gpu.py ...`` from the checkout, which puts the checkout and the carried wheels (installed
into /tmp/site) on ``sys.path`` itself. Standard library at the top; ``frost_nb`` is imported by
the steps that need it, after that.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MIB = 1 << 20
SEND_LIMIT = 64 * MIB  # the working tree and the carried paths, per call
REPO_BUDGET = 40 * MIB  # the tracked files at most (tests/test_repo_size.py): 24 MiB stay for data
OUT_FILES, OUT_FILE_BYTES, OUT_TOTAL_BYTES, OUT_DEPTH = 8, 16 * MIB, 64 * MIB, 2  # what comes back
OUT_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
CHECKPOINT_PART_BYTES = 15 * MIB  # a checkpoint above this comes back in parts
SITE = "/tmp/site"  # where the carried wheels are installed on the device
# here and there alike, relative to the checkout (ignored: /.gpu/ in .gitignore, .whl/ too)
GPU, WHEEL_DIR = ".gpu", ".whl"
MANIFESTS, PARTS, STORE, DATA = f"{GPU}/manifests", f"{GPU}/parts", f"{GPU}/store", f"{GPU}/data"
RESULTS = f"{GPU}/results"  # files of $OUT that are not a run (benchmark tables), fetched here
RUN_FILES = ("config.json", "model.pt", "metrics.json", "lean.pt", "gpu_calls.json")
# Device-minutes per step, estimates (not measurements) for the printed plan: no call has run.
START_MIN, DATA_CALL_MIN, CALL_OVERHEAD_MIN = 2.0, 0.75, 0.5
SESSION_MIN, CALL_MIN = 30.0, 10.0


@dataclass(frozen=True)
class Wheel:
    """A pinned wheel the device lacks: ``module`` is what its absence looks like."""

    requirement: str
    module: str
    file: str
    bytes: int
    sha256: str


# The device's python3 is 3.12 on x86-64 with torch 2.11, numpy, pandas, tqdm, pillow, matplotlib
# (/work/.library/device/KINDS.md); of this package's needs only datasketches is missing (its one
# requirement, numpy, is there). Checked 2026-11-25: pip download gives this file for cp312.
WHEELS = (Wheel("datasketches==5.2.0", "datasketches",
                "datasketches-5.2.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                748_356, "d9aa0c1dad8d00c242718c5dbb9f8cf1876ea099ee55c1c0634a8beecb589164"),)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")


class GpuError(RuntimeError):
    """A step cannot go on; the message says what is missing and which step makes it."""


def _parts_module():
    """scripts/parts.py (split, join, check), loaded by path: it sits beside this file."""
    spec = importlib.util.spec_from_file_location("frost_parts", Path(__file__).resolve().parent / "parts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


parts = _parts_module()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(MIB), b""):
            digest.update(block)
    return digest.hexdigest()


def _mib(n: float) -> str:
    return f"{n / MIB:.1f} MiB"


def _copy(source: Path, target: Path) -> None:
    """Copy a file atomically (a temporary file beside ``target``, then a rename)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


# --- what travels ------------------------------------------------------------------------------

def _git_files(repo: Path, *args: str) -> list[str]:
    try:
        out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", *args], capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        raise GpuError(f"{repo} is not a git checkout ({err}): what travels to the device is "
                       "measured with git ls-files") from err
    return [p for p in out.decode().split("\0") if p]


def file_sizes(repo: Path, names: list[str]) -> dict[str, int]:
    """Bytes of each of ``names`` under ``repo`` that exists (a link counts as itself)."""
    sizes = {}
    for name in names:
        path = repo / name
        if path.is_symlink() or path.is_file():
            sizes[name] = path.lstat().st_size
    return sizes


def tracked_sizes(repo: Path = REPO) -> dict[str, int]:
    """Bytes of every tracked file in the working tree (``git ls-files``)."""
    return file_sizes(repo, _git_files(repo))


def travelling_bytes(repo: Path = REPO) -> int:
    """What every call sends before anything is carried: tracked files, untracked files that git
    does not ignore, and a ``shared/`` folder inside the checkout."""
    total = sum(file_sizes(repo, _git_files(repo, "--cached", "--others", "--exclude-standard")).values())
    shared = repo / "shared"
    if shared.is_dir():
        total += sum(p.lstat().st_size for p in shared.rglob("*") if p.is_file() or p.is_symlink())
    return total


def folder_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


# --- the plan ----------------------------------------------------------------------------------

@dataclass
class Call:
    """One call of the device tool: what it carries, the command it runs, an estimate of its minutes."""

    what: str
    carry: list[str]
    command: str
    carried_bytes: int
    minutes: float  # an estimate, never a measurement
    parts: list[str] = field(default_factory=list)  # the data parts it carries (.gpu/parts/callNN/)


@dataclass
class Plan:
    travelling: int
    room: int  # for carried paths beside the tree, the margin kept
    part_bytes: int
    files: dict[str, list[str]]  # data file -> its part names
    calls: list[Call] = field(default_factory=list)
    checkpoint_bytes: int = 0
    lean_bytes: int = 0  # the finished run's lean export (bf16 weights), what gets committed
    tracked: int = 0
    train_minutes: float | None = None  # an estimate from --images-per-s, else None

    @property
    def minutes(self) -> float:
        return START_MIN + sum(c.minutes for c in self.calls)


@dataclass(frozen=True)
class RunSpec:
    """The run a plan trains, as ``train``'s options."""

    size: str = "cifar"
    dataset: str = "cifar100"
    model: str = "frost"
    backbone: str = "resnet"
    seed: int = 0
    epochs: int | None = None
    sets: tuple[str, ...] = ()

    def options(self) -> str:
        opts = f"--size {self.size} --dataset {self.dataset} --model {self.model} --backbone " \
               f"{self.backbone} --seed {self.seed}"
        opts += f" --epochs {self.epochs}" if self.epochs is not None else ""
        return opts + "".join(f" --set {s}" for s in self.sets)

    def config(self):
        from frost_nb.config import make_config

        overrides = {"train.seed": self.seed}
        if self.epochs is not None:
            overrides["train.epochs"] = self.epochs
        for item in self.sets:
            key, _, value = item.partition("=")
            overrides[key] = _literal(value)
        return make_config(self.size, self.dataset, self.model, self.backbone, **overrides)

    def name(self) -> str:
        from frost_nb.runs import default_name

        return default_name(self.config())


def _literal(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def part_names(size: int, part_bytes: int, name: str) -> list[str]:
    """The names ``parts.split`` gives a file of ``size`` bytes cut at ``part_bytes``."""
    return [f"{name}.part{i:02d}" for i in range(max(1, -(-size // part_bytes)))]


def checkpoint_estimate(config, train_images: int = 50_000) -> tuple[int, int]:
    """Bytes of ``config``'s resumable checkpoint at its last epoch and of its lean bf16 export,
    measured on a checkpoint of the right shapes (the model, its optimiser state, a history of
    every optimiser step) written to a temporary file: sizes, not results."""
    import torch

    from frost_nb.checkpoint import lean_state, save_checkpoint
    from frost_nb.models import create_model
    from frost_nb.training import _new_history, make_optimizer

    model = create_model(config.model)
    optimizer = make_optimizer(model, config.train)
    for p in model.parameters():  # one step, so the optimiser holds its state (momentum, moments)
        p.grad = torch.zeros_like(p)
    optimizer.step()
    steps = config.train.epochs * max(1, round(train_images * (1 - config.data.val_fraction))
                                      // config.train.batch_size)
    history = _new_history()
    for key in history["steps"]:
        history["steps"][key] = [0.123456789 * (i % 97) for i in range(steps)]
    for key in history["epochs"]:
        history["epochs"][key] = [0.5] * config.train.epochs
    state = {"config": config.to_dict(), "model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "scheduler": {}, "rng": {"torch": torch.get_rng_state(), "data": torch.get_rng_state()},
             "calibrator": b"\0" * 4096, "history": history, "epoch": config.train.epochs, "step": steps,
             "train_seconds": 1.0, "complete": True, "metrics": {"test_accuracy": 0.5}}
    with tempfile.TemporaryDirectory() as tmp:
        full = save_checkpoint(Path(tmp) / "full.pt", state).stat().st_size
        lean = save_checkpoint(Path(tmp) / "lean.pt", lean_state(state, "bfloat16"), compress=True).stat().st_size
    return full, lean


def make_plan(files: dict[str, int], run: RunSpec, *, travelling: int, wheel_bytes: int,
              checkpoint_bytes: int, lean_bytes: int = 0, tracked: int = 0, limit: int = SEND_LIMIT,
              margin: int = 2 * MIB, part_bytes: int | None = None, minutes: float = 8.0,
              images_per_s: float | None = None, benchmark: bool = True) -> Plan:
    """The calls that carry ``files`` (name -> bytes) in parts and then train ``run``: every call
    carries the manifests and the wheels, the data calls one group of parts each (as many as fit
    beside the tree), the training calls the run folder (its resumable checkpoint)."""
    manifest_bytes = 8 * 1024 * (1 + len(files))
    room = limit - travelling - margin - wheel_bytes - manifest_bytes
    if part_bytes is None:
        part_bytes = (room // MIB) * MIB if room >= MIB else room
    if part_bytes < 1 or part_bytes > room:
        raise GpuError(f"no room for data beside the repository: {_mib(travelling)} travel with every "
                       f"call, {_mib(limit)} may; {_mib(room)} are left after the margin and the "
                       "wheels: make the tracked files smaller (tests/test_repo_size.py)")
    if travelling + margin + wheel_bytes + checkpoint_bytes > limit:
        raise GpuError(f"the run's checkpoint ({_mib(checkpoint_bytes)}) does not fit beside the "
                       f"repository ({_mib(travelling)}) in one call of {_mib(limit)}")
    named = {name: part_names(size, part_bytes, name) for name, size in files.items()}
    sizes = [(p, min(part_bytes, files[name] - i * part_bytes)) for name, ps in named.items()
             for i, p in enumerate(ps)]
    groups: list[list[tuple[str, int]]] = []
    for item in sizes:  # next fit, in order: each call a folder of parts
        if groups and sum(s for _, s in groups[-1]) + item[1] <= room:
            groups[-1].append(item)
        else:
            groups.append([item])
    plan = Plan(travelling, room, part_bytes, named, checkpoint_bytes=checkpoint_bytes,
                lean_bytes=lean_bytes, tracked=tracked)
    train = f"python3 scripts/gpu.py train {run.options()}"
    base = [MANIFESTS, WHEEL_DIR]
    for i, group in enumerate(groups, 1):
        command = "python3 scripts/gpu.py receive"
        what = f"data {i}/{len(groups)}: " + ", ".join(p for p, _ in group)
        minutes_here = DATA_CALL_MIN
        if i == len(groups):  # the set is whole after this one: train at once
            command += f" && {train} --minutes {minutes:g}"
            what += "; join, prepare, train"
            minutes_here += minutes
        elif i == 1 and benchmark:  # needs no data: the throughput that sets the epochs per call
            command += (f" && PYTHONPATH={SITE}:. python3 benchmarks/train_throughput.py --size "
                        f"{run.size} --dataset {run.dataset} --models vanilla basic_ssm frost "
                        "--device cuda --csv $OUT/bench_train_throughput.csv")
            what += "; training throughput (synthetic input)"
            minutes_here += 2.0
        plan.calls.append(Call(what, [*base, f"{PARTS}/call{i:02d}"], command,
                               wheel_bytes + manifest_bytes + sum(s for _, s in group), minutes_here,
                               [p for p, _ in group]))
    if images_per_s:
        config = run.config()
        train_images = 50_000 * (1 - config.data.val_fraction)
        epoch_s = (train_images + (50_000 - train_images) / 3) / images_per_s  # held-out pass ~ a third
        plan.train_minutes = config.train.epochs * epoch_s / 60
        more = max(0, math.ceil(plan.train_minutes / minutes) - 1)
    else:
        more = 1  # at least one more: the real count follows from call 1's benchmark
    carry = [WHEEL_DIR, f"outputs/cache/{run.name()}"]
    for j in range(more):
        plan.calls.append(Call(f"train {j + 2}: resume, train, send the checkpoint back", carry,
                               f"{train} --minutes {minutes:g}", wheel_bytes + checkpoint_bytes,
                               minutes + CALL_OVERHEAD_MIN))
    return plan


def describe(plan: Plan, run: RunSpec) -> str:
    lines = [f"travels with every call: {_mib(plan.travelling)} (tracked and untracked, not ignored)",
             f"room for carried paths: {_mib(plan.room)} of {_mib(SEND_LIMIT)} (margin and wheels kept)",
             f"parts of {_mib(plan.part_bytes)}: "
             + "; ".join(f"{n} in {len(p)}" for n, p in plan.files.items()),
             f"resumable checkpoint at the last epoch, about {_mib(plan.checkpoint_bytes)} "
             f"({'under' if plan.checkpoint_bytes <= CHECKPOINT_PART_BYTES else 'over'} "
             f"{_mib(CHECKPOINT_PART_BYTES)}: it comes back "
             f"{'whole' if plan.checkpoint_bytes <= CHECKPOINT_PART_BYTES else 'in parts'})"]
    if plan.lean_bytes:
        after = plan.tracked + plan.lean_bytes
        lines.append(f"lean export (bf16 weights) about {_mib(plan.lean_bytes)}: tracked files "
                     f"{_mib(plan.tracked)} now, {_mib(after)} with it committed, against the budget "
                     f"of {_mib(REPO_BUDGET)}"
                     + ("" if after <= REPO_BUDGET else " (over: make room before committing it)"))
    if plan.train_minutes is not None:
        lines.append(f"training, estimated from the given images/s: {plan.train_minutes:.0f} minutes")
    else:
        lines.append("training minutes: unknown until call 1's benchmark (images/s); each training "
                     "call trains what fits its budget and the run continues in the next, here or in "
                     "a later session")
    lines.append("")
    for i, call in enumerate(plan.calls, 1):
        lines += [f"call {i} ({call.what}); carries {_mib(call.carried_bytes)}; about {call.minutes:.1f} "
                  "device-minutes (estimate)",
                  f"  run(command={call.command!r}, carry={json.dumps(call.carry)}, timeout_s=600)",
                  f"  then here: python scripts/gpu.py fetch --from <files_at of the reply>"]
    lines += ["", f"estimated device-minutes: {plan.minutes:.1f} with {START_MIN:g} to start "
              f"(a session has {SESSION_MIN:g}; a machine goes back after 30 held): estimates, not "
              "measurements. A machine that comes back bare needs the data calls again: receive says "
              "which parts are missing."]
    return "\n".join(lines)


# --- here: wheels, parts -----------------------------------------------------------------------

def wheel_bytes(wheels=WHEELS) -> int:
    return sum(w.bytes for w in wheels)


def download_wheels(folder: Path = REPO / WHEEL_DIR, wheels=WHEELS) -> list[Path]:
    """Download the pinned wheels for the device (cp312, manylinux x86-64) and check each one's
    SHA-256; a file already there and whole is kept."""
    folder.mkdir(parents=True, exist_ok=True)
    for w in wheels:
        if (folder / w.file).is_file() and _sha256(folder / w.file) == w.sha256:
            continue
        platforms = [a for p in PLATFORMS for a in ("--platform", p)]
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.12", "--implementation", "cp", *platforms, "-d",
                        str(folder), w.requirement], check=True)
    return check_wheels(folder, wheels)


def check_wheels(folder: Path, wheels=WHEELS) -> list[Path]:
    """The pinned wheels in ``folder``, each checked against its SHA-256."""
    paths = []
    for w in wheels:
        path = folder / w.file
        if not path.is_file():
            raise GpuError(f"{path} is missing: run python scripts/gpu.py wheels here and carry {WHEEL_DIR}")
        if _sha256(path) != w.sha256:
            raise GpuError(f"{path} is not the pinned {w.requirement} (SHA-256 differs): delete it and "
                           "run python scripts/gpu.py wheels")
        paths.append(path)
    return paths


def pack(sources: dict[str, Path], dataset: str, part_bytes: int, groups: list[list[str]],
         repo: Path = REPO) -> list[Path]:
    """Cut each source into parts of ``part_bytes``, into ``.gpu/parts/callNN/`` as ``groups``
    (the plan's part names per call) says, the manifests into ``.gpu/manifests/``; old parts and
    manifests are removed first. Returns the call folders."""
    for old in (repo / PARTS, repo / MANIFESTS):
        shutil.rmtree(old, ignore_errors=True)
    flat = repo / PARTS / "all"
    manifests = repo / MANIFESTS
    manifests.mkdir(parents=True)
    for name, source in sources.items():
        manifest = parts.split(source, flat, part_bytes / MIB)
        os.replace(manifest, manifests / manifest.name)
    folders = []
    for i, group in enumerate(groups, 1):
        folder = repo / PARTS / f"call{i:02d}"
        folder.mkdir(parents=True)
        for part in group:
            os.replace(flat / part, folder / part)
        folders.append(folder)
    if left := sorted(p.name for p in flat.iterdir()):
        raise GpuError(f"parts not in any call: {left}")
    flat.rmdir()
    (manifests / "dataset.json").write_text(json.dumps({"dataset": dataset, "files": sorted(sources)}) + "\n")
    return folders


# --- there: packages, receive ------------------------------------------------------------------

def ensure_packages(wheel_dir: Path = REPO / WHEEL_DIR, site: str = SITE, wheels=WHEELS) -> list[str]:
    """Make this package importable (the checkout on ``sys.path``) and install the pinned wheels
    whose module is missing into ``site``; returns the requirements installed."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    if site not in sys.path and Path(site).is_dir():
        sys.path.insert(0, site)
    importlib.invalidate_caches()
    missing = [w for w in wheels if importlib.util.find_spec(w.module) is None]
    if not missing:
        return []
    files = check_wheels(wheel_dir, missing)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--upgrade", "--target", site, *map(str, files)], check=True)
    if site not in sys.path:
        sys.path.insert(0, site)
    importlib.invalidate_caches()
    if still := [w.requirement for w in missing if importlib.util.find_spec(w.module) is None]:
        raise GpuError(f"{', '.join(still)} installed into {site} but cannot be imported")
    return [w.requirement for w in missing]


def receive(repo: Path = REPO) -> dict:
    """On the device: move the parts that arrived (``.gpu/parts/*/``), each checked, into
    ``.gpu/store/``; join a file once all its parts are there (SHA-256 checked) into
    ``.gpu/data/<dataset>/``, and prepare the set once every file is joined. Returns the status:
    which parts are still missing."""
    ensure_packages(repo / WHEEL_DIR)  # first: a command after it may need them (call 1's benchmark)
    manifests = repo / MANIFESTS
    try:
        spec = json.loads((manifests / "dataset.json").read_text())
    except (OSError, ValueError) as err:
        raise GpuError(f"{manifests}/dataset.json is missing or unreadable ({err}): carry {MANIFESTS} "
                       "(python scripts/gpu.py pack writes it)") from err
    dataset, store, target = spec["dataset"], repo / STORE, repo / DATA / spec["dataset"]
    store.mkdir(parents=True, exist_ok=True)
    status = {"dataset": dataset, "joined": [], "missing": {}, "damaged": [], "prepared": False}
    for name in spec["files"]:
        manifest = json.loads((manifests / f"{name}.manifest.json").read_text())
        done = target / f".{name}.sha256"  # written after a checked join: no hashing 112 MB every call
        if done.is_file() and done.read_text().strip() == manifest["sha256"] and (target / name).is_file():
            status["joined"].append(name)
            continue
        _copy(manifests / f"{name}.manifest.json", store / f"{name}.manifest.json")
        wanted = {p["file"]: p for p in manifest["parts"]}
        for arrived in sorted((repo / PARTS).glob(f"*/{name}.part*")):
            part = wanted.get(arrived.name)
            if part and arrived.stat().st_size == part["bytes"] and _sha256(arrived) == part["sha256"]:
                os.replace(arrived, store / arrived.name)
            else:
                status["damaged"].append(arrived.name)
        if missing := parts.missing(store / f"{name}.manifest.json"):
            status["missing"][name] = missing
            continue
        parts.join(store / f"{name}.manifest.json", target)
        done.write_text(manifest["sha256"] + "\n")
        for p in wanted:
            (store / p).unlink(missing_ok=True)
        status["joined"].append(name)
    if not status["missing"]:
        from frost_nb.data.prepare import prepare

        prepare(dataset, repo / DATA, download=False)
        status["prepared"] = True
    return status


# --- there: train ------------------------------------------------------------------------------

def room_for_another(elapsed: float, last_epoch: float, budget: float, final: bool) -> bool:
    """Whether one more epoch, as long as the last one (the final epoch also evaluates the test
    set and writes the lean export: counted at 1.5 times), ends within ``budget`` seconds."""
    return elapsed + last_epoch * (1.5 if final else 1.2) <= budget


def check_out(out: Path) -> list[Path]:
    """The files under ``out``, if the device tool brings every one back (at most 8 files of
    16 MiB, 64 MiB together, no deeper than ``out/a/b/file``, plain names); else GpuError."""
    files, problems = [], []
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out)
        if any(not OUT_NAME.match(p) for p in rel.parts):
            problems.append(f"{rel}: a name with characters other than letters, digits, '.', '_', '-'")
        if path.is_symlink() or not (path.is_dir() or path.is_file()):
            problems.append(f"{rel}: not a plain file")
        elif path.is_file():
            files.append(path)
            if len(rel.parts) > OUT_DEPTH + 1:
                problems.append(f"{rel}: deeper than {OUT_DEPTH} folders")
            if path.stat().st_size > OUT_FILE_BYTES:
                problems.append(f"{rel}: {_mib(path.stat().st_size)}, over {_mib(OUT_FILE_BYTES)}")
    if len(files) > OUT_FILES:
        problems.append(f"{len(files)} files, over {OUT_FILES}")
    if (total := sum(p.stat().st_size for p in files)) > OUT_TOTAL_BYTES:
        problems.append(f"{_mib(total)} together, over {_mib(OUT_TOTAL_BYTES)}")
    if problems:
        raise GpuError(f"{out} would not come back whole: " + "; ".join(problems))
    return files


def _hardware(device) -> str:
    import platform

    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def lean_export(state: dict, config, device, target: Path) -> dict:
    """Write the lean export of the finished ``state`` with bf16 weights to ``target``, its test
    metrics recomputed from those stored weights (the same device and autocast as training); the
    float32 weights' accuracy is kept beside them. Returns the lean metrics."""
    import torch

    from frost_nb.checkpoint import lean_state, save_checkpoint
    from frost_nb.models import create_model
    from frost_nb.training import evaluate, load_split

    lean = lean_state(state, "bfloat16")
    model = create_model(config.model)
    model.load_state_dict(lean["model"])  # widened back to float32, as load_model does
    model.to(device).eval()
    amp = config.train.amp == "bf16" or (config.train.amp == "auto" and device.type == "cuda")
    with torch.no_grad():
        test = evaluate(model, load_split(config, "test"), batch_size=config.train.eval_batch_size, amp=amp)
    before = state.get("metrics", {})
    lean["metrics"] = {**before, "test_accuracy": test.accuracy,
                       "test_accuracy_per_step": test.accuracy_per_step(), "weights": "bfloat16",
                       "test_accuracy_float32_weights": before.get("test_accuracy"),
                       "evaluated_with": {"device": str(device), "amp": "bf16" if amp else "off"}}
    save_checkpoint(target, lean, compress=True)  # a lean export, as export_lean writes it
    return lean["metrics"]


def train(run: RunSpec, *, out: Path, minutes: float, max_epochs: int | None = None, name: str | None = None,
          repo: Path = REPO, cache: Path | None = None, data: Path | None = None,
          split_above: int = CHECKPOINT_PART_BYTES, device: str | None = None) -> dict:
    """On the device: resume ``run`` from its run folder in the local store (``outputs/cache/``,
    carried in), train whole epochs while the next one fits in ``minutes`` (at least one, at most
    ``max_epochs``), and leave the run folder under ``out`` (the checkpoint in parts when it is
    over ``split_above`` bytes), with the lean export once it is finished. Returns this call's
    record, also appended to the run's gpu_calls.json."""
    started, wall = time.strftime("%Y-%m-%dT%H:%M:%S%z"), time.monotonic()
    os.environ["FROST_CACHE"] = str(cache or repo / "outputs" / "cache")
    os.environ["FROST_DATA"] = str(data or repo / DATA)
    ensure_packages(repo / WHEEL_DIR)
    import torch

    from frost_nb.checkpoint import load_checkpoint, stored_config
    from frost_nb.data.prepare import DATASETS, is_prepared
    from frost_nb.paths import cache_dir, data_root
    from frost_nb.runs import CONFIG_FILE, METRICS_FILE, MODEL_FILE, check_name, identity_key, write_json
    from frost_nb.training import build_trainer

    config = run.config()
    if device is not None:
        config = config.replace(**{"train.device": device})
    name = check_name(name or run.name())
    grid, label = name.split("/")
    root = data_root()
    if config.data.name in DATASETS and config.data.name != "digits" \
            and not is_prepared(config.data.name, root):
        raise GpuError(f"{config.data.name} is not prepared under {root}: send its parts first "
                       "(the data calls of python scripts/gpu.py plan; receive says which are missing; a "
                       "machine that came back bare has none)")
    folder = cache_dir() / grid / label
    checkpoint = folder / MODEL_FILE
    if (folder / CONFIG_FILE).is_file():
        from frost_nb.config import RunConfig

        theirs = RunConfig.from_dict(json.loads((folder / CONFIG_FILE).read_text()))
        if identity_key(theirs) != identity_key(config):
            raise GpuError(f"{folder} holds another run: train this one under another --name")
    write_json(folder / CONFIG_FILE, config.to_dict())
    state = load_checkpoint(checkpoint) if checkpoint.is_file() else None
    if state is not None and identity_key(stored_config(checkpoint, state)) != identity_key(config):
        raise GpuError(f"{checkpoint} belongs to another run: delete it or train under another --name")
    before = state["epoch"] if state is not None else 0
    seconds_before = state.get("train_seconds", 0.0) if state is not None else 0.0
    complete = bool(state and state.get("complete"))
    trainer = None if complete else build_trainer(config, checkpoint=checkpoint, progress=False)
    dev = trainer.device if trainer is not None else torch.device(
        "cuda" if config.train.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu")
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    done, budget, last, this_call = before, minutes * 60, None, 0
    while not complete and done < config.train.epochs:
        if max_epochs is not None and this_call >= max_epochs:
            break
        final = done + 1 == config.train.epochs
        if last is not None and not room_for_another(time.monotonic() - wall, last, budget, final):
            break
        t0 = time.monotonic()
        trainer.fit(until_epoch=done + 1)  # resumes from the checkpoint the last epoch wrote
        last, done, this_call = time.monotonic() - t0, done + 1, this_call + 1
        complete = done >= config.train.epochs
    state = load_checkpoint(checkpoint)
    hardware = _hardware(dev)
    if complete:
        write_json(folder / METRICS_FILE, {**state["metrics"], "hardware": hardware})
    seconds = state.get("train_seconds", 0.0) - seconds_before
    images = this_call * (trainer.steps_per_epoch * config.train.batch_size if trainer is not None else 0)
    record = {"started": started, "hardware": hardware, "torch": torch.__version__, "run": name,
              "resumed_from_epoch": before, "epochs_after": done, "epochs": config.train.epochs,
              "epochs_this_call": this_call, "train_seconds_this_call": round(seconds, 1),
              "images_per_s": round(images / seconds, 1) if seconds > 0 else None,
              "peak_memory_gib": round(torch.cuda.max_memory_allocated(dev) / 2**30, 2)
              if dev.type == "cuda" else None,
              "finished": complete, "wall_seconds": None}
    calls_file = folder / "gpu_calls.json"
    calls = json.loads(calls_file.read_text()) if calls_file.is_file() else []
    target = out / grid / label
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    if complete:
        record["lean_test_accuracy"] = lean_export(state, config, dev, target / "lean.pt")["test_accuracy"]
        _copy(folder / METRICS_FILE, target / METRICS_FILE)
    _copy(folder / CONFIG_FILE, target / CONFIG_FILE)
    if checkpoint.stat().st_size > split_above:  # comes back in parts; fetch joins them
        manifest = parts.split(checkpoint, target, split_above / MIB)
        record["checkpoint_parts"] = len(json.loads(manifest.read_text())["parts"])
    else:
        _copy(checkpoint, target / MODEL_FILE)
    record["wall_seconds"] = round(time.monotonic() - wall, 1)
    write_json(calls_file, [*calls, record])
    _copy(calls_file, target / "gpu_calls.json")
    check_out(out)
    return record


# --- here: fetch -------------------------------------------------------------------------------

def fetch(source: Path, *, cache: Path | None = None, runs_root: Path | None = None, commit: bool = False,
          force: bool = False, repo: Path = REPO) -> list[dict]:
    """Take the files of one call (``source``: the reply's files_at) back: each run folder into the
    local store, where the next call carries it from and ``train_or_load`` finds it (a checkpoint
    older than the one here is refused unless ``force``); with ``commit``, a finished run's lean
    export into the committed runs (``runs_root``, default outputs/runs/) and its index. Other
    files go to .gpu/results/."""
    ensure_packages(repo / WHEEL_DIR, wheels=())
    from frost_nb.checkpoint import load_checkpoint, stored_config
    from frost_nb.config import RunConfig, config_difference
    from frost_nb.paths import cache_dir, committed_runs_dir
    from frost_nb.runs import CONFIG_FILE, METRICS_FILE, MODEL_FILE, identity_key, write_index, write_json

    cache = Path(cache) if cache is not None else cache_dir()
    runs_root = Path(runs_root) if runs_root is not None else committed_runs_dir()
    source = Path(source)
    done = []
    if not source.is_dir():  # a call that left nothing under $OUT (a data call)
        return done
    for config_file in sorted(source.glob(f"*/*/{CONFIG_FILE}")):
        came, grid, label = config_file.parent, config_file.parent.parent.name, config_file.parent.name
        config = RunConfig.from_dict(json.loads(config_file.read_text()))
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = came / MODEL_FILE
            if (came / f"{MODEL_FILE}.manifest.json").is_file():
                checkpoint = parts.join(came / f"{MODEL_FILE}.manifest.json", tmp)
            state = load_checkpoint(checkpoint)
            if identity_key(stored_config(checkpoint, state)) != identity_key(config):
                raise GpuError(f"{came}: the checkpoint and config.json are of different runs")
            folder = cache / grid / label
            if (folder / MODEL_FILE).is_file() and not force:
                here = load_checkpoint(folder / MODEL_FILE)
                theirs = stored_config(folder / MODEL_FILE, here)
                if identity_key(theirs) != identity_key(config):
                    raise GpuError(f"{folder} holds another run ({config_difference(theirs, config)})")
                if here["epoch"] > state["epoch"]:
                    raise GpuError(f"{folder} is at epoch {here['epoch']}, the fetched checkpoint at "
                                   f"{state['epoch']}: keeping the newer one (--force to replace it)")
            (folder / METRICS_FILE).unlink(missing_ok=True)  # unfinished until the new files are all in
            _copy(config_file, folder / CONFIG_FILE)
            _copy(checkpoint, folder / MODEL_FILE)
        if (came / "gpu_calls.json").is_file():
            _copy(came / "gpu_calls.json", folder / "gpu_calls.json")
        if (came / METRICS_FILE).is_file():
            _copy(came / METRICS_FILE, folder / METRICS_FILE)
        entry = {"run": f"{grid}/{label}", "epoch": state["epoch"], "epochs": config.train.epochs,
                 "finished": bool(state.get("complete")), "stored": str(folder)}
        if commit and (came / "lean.pt").is_file():
            lean = load_checkpoint(came / "lean.pt")
            target = runs_root / grid / label
            if (target / CONFIG_FILE).is_file():
                theirs = RunConfig.from_dict(json.loads((target / CONFIG_FILE).read_text()))
                if identity_key(theirs) != identity_key(config):
                    raise GpuError(f"{target} holds another run ({config_difference(theirs, config)})")
            (target / METRICS_FILE).unlink(missing_ok=True)
            _copy(came / "lean.pt", target / MODEL_FILE)
            _copy(config_file, target / CONFIG_FILE)
            hardware = json.loads((came / METRICS_FILE).read_text()).get("hardware")
            write_json(target / METRICS_FILE, {**lean["metrics"], "hardware": hardware})  # last: finished
            write_index(runs_root)
            entry["committed"] = str(target)
            entry["lean_bytes"] = (target / MODEL_FILE).stat().st_size
            try:  # the new files count once git tracks them: say so before the size test does
                tracked = tracked_sizes(repo)
                after = sum(tracked.values()) + sum(
                    f.stat().st_size for f in target.iterdir()
                    if f.is_file() and str(f.relative_to(repo)) not in tracked) \
                    if target.is_relative_to(repo) else sum(tracked.values())
                entry["tracked_bytes_with_it"] = after
                if after > REPO_BUDGET:
                    print(f"warning: with {target} the tracked files come to {_mib(after)}, over the "
                          f"budget of {_mib(REPO_BUDGET)} (tests/test_repo_size.py): make room before "
                          "committing it", file=sys.stderr)
            except GpuError:
                pass
        done.append(entry)
    for other in sorted(p for p in source.iterdir() if p.is_file()):
        _copy(other, repo / RESULTS / other.name)
    return done


# --- the command line --------------------------------------------------------------------------

def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", default="cifar")
    p.add_argument("--dataset", default="cifar100")
    p.add_argument("--model", default="frost")
    p.add_argument("--backbone", default="resnet")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=None, help="default: the size's")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE")


def _spec(args) -> RunSpec:
    return RunSpec(args.size, args.dataset, args.model, args.backbone, args.seed, args.epochs,
                   tuple(args.set))


def _plan_from_args(args) -> tuple[Plan, dict[str, Path]]:
    ensure_packages(REPO / WHEEL_DIR, wheels=())
    run = _spec(args)
    source = Path(args.source) if args.source else REPO / "data" / args.dataset
    sources = {name: source / name for name in args.files}
    if missing := [str(p) for p in sources.values() if not p.is_file()]:
        raise GpuError(f"no data to send: {', '.join(missing)} missing (make data links data/{args.dataset})")
    wheels = sum(folder_bytes(REPO / WHEEL_DIR / w.file) or w.bytes for w in WHEELS)
    checkpoint_bytes, lean_bytes = checkpoint_estimate(run.config())
    plan = make_plan({n: p.stat().st_size for n, p in sources.items()}, run,
                     travelling=travelling_bytes(REPO), wheel_bytes=wheels, checkpoint_bytes=checkpoint_bytes,
                     lean_bytes=lean_bytes, tracked=sum(tracked_sizes(REPO).values()),
                     limit=int(args.limit_mib * MIB), margin=int(args.margin_mib * MIB),
                     part_bytes=int(args.part_mib * MIB) if args.part_mib else None, minutes=args.minutes,
                     images_per_s=args.images_per_s, benchmark=not args.no_benchmark)
    return plan, sources


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for verb, text in (("plan", "print the device calls (here)"),
                       ("pack", "cut the data set into the plan's parts (here)")):
        p = sub.add_parser(verb, help=text)
        _run_options(p)
        p.add_argument("--source", default=None, help="folder of the files (default data/DATASET)")
        p.add_argument("--files", nargs="+", default=["train.npz", "test.npz"])
        p.add_argument("--limit-mib", type=float, default=SEND_LIMIT / MIB)
        p.add_argument("--margin-mib", type=float, default=2.0, help="room kept for the tree to grow")
        p.add_argument("--part-mib", type=float, default=None, help="default: the room left")
        p.add_argument("--minutes", type=float, default=8.0, help="training budget of a call")
        p.add_argument("--images-per-s", type=float, default=None, help="for the training-minutes estimate")
        p.add_argument("--no-benchmark", action="store_true", help="no throughput benchmark in call 1")
    sub.add_parser("wheels", help="download the pinned wheels into .whl/ (here)")
    sub.add_parser("receive", help="check, keep, join and prepare the parts that arrived (there)")
    p = sub.add_parser("train", help="resume and train within a time budget, results under $OUT (there)")
    _run_options(p)
    p.add_argument("--minutes", type=float, default=8.0, help="stop before an epoch that would end later")
    p.add_argument("--max-epochs", type=int, default=None, help="at most this many epochs in this call")
    p.add_argument("--name", default=None,
                   help="GRID/LABEL (default: DATASET-SIZE-single/MODEL-BACKBONE-seedN)")
    p.add_argument("--out", default=os.environ.get("OUT"), help="default $OUT")
    p.add_argument("--cache", default=None, help="the local store (default outputs/cache)")
    p.add_argument("--data", default=None, help=f"the data root (default {DATA})")
    p.add_argument("--device", default=None, help="train.device (default: the config's, auto)")
    p.add_argument("--split-above-mib", type=float, default=CHECKPOINT_PART_BYTES / MIB)
    p = sub.add_parser("fetch", help="take a call's files back (here)")
    p.add_argument("--from", dest="source", required=True, help="the reply's files_at folder")
    p.add_argument("--cache", default=None, help="the local store (default outputs/cache)")
    p.add_argument("--commit", action="store_true", help="a finished run's lean export into outputs/runs/")
    p.add_argument("--runs", default=None, help="the committed runs' folder (default outputs/runs)")
    p.add_argument("--force", action="store_true", help="replace a newer checkpoint here")
    args = parser.parse_args(argv)
    try:
        if args.command in ("plan", "pack"):
            plan, sources = _plan_from_args(args)
            if args.command == "pack":
                pack(sources, args.dataset, plan.part_bytes, [c.parts for c in plan.calls if c.parts])
            print(describe(plan, _spec(args)))
        elif args.command == "wheels":
            for path in download_wheels():
                print(f"{path} ({_mib(path.stat().st_size)}, SHA-256 checked)")
        elif args.command == "receive":
            print(json.dumps(receive()))
        elif args.command == "train":
            if not args.out:
                raise GpuError("$OUT is not set (the device tool sets it): pass --out FOLDER")
            record = train(_spec(args), out=Path(args.out), minutes=args.minutes, max_epochs=args.max_epochs,
                           name=args.name, cache=Path(args.cache) if args.cache else None,
                           data=Path(args.data) if args.data else None, device=args.device,
                           split_above=int(args.split_above_mib * MIB))
            print(json.dumps(record))
        else:
            for entry in fetch(Path(args.source), cache=Path(args.cache) if args.cache else None,
                               runs_root=Path(args.runs) if args.runs else None, commit=args.commit,
                               force=args.force):
                print(json.dumps(entry))
    except (GpuError, parts.PartsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
