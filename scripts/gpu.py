"""Train a run on an offline GPU host with tight limits, and rehearse that path on the CPU
(docs/scaling.md, "The cifar size on an offline GPU host").

The host's limits are the fields of ``Host`` and options of ``plan`` and ``rehearse``, never
constants: GPU time per allocation (start-up, idle waits and every command counted), the limit
of one command, the bytes one command may upload (a copy of the checkout, its tracked files and
the untracked ones git does not ignore, plus ignored paths named for it), the files that come
back from the command's return folder (``$OUT``), and the idle time after which the host goes
back and a new one starts bare.

Steps (here: this machine; host: the GPU host; ``plan`` prints the exact commands):

  here  wheels    download the pinned wheels the host lacks (datasketches) into .whl/
  here  pack      the training split, WebP lossless (exact pixels, hash-checked), cut into one
                  part per upload (.gpu/parts/upNN/) with manifests (.gpu/manifests/)
  here  plan      what travels, the uploads, and the minutes of each allocation; refuses when an
                  allocation's total exceeds the host's GPU time
  host  receive   check the parts that arrived and keep them aside
  host  train     receive, decode the training split, resume the run (outputs/partial/), train
                  epoch after epoch until shortly before the command's limit; the checkpoint is
                  in $OUT after every epoch, so a killed command returns its last epoch
  here  fetch     an unfinished run's checkpoint into outputs/partial/ (committed: a fresh clone
                  resumes it); a finished one evaluated on the test split here, on the CPU (the
                  test split never travels), into the run cache, its lean export into
                  outputs/runs/ with --commit
  here  rehearse  every printed command at smoke size against a stand-in host (a temporary
                  folder with the same limits), with a kill mid-training and a resume on a bare host

On the host the commands run as ``python3 scripts/gpu.py ...`` from the checkout: no install of
this package (its pins are never resolved there), the checkout and the carried wheels (installed
with pip --no-deps into .gpu/site) are put on ``sys.path`` here. Standard library at the top;
``frost_nb`` is imported by the steps that need it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import inspect
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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

STARTED = time.monotonic()  # the command's start on the host: the training deadline counts from here
REPO = Path(__file__).resolve().parent.parent
MIB = 1 << 20
OUT_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
# relative to the checkout, here and on the host alike (ignored: /.gpu/ and .whl/ in .gitignore)
GPU, WHEEL_DIR = ".gpu", ".whl"
MANIFESTS, PARTS, STORE, DATA, SEND = (f"{GPU}/manifests", f"{GPU}/parts", f"{GPU}/store", f"{GPU}/data",
                                       f"{GPU}/send")
SITE = f"{GPU}/site"  # where a carried wheel is installed on the host
PARTIAL = "outputs/partial"  # unfinished checkpoints, committed: a fresh clone finds them
PARTIAL_BUDGET = 16 * MIB  # one unfinished checkpoint at most (what one returned file may hold)
PACKED = "train.webp.npz"  # the training split as it travels
SHEET = 1000  # images per WebP sheet (100 x 10 images of 32 px; WebP allows 16,383 px a side)


@dataclass(frozen=True)
class Host:
    """The limits of an offline GPU host (defaults: one H100 allocation as described in
    docs/scaling.md); every step takes them as arguments."""

    gpu_s: float = 15 * 60  # GPU time of one allocation: start-up, idle waits, every command
    startup_s: float = 3 * 60  # start-up of a bare host (1-3 minutes: the worst counted)
    command_s: float = 10 * 60  # one command at most
    upload_bytes: int = 64 * MIB  # one command's upload: the checkout's files and what is named
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
    """Copy a file atomically (a temporary file beside ``target``, then a rename)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


# --- what travels ------------------------------------------------------------------------------

IGNORED_TOP = (GPU, WHEEL_DIR, ".git", ".venv")  # never travel uninvited (a copy without git)


def travelling_files(repo: Path = REPO) -> list[str]:
    """The files every upload sends: tracked files and untracked ones git does not ignore (a
    folder that is no git checkout, such as the rehearsal's copy: every file outside
    ``IGNORED_TOP`` and caches)."""
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


