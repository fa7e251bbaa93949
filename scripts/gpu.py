"""Train a run on an offline GPU host with tight limits (docs/scaling.md, "The cifar size on an
offline GPU host"): the plan, the transport (wheels, the training split and the checkpoint in parts)
and verbs over the library. The host's limits are ``Host``'s fields and ``plan``'s options, never
constants. On the host the verbs run as ``python3 scripts/gpu.py ...`` from the staged checkout, put
first on ``sys.path`` (nothing is installed; the carried wheels go into .gpu/site with pip).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import namedtuple
from dataclasses import dataclass, replace
from pathlib import Path

STARTED = time.monotonic()  # the command's start on the host: the training deadline counts from here
REPO = Path(__file__).resolve().parent.parent
if sys.path[0] != str(REPO):  # this checkout's package, never another (nothing is installed on the host)
    sys.path.insert(0, str(REPO))
from frost_nb.paths import PARTIAL, PARTIAL_BUDGET, atomic_path  # noqa: E402  (standard library only)

_spec = importlib.util.spec_from_file_location("frost_parts", Path(__file__).resolve().parent / "parts.py")
parts = importlib.util.module_from_spec(_spec)  # scripts/parts.py (split, join, check), beside this file
_spec.loader.exec_module(parts)

MIB = 1 << 20
# relative to a checkout, here and on the host alike (ignored: /.gpu/ and .whl/ in .gitignore)
GPU, WHEEL_DIR = ".gpu", ".whl"
MANIFESTS, PARTS, STORE, DATA, SEND, SITE, STAGE, RUN = (f"{GPU}/{n}" for n in (
    "manifests", "parts", "store", "data", "send", "site", "checkout", "run"))
SHIPPED = ("frost_nb/", "scripts/gpu.py", "scripts/parts.py")  # what the host reads of the checkout
PACKED = "train.webp.npz"  # the training split as it travels (data.prepare.write_sheets)
CALLS = "gpu_calls.json"  # a run's record of every command: hardware, images/s, peak memory
RUN_OPTIONS = {"size": "cifar", "dataset": "cifar100", "model": "frost", "backbone": "resnet", "seed": 0,
               "epochs": None}  # the run, as python -m frost_nb train's options (and --set)
Wheel = namedtuple("Wheel", "requirement module file bytes sha256")  # module: what its absence looks like
# The host's python3 (3.12, x86-64) has torch 2.11, numpy, pandas, tqdm, Pillow and matplotlib, not
# datasketches (its one requirement, numpy, is there); pip download gives this file (checked 2026-11-25).
WHEELS = (Wheel("datasketches==5.2.0", "datasketches",
                "datasketches-5.2.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                748_356, "d9aa0c1dad8d00c242718c5dbb9f8cf1876ea099ee55c1c0634a8beecb589164"),)
PIP_HOST = ("--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", *(a for p in (
    "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
    "manylinux1_x86_64") for a in ("--platform", p)))  # pip download: wheels for the host


@dataclass(frozen=True)
class Host:
    """The limits of an offline GPU host (defaults: one H100 allocation, docs/scaling.md)."""
    gpu_s: float = 15 * 60  # GPU time of one allocation: start-up, idle waits, every command
    startup_s: float = 3 * 60  # start-up of a bare host (1-3 minutes: the worst counted)
    command_s: float = 10 * 60  # one command at most
    upload_bytes: int = 64 * MIB  # one command's upload: the staged checkout and what is named
    upload_s: float = 30.0  # transfer and unpacking of one full upload (an estimate)
    return_files: int = 8
    return_file_bytes: int = 16 * MIB
    return_depth: int = 2  # $OUT/a/b/file comes back, $OUT/a/b/c/file does not
    idle_s: float = 30.0  # idle this long and the host goes back; the next one starts bare
    max_uploads: int = 3  # data uploads per allocation, issued back to back (each within idle_s)


@dataclass(frozen=True)
class Speed:
    """The rates a plan counts with (``images_per_s``: pass benchmarks/train_throughput.py's measure)."""
    images_per_s: float = 3500.0  # cifar size on one H100, estimated (no GPU has run it)
    measured: bool = False
    warmup_s: float = 90.0  # torch.compile's warm-up on a bare host (an estimate)
    prepare_s: float = 30.0  # joining and decoding the training split on the host (an estimate)
    stop_s: float = 75.0  # training stops this long before the command's limit (60-90 s)


class GpuError(RuntimeError):
    """A step cannot go on; the message says what is missing and which step makes it."""


_mib = lambda n: f"{n / MIB:.1f} MiB"


def _copy(source: Path, target: Path, link: bool = False) -> None:
    """``source`` at ``target`` (atomically), or ``link``: the same bytes (the parts are large)."""
    try:
        if link:
            return os.link(source, target)
    except OSError:
        pass
    with atomic_path(target) as tmp:
        shutil.copyfile(source, tmp)


def run_of(args) -> tuple[str, object, str]:
    """The run that ``args`` name (``RUN_OPTIONS``, ``--set``): ``train``'s options, config, name."""
    from frost_nb.__main__ import run_config
    from frost_nb.runs import default_name

    config = run_config(argparse.Namespace(**vars(args), root=None))
    options = [f"--{k} {getattr(args, k)}" for k in RUN_OPTIONS if getattr(args, k) is not None]
    return " ".join(options + [f"--set {v}" for v in args.set]), config, default_name(config)


def travelling_files(repo: Path = REPO) -> list[str]:
    """The files every upload from the git checkout ``repo`` sends: those git lists and does not ignore."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        raise GpuError(f"git cannot list {repo}'s files ({err}): what travels is measured with git "
                       "ls-files") from err
    return [n for n in out.decode().split("\0") if n and ((repo / n).is_file() or (repo / n).is_symlink())]


def travelling_bytes(repo: Path = REPO) -> int:
    return sum((repo / n).lstat().st_size for n in travelling_files(repo))


def stage(name: str | None, repo: Path = REPO) -> Path:
    """``repo/STAGE`` afresh, the git checkout uploads are sent from: ``SHIPPED``, the run ``name``'s
    unfinished checkpoint if any, and as ignored paths (named for each upload) manifests, parts, wheels."""
    target = repo / STAGE
    shutil.rmtree(target, ignore_errors=True)
    for rel in travelling_files(repo):
        if rel.startswith(SHIPPED + ((f"{PARTIAL}/{name}/",) if name else ())) and "__pycache__" not in rel:
            _copy(repo / rel, target / rel)
    for rel in (MANIFESTS, PARTS, WHEEL_DIR):
        if (repo / rel).is_dir():  # the same bytes: hard links where the system allows
            shutil.copytree(repo / rel, target / rel, copy_function=lambda a, b: _copy(Path(a), Path(b), 1))
    (target / ".gitignore").write_text(f"/{GPU}/\n/{WHEEL_DIR}/\n__pycache__/\n")
    subprocess.run(["git", "init", "-q", str(target)], check=True)  # a host sends untracked files only
    return target


Upload = namedtuple("Upload", "send command data_bytes")  # a command, the paths it sends beside the checkout
Allocation = namedtuple("Allocation", "epochs seconds")  # (first, last) epoch; seconds of start-up, ...
# make_plan's: its arguments, the returned files the checkpoint comes back in, the uploads and allocations
Plan = namedtuple("Plan", "host speed travelling checkpoint_bytes wheel_bytes data_bytes train_images pieces "
                          "uploads allocations epoch_s")


def make_plan(options: str, host: Host, speed: Speed, *, data_bytes: int, travelling: int, wheel_bytes: int,
              checkpoint_bytes: int, epochs: int, train_images: int, val_images: int,
              manifest_bytes: int = 8192, margin: int = MIB) -> Plan:
    """The uploads that carry the packed training split (``data_bytes``) beside the staged checkout
    (``travelling`` bytes; the unfinished checkpoint on top from the second allocation on), the last
    running ``train`` with the run's ``options``, and the allocations that train ``epochs`` at
    ``speed``; GpuError when the host cannot take them or the checkpoint (back, or in outputs/partial/)."""
    pieces = math.ceil(checkpoint_bytes / host.return_file_bytes)
    back = 2 * (pieces + 1) + 2  # two epochs' parts and manifests at once, config.json, gpu_calls.json
    if back > host.return_files:
        raise GpuError(f"the run's checkpoint ({_mib(checkpoint_bytes)}) comes back in {pieces} files of at "
                       f"most {_mib(host.return_file_bytes)}: with the epoch before beside it that is {back} "
                       f"files, over the {host.return_files} that come back")
    room = host.upload_bytes - travelling - checkpoint_bytes - wheel_bytes - manifest_bytes - margin
    n = math.ceil(data_bytes / room) if room > 0 else math.inf
    if n > host.max_uploads:
        raise GpuError(f"the training split ({_mib(data_bytes)}) needs {n} uploads of {_mib(max(room, 0))} "
                       f"beside the staged checkout ({_mib(travelling)}) and the checkpoint "
                       f"({_mib(checkpoint_bytes)}); the host takes {host.max_uploads} back to back")
    part = math.ceil(data_bytes / n / 1024) * 1024
    train = (f"python3 -u scripts/gpu.py train {options} --limit-s {host.command_s:g} "
             f"--stop-s {speed.stop_s:g} --return-bytes {host.return_file_bytes}")
    uploads = [Upload([MANIFESTS, WHEEL_DIR, f"{PARTS}/up{i:02d}"], "python3 scripts/gpu.py receive",
                      min(part, data_bytes - (i - 1) * part)) for i in range(1, n + 1)]
    uploads[-1] = uploads[-1]._replace(command=train)
    epoch_s = (train_images + val_images / 3) / speed.images_per_s  # the held-out pass at a third
    fixed = {"start-up": host.startup_s, "uploads": n * host.upload_s, "prepare": speed.prepare_s,
             "compile warm-up": speed.warmup_s}
    budget = min(host.command_s - speed.stop_s - speed.prepare_s - speed.warmup_s,
                 host.gpu_s - sum(fixed.values()))
    if (per := int(budget // epoch_s) if epoch_s > 0 else 0) < 1:
        raise GpuError(f"no epoch fits an allocation: {sum(fixed.values()) / 60:.1f} minutes go to "
                       f"start-up, {n} uploads, preparing and compiling, and one epoch takes "
                       f"{epoch_s / 60:.1f} at {speed.images_per_s:g} images/s")
    allocations = [Allocation((a, b), {**fixed, "training": (b - a + 1) * epoch_s})
                   for a in range(1, epochs + 1, per) for b in [min(epochs, a + per - 1)]]
    if len(allocations) > 1 and checkpoint_bytes > PARTIAL_BUDGET:
        raise GpuError(f"the run takes {len(allocations)} allocations, and its unfinished checkpoint "
                       f"({_mib(checkpoint_bytes)}) is over the {_mib(PARTIAL_BUDGET)} that {PARTIAL}/ may "
                       "hold between them: it must finish in one (a measured, faster --images-per-s)")
    return Plan(host, speed, travelling, checkpoint_bytes, wheel_bytes, data_bytes, train_images, pieces,
                uploads, allocations, epoch_s)


def describe(plan: Plan, name: str) -> str:
    """The plan for the run ``name``, for a person to carry out."""
    h, s = plan.host, plan.speed
    rate = "measured" if s.measured else "an estimate from the code, not measured"
    lines = [f"host: {h.gpu_s / 60:g} min of GPU time per allocation (start-up {h.startup_s / 60:g} "
             f"counted), {h.command_s / 60:g} min per command, {_mib(h.upload_bytes)} per upload, "
             f"{h.return_files} files of {_mib(h.return_file_bytes)} back, bare after {h.idle_s:g} s idle",
             f"sent from {STAGE}/ with every command: the library and scripts, {_mib(plan.travelling)}; "
             f"the unfinished checkpoint {_mib(plan.checkpoint_bytes)} on top from the second allocation "
             f"(back after every epoch in {plan.pieces} file(s)); wheels {_mib(plan.wheel_bytes)}",
             f"training split, WebP lossless: {_mib(plan.data_bytes)} in {len(plan.uploads)} uploads "
             "(the test split stays here and is evaluated on the CPU)",
             f"training at {s.images_per_s:g} images/s ({rate}): {plan.epoch_s:.1f} s an epoch of "
             f"{plan.train_images:,} images and the held-out pass", ""]
    for k, a in enumerate(plan.allocations, 1):
        lines.append(f"allocation {k} of {len(plan.allocations)}: epochs {a.epochs[0]}-{a.epochs[1]}, "
                     f"{sum(a.seconds.values()) / 60:.1f} of {h.gpu_s / 60:g} minutes ("
                     + ", ".join(f"{part} {v / 60:.1f}" for part, v in a.seconds.items()) + ")")
        if k > 1:
            lines.append(f"  the host starts bare: the same uploads again, from {STAGE}/ as fetch staged it "
                         f"(it holds {PARTIAL}/{name}/; commit that folder here too)")
        lines += [f"  upload {i}: send {' '.join(u.send)} ({_mib(u.data_bytes)} of data); limit "
                  f"{h.command_s:g} s; run: {u.command}" for i, u in enumerate(plan.uploads, 1)]
        lines.append("  then here: python scripts/gpu.py fetch --from <the returned files>"
                     + (" --commit" if k == len(plan.allocations) else ""))
    lines.append(f"issue the uploads back to back from {STAGE}/: the host goes back after "
                 f"{h.idle_s:g} s idle, and a new one has none of the parts")
    return "\n".join(lines)


def _pip(*args: str) -> None:
    try:
        subprocess.run([sys.executable, "-m", "pip", *args], check=True)
    except (OSError, subprocess.CalledProcessError) as err:
        raise GpuError(f"pip {args[0]} failed ({err}): its output above says why") from err


def check_wheels(folder: Path, wheels=WHEELS, download: bool = False) -> list[Path]:
    """The pinned wheels in ``folder``, SHA-256 checked; ``download``: pip gets those missing first."""
    for w in wheels:
        if download and not ((folder / w.file).is_file() and parts._sha256(folder / w.file) == w.sha256):
            _pip("download", "--no-deps", *PIP_HOST, "-d", str(folder), w.requirement)
        if not (folder / w.file).is_file():
            raise GpuError(f"{folder / w.file} is missing: run python scripts/gpu.py wheels here and send "
                           f"{WHEEL_DIR}")
        if parts._sha256(folder / w.file) != w.sha256:
            raise GpuError(f"{folder / w.file} is not the pinned {w.requirement} (SHA-256 differs): delete "
                           "it and run python scripts/gpu.py wheels")
    return [folder / w.file for w in wheels]


def ensure_packages(repo: Path = REPO, site: Path | None = None, wheels=WHEELS) -> list[str]:
    """The pinned wheels whose module is missing, installed into ``site`` (on ``sys.path``)."""
    site = str(Path(site) if site is not None else repo / SITE)
    sys.path[:0] = [] if site in sys.path else [site]  # pip makes it when it installs there
    importlib.invalidate_caches()
    if not (missing := [w for w in wheels if importlib.util.find_spec(w.module) is None]):
        return []
    _pip("install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade",
         "--target", site, *map(str, check_wheels(repo / WHEEL_DIR, missing)))
    importlib.invalidate_caches()
    if still := [w.requirement for w in missing if importlib.util.find_spec(w.module) is None]:
        raise GpuError(f"{', '.join(still)} installed into {site} but cannot be imported")
    return [w.requirement for w in missing]


def pack(dataset: str, uploads: int, *, repo: Path = REPO, data_root: Path | None = None) -> Path:
    """The prepared training split of ``dataset`` as WebP lossless sheets (kept while its source is
    unchanged), cut into ``uploads`` parts, one per ``PARTS``/upNN/, the manifests in ``MANIFESTS``."""
    from frost_nb.data.prepare import checked_data_root, prepare, prepared_dir, read_prepared, write_sheets

    root = checked_data_root(data_root)
    prepare(dataset, root, download=False)
    source, packed = prepared_dir(dataset, root) / "train.npz", repo / SEND / dataset / PACKED
    stamp, key = packed.with_suffix(".source"), f"{source.stat().st_size} {source.stat().st_mtime_ns}"
    if not (packed.is_file() and stamp.is_file() and stamp.read_text() == key):
        write_sheets(read_prepared(dataset, root, "train"), packed)
        stamp.write_text(key)
    for old in (repo / PARTS, repo / MANIFESTS):
        shutil.rmtree(old, ignore_errors=True)
    cut = repo / PARTS / "all"
    manifest = parts.split(packed, cut, math.ceil(packed.stat().st_size / uploads / 1024) * 1024 / MIB)
    _copy(manifest, repo / MANIFESTS / manifest.name)
    (repo / MANIFESTS / "dataset.json").write_text(json.dumps({"dataset": dataset, "file": PACKED}) + "\n")
    if len(names := sorted(p.name for p in cut.iterdir() if p != manifest)) != uploads:
        raise GpuError(f"{packed} cut into {len(names)} parts, not {uploads}")
    for i, name in enumerate(names, 1):
        (up := repo / PARTS / f"up{i:02d}").mkdir(parents=True)
        os.replace(cut / name, up / name)
    shutil.rmtree(cut)
    return packed


def receive(repo: Path = REPO) -> dict:
    """On the host: keep the parts that arrived in ``STORE``; once all are there and whole, join and
    decode them into the prepared set under ``DATA`` (the test split stays behind: an empty part)."""
    from frost_nb.data.prepare import prepared_dir, read_sheets, write_prepared

    try:
        spec = json.loads((repo / MANIFESTS / "dataset.json").read_text())
        manifest = json.loads((repo / MANIFESTS / (kept := f"{spec['file']}.manifest.json")).read_text())
    except (OSError, ValueError, KeyError) as err:
        raise GpuError(f"{repo / MANIFESTS} lacks its manifests ({err}): send {MANIFESTS} (python "
                       "scripts/gpu.py pack writes it)") from err
    store, done = repo / STORE, repo / DATA / "prepared" / spec["dataset"] / ".sha256"
    status = {"dataset": spec["dataset"], "missing": [], "damaged": [], "prepared": True}
    if done.is_file() and done.read_text().strip() == manifest["sha256"]:
        return status
    _copy(repo / MANIFESTS / kept, store / kept)
    for arrived in (repo / PARTS).glob(f"*/{spec['file']}.part*"):
        os.replace(arrived, store / arrived.name)
    if missing := parts.missing(store / kept):  # absent, or damaged (a part sent again replaces it)
        return {**status, "missing": missing, "prepared": False,
                "damaged": [m for m in missing if (store / m).is_file()]}
    with tempfile.TemporaryDirectory(dir=store) as tmp:
        train = read_sheets(parts.join(store / kept, tmp))
    test = train._replace(x=train.x[:0], y=train.y[:0], source="not sent: evaluated off the host",
                          coarse_y=None if train.coarse_y is None else train.coarse_y[:0])
    write_prepared(prepared_dir(spec["dataset"], repo / DATA), {"test": test, "train": train})
    done.write_text(manifest["sha256"] + "\n")
    for part in manifest["parts"]:
        (store / part["file"]).unlink(missing_ok=True)
    return status


def send_back(checkpoint: Path, folder: Path, epoch: int, piece_bytes: int) -> Path:
    """``checkpoint`` (after ``epoch``) in the return folder ``folder`` in parts of ``piece_bytes`` at
    most, the manifest written last, then the epoch before's removed: a kill leaves one whole."""
    tagged = checkpoint.with_name(f"e{epoch:03d}.{checkpoint.name}")
    _copy(checkpoint, tagged, link=True)
    try:
        manifest = parts.split(tagged, folder, piece_bytes / MIB)
    finally:
        tagged.unlink()
    for old in folder.glob(f"e*.{checkpoint.name}.*"):
        if not old.name.startswith(f"{tagged.name}."):
            old.unlink()
    return manifest


def returned_checkpoint(folder: Path, into: Path) -> tuple[Path, int]:
    """The newest whole checkpoint ``send_back`` left in ``folder``, joined into ``into``; its parts."""
    for manifest in sorted(folder.glob("e*.manifest.json"), reverse=True):
        try:
            return parts.join(manifest, into), len(json.loads(manifest.read_text())["parts"])
        except (parts.PartsError, ValueError):  # cut off by a kill: the epoch before is whole
            continue
    raise GpuError(f"{folder} holds no whole checkpoint: the command ended before its first epoch")


def train(config, name: str, *, out: Path, limit_s: float, stop_s: float, piece_bytes: int = 16 * MIB,
          repo: Path = REPO, started: float | None = None) -> dict:
    """On the host: receive, resume the run ``name`` from outputs/partial/ if there, and train until
    ``stop_s`` before ``limit_s`` from ``started`` (this process's start); after every epoch its
    checkpoint (``send_back``) and ``CALLS`` (this command's record added) are in ``out``."""
    deadline = (STARTED if started is None else started) + limit_s - stop_s
    os.environ["FROST_DATA"], os.environ["FROST_CACHE"] = str(repo / DATA), str(repo / GPU / "cache")
    if not (status := receive(repo))["prepared"]:
        raise GpuError(f"parts missing on this host: {', '.join(status['missing'])} (damaged: "
                       f"{status['damaged'] or 'none'}); a host that started bare needs every upload again")
    import torch

    from frost_nb.runs import CONFIG_FILE, MODEL_FILE, hardware, load_teacher, write_json
    from frost_nb.training import train as fit

    folder, partial, local = Path(out) / name, repo / PARTIAL / name, repo / RUN / name / MODEL_FILE
    calls = json.loads((partial / CALLS).read_text()) if (partial / CALLS).is_file() else []
    if (partial / MODEL_FILE).is_file():  # the trainer resumes it (and refuses another run's)
        _copy(partial / MODEL_FILE, local)
    write_json(folder / CONFIG_FILE, config.to_dict())
    record = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "torch": torch.__version__, "run": name,
              "epochs": config.train.epochs}

    def returned(t) -> None:  # Trainer.fit's on_epoch (the first epoch compiles: no images/s)
        first = record.setdefault("resumed_from_epoch", t.epoch - 1)
        images, dev = t.steps_per_epoch * config.train.batch_size, t.device
        record.update(hardware=hardware(dev), epochs_after=t.epoch, last_epoch_s=round(t.epoch_seconds, 2),
                      images_per_s=round(images / t.epoch_seconds, 1) if t.epoch > first + 1 else None,
                      peak_memory_gib=round(torch.cuda.max_memory_allocated(dev) / 2**30, 2)
                      if dev.type == "cuda" else None, finished=t.epoch >= config.train.epochs)
        send_back(local, folder, t.epoch, piece_bytes)
        write_json(folder / CALLS, [*calls, record])

    print(f"{name}: {deadline - time.monotonic():.0f} s to train", flush=True)
    fit(config, local, progress=False, deadline=deadline, on_epoch=returned,  # the test split: here, by fetch
        teacher=load_teacher(config) if config.loss.teacher is not None else None)  # a student's
    return record


