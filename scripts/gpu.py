"""Train a run on an offline GPU host with tight limits, and rehearse that path on the CPU
(docs/scaling.md, "The cifar size on an offline GPU host").

This script carries data and calls the library (which trains, checkpoints, exports and writes
prepared data). The host's limits are the fields of ``Host`` and options of ``plan``, never
constants: GPU time per allocation (start-up, idle waits and every command counted), one command's
time, the bytes one command uploads (a copy of the checkout it is sent from, plus paths named for
it), the files that come back from its return folder (``$OUT``), the idle time before it goes back.

  here  wheels    the pinned wheels the host lacks (datasketches), into .whl/
  here  pack      the training split as WebP lossless sheets (exact pixels, hash-checked), cut into
                  one part per upload (.gpu/parts/upNN/) with manifests; then stage
  here  stage     .gpu/checkout/, the checkout the uploads are sent from (a git repository of its
                  own): the library, this script, parts.py and the run's unfinished checkpoint;
                  committed runs, notebooks and figures stay behind
  here  plan      what travels, each upload's command, each allocation's minutes (or a refusal)
  host  receive   check the parts that arrived and keep them aside
  host  train     receive, decode, resume the run (outputs/partial/), train until shortly before the
                  command's limit; after every epoch its checkpoint is in $OUT (in parts of at most
                  one returned file), so a killed command returns its last
  here  fetch     an unfinished checkpoint into outputs/partial/ (commit it), staged again; a finished
                  run evaluated on the test split here (it never travels), into the run cache, and
                  exported lean (bf16) into outputs/runs/ with --commit
  here  rehearse  every printed command at smoke size against a stand-in host with the same limits,
                  killed mid-training and resumed on a bare host

On the host the commands run as ``python3 scripts/gpu.py ...`` from the staged checkout, which is
put first on ``sys.path`` (nothing is installed; the carried wheels go into .gpu/site with pip).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

STARTED = time.monotonic()  # the command's start on the host: the training deadline counts from here
REPO = Path(__file__).resolve().parent.parent
if sys.path[0] != str(REPO):  # this checkout's package, never another (nothing is installed on the host)
    sys.path.insert(0, str(REPO))
from frost_nb.paths import PARTIAL, PARTIAL_BUDGET, atomic_path  # noqa: E402  (standard library only)

MIB = 1 << 20
OUT_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
# relative to a checkout, here and on the host alike (ignored: /.gpu/ and .whl/ in .gitignore)
GPU, WHEEL_DIR = ".gpu", ".whl"
MANIFESTS, PARTS, STORE, DATA, SEND, SITE, STAGE, RUN = (f"{GPU}/{n}" for n in (
    "manifests", "parts", "store", "data", "send", "site", "checkout", "run"))
SHIPPED = ("frost_nb/", "scripts/gpu.py", "scripts/parts.py")  # what the host reads of the checkout
PACKED = "train.webp.npz"  # the training split as it travels
SHEET = 1000  # images per WebP sheet (100 x 10 images of 32 px; WebP allows 16,383 px a side)


@dataclass(frozen=True)
class Host:
    """The limits of an offline GPU host (defaults: one H100 allocation as described in
    docs/scaling.md); every step takes them as arguments."""

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
    """The rates a plan counts with. ``images_per_s`` is an estimate from the code until a GPU
    measures it (then pass the measurement: ``benchmarks/train_throughput.py``)."""

    images_per_s: float = 3500.0  # cifar size on one H100, estimated (no GPU has run it)
    measured: bool = False
    warmup_s: float = 90.0  # torch.compile's warm-up on a bare host (an estimate)
    prepare_s: float = 30.0  # joining and decoding the training split on the host (an estimate)
    stop_s: float = 75.0  # training stops this long before the command's limit (60-90 s)


class GpuError(RuntimeError):
    """A step cannot go on; the message says what is missing and which step makes it."""


def _parts_module():
    """scripts/parts.py (split, join, check), loaded by path: it sits beside this file."""
    spec = importlib.util.spec_from_file_location("frost_parts", Path(__file__).resolve().parent / "parts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


parts = _parts_module()


def _mib(n: float) -> str:
    return f"{n / MIB:.1f} MiB"


def _copy(source: Path, target: Path) -> None:
    with atomic_path(target) as tmp:
        shutil.copyfile(source, tmp)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)  # the parts are large: the same bytes, not a second copy
    except OSError:
        shutil.copy2(source, target)


# --- what travels ------------------------------------------------------------------------------

IGNORED_TOP = (GPU, WHEEL_DIR, ".git", ".venv")  # never travel uninvited (a copy without git)


def travelling_files(repo: Path = REPO) -> list[str]:
    """The files every upload from ``repo`` sends: tracked files and untracked ones git does not
    ignore (a folder that is no git checkout: every file outside ``IGNORED_TOP`` and caches)."""
    if (repo / ".git").exists():
        try:
            out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others",
                                  "--exclude-standard"], capture_output=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError) as err:
            raise GpuError(f"git cannot list {repo}'s files ({err}): what travels is measured with "
                           "git ls-files") from err
        names = [p for p in out.decode().split("\0") if p]
        return [n for n in names if (repo / n).is_file() or (repo / n).is_symlink()]
    return sorted(str(p.relative_to(repo)) for p in repo.rglob("*")
                  if (p.is_file() or p.is_symlink()) and p.relative_to(repo).parts[0] not in IGNORED_TOP
                  and "__pycache__" not in p.parts)


def travelling_bytes(repo: Path = REPO) -> int:
    return sum((repo / n).lstat().st_size for n in travelling_files(repo))


def folder_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def stage(name: str | None, repo: Path = REPO) -> Path:
    """The checkout the uploads are sent from, ``repo/STAGE``, made afresh: a git repository of its
    own holding what the host reads (``SHIPPED``) and, when the run ``name`` (``<grid>/<label>``)
    has an unfinished checkpoint in outputs/partial/, that folder; the manifests, parts and wheels
    sit in it as ignored paths, named for each upload. Committed runs, notebooks and figures stay
    behind, so what travels does not grow with what is committed."""
    target = repo / STAGE
    shutil.rmtree(target, ignore_errors=True)
    keep = SHIPPED + ((f"{PARTIAL}/{name}/",) if name else ())
    for rel in travelling_files(repo):
        if rel.startswith(keep) and "__pycache__" not in rel:
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / rel, target / rel)
    for rel in (MANIFESTS, PARTS, WHEEL_DIR):
        if (repo / rel).is_dir():
            shutil.copytree(repo / rel, target / rel, copy_function=_link_or_copy)
    (target / ".gitignore").write_text(f"/{GPU}/\n/{WHEEL_DIR}/\n__pycache__/\n")
    if shutil.which("git"):  # a host that copies a checkout sends its untracked files, not its ignored
        subprocess.run(["git", "init", "-q", str(target)], check=True)
    return target


# --- the data: WebP lossless sheets ------------------------------------------------------------

def pixels_sha256(x) -> str:
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()


def encode_split(part, target: Path, *, method: int = 6, quality: int = 50) -> Path:
    """Write ``part`` (a prepared ``Part``: uint8 (N, C, H, W), labels, classes) as WebP lossless
    sheets of ``SHEET`` images, with the labels and the pixels' SHA-256; decoding gives the
    exact pixels (checked here before anything is written)."""
    import numpy as np
    from PIL import Image

    x = np.ascontiguousarray(np.asarray(part.x).transpose(0, 2, 3, 1))  # (N, H, W, C)
    n, h, w, c = x.shape
    cols = min(100, SHEET)
    blobs, counts = [], []
    for start in range(0, n, SHEET):
        chunk = x[start:start + SHEET]
        sheet = np.zeros((-(-len(chunk) // cols) * h, cols * w, c), np.uint8)  # (rows * H, cols * W, C)
        for j, image in enumerate(chunk):
            sheet[(j // cols) * h:(j // cols + 1) * h, (j % cols) * w:(j % cols + 1) * w] = image
        buf = io.BytesIO()
        Image.fromarray(sheet.squeeze(-1) if c == 1 else sheet).save(buf, format="WEBP", lossless=True,
                                                                      method=method, quality=quality)
        blobs.append(np.frombuffer(buf.getvalue(), np.uint8))
        counts.append(len(chunk))
    arrays = {"webp": np.concatenate(blobs), "offsets": np.cumsum([0] + [len(b) for b in blobs]),
              "counts": np.array(counts), "shape": np.array([n, c, h, w]), "y": np.asarray(part.y),
              "classes": np.array(part.classes), "source": np.array(str(part.source)),
              "sha256": np.array(pixels_sha256(part.x))}
    if part.coarse_y is not None:
        arrays |= {"coarse_y": np.asarray(part.coarse_y), "coarse_classes": np.array(part.coarse_classes)}
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    decode_split(io.BytesIO(buf.getvalue()))  # exact pixels (SHA-256 checked), or nothing is written
    with atomic_path(target) as tmp:
        tmp.write_bytes(buf.getvalue())
    return target


def decode_split(source):
    """The ``Part`` in ``encode_split``'s file, the pixels' SHA-256 checked."""
    import numpy as np
    from PIL import Image

    from frost_nb.data.prepare import Part

    with np.load(source) as z:
        got = {k: z[k] for k in z.files}
    n, c, h, w = (int(v) for v in got["shape"])
    x = np.empty((n, h, w, c), np.uint8)
    cols, done = min(100, SHEET), 0
    for i, count in enumerate(got["counts"]):
        with Image.open(io.BytesIO(got["webp"][got["offsets"][i]:got["offsets"][i + 1]].tobytes())) as im:
            sheet = np.asarray(im.convert("L" if c == 1 else "RGB")).reshape(-1, cols * w, c)
        for j in range(int(count)):
            x[done + j] = sheet[(j // cols) * h:(j // cols + 1) * h, (j % cols) * w:(j % cols + 1) * w]
        done += int(count)
    x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))  # (N, C, H, W)
    if pixels_sha256(x) != got["sha256"].item():
        raise GpuError("the decoded training split does not match its SHA-256: pack and send it again")
    coarse = "coarse_y" in got
    return Part(x, got["y"], tuple(str(k) for k in got["classes"]), str(got["source"]),
                got["coarse_y"] if coarse else None,
                tuple(str(k) for k in got["coarse_classes"]) if coarse else None)


# --- the plan ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunSpec:
    """The run a plan trains, as ``train``'s options (``python -m frost_nb train``'s meaning)."""

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
        from frost_nb.__main__ import _config

        return _config(argparse.Namespace(size=self.size, dataset=self.dataset, model=self.model,
                                          backbone=self.backbone, seed=self.seed, epochs=self.epochs,
                                          set=list(self.sets), root=None))

    def name(self) -> str:
        from frost_nb.runs import default_name

        return default_name(self.config())


@dataclass
class Upload:
    """One command of an allocation: what it sends beside the staged checkout, and what it runs."""

    send: list[str]
    command: str
    data_bytes: int
    part: str


@dataclass
class Allocation:
    epochs: tuple[int, int]  # (first, last) epoch trained in it
    seconds: dict[str, float]  # start-up, uploads, prepare, warm-up, training

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())


@dataclass
class Plan:
    host: Host
    speed: Speed
    travelling: int  # the staged checkout's upload, measured
    checkpoint_bytes: int  # the resumable checkpoint (it travels in the checkout once unfinished)
    wheel_bytes: int
    data_bytes: int
    pieces: int = 1  # returned files the checkpoint comes back in
    uploads: list[Upload] = field(default_factory=list)
    allocations: list[Allocation] = field(default_factory=list)
    epoch_s: float = 0.0
    train_images: int = 0


class _Steps:
    """What ``Trainer`` needs of its batches to build its state: their count and generator."""

    def __init__(self, n: int) -> None:
        import torch

        self.n, self.generator = n, torch.Generator()

    def __len__(self) -> int:
        return self.n


def checkpoint_estimate(config, train_images: int) -> int:
    """Bytes of ``config``'s resumable checkpoint at its last epoch: the trainer's own state
    (``Trainer.state``) after one optimiser step (its moments filled), a fed halting sketch and a
    history of every step, written to a temporary file: a size, not a result."""
    import numpy as np
    import torch

    from frost_nb.checkpoint import save_checkpoint
    from frost_nb.models import create_model
    from frost_nb.training import Trainer

    steps = max(1, train_images // config.train.batch_size)
    trainer = Trainer(config, create_model(config.model), _Steps(steps), val_set=())
    for p in trainer.model.parameters():
        p.grad = torch.zeros_like(p)
    trainer.optimizer.step()
    trainer.calibrator.update(np.random.default_rng(0).random(100_000))
    trainer.epoch, trainer.step = config.train.epochs, config.train.epochs * steps
    for key in trainer.history["steps"]:
        trainer.history["steps"][key] = [0.123456789 * (i % 97) for i in range(trainer.step)]
    for key in trainer.history["epochs"]:
        trainer.history["epochs"][key] = [0.5] * trainer.epoch
    with tempfile.TemporaryDirectory() as tmp:
        return save_checkpoint(Path(tmp) / "full.pt", trainer.state(complete=False)).stat().st_size


def make_plan(run: RunSpec, host: Host, speed: Speed, *, data_bytes: int, travelling: int, wheel_bytes: int,
              checkpoint_bytes: int, epochs: int, train_images: int, val_images: int,
              manifest_bytes: int = 8192, margin: int = MIB) -> Plan:
    """The uploads that carry the packed training split (``data_bytes``) beside the staged checkout
    (``travelling`` bytes, the unfinished checkpoint counted on top: it travels from the second
    allocation on), and the allocations that train ``epochs`` at ``speed``. Raises GpuError when
    the data needs more than ``host.max_uploads`` uploads, the checkpoint cannot come back, or
    cannot be committed between allocations, or an allocation exceeds the host's GPU time."""
    pieces = math.ceil(checkpoint_bytes / host.return_file_bytes)
    plan = Plan(host, speed, travelling, checkpoint_bytes, wheel_bytes, data_bytes, pieces)
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
    train = (f"python3 -u scripts/gpu.py train {run.options()} --limit-s {host.command_s:g} "
             f"--stop-s {speed.stop_s:g} --return-bytes {host.return_file_bytes}")
    for i in range(1, n + 1):
        command = train if i == n else "python3 scripts/gpu.py receive"
        plan.uploads.append(Upload([MANIFESTS, WHEEL_DIR, f"{PARTS}/up{i:02d}"], command,
                                   min(part, data_bytes - (i - 1) * part), f"{PACKED}.part{i - 1:02d}"))
    plan.train_images = train_images
    plan.epoch_s = (train_images + val_images / 3) / speed.images_per_s  # the held-out pass at a third
    fixed = {"start-up": host.startup_s, "uploads": n * host.upload_s, "prepare": speed.prepare_s,
             "compile warm-up": speed.warmup_s}
    budget = min(host.command_s - speed.stop_s - speed.prepare_s - speed.warmup_s,
                 host.gpu_s - sum(fixed.values()))
    per = int(budget // plan.epoch_s) if plan.epoch_s > 0 else 0
    if per < 1:
        raise GpuError(f"no epoch fits an allocation: {sum(fixed.values()) / 60:.1f} minutes go to "
                       f"start-up, {n} uploads, preparing and compiling, and one epoch takes "
                       f"{plan.epoch_s / 60:.1f} at {speed.images_per_s:g} images/s")
    for first in range(1, epochs + 1, per):
        last = min(epochs, first + per - 1)
        training = {"training": (last - first + 1) * plan.epoch_s}
        plan.allocations.append(Allocation((first, last), {**fixed, **training}))
    if len(plan.allocations) > 1 and checkpoint_bytes > PARTIAL_BUDGET:
        raise GpuError(f"the run takes {len(plan.allocations)} allocations, and its unfinished checkpoint "
                       f"({_mib(checkpoint_bytes)}) is over the {_mib(PARTIAL_BUDGET)} that {PARTIAL}/ may "
                       "hold between them: it must finish in one (a measured, faster --images-per-s)")
    return plan


def describe(plan: Plan, run: RunSpec) -> str:
    h, s = plan.host, plan.speed
    rate = "measured" if s.measured else "an estimate from the code, not measured"
    lines = [f"host: {h.gpu_s / 60:g} min of GPU time per allocation (start-up {h.startup_s / 60:g} "
             f"counted), {h.command_s / 60:g} min per command, {_mib(h.upload_bytes)} per upload, "
             f"{h.return_files} files of {_mib(h.return_file_bytes)} back, bare again after "
             f"{h.idle_s:g} s idle",
             f"sent from {STAGE}/ with every command: the library and scripts, {_mib(plan.travelling)}; "
             f"the unfinished checkpoint {_mib(plan.checkpoint_bytes)} on top from the second allocation "
             f"(back after every epoch in {plan.pieces} file(s)); wheels {_mib(plan.wheel_bytes)}",
             f"training split, WebP lossless: {_mib(plan.data_bytes)} in {len(plan.uploads)} uploads "
             "(the test split stays here and is evaluated on the CPU)",
             f"training at {s.images_per_s:g} images/s ({rate}): {plan.epoch_s:.1f} s an epoch of "
             f"{plan.train_images:,} images and the held-out pass",
             ""]
    for k, a in enumerate(plan.allocations, 1):
        parts_s = ", ".join(f"{name} {v / 60:.1f}" for name, v in a.seconds.items())
        lines.append(f"allocation {k} of {len(plan.allocations)}: epochs {a.epochs[0]}-{a.epochs[1]}, "
                     f"{a.total_s / 60:.1f} of {h.gpu_s / 60:g} minutes ({parts_s})")
        if k > 1:
            lines.append(f"  the host starts bare: the same uploads again, from {STAGE}/ as fetch staged it "
                         f"(it holds {PARTIAL}/{run.name()}/; commit that folder here too)")
        for i, u in enumerate(plan.uploads, 1):
            lines.append(f"  upload {i}: send {' '.join(u.send)} ({_mib(u.data_bytes)} of data); "
                         f"limit {h.command_s:g} s; run: {u.command}")
        lines.append("  then here: python scripts/gpu.py fetch --from <the returned files>"
                     + (" --commit" if k == len(plan.allocations) else ""))
    lines.append(f"issue the uploads back to back from {STAGE}/: the host goes back after "
                 f"{h.idle_s:g} s idle, and a new one has none of the parts")
    return "\n".join(lines)


# --- here: wheels, pack ------------------------------------------------------------------------

@dataclass(frozen=True)
class Wheel:
    """A pinned wheel the host lacks: ``module`` is what its absence looks like."""

    requirement: str
    module: str
    file: str
    bytes: int
    sha256: str


# The host's python3 is 3.12 on x86-64 with torch 2.11, numpy, pandas, tqdm, Pillow and matplotlib;
# of this package's needs only datasketches is missing (its one requirement, numpy, is there).
# pip download gives this file for cp312 (checked 2026-11-25).
WHEELS = (Wheel("datasketches==5.2.0", "datasketches",
                "datasketches-5.2.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                748_356, "d9aa0c1dad8d00c242718c5dbb9f8cf1876ea099ee55c1c0634a8beecb589164"),)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")


def wheel_bytes(wheels=WHEELS) -> int:
    return sum(w.bytes for w in wheels)


def _pip(*args: str) -> None:
    try:
        subprocess.run([sys.executable, "-m", "pip", *args], check=True)
    except (OSError, subprocess.CalledProcessError) as err:
        raise GpuError(f"pip {args[0]} failed ({err}): its output above says why") from err


def download_wheels(folder: Path = REPO / WHEEL_DIR, wheels=WHEELS) -> list[Path]:
    """Download the pinned wheels for the host (cp312, manylinux x86-64, no dependencies) and
    check each one's SHA-256; a file already there and whole is kept."""
    folder.mkdir(parents=True, exist_ok=True)
    for w in wheels:
        if not ((folder / w.file).is_file() and parts._sha256(folder / w.file) == w.sha256):
            _pip("download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
                 "--implementation", "cp", *[a for p in PLATFORMS for a in ("--platform", p)], "-d",
                 str(folder), w.requirement)
    return check_wheels(folder, wheels)


def check_wheels(folder: Path, wheels=WHEELS) -> list[Path]:
    """The pinned wheels in ``folder``, each checked against its SHA-256."""
    paths = []
    for w in wheels:
        path = folder / w.file
        if not path.is_file():
            raise GpuError(f"{path} is missing: run python scripts/gpu.py wheels here and send {WHEEL_DIR}")
        if parts._sha256(path) != w.sha256:
            raise GpuError(f"{path} is not the pinned {w.requirement} (SHA-256 differs): delete it and "
                           "run python scripts/gpu.py wheels")
        paths.append(path)
    return paths


def pack(dataset: str, uploads: int, *, repo: Path = REPO, data_root: Path | None = None) -> Path:
    """The prepared training split of ``dataset`` (read through the data root) as WebP lossless
    sheets (``SEND``/<dataset>/train.webp.npz, kept while its source is unchanged), cut into
    ``uploads`` parts, one per upload folder (``PARTS``/upNN/), the manifests into ``MANIFESTS``.
    Returns the packed file."""
    from frost_nb.data.prepare import checked_data_root, prepare, prepared_dir, read_prepared

    root = checked_data_root(data_root)
    prepare(dataset, root, download=False)
    source = prepared_dir(dataset, root) / "train.npz"
    packed = repo / SEND / dataset / PACKED
    stamp = packed.with_suffix(".source")
    key = f"{source.stat().st_size} {source.stat().st_mtime_ns}"
    if not (packed.is_file() and stamp.is_file() and stamp.read_text() == key):
        encode_split(read_prepared(dataset, root, "train"), packed)
        stamp.write_text(key)
    for old in (repo / PARTS, repo / MANIFESTS):
        shutil.rmtree(old, ignore_errors=True)
    size = packed.stat().st_size
    manifest = parts.split(packed, repo / PARTS / "all", math.ceil(size / uploads / 1024) * 1024 / MIB)
    (repo / MANIFESTS).mkdir(parents=True)
    os.replace(manifest, repo / MANIFESTS / manifest.name)
    names = sorted(p.name for p in (repo / PARTS / "all").iterdir())
    if len(names) != uploads:
        raise GpuError(f"{packed} cut into {len(names)} parts, not {uploads}")
    for i, name in enumerate(names, 1):
        (repo / PARTS / f"up{i:02d}").mkdir(parents=True)
        os.replace(repo / PARTS / "all" / name, repo / PARTS / f"up{i:02d}" / name)
    (repo / PARTS / "all").rmdir()
    (repo / MANIFESTS / "dataset.json").write_text(json.dumps({"dataset": dataset, "file": PACKED}) + "\n")
    return packed


# --- host: packages, receive -------------------------------------------------------------------

def ensure_packages(repo: Path = REPO, site: Path | None = None, wheels=WHEELS) -> list[str]:
    """Install the pinned wheels whose module is missing into ``site`` (pip, no index, no
    dependencies) and put it on ``sys.path``; returns the requirements installed."""
    site = Path(site) if site is not None else repo / SITE
    if site.is_dir() and str(site) not in sys.path:
        sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    missing = [w for w in wheels if importlib.util.find_spec(w.module) is None]
    if not missing:
        return []
    files = check_wheels(repo / WHEEL_DIR, missing)
    _pip("install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade",
         "--target", str(site), *map(str, files))
    if str(site) not in sys.path:
        sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    if still := [w.requirement for w in missing if importlib.util.find_spec(w.module) is None]:
        raise GpuError(f"{', '.join(still)} installed into {site} but cannot be imported")
    return [w.requirement for w in missing]


def receive(repo: Path = REPO) -> dict:
    """On the host: move the parts that arrived (``PARTS``/*/), each checked against its manifest,
    into ``STORE``; once all are there, join them (SHA-256 checked), decode the training split
    (pixels checked) and write it as the prepared set under ``DATA``, with an empty test part (the
    test split stays behind; the trainer is given none). Returns the status."""
    from frost_nb.data.prepare import prepared_dir, write_prepared

    manifests = repo / MANIFESTS
    try:
        spec = json.loads((manifests / "dataset.json").read_text())
        manifest = json.loads((manifests / f"{spec['file']}.manifest.json").read_text())
    except (OSError, ValueError, KeyError) as err:
        raise GpuError(f"{manifests} lacks its manifests ({err}): send {MANIFESTS} (python scripts/gpu.py "
                       "pack writes it)") from err
    dataset, store = spec["dataset"], repo / STORE
    done = repo / DATA / "prepared" / dataset / ".sha256"
    status = {"dataset": dataset, "missing": [], "damaged": [], "prepared": False}
    if done.is_file() and done.read_text().strip() == manifest["sha256"]:
        return {**status, "prepared": True}
    store.mkdir(parents=True, exist_ok=True)
    _copy(manifests / f"{spec['file']}.manifest.json", store / f"{spec['file']}.manifest.json")
    wanted = {p["file"]: p for p in manifest["parts"]}
    for arrived in sorted((repo / PARTS).glob(f"*/{spec['file']}.part*")):
        part = wanted.get(arrived.name)
        if part and arrived.stat().st_size == part["bytes"] and parts._sha256(arrived) == part["sha256"]:
            os.replace(arrived, store / arrived.name)
        else:
            status["damaged"].append(arrived.name)
    status["missing"] = parts.missing(store / f"{spec['file']}.manifest.json")
    if status["missing"]:
        return status
    with tempfile.TemporaryDirectory(dir=store) as tmp:
        train = decode_split(parts.join(store / f"{spec['file']}.manifest.json", tmp))
    test = train._replace(x=train.x[:0], y=train.y[:0], source="not sent: evaluated off the host",
                          coarse_y=None if train.coarse_y is None else train.coarse_y[:0])
    write_prepared(prepared_dir(dataset, repo / DATA), {"test": test, "train": train})
    done.write_text(manifest["sha256"] + "\n")
    for name in wanted:
        (store / name).unlink(missing_ok=True)
    return {**status, "prepared": True}


# --- host: train -------------------------------------------------------------------------------

def check_out(out: Path, host: Host = Host()) -> list[Path]:
    """The files under ``out``, if every one comes back (``host``'s return limits, plain names);
    else GpuError."""
    files, problems = [], []
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out)
        if any(not OUT_NAME.match(p) for p in rel.parts):
            problems.append(f"{rel}: a name with characters other than letters, digits, '.', '_', '-'")
        if path.is_symlink() or not (path.is_dir() or path.is_file()):
            problems.append(f"{rel}: not a plain file")
        elif path.is_file():
            files.append(path)
            if len(rel.parts) > host.return_depth + 1:
                problems.append(f"{rel}: deeper than {host.return_depth} folders")
            if path.stat().st_size > host.return_file_bytes:
                problems.append(f"{rel}: {_mib(path.stat().st_size)}, over {_mib(host.return_file_bytes)}")
    if len(files) > host.return_files:
        problems.append(f"{len(files)} files, over {host.return_files}")
    if problems:
        raise GpuError(f"{out} would not come back whole: " + "; ".join(problems))
    return files


def send_back(checkpoint: Path, folder: Path, epoch: int, piece_bytes: int) -> Path:
    """Put ``checkpoint`` (after ``epoch``) into the return folder ``folder`` in parts of at most
    ``piece_bytes`` with their manifest, written last (parts.py), then remove the epoch before's:
    a command killed on the way leaves the epoch before whole. Returns the manifest."""
    tagged = checkpoint.with_name(f"e{epoch:03d}.{checkpoint.name}")
    _link_or_copy(str(checkpoint), str(tagged))
    try:
        manifest = parts.split(tagged, folder, piece_bytes / MIB)
    finally:
        tagged.unlink()
    for old in folder.glob(f"e*.{checkpoint.name}.*"):
        if not old.name.startswith(f"{tagged.name}."):
            old.unlink()
    return manifest


def returned_checkpoint(folder: Path, into: Path) -> tuple[Path, int]:
    """The newest whole checkpoint that ``send_back`` left in ``folder``, joined into ``into``
    (every part's and the whole file's SHA-256 checked), and the number of its parts."""
    for manifest in sorted(folder.glob("e*.manifest.json"), reverse=True):
        try:
            return parts.join(manifest, into), len(json.loads(manifest.read_text())["parts"])
        except (parts.PartsError, ValueError):  # cut off by a kill: the epoch before is whole
            continue
    raise GpuError(f"{folder} holds no whole checkpoint: the command ended before its first epoch")


def train(run: RunSpec, *, out: Path, limit_s: float, stop_s: float, piece_bytes: int = 16 * MIB,
          repo: Path = REPO, device: str | None = None, started: float | None = None) -> dict:
    """On the host: receive the last part, resume ``run`` from ``outputs/partial/`` if it is there,
    and train until ``stop_s`` before the command's limit (``limit_s`` from ``started``, this
    process's start): the trainer's own deadline rule, an epoch at a time, so that after every epoch
    its checkpoint (``send_back``) and gpu_calls.json (this command's record appended to the run's)
    are in ``out`` beside config.json. The test split is not here."""
    deadline = (STARTED if started is None else started) + limit_s - stop_s
    os.environ["FROST_DATA"] = str(repo / DATA)
    os.environ["FROST_CACHE"] = str(repo / GPU / "cache")
    status = receive(repo)
    if not status["prepared"]:
        raise GpuError(f"parts missing on this host: {', '.join(status['missing'])} (damaged: "
                       f"{status['damaged'] or 'none'}); a host that started bare needs every upload again")
    import torch

    from frost_nb.checkpoint import load_checkpoint
    from frost_nb.runs import CONFIG_FILE, MODEL_FILE, hardware, write_json
    from frost_nb.training import build_trainer

    config = run.config()
    if device is not None:
        config = config.replace(**{"train.device": device})
    name = run.name()
    folder, partial, local = Path(out) / name, repo / PARTIAL / name, repo / RUN / name / MODEL_FILE
    for path in (folder, local.parent):
        path.mkdir(parents=True, exist_ok=True)
    done, within, calls = 0, 0, []
    if (partial / MODEL_FILE).is_file():  # the trainer refuses another run's checkpoint
        _copy(partial / MODEL_FILE, local)
        staged = load_checkpoint(local)
        done, within = staged["epoch"], (staged.get("within_epoch") or {}).get("done", 0)
        if (partial / "gpu_calls.json").is_file():
            calls = json.loads((partial / "gpu_calls.json").read_text())
    write_json(folder / CONFIG_FILE, config.to_dict())
    trainer = build_trainer(config, checkpoint=local, progress=False)
    trainer.test_set = None  # the test split stays behind: evaluated here, on the CPU, by fetch
    dev, epochs = trainer.device, config.train.epochs
    record = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "hardware": hardware(dev),
              "torch": torch.__version__, "run": name, "resumed_from_epoch": done, "epochs": epochs}
    part = f" and {within} steps of the next" if within else ""  # a CPU run's mid-epoch checkpoint
    print(f"{name}: from epoch {done}{part} of {epochs}, {deadline - time.monotonic():.0f} s to train", flush=True)
    first = done
    while done < epochs:
        t0 = time.monotonic()
        trainer.fit(until_epoch=done + 1, deadline=deadline)
        if trainer.epoch <= done:  # the deadline: another epoch would end after it
            break
        last, done = time.monotonic() - t0, trainer.epoch
        row = {k: v[-1] for k, v in trainer.history["epochs"].items() if k != "epoch"}
        print(f"epoch {done}/{epochs}: {', '.join(f'{k} {v:.4g}' for k, v in row.items())}, {last:.1f} s",
              flush=True)
        images = trainer.steps_per_epoch * config.train.batch_size
        record |= {"epochs_after": done, "last_epoch_s": round(last, 2),
                   "images_per_s": round(images / last, 1) if done > first + 1 else None,  # 1st: compiling
                   "peak_memory_gib": round(torch.cuda.max_memory_allocated(dev) / 2**30, 2)
                   if dev.type == "cuda" else None, "finished": done >= epochs}
        send_back(local, folder, done, piece_bytes)
        write_json(folder / "gpu_calls.json", [*calls, record])
    check_out(Path(out), replace(Host(), return_file_bytes=piece_bytes))
    return record