def needed_bytes(repo: Path = REPO) -> int:
    """What of the travelling files the host reads: the package, the scripts, the project file
    and the run's unfinished checkpoint (the rest travels because the host copies the checkout)."""
    return sum((repo / n).lstat().st_size for n in travelling_files(repo)
               if n.startswith(("frost_nb/", "scripts/", f"{PARTIAL}/")) or n == "pyproject.toml")


# --- the data: WebP lossless sheets ------------------------------------------------------------

def pixels_sha256(x) -> str:
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()


def encode_split(part, target: Path, *, method: int = 6, quality: int = 50) -> Path:
    """Write ``part`` (a prepared split: uint8 (N, C, H, W), labels, classes) as WebP lossless
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
        rows = -(-len(chunk) // cols)
        sheet = np.zeros((rows * h, cols * w, c), np.uint8)
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
    decoded = decode_split(io.BytesIO(buf.getvalue()))  # exact pixels, or nothing is written
    if pixels_sha256(decoded["x"]) != arrays["sha256"].item():
        raise GpuError("WebP lossless did not give back the exact pixels: keep the PNG packing")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, target)
    return target


def decode_split(source) -> dict:
    """The arrays of a prepared split from ``encode_split``'s file, the pixels' SHA-256 checked."""
    import numpy as np
    from PIL import Image

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
    x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    if pixels_sha256(x) != got["sha256"].item():
        raise GpuError("the decoded training split does not match its SHA-256: pack and send it again")
    arrays = {"x": x, "y": got["y"], "classes": got["classes"], "source": got["source"]}
    if "coarse_y" in got:
        arrays |= {"coarse_y": got["coarse_y"], "coarse_classes": got["coarse_classes"]}
    return arrays


def write_prepared(arrays: dict, dataset: str, root: Path) -> None:
    """On the host: the training split as the library's prepared file, and an empty test part
    in its place (the test split stays behind; the trainer is given none)."""
    import numpy as np

    from frost_nb.data.prepare import FORMAT, prepared_dir
    from frost_nb.paths import atomic_path

    folder = prepared_dir(dataset, root)
    x, y = arrays["x"], arrays["y"]
    empty = {**arrays, "x": x[:0], "y": y[:0], "source": np.array("not sent: evaluated off the host")}
    if "coarse_y" in arrays:
        empty["coarse_y"] = arrays["coarse_y"][:0]
    for name, part in (("test", empty), ("train", arrays)):  # train last: it marks the set whole
        with atomic_path(folder / f"{name}.npz") as tmp, open(tmp, "wb") as f:
            np.savez(f, **part, format=np.array(FORMAT))


# --- the plan ----------------------------------------------------------------------------------

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


@dataclass
class Upload:
    """One command of an allocation: what it sends beside the checkout, and what it runs."""

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
    travelling: int  # the checkout's upload, measured
    needed: int  # of it, what the host reads
    checkpoint_bytes: int  # the resumable checkpoint (it travels in the checkout once unfinished)
    wheel_bytes: int
    data_bytes: int
    uploads: list[Upload] = field(default_factory=list)
    allocations: list[Allocation] = field(default_factory=list)
    epoch_s: float = 0.0
    train_images: int = 0


def checkpoint_estimate(config, train_images: int) -> int:
    """Bytes of ``config``'s resumable checkpoint at its last epoch, measured on a checkpoint of
    the right shapes (the model, its optimiser state, a history of every optimiser step) written
    to a temporary file: a size, not a result."""
    import torch

    from frost_nb.checkpoint import save_checkpoint
    from frost_nb.models import create_model
    from frost_nb.training import _new_history, make_optimizer

    model = create_model(config.model)
    optimizer = make_optimizer(model, config.train)
    for p in model.parameters():  # one step, so the optimiser holds its state (momentum, moments)
        p.grad = torch.zeros_like(p)
    optimizer.step()
    steps = config.train.epochs * max(1, train_images // config.train.batch_size)
    history = _new_history()
    for key in history["steps"]:
        history["steps"][key] = [0.123456789 * (i % 97) for i in range(steps)]
    for key in history["epochs"]:
        history["epochs"][key] = [0.5] * config.train.epochs
    state = {"config": config.to_dict(), "model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "scheduler": {}, "rng": {"torch": torch.get_rng_state(), "data": torch.get_rng_state()},
             "calibrator": b"\0" * 4096, "history": history, "epoch": config.train.epochs, "step": steps,
             "train_seconds": 1.0, "complete": True, "metrics": {}}
    with tempfile.TemporaryDirectory() as tmp:
        return save_checkpoint(Path(tmp) / "full.pt", state).stat().st_size


def make_plan(run: RunSpec, host: Host, speed: Speed, *, data_bytes: int, travelling: int, needed: int,
              wheel_bytes: int, checkpoint_bytes: int, epochs: int, train_images: int, val_images: int,
              manifest_bytes: int = 8192, margin: int = MIB) -> Plan:
    """The uploads that carry the packed training split (``data_bytes``) beside the checkout
    (``travelling`` bytes, the unfinished checkpoint counted on top: it travels from the second
    allocation on), and the allocations that train ``epochs`` at ``speed``. Raises GpuError when
    the data needs more than ``host.max_uploads`` uploads, the checkpoint cannot come back, or an
    allocation's total exceeds the host's GPU time."""
    plan = Plan(host, speed, travelling, needed, checkpoint_bytes, wheel_bytes, data_bytes)
    if checkpoint_bytes > min(host.return_file_bytes, PARTIAL_BUDGET):
        raise GpuError(f"the run's checkpoint ({_mib(checkpoint_bytes)}) is over what one returned file "
                       f"may hold ({_mib(host.return_file_bytes)}): it cannot come back after an epoch")
    room = host.upload_bytes - travelling - checkpoint_bytes - wheel_bytes - manifest_bytes - margin
    n = math.ceil(data_bytes / room) if room > 0 else math.inf
    if n > host.max_uploads:
        raise GpuError(f"the training split ({_mib(data_bytes)}) needs {n} uploads of "
                       f"{_mib(max(room, 0))} beside the checkout ({_mib(travelling)}, of which the host "
                       f"reads {_mib(needed)}) and the checkpoint ({_mib(checkpoint_bytes)}); the host takes "
                       f"{host.max_uploads} back to back: make the tracked files smaller")
    part = math.ceil(data_bytes / n / 1024) * 1024
    train = (f"python3 -u scripts/gpu.py train {run.options()} --limit-s {host.command_s:g} "
             f"--stop-s {speed.stop_s:g}")
    for i in range(1, n + 1):
        command = train if i == n else "python3 scripts/gpu.py receive"
        plan.uploads.append(Upload([MANIFESTS, WHEEL_DIR, f"{PARTS}/up{i:02d}"], command,
                                   min(part, data_bytes - (i - 1) * part), f"{PACKED}.part{i - 1:02d}"))
    plan.train_images = train_images
    plan.epoch_s = (train_images + val_images / 3) / speed.images_per_s  # the held-out pass at a third
    fixed = {"start-up": host.startup_s, "uploads": n * host.upload_s * 1.0, "prepare": speed.prepare_s,
             "compile warm-up": speed.warmup_s}
    budget = min(host.command_s - speed.stop_s - speed.prepare_s - speed.warmup_s,
                 host.gpu_s - sum(fixed.values()))
    per = int(budget // plan.epoch_s) if plan.epoch_s > 0 else 0
    if per < 1:
        raise GpuError(f"no epoch fits an allocation: {sum(fixed.values()) / 60:.1f} minutes go to "
                       f"start-up, {n} uploads, preparing and compiling, and one epoch takes "
                       f"{plan.epoch_s / 60:.1f} at {speed.images_per_s:g} images/s")
    first = 1
    while first <= epochs:
        last = min(epochs, first + per - 1)
        seconds = {**fixed, "training": (last - first + 1) * plan.epoch_s}
        plan.allocations.append(Allocation((first, last), seconds))
        first = last + 1
    for a in plan.allocations:
        if a.total_s > host.gpu_s:
            raise GpuError(f"an allocation would take {a.total_s / 60:.1f} minutes, over the host's "
                           f"{host.gpu_s / 60:g}")
    return plan


def describe(plan: Plan, run: RunSpec) -> str:
    h, s = plan.host, plan.speed
    rate = "measured" if s.measured else "an estimate from the code, not measured"
    lines = [f"host: {h.gpu_s / 60:g} min of GPU time per allocation (start-up {h.startup_s / 60:g} "
             f"counted), {h.command_s / 60:g} min per command, {_mib(h.upload_bytes)} per upload, "
             f"{h.return_files} files of {_mib(h.return_file_bytes)} back, bare again after "
             f"{h.idle_s:g} s idle",
             f"checkout uploaded with every command: {_mib(plan.travelling)} (the host reads "
             f"{_mib(plan.needed)} of it), the unfinished checkpoint {_mib(plan.checkpoint_bytes)} on top "
             f"from the second allocation, wheels {_mib(plan.wheel_bytes)}",
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
            lines.append(f"  the host starts bare: the same uploads again; the checkout now holds "
                         f"{PARTIAL}/{run.name()}/ (commit it after fetch)")
        for i, u in enumerate(plan.uploads, 1):
            lines.append(f"  upload {i}: send {' '.join(u.send)} ({_mib(u.data_bytes)} of data); "
                         f"limit {h.command_s:g} s; run: {u.command}")
        lines.append("  then here: python scripts/gpu.py fetch --from <the returned files>"
                     + (" --commit" if k == len(plan.allocations) else ""))
    lines.append("issue the uploads back to back: the host goes back after "
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


def _sha256(path: Path) -> str:
    return parts._sha256(path)


def download_wheels(folder: Path = REPO / WHEEL_DIR, wheels=WHEELS) -> list[Path]:
    """Download the pinned wheels for the host (cp312, manylinux x86-64, no dependencies) and
    check each one's SHA-256; a file already there and whole is kept."""
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
            raise GpuError(f"{path} is missing: run python scripts/gpu.py wheels here and send {WHEEL_DIR}")
        if _sha256(path) != w.sha256:
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
    """Make this package importable (the checkout on ``sys.path``, never installed: its pins are
    not resolved on the host) and install the pinned wheels whose module is missing into
    ``site`` (pip, no index, no dependencies); returns the requirements installed."""
    site = Path(site) if site is not None else repo / SITE
    if importlib.util.find_spec("frost_nb") is None:
        sys.path.insert(0, str(repo))
    if site.is_dir() and str(site) not in sys.path:
        sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    missing = [w for w in wheels if importlib.util.find_spec(w.module) is None]
    if not missing:
        return []
    files = check_wheels(repo / WHEEL_DIR, missing)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--upgrade", "--target", str(site), *map(str, files)], check=True)
    if str(site) not in sys.path:
        sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    if still := [w.requirement for w in missing if importlib.util.find_spec(w.module) is None]:
        raise GpuError(f"{', '.join(still)} installed into {site} but cannot be imported")
    return [w.requirement for w in missing]