def fetch(source: Path, *, repo: Path = REPO, cache: Path | None = None, runs_root: Path | None = None,
          commit: bool = False, force: bool = False) -> list[dict]:
    """One command's returned files (``source``): an unfinished run into outputs/partial/ (not over a
    newer one unless ``force``), staged; a finished one stored in the run cache (``runs.store_run``:
    its test split evaluated here), with ``commit`` in bf16 (evaluated once) and exported lean."""
    from frost_nb.checkpoint import lean_state, load_checkpoint, progress_of, stored_config
    from frost_nb.paths import cache_dir
    from frost_nb.runs import CONFIG_FILE, MODEL_FILE, export_run, identity_key, read_config, store_run

    def state_of(path: Path, config, where: Path) -> dict:
        if identity_key(stored_config(path, state := load_checkpoint(path))) != identity_key(config):
            raise GpuError(f"{where} holds a checkpoint of another run: move it away first")
        return state

    done = []
    for config_file in sorted(Path(source).glob(f"*/*/{CONFIG_FILE}")):
        came, config = config_file.parent, read_config(config_file)
        name, record = f"{came.parent.name}/{came.name}", came / CALLS
        partial, folder = repo / PARTIAL / name, (Path(cache) if cache is not None else cache_dir()) / name
        calls = json.loads(record.read_text()) if record.is_file() else []
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint, pieces = returned_checkpoint(came, Path(tmp))
            now = progress_of(state := state_of(checkpoint, config, came))
            if (partial / MODEL_FILE).is_file() and not force:
                if (here := progress_of(state_of(partial / MODEL_FILE, config, partial))).step > now.step:
                    raise GpuError(f"{partial} is at step {here.step} (epoch {here.epoch}), the returned "
                                   f"checkpoint at step {now.step}: keeping the newer (--force replaces it)")
            entry = {"run": name, "epoch": now.epoch, "epochs": config.train.epochs, "finished": now.complete,
                     "parts": pieces}
            if not now.complete:
                for path, kept in ((checkpoint, MODEL_FILE), (config_file, CONFIG_FILE), (record, CALLS)):
                    _copy(path, partial / kept) if path.is_file() else None
                stage(name, repo)
                done.append({**entry, "kept": str(partial.relative_to(repo))})
                continue
            hardware = next((c["hardware"] for c in reversed(calls) if c.get("hardware")), None)
            metrics = store_run(folder, {"hardware": hardware}, config_file=config_file, files={CALLS: calls},
                                state=lean_state(state, "bfloat16") if commit else state)
        entry |= {"stored": str(folder), "test_accuracy": metrics["test_accuracy"]}
        if commit:
            entry["committed"] = str(export_run(folder, runs_root, weights="bfloat16"))
        shutil.rmtree(partial, ignore_errors=True)
        done.append(entry)
    return done