# --- here: fetch -------------------------------------------------------------------------------

def fetch(source: Path, *, repo: Path = REPO, cache: Path | None = None, runs_root: Path | None = None,
          commit: bool = False, force: bool = False) -> list[dict]:
    """Take one command's returned files (``source``) back. An unfinished run's checkpoint goes
    to ``outputs/partial/<grid>/<label>/`` (one older than the one there is refused unless
    ``force``), staged again for the next allocation; a finished one is evaluated on the test split
    here, on the CPU, and stored in the run cache as a finished run, its partial folder removed; with
    ``commit``, ``runs.export_run`` exports it lean with bf16 weights into the committed runs."""
    import torch

    from frost_nb.checkpoint import load_checkpoint, load_model, save_checkpoint, stored_config
    from frost_nb.paths import cache_dir
    from frost_nb.runs import (CONFIG_FILE, METRICS_FILE, MODEL_FILE, export_run, identity_key, read_config,
                               write_json)
    from frost_nb.training import evaluate, load_split, use_amp

    done = []
    for config_file in sorted(Path(source).glob(f"*/*/{CONFIG_FILE}")):
        came = config_file.parent
        name = f"{came.parent.name}/{came.name}"
        config = read_config(config_file)
        partial = repo / PARTIAL / name
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint, pieces = returned_checkpoint(came, Path(tmp))
            state = load_checkpoint(checkpoint)
            if identity_key(stored_config(checkpoint, state)) != identity_key(config):
                raise GpuError(f"{came}: the checkpoint and config.json are of different runs")
            if (partial / MODEL_FILE).is_file() and not force:
                here = load_checkpoint(partial / MODEL_FILE)
                if identity_key(stored_config(partial / MODEL_FILE, here)) != identity_key(config):
                    raise GpuError(f"{partial} holds another run: move it away first")
                if here["step"] > state["step"]:  # steps: a checkpoint may be saved within an epoch
                    raise GpuError(f"{partial} is at step {here['step']} (epoch {here['epoch']}), the returned "
                                   f"checkpoint at step {state['step']}: keeping the newer one (--force to "
                                   "replace it)")
            record = came / "gpu_calls.json"
            calls = json.loads(record.read_text()) if record.is_file() else []
            entry = {"run": name, "epoch": state["epoch"], "epochs": config.train.epochs,
                     "finished": bool(state.get("complete")), "parts": pieces}
            if not state.get("complete"):
                for path in (checkpoint, config_file, record):
                    if path.is_file():
                        _copy(path, partial / (MODEL_FILE if path == checkpoint else path.name))
                stage(name, repo)
                done.append({**entry, "kept": str(partial.relative_to(repo))})
                continue
            folder = (Path(cache) if cache is not None else cache_dir()) / name
            if (folder / CONFIG_FILE).is_file() and identity_key(read_config(folder / CONFIG_FILE)) != \
                    identity_key(config):
                raise GpuError(f"{folder} holds another run: move it away first")
            model, _ = load_model(checkpoint, expect=config)
            test = evaluate(model, load_split(config, "test"), batch_size=config.train.eval_batch_size,
                            amp=use_amp(config, torch.device("cpu")))  # as the trainer evaluates on a CPU
            state["metrics"] = {**state.get("metrics", {}), "test_accuracy": test.accuracy,
                                "test_accuracy_per_step": test.accuracy_per_step(),
                                "test_evaluated_on": "cpu"}
            (folder / METRICS_FILE).unlink(missing_ok=True)  # unfinished until the new files are all in
            save_checkpoint(folder / MODEL_FILE, state)
        _copy(config_file, folder / CONFIG_FILE)
        write_json(folder / "gpu_calls.json", calls)
        hardware = next((c["hardware"] for c in reversed(calls) if c.get("hardware")), None)
        write_json(folder / METRICS_FILE, {**state["metrics"], "hardware": hardware})  # last: finished
        entry |= {"stored": str(folder), "test_accuracy": test.accuracy}
        if commit:
            entry["committed"] = str(export_run(folder, runs_root, weights="bfloat16"))
        shutil.rmtree(partial, ignore_errors=True)
        done.append(entry)
    return done