def receive(repo: Path = REPO) -> dict:
    """On the host: move the parts that arrived (``PARTS``/*/), each checked against its manifest,
    into ``STORE``; once all are there, join them (SHA-256 checked), decode the training split
    (pixels checked) and write it as the prepared set under ``DATA``. Returns the status."""
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
        if part and arrived.stat().st_size == part["bytes"] and _sha256(arrived) == part["sha256"]:
            os.replace(arrived, store / arrived.name)
        else:
            status["damaged"].append(arrived.name)
    status["missing"] = parts.missing(store / f"{spec['file']}.manifest.json")
    if status["missing"]:
        return status
    with tempfile.TemporaryDirectory(dir=store) as tmp:
        joined = parts.join(store / f"{spec['file']}.manifest.json", tmp)
        write_prepared(decode_split(joined), dataset, repo / DATA)
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


def _hardware(device) -> str:
    import platform

    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def room_for_another(now: float, last_epoch: float, deadline: float, final: bool) -> bool:
    """Whether one more epoch, as long as the last one (with a tenth to spare; the final one, which
    also writes the finished checkpoint, at 1.5 times), ends before ``deadline``."""
    return now + last_epoch * (1.5 if final else 1.1) <= deadline


def train(run: RunSpec, *, out: Path, limit_s: float, stop_s: float, repo: Path = REPO,
          device: str | None = None, started: float | None = None) -> dict:
    """On the host: receive the last part, resume ``run`` from ``outputs/partial/`` if it is there,
    and train epoch after epoch until ``stop_s`` before the command's limit (``limit_s`` from
    ``started``, this process's start). The trainer writes its checkpoint into ``out`` after every
    epoch, beside config.json and gpu_calls.json (this command's record appended to the run's):
    a command killed mid-epoch returns its last whole epoch. The test split is not here."""
    deadline = (STARTED if started is None else started) + limit_s - stop_s
    os.environ["FROST_DATA"] = str(repo / DATA)
    os.environ["FROST_CACHE"] = str(repo / GPU / "cache")
    ensure_packages(repo)
    status = receive(repo)
    if not status["prepared"]:
        raise GpuError(f"parts missing on this host: {', '.join(status['missing'])} (damaged: "
                       f"{status['damaged'] or 'none'}); a host that started bare needs every upload again")
    import torch

    from frost_nb.checkpoint import load_checkpoint, stored_config
    from frost_nb.runs import CONFIG_FILE, MODEL_FILE, identity_key, write_json
    from frost_nb.training import build_trainer

    config = run.config()
    if device is not None:
        config = config.replace(**{"train.device": device})
    grid, label = run.name().split("/")
    folder, partial = Path(out) / grid / label, repo / PARTIAL / grid / label
    folder.mkdir(parents=True, exist_ok=True)
    checkpoint, before, calls = folder / MODEL_FILE, 0, []
    if (partial / MODEL_FILE).is_file():
        state = load_checkpoint(partial / MODEL_FILE)
        if identity_key(stored_config(partial / MODEL_FILE, state)) != identity_key(config):
            raise GpuError(f"{partial} holds another run: move it away or train that run")
        before = state["epoch"]
        _copy(partial / MODEL_FILE, checkpoint)
        if (partial / "gpu_calls.json").is_file():
            calls = json.loads((partial / "gpu_calls.json").read_text())
    write_json(folder / CONFIG_FILE, config.to_dict())
    trainer = build_trainer(config, checkpoint=checkpoint, progress=False)
    trainer.test_set = None  # the test split stays behind: evaluated here, on the CPU, by fetch
    dev = trainer.device
    record = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "hardware": _hardware(dev),
              "torch": torch.__version__, "run": run.name(), "resumed_from_epoch": before,
              "epochs": config.train.epochs}
    kwargs = {"deadline": deadline} if "deadline" in inspect.signature(trainer.fit).parameters else {}
    done, last, epochs = before, None, config.train.epochs
    print(f"{run.name()}: from epoch {done} of {epochs}, {deadline - time.monotonic():.0f} s to train",
          flush=True)
    while done < epochs:
        if last is not None and not room_for_another(time.monotonic(), last, deadline, done + 1 == epochs):
            break
        t0 = time.monotonic()
        trainer.fit(until_epoch=done + 1, **kwargs)
        last = time.monotonic() - t0
        if trainer.epoch <= done:  # the trainer's own deadline stopped it
            break
        done = trainer.epoch
        row = {k: v[-1] for k, v in trainer.history["epochs"].items()}
        print(f"epoch {done}/{epochs}: " + ", ".join(f"{k} {v:.4g}" for k, v in row.items() if k != "epoch")
              + f", {last:.1f} s", flush=True)
        images = trainer.steps_per_epoch * config.train.batch_size
        record |= {"epochs_after": done, "last_epoch_s": round(last, 2),
                   "images_per_s": round(images / last, 1) if done > before + 1 else None,
                   "peak_memory_gib": round(torch.cuda.max_memory_allocated(dev) / 2**30, 2)
                   if dev.type == "cuda" else None, "finished": done >= epochs}
        write_json(folder / "gpu_calls.json", [*calls, record])  # beside the checkpoint, every epoch
    check_out(Path(out))
    return record