VERBS = {"wheels": "the pinned wheels the host lacks (datasketches) into .whl/, SHA-256 checked (here)",
         "pack": "the training split as WebP lossless sheets (exact pixels), a part per upload; stage (here)",
         "stage": f"{STAGE}/, the checkout the uploads are sent from: library, scripts, partial run (here)",
         "plan": "what travels, each upload's command, each allocation's minutes, or a refusal (here)",
         "receive": "check the parts that arrived and keep them aside (host)",
         "train": "receive, resume, train until shortly before the limit; each epoch's checkpoint in $OUT "
                  "(host)",
         "fetch": "a returned checkpoint: unfinished into outputs/partial/, staged; finished, stored (here)",
         "rehearse": "tests/test_gpu_path.py's rehearsal of every printed command on a stand-in host (here)"}
# plan's and pack's limits: (option, Host or Speed field, the field's units in one of the option's, help)
LIMITS = (("--gpu-min", "gpu_s", 60, "GPU time of one allocation"), ("--startup-min", "startup_s", 60,
          "start-up of a bare host"), ("--command-min", "command_s", 60, "one command at most"),
          ("--upload-mib", "upload_bytes", MIB, "one command's upload"), ("--upload-s", "upload_s", 1,
          "seconds one upload takes"), ("--return-files", "return_files", 1, "files that come back"),
          ("--return-mib", "return_file_bytes", MIB, "one returned file"), ("--idle-s", "idle_s", 1,
          "idle time before the host goes back"), ("--max-uploads", "max_uploads", 1, "data uploads per "
          "allocation"), ("--warmup-s", "warmup_s", 1, "compile warm-up on a bare host"),
          ("--stop-s", "stop_s", 1, "stop training this long before the limit"))