# --- here: rehearse ----------------------------------------------------------------------------

class StandIn:
    """A stand-in host: a temporary folder that receives a copy of a checkout's travelling files
    and the named paths (refusing more than the upload limit), empties the return folder before
    each command, kills a command at its time limit (or when ``kill_when`` holds), and is bare
    again when a new allocation starts."""

    def __init__(self, root: Path, host: Host):
        self.root, self.host, self.allocation, self.log = Path(root), host, 0, []
        self.bin = self.root / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        shim = self.bin / "python3"  # the host's python3: this interpreter, its environment kept
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        shim.chmod(0o755)

    def start(self) -> Path:
        """A new allocation: a bare folder."""
        self.allocation += 1
        self.tree = self.root / f"host{self.allocation}"
        self.out = self.root / "out"
        return self.tree

    def run(self, here: Path, command: str, send: list[str], *, kill_when=None) -> tuple[Path, str, bool]:
        files = travelling_files(here)
        sent = sum((here / n).lstat().st_size for n in files)
        for name in files:
            (self.tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(here / name, self.tree / name)
        for path in send:  # replaced there; one missing here is removed there
            there = self.tree / path
            shutil.rmtree(there, ignore_errors=True) if there.is_dir() else there.unlink(missing_ok=True)
            if (here / path).exists():
                shutil.copytree(here / path, there)
                sent += folder_bytes(there)
        if sent > self.host.upload_bytes:
            raise GpuError(f"the stand-in host refuses an upload of {_mib(sent)}, over "
                           f"{_mib(self.host.upload_bytes)}")
        shutil.rmtree(self.out, ignore_errors=True)
        self.out.mkdir(parents=True)
        env = {**os.environ, "OUT": str(self.out), "PATH": f"{self.bin}:{os.environ['PATH']}",
               "PYTHONPATH": "", "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(["bash", "-c", command], cwd=self.tree, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        killed, t0 = False, time.monotonic()
        while proc.poll() is None:
            if time.monotonic() - t0 > self.host.command_s or (kill_when is not None and kill_when(self.out)):
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.05)
        output = proc.communicate()[0]
        self.log.append({"allocation": self.allocation, "command": command, "sent_bytes": sent,
                         "sent_files": files, "killed": killed, "rc": proc.returncode,
                         "seconds": round(time.monotonic() - t0, 1)})
        if proc.returncode != 0 and not killed:
            raise GpuError(f"the command failed on the stand-in host:\n{command}\n{output[-4000:]}")
        check_out(self.out, self.host)
        back = self.root / f"back{len(self.log)}"
        shutil.copytree(self.out, back)
        return back, output, killed


def standin_cifar100(root: Path, per_class: tuple[int, int] = (5, 1), seed: int = 0) -> None:
    """A small stand-in for CIFAR-100, prepared under ``root``: random pixels, its 100 classes and
    20 superclasses."""
    import numpy as np

    from frost_nb.data.prepare import Part, prepared_dir, write_prepared

    rng, classes = np.random.default_rng(seed), tuple(f"class{i:02d}" for i in range(100))
    sets = {}
    for name, n in zip(("train", "test"), per_class):
        y = np.repeat(np.arange(100, dtype=np.int64), n)
        x = rng.integers(0, 256, (len(y), 3, 32, 32), dtype=np.uint8)  # (N, C, H, W)
        sets[name] = Part(x, y, classes, "a stand-in", y // 5, tuple(f"super{i}" for i in range(20)))
    write_prepared(prepared_dir("cifar100", root), sets)


REHEARSAL = RunSpec(size="smoke", dataset="cifar100", seed=0, epochs=2,
                    sets=("model.stem_stride=2", "data.val_fraction=0.2", "data.limit=500"))


def _split_sizes(config) -> tuple[int, int]:
    """Images in the training and held-out splits of ``config``."""
    from frost_nb.training import load_split

    return len(load_split(config, "train")), len(load_split(config, "val")) if config.data.val_fraction else 0


def rehearse(work: Path, *, run: RunSpec = REHEARSAL, speed: Speed = Speed(), host: Host = Host(),
             repo: Path = REPO, say=print) -> dict:
    """Every printed command of ``run``'s plan against a stand-in host in ``work``, from a copy of
    ``repo`` (as a clone holds it) staged as for the host: CIFAR-100 when the data root holds it,
    else a small stand-in in its format. The limits are scaled to the smoke run: the upload so that
    the training split needs ``host.max_uploads`` uploads, a returned file so that the checkpoint
    comes back in two (as the ``ladder256`` run's does). Allocation 1 is killed once its first
    epoch is back; allocation 2 starts bare, resumes from the fetched checkpoint and finishes; the
    test split is evaluated here. Returns what happened."""
    from frost_nb.data.prepare import find_source, prepare
    from frost_nb.paths import data_root

    work, name = Path(work), run.name()
    here = work / "checkout"  # what a clone holds: the travelling files, outputs/partial/ included
    for rel in travelling_files(repo):
        if not rel.startswith(f"{PARTIAL}/{name}/"):
            (here / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / rel, here / rel)
    hit, _ = find_source(run.dataset, data_root())
    root = work / "data"
    if hit is not None:
        prepare(run.dataset, root, source=hit[1], download=False)
    else:
        standin_cifar100(root)
    say(f"data: {hit[1] if hit is not None else 'a stand-in for CIFAR-100 (random pixels)'}")
    config = run.config()
    packed = pack(run.dataset, host.max_uploads, repo=here, data_root=root)
    train_images, val_images = _split_sizes(config.replace(**{"data.root": str(root)}))
    checkpoint = checkpoint_estimate(config, train_images)
    staged = stage(None, here)
    travelling = travelling_bytes(staged)
    host = replace(host, upload_bytes=travelling + checkpoint + wheel_bytes() + 8192 + MIB
                   + math.ceil(packed.stat().st_size / host.max_uploads) + 4096,
                   return_file_bytes=math.ceil(checkpoint * 0.6))
    plan = make_plan(run, host, speed, data_bytes=packed.stat().st_size, travelling=travelling,
                     wheel_bytes=wheel_bytes(), checkpoint_bytes=checkpoint, epochs=config.train.epochs,
                     train_images=train_images, val_images=val_images)
    say(describe(plan, run))
    stand = StandIn(work / "host", host)
    result = {"uploads": len(plan.uploads), "upload_limit": host.upload_bytes, "allocations": []}
    epoch_back = lambda out: (out / name / "gpu_calls.json").is_file()  # written after the checkpoint's parts
    for k in (1, 2):
        stand.start()
        for i, upload in enumerate(plan.uploads, 1):
            kill = epoch_back if k == 1 and i == len(plan.uploads) else None  # once its first epoch is back
            back, output, killed = stand.run(staged, upload.command, upload.send, kill_when=kill)
            say(f"allocation {k}, upload {i}: {upload.command}" + (" (killed)" if killed else "")
                + f"\n{output[-1500:]}")
        before, os.environ["FROST_DATA"] = os.environ.get("FROST_DATA"), str(root)  # here: the test split
        try:
            entries = fetch(back, repo=here, cache=work / "cache", runs_root=work / "runs", commit=k == 2)
        finally:
            os.environ.pop("FROST_DATA") if before is None else os.environ.update(FROST_DATA=before)
        result["allocations"].append({"killed": killed, "fetched": entries})
        say(json.dumps(entries))
    result["log"] = stand.log
    return result


# --- the command line --------------------------------------------------------------------------

def _run_options(p: argparse.ArgumentParser) -> None:
    from frost_nb.config import SIZES

    p.add_argument("--size", default="cifar", choices=SIZES)
    p.add_argument("--dataset", default="cifar100")
    p.add_argument("--model", default="frost")
    p.add_argument("--backbone", default="resnet")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=None, help="default: the size's")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE")


def _host_options(p: argparse.ArgumentParser) -> None:
    h, s = Host(), Speed()
    p.add_argument("--gpu-min", type=float, default=h.gpu_s / 60, help="GPU time of one allocation")
    p.add_argument("--startup-min", type=float, default=h.startup_s / 60, help="start-up of a bare host")
    p.add_argument("--command-min", type=float, default=h.command_s / 60, help="one command at most")
    p.add_argument("--upload-mib", type=float, default=h.upload_bytes / MIB, help="one command's upload")
    p.add_argument("--upload-s", type=float, default=h.upload_s, help="seconds one upload takes")
    p.add_argument("--return-files", type=int, default=h.return_files)
    p.add_argument("--return-mib", type=float, default=h.return_file_bytes / MIB, help="one returned file")
    p.add_argument("--idle-s", type=float, default=h.idle_s, help="idle time before the host goes back")
    p.add_argument("--max-uploads", type=int, default=h.max_uploads)
    p.add_argument("--images-per-s", type=float, default=None,
                   help=f"measured training rate (default: the estimate {s.images_per_s:g}, not measured)")
    p.add_argument("--warmup-s", type=float, default=s.warmup_s, help="compile warm-up on a bare host")
    p.add_argument("--stop-s", type=float, default=s.stop_s, help="stop training this long before the limit")


def _host(args) -> tuple[Host, Speed]:
    host = Host(args.gpu_min * 60, args.startup_min * 60, args.command_min * 60, int(args.upload_mib * MIB),
                args.upload_s, args.return_files, int(args.return_mib * MIB), 2, args.idle_s,
                args.max_uploads)
    speed = Speed(stop_s=args.stop_s, warmup_s=args.warmup_s)
    if args.images_per_s:
        speed = replace(speed, images_per_s=args.images_per_s, measured=True)
    return host, speed


def _spec(args) -> RunSpec:
    return RunSpec(args.size, args.dataset, args.model, args.backbone, args.seed, args.epochs,
                   tuple(args.set))


def _plan_from_args(args, packed: Path) -> Plan:
    run, (host, speed) = _spec(args), _host(args)
    config = run.config()
    staged = REPO / STAGE
    if not staged.is_dir():
        raise GpuError(f"{staged} is missing: run python scripts/gpu.py pack (or stage) first")
    train_images, val_images = _split_sizes(config)
    partial = staged / PARTIAL / run.name() / "model.pt"
    travelling = travelling_bytes(staged) - (partial.stat().st_size if partial.is_file() else 0)
    return make_plan(run, host, speed, data_bytes=packed.stat().st_size, travelling=travelling,
                     wheel_bytes=wheel_bytes(), checkpoint_bytes=checkpoint_estimate(config, train_images),
                     epochs=config.train.epochs, train_images=train_images, val_images=val_images)


def _commands() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for verb, text in (("plan", "print the uploads and allocations (here)"),
                       ("pack", "the training split in WebP parts, one per upload, staged; the plan (here)")):
        p = sub.add_parser(verb, help=text)
        _run_options(p)
        _host_options(p)
    _run_options(sub.add_parser("stage", help=f"make {STAGE}/, the checkout uploads are sent from (here)"))
    sub.add_parser("wheels", help="download the pinned wheels into .whl/ (here)")
    sub.add_parser("receive", help="check and keep the parts that arrived (host)")
    p = sub.add_parser("train", help="receive, resume, train until shortly before the limit (host)")
    _run_options(p)
    p.add_argument("--limit-s", type=float, default=Host().command_s, help="the command's limit")
    p.add_argument("--stop-s", type=float, default=Speed().stop_s, help="stop this long before it")
    p.add_argument("--return-bytes", type=int, default=Host().return_file_bytes, help="one returned file")
    p.add_argument("--out", default=os.environ.get("OUT"), help="the return folder (default $OUT)")
    p.add_argument("--device", default=None, help="train.device (default: the config's)")
    p = sub.add_parser("fetch", help="take a command's returned files back (here)")
    p.add_argument("--from", dest="source", required=True, help="the folder of the returned files")
    p.add_argument("--commit", action="store_true", help="a finished run's lean export into outputs/runs/")
    p.add_argument("--force", action="store_true", help="replace a newer checkpoint in outputs/partial/")
    p = sub.add_parser("rehearse", help="every printed command at smoke size on a stand-in host (here)")
    p.add_argument("--work", default=None, help="the stand-in's folder (default: a temporary one)")
    return parser


def _run(args) -> None:
    if args.command in ("plan", "pack"):
        packed = REPO / SEND / args.dataset / PACKED
        if args.command == "pack":
            packed = pack(args.dataset, args.max_uploads)
            stage(_spec(args).name())
        elif not packed.is_file():
            raise GpuError(f"{packed} is missing: run python scripts/gpu.py pack first")
        plan = _plan_from_args(args, packed)
        if args.command == "pack" and len(plan.uploads) != args.max_uploads:
            pack(args.dataset, len(plan.uploads))
            stage(_spec(args).name())
        print(describe(plan, _spec(args)))
    elif args.command == "stage":
        staged = stage(_spec(args).name())
        print(f"{staged}: {len(travelling_files(staged))} files, {_mib(travelling_bytes(staged))}")
    elif args.command == "wheels":
        for path in download_wheels():
            print(f"{path.relative_to(REPO)} ({_mib(path.stat().st_size)}, SHA-256 checked)")
    elif args.command == "receive":
        print(json.dumps(receive()), flush=True)
    elif args.command == "train":
        if not args.out:
            raise GpuError("$OUT is not set: pass --out FOLDER, the folder whose files come back")
        print(json.dumps(train(_spec(args), out=Path(args.out), limit_s=args.limit_s, stop_s=args.stop_s,
                               piece_bytes=args.return_bytes, device=args.device)), flush=True)
    elif args.command == "fetch":
        for entry in fetch(Path(args.source), commit=args.commit, force=args.force):
            print(json.dumps(entry))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            result = rehearse(Path(args.work) if args.work else Path(tmp))
        print(json.dumps({k: v for k, v in result.items() if k != "log"}, indent=1))


def main(argv: list[str] | None = None) -> int:
    """The command line; a step that cannot go on says why in one line, exit status 2."""
    args = _commands().parse_args(argv)
    try:  # on the host, the carried wheels before anything imports them
        ensure_packages(REPO, wheels=WHEELS if args.command in ("receive", "train") else ())
    except GpuError as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    from frost_nb.checkpoint import CheckpointError
    from frost_nb.config import ConfigError
    from frost_nb.data.datasets import DataError
    from frost_nb.paths import DamagedInput, OutputError
    from frost_nb.training import TrainingError

    try:
        _run(args)
    except (GpuError, parts.PartsError, CheckpointError, ConfigError, DataError, DamagedInput, OutputError,
            TrainingError) as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