# --- here: fetch -------------------------------------------------------------------------------

def lean_export(state: dict, config, device, target: Path) -> dict:
    """Write the lean export of the finished ``state`` with bf16 weights to ``target``, its test
    metrics recomputed from those stored weights; the float32 weights' accuracy is kept beside
    them. Returns the lean metrics."""
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


def fetch(source: Path, *, repo: Path = REPO, cache: Path | None = None, runs_root: Path | None = None,
          commit: bool = False, force: bool = False) -> list[dict]:
    """Take one command's returned files (``source``) back. An unfinished run's checkpoint goes
    to ``outputs/partial/<grid>/<label>/`` (a checkpoint older than the one there is refused
    unless ``force``); a finished one is evaluated on the test split here, on the CPU, and stored
    in the run cache as a finished run, its partial folder removed; with ``commit``, its lean
    export (bf16 weights, metrics recomputed) goes into the committed runs and their index."""
    ensure_packages(repo, wheels=())
    import torch

    from frost_nb.checkpoint import load_checkpoint, load_model, save_checkpoint, stored_config
    from frost_nb.config import RunConfig
    from frost_nb.paths import cache_dir, committed_runs_dir
    from frost_nb.runs import CONFIG_FILE, METRICS_FILE, MODEL_FILE, identity_key, write_index, write_json
    from frost_nb.training import evaluate, load_split

    done = []
    for config_file in sorted(Path(source).glob(f"*/*/{CONFIG_FILE}")):
        came, grid, label = config_file.parent, config_file.parent.parent.name, config_file.parent.name
        config = RunConfig.from_dict(json.loads(config_file.read_text()))
        if not (came / MODEL_FILE).is_file():
            raise GpuError(f"{came} holds no checkpoint: the command ended before its first epoch")
        state = load_checkpoint(came / MODEL_FILE)
        if identity_key(stored_config(came / MODEL_FILE, state)) != identity_key(config):
            raise GpuError(f"{came}: the checkpoint and config.json are of different runs")
        partial = repo / PARTIAL / grid / label
        if (partial / MODEL_FILE).is_file() and not force:
            here = load_checkpoint(partial / MODEL_FILE)
            if identity_key(stored_config(partial / MODEL_FILE, here)) != identity_key(config):
                raise GpuError(f"{partial} holds another run: move it away first")
            if here["epoch"] > state["epoch"]:
                raise GpuError(f"{partial} is at epoch {here['epoch']}, the returned checkpoint at "
                               f"{state['epoch']}: keeping the newer one (--force to replace it)")
        record = came / "gpu_calls.json"
        calls = json.loads(record.read_text()) if record.is_file() else []
        entry = {"run": f"{grid}/{label}", "epoch": state["epoch"], "epochs": config.train.epochs,
                 "finished": bool(state.get("complete"))}
        if not state.get("complete"):
            for name in (CONFIG_FILE, "gpu_calls.json", MODEL_FILE):
                if (came / name).is_file():
                    _copy(came / name, partial / name)
            entry["kept"] = str(partial.relative_to(repo))
            done.append(entry)
            continue
        cpu = torch.device("cpu")
        model, _ = load_model(came / MODEL_FILE, expect=config)
        with torch.no_grad():
            test = evaluate(model, load_split(config, "test"), batch_size=config.train.eval_batch_size)
        state["metrics"] = {**state.get("metrics", {}), "test_accuracy": test.accuracy,
                            "test_accuracy_per_step": test.accuracy_per_step(),
                            "test_evaluated_on": "cpu"}
        folder = (Path(cache) if cache is not None else cache_dir()) / grid / label
        (folder / METRICS_FILE).unlink(missing_ok=True)  # unfinished until the new files are all in
        save_checkpoint(folder / MODEL_FILE, state)
        _copy(config_file, folder / CONFIG_FILE)
        write_json(folder / "gpu_calls.json", calls)
        hardware = next((c["hardware"] for c in reversed(calls) if c.get("hardware")), None)
        write_json(folder / METRICS_FILE, {**state["metrics"], "hardware": hardware})  # last: finished
        entry |= {"stored": str(folder), "test_accuracy": test.accuracy}
        if commit:
            target = (Path(runs_root) if runs_root is not None else committed_runs_dir()) / grid / label
            (target / METRICS_FILE).unlink(missing_ok=True)
            lean = lean_export(state, config, cpu, target / MODEL_FILE)
            _copy(config_file, target / CONFIG_FILE)
            write_json(target / METRICS_FILE, {**lean, "hardware": hardware})
            write_index(target.parent.parent)
            entry["committed"] = str(target)
        shutil.rmtree(partial, ignore_errors=True)
        done.append(entry)
    return done