def _commands() -> argparse.ArgumentParser:
    from frost_nb.config import SIZES

    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = {verb: sub.add_parser(verb, help=text) for verb, text in VERBS.items()}
    for verb in ("pack", "stage", "plan", "train"):
        for option, default in RUN_OPTIONS.items():
            p[verb].add_argument(f"--{option}", default=default, choices=SIZES if option == "size" else None,
                                 type=str if isinstance(default, str) else int)
        p[verb].add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE")
    for verb in ("pack", "plan"):
        for option, name, unit, text in LIMITS:
            default = getattr(Host() if hasattr(Host, name) else Speed(), name) / unit
            p[verb].add_argument(option, type=float, default=default, help=text)
        p[verb].add_argument("--images-per-s", type=float, default=None, help="measured training rate "
                             f"(default: the estimate {Speed().images_per_s:g}, not measured)")
    p["train"].add_argument("--limit-s", type=float, default=Host().command_s, help="the command's limit")
    p["train"].add_argument("--stop-s", type=float, default=Speed().stop_s, help="stop this long before it")
    p["train"].add_argument("--return-bytes", type=int, default=Host().return_file_bytes, help="a file back")
    p["train"].add_argument("--out", default=os.environ.get("OUT"), help="the return folder (default $OUT)")
    p["train"].add_argument("--device", default=None, help="train.device (default: the config's)")
    p["fetch"].add_argument("--from", dest="source", required=True, help="the folder of the returned files")
    p["fetch"].add_argument("--commit", action="store_true", help="a finished run in bf16, exported lean")
    p["fetch"].add_argument("--force", action="store_true", help="replace a newer one in outputs/partial/")
    p["rehearse"].add_argument("--work", default=None, help="its folder (pytest's --basetemp)")
    return parser