# --- here: rehearse ----------------------------------------------------------------------------

class StandIn:
    """A stand-in host: a temporary folder that receives a copy of the checkout's travelling files
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
                         "killed": killed, "rc": proc.returncode,
                         "seconds": round(time.monotonic() - t0, 1)})
        if proc.returncode != 0 and not killed:
            raise GpuError(f"the command failed on the stand-in host:\n{command}\n{output[-4000:]}")
        check_out(self.out, self.host)
        back = self.root / f"back{len(self.log)}"
        shutil.copytree(self.out, back)
        return back, output, killed


def standin_cifar100(folder: Path, per_class_train: int = 5, per_class_test: int = 1, seed: int = 0) -> Path:
    """A small stand-in for CIFAR-100's packed PNG copy (random pixels, the same files and keys)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for part, per_class in (("train", per_class_train), ("test", per_class_test)):
        labels = np.repeat(np.arange(100), per_class)
        blobs = []
        for image in rng.integers(0, 256, (len(labels), 32, 32, 3), dtype=np.uint8):
            buf = io.BytesIO()
            Image.fromarray(image).save(buf, format="PNG")
            blobs.append(np.frombuffer(buf.getvalue(), dtype=np.uint8))
        offsets = np.concatenate([[0], np.cumsum([len(b) for b in blobs])]).astype(np.int64)
        np.savez(folder / f"{part}.npz", jpeg=np.concatenate(blobs), offsets=offsets, labels=labels,
                 classes=np.array([f"class{i:02d}" for i in range(100)]), coarse_labels=labels // 5,
                 coarse_classes=np.array([f"super{i}" for i in range(20)]), format=np.array("png"))
    return folder


REHEARSAL = RunSpec(size="smoke", dataset="cifar100", seed=0, epochs=2,
                    sets=("model.stem_stride=2", "data.val_fraction=0.2", "data.limit=500"))


def rehearse(work: Path, *, run: RunSpec = REHEARSAL, speed: Speed = Speed(), host: Host = Host(),
             repo: Path = REPO, say=print) -> dict:
    """Every printed command of ``run``'s plan against a stand-in host in ``work``: CIFAR-100 when
    the data root holds it, else a small stand-in in its format; the upload limit set so that the
    training split needs ``host.max_uploads`` uploads. Allocation 1 is killed once its first epoch's
    checkpoint is back; allocation 2 starts bare, resumes from the fetched checkpoint and finishes;
    the test split is evaluated here. Returns what happened."""
    from frost_nb.data.prepare import find_source, prepare
    from frost_nb.paths import data_root

    work = Path(work)
    here = work / "checkout"  # what a clone holds: the travelling files, outputs/partial/ included
    for name in travelling_files(repo):
        if not name.startswith(f"{PARTIAL}/{run.name()}/"):
            (here / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / name, here / name)
    hit, _ = find_source(run.dataset, data_root())
    source = hit[1] if hit is not None else standin_cifar100(work / "standin")
    say(f"data: {source}" + (" (a stand-in in CIFAR-100's packed format)" if hit is None else ""))
    root = work / "data"
    prepare(run.dataset, root, source=source, download=False)
    config = run.config()
    packed = pack(run.dataset, host.max_uploads, repo=here, data_root=root)
    from frost_nb.training import load_split

    here_config = config.replace(**{"data.root": str(root)})
    train_images = len(load_split(here_config, "train"))
    val_images = len(load_split(here_config, "val")) if config.data.val_fraction else 0
    checkpoint = checkpoint_estimate(config, train_images)
    travelling = travelling_bytes(here)
    overhead = travelling + checkpoint + wheel_bytes() + 8192 + MIB
    host = replace(host, upload_bytes=overhead + math.ceil(packed.stat().st_size / host.max_uploads) + 4096)
    plan = make_plan(run, host, speed, data_bytes=packed.stat().st_size, travelling=travelling,
                     needed=needed_bytes(here), wheel_bytes=wheel_bytes(), checkpoint_bytes=checkpoint,
                     epochs=config.train.epochs, train_images=train_images, val_images=val_images)
    say(describe(plan, run))
    stand = StandIn(work / "host", host)
    grid, label = run.name().split("/")
    result = {"uploads": len(plan.uploads), "upload_limit": host.upload_bytes, "allocations": []}
    for k in (1, 2):
        stand.start()
        first = k == 1
        kill = (lambda out: (out / grid / label / "model.pt").is_file()) if first else None
        for i, upload in enumerate(plan.uploads, 1):
            last = i == len(plan.uploads)
            back, output, killed = stand.run(here, upload.command, upload.send,
                                             kill_when=kill if last else None)
            say(f"allocation {k}, upload {i}: {upload.command}" + (" (killed)" if killed else "")
                + f"\n{output[-1500:]}")
        before, os.environ["FROST_DATA"] = os.environ.get("FROST_DATA"), str(root)  # here: the test split
        try:
            entries = fetch(back, repo=here, cache=work / "cache", runs_root=work / "runs", commit=not first)
        finally:
            os.environ.pop("FROST_DATA") if before is None else os.environ.update(FROST_DATA=before)
        result["allocations"].append({"killed": killed, "fetched": entries})
        say(json.dumps(entries))
    result["log"] = stand.log
    return result