def _plan(args, options: str, config, name: str) -> Plan:
    """``args``' plan for the run ``name``: host, speed, packed split (``pack`` packs), staged checkout."""
    from frost_nb.cost import checkpoint_bytes
    from frost_nb.training import load_split

    given = lambda cls: cls(**{k: type(getattr(cls(), k))(getattr(args, opt[2:].replace("-", "_")) * unit)
                               for opt, k, unit, _ in LIMITS if hasattr(cls, k)})
    speed = replace(given(Speed), images_per_s=args.images_per_s or Speed().images_per_s,
                    measured=bool(args.images_per_s))
    packed, staged = REPO / SEND / args.dataset / PACKED, REPO / STAGE
    if args.command == "pack":
        packed = pack(args.dataset, int(args.max_uploads))
        stage(name)
    for path, verb in ((packed, "pack"), (staged, "pack (or stage)")):
        if not path.exists():
            raise GpuError(f"{path} is missing: run python scripts/gpu.py {verb} first")
    train_images, partial = len(load_split(config, "train")), staged / PARTIAL / name / "model.pt"
    travelling = travelling_bytes(staged) - (partial.stat().st_size if partial.is_file() else 0)
    return make_plan(options, given(Host), speed, data_bytes=packed.stat().st_size, travelling=travelling,
                     wheel_bytes=sum(w.bytes for w in WHEELS), epochs=config.train.epochs,
                     checkpoint_bytes=checkpoint_bytes(config, train_images), train_images=train_images,
                     val_images=len(load_split(config, "val")) if config.data.val_fraction else 0)