# --- the command line --------------------------------------------------------------------------

def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", default="cifar")
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
    from frost_nb.training import load_split

    run, (host, speed) = _spec(args), _host(args)
    config = run.config()
    train_images = len(load_split(config, "train"))
    val_images = len(load_split(config, "val")) if config.data.val_fraction else 0
    partial = REPO / PARTIAL / run.name() / "model.pt"
    travelling = travelling_bytes(REPO) - (partial.stat().st_size if partial.is_file() else 0)
    return make_plan(run, host, speed, data_bytes=packed.stat().st_size, travelling=travelling,
                     needed=needed_bytes(REPO), wheel_bytes=wheel_bytes(),
                     checkpoint_bytes=checkpoint_estimate(config, train_images), epochs=config.train.epochs,
                     train_images=train_images, val_images=val_images)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for verb, text in (("plan", "print the uploads and allocations (here)"),
                       ("pack", "the training split as WebP parts, one per upload, then the plan (here)")):
        p = sub.add_parser(verb, help=text)
        _run_options(p)
        _host_options(p)
    sub.add_parser("wheels", help="download the pinned wheels into .whl/ (here)")
    sub.add_parser("receive", help="check and keep the parts that arrived (host)")
    p = sub.add_parser("train", help="receive, resume, train until shortly before the limit (host)")
    _run_options(p)
    p.add_argument("--limit-s", type=float, default=Host().command_s, help="the command's limit")
    p.add_argument("--stop-s", type=float, default=Speed().stop_s, help="stop this long before it")
    p.add_argument("--out", default=os.environ.get("OUT"), help="the return folder (default $OUT)")
    p.add_argument("--device", default=None, help="train.device (default: the config's)")
    p = sub.add_parser("fetch", help="take a command's returned files back (here)")
    p.add_argument("--from", dest="source", required=True, help="the folder of the returned files")
    p.add_argument("--commit", action="store_true", help="a finished run's lean export into outputs/runs/")
    p.add_argument("--force", action="store_true", help="replace a newer checkpoint in outputs/partial/")
    p = sub.add_parser("rehearse", help="every printed command at smoke size on a stand-in host (here)")
    p.add_argument("--work", default=None, help="the stand-in's folder (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.command in ("receive", "train"):  # on the host: this checkout's package, never another
        sys.path.insert(0, str(REPO))
    try:
        if args.command in ("plan", "pack"):
            ensure_packages(REPO, wheels=())
            packed = REPO / SEND / args.dataset / PACKED
            if args.command == "pack":
                packed = pack(args.dataset, args.max_uploads)
            elif not packed.is_file():
                raise GpuError(f"{packed} is missing: run python scripts/gpu.py pack first")
            plan = _plan_from_args(args, packed)
            if args.command == "pack" and len(plan.uploads) != args.max_uploads:
                pack(args.dataset, len(plan.uploads))
            print(describe(plan, _spec(args)))
        elif args.command == "wheels":
            for path in download_wheels():
                print(f"{path.relative_to(REPO)} ({_mib(path.stat().st_size)}, SHA-256 checked)")
        elif args.command == "receive":
            ensure_packages(REPO)
            print(json.dumps(receive()), flush=True)
        elif args.command == "train":
            if not args.out:
                raise GpuError("$OUT is not set: pass --out FOLDER, the folder whose files come back")
            print(json.dumps(train(_spec(args), out=Path(args.out), limit_s=args.limit_s, stop_s=args.stop_s,
                                   device=args.device)), flush=True)
        elif args.command == "fetch":
            for entry in fetch(Path(args.source), commit=args.commit, force=args.force):
                print(json.dumps(entry))
        else:
            ensure_packages(REPO, wheels=())
            with tempfile.TemporaryDirectory() as tmp:
                result = rehearse(Path(args.work) if args.work else Path(tmp))
            print(json.dumps({k: v for k, v in result.items() if k != "log"}, indent=1))
    except (GpuError, parts.PartsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