def _run(args) -> int:
    options, config, name = run_of(args) if hasattr(args, "size") else (None,) * 3
    if args.command in ("plan", "pack"):
        plan = _plan(args, options, config, name)
        if args.command == "pack" and len(plan.uploads) != args.max_uploads:
            pack(args.dataset, len(plan.uploads))
            stage(name)
        print(describe(plan, name))
    elif args.command == "stage":
        staged = stage(name)
        print(f"{staged}: {len(travelling_files(staged))} files, {_mib(travelling_bytes(staged))}")
    elif args.command == "wheels":
        for path in check_wheels(REPO / WHEEL_DIR, download=True):
            print(f"{path.relative_to(REPO)} ({_mib(path.stat().st_size)}, SHA-256 checked)")
    elif args.command == "receive":
        print(json.dumps(receive()), flush=True)
    elif args.command == "train":
        if not args.out:
            raise GpuError("$OUT is not set: pass --out FOLDER, the folder whose files come back")
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)  # the trainer's
        config = config.replace(**{"train.device": args.device}) if args.device else config
        print(json.dumps(train(config, name, out=Path(args.out), limit_s=args.limit_s, stop_s=args.stop_s,
                               piece_bytes=args.return_bytes)), flush=True)
    elif args.command == "fetch":
        for entry in fetch(Path(args.source), commit=args.commit, force=args.force):
            print(json.dumps(entry))
    else:
        work = ["--basetemp", args.work] if args.work else []
        return subprocess.call([sys.executable, "-m", "pytest", "-q", "-k", "rehearsal",
                                "tests/test_gpu_path.py", *work], cwd=REPO)
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command line; a step that cannot go on says why in one line, exit status 2."""
    args, errors = _commands().parse_args(argv), (GpuError, parts.PartsError)
    try:  # on the host, the carried wheels before anything imports them
        ensure_packages(REPO, wheels=WHEELS if args.command in ("receive", "train") else ())
        from frost_nb import checkpoint, config, paths, training
        from frost_nb.data import datasets

        errors += (checkpoint.CheckpointError, config.ConfigError, datasets.DataError, paths.DamagedInput,
                   paths.OutputError, training.TrainingError)
        return _run(args)
    except errors as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
