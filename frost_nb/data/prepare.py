"""The data sets' facts, and each set prepared once from whichever source exists (`_PLACES`;
data/README.md) into ``<root>/prepared/<name>/{train,test}.npz``, in the loader's order."""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import io
import logging
import math
import os
import pickle
import shutil
import sys
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from ..paths import (OutputError, atomic_path, check_readable, check_writable, data_root, downloads_allowed,
                     nearest_existing, system_data_dir, write_atomic)

log = logging.getLogger("frost_nb")


class DataError(ValueError):
    """Data cannot be found or read, or a parameter is wrong; the message says how to fix it."""


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    channels: int
    image_size: int  # side of the (square) images the model sees
    num_classes: int
    mean: tuple[float, ...]  # per-channel normalisation, on [0, 1] pixels
    std: tuple[float, ...]
    augmentation: str  # "shift" | "crop_flip" | "resized_crop_flip"
    in_memory: bool  # batches come from device-resident tensors
    how_to_get: str  # shown when the data cannot be found
    stratified_val: bool = False  # the held-out split takes the same share of every class


_DOWNLOAD = "or allow torchvision's download (data.download=True)"
DATASETS: dict[str, DatasetInfo] = {info.name: info for info in (
    DatasetInfo("digits", 1, 8, 10, (0.3,), (0.38,), "shift", True,
                "bundled with scikit-learn: pip install scikit-learn"),
    DatasetInfo("fashion-mnist", 1, 28, 10, (0.286,), (0.353,), "crop_flip", True,
                "apt-get install dataset-fashion-mnist (Debian), or put the four IDX .gz files in "
                f"<root>/fashion-mnist/, {_DOWNLOAD}"),
    DatasetInfo("cifar10", 3, 32, 10, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), "crop_flip", True,
                "put train.npz/test.npz (packed JPEG format) or torchvision's cifar-10-batches-py in "
                f"<root>/cifar10/, {_DOWNLOAD}"),
    DatasetInfo("cifar100", 3, 32, 100, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), "crop_flip", True,
                "put train.npz/test.npz (packed PNG format) or torchvision's cifar-100-python in "
                f"<root>/cifar100/ (make data links ../shared/data/cifar100 there), {_DOWNLOAD}",
                stratified_val=True),
    DatasetInfo("imagenet100", 3, 224, 100, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), "resized_crop_flip",
                False, "put the ImageNet-100 class folders in <root>/imagenet100/train/ and .../val/ "
                "(100 ImageNet classes; no automatic download exists)"),
)}

FORMAT = 1  # version of the prepared files: a file of another version is prepared again by hand
PARTS = ("train", "test")
SHEET, SHEET_COLS = 1000, 100  # write_sheets: images per WebP sheet, per row (WebP: 16,383 px a side)
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                         "Sneaker", "Bag", "Ankle boot")  # label order of the IDX files
FIXED_ORDER_SEED = 0  # seed of every order that must not depend on split_seed
_names = lambda v: None if v is None else tuple(str(c) for c in v)  # class names as str (None: none)

# Where a prepared set's source may be, in the order tried: (kind, folder under the data root),
# then (kind, folder under ``source=``) when one is named (never a download then). "{system}" is
# $FROST_SYSTEM_DATA (Debian's /usr/share/datasets, where dataset-fashion-mnist installs).
_PLACES = {
    "fashion-mnist": ([("idx", "fashion-mnist"), ("idx", "fashion-mnist/raw"), ("idx", "FashionMNIST/raw"),
                       ("idx", "{system}/fashion-mnist")], [("idx", "."), ("idx", "raw")]),
    # either CIFAR set: its packed files, then torchvision's release folder (in the set's folder, or not)
    **{name: ([("packed", name), ("pickles", f"{name}/{release}"), ("pickles", release)],
              [("packed", "."), ("pickles", "."), ("pickles", release)])
       for name, release in (("cifar10", "cifar-10-batches-py"), ("cifar100", "cifar-100-python"))},
}
_IDX = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",  # train part: images, labels
        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")  # test part
_FILES = {  # (name, kind) -> (the files of a complete copy, what the missing-data error calls them)
    ("fashion-mnist", "idx"): (_IDX, "four IDX files (.gz or uncompressed)"),
    ("cifar10", "packed"): (("train.npz", "test.npz"), "train.npz and test.npz (packed JPEG)"),
    ("cifar10", "pickles"): ((*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta"),
                             "torchvision's pickled batches"),
    ("cifar100", "packed"): (("train.npz", "test.npz"), "train.npz and test.npz (packed PNG)"),
    ("cifar100", "pickles"): (("train", "test", "meta"), "torchvision's pickled train, test, meta"),
}


class Part(NamedTuple):
    """The train or test part of a set: numpy arrays here, torch tensors once `data` loads them."""

    x: Any  # (N, C, H, W) uint8
    y: Any  # (N,) int64
    classes: tuple[str, ...]
    source: str
    coarse_y: Any = None  # (N,) int64 superclass labels (CIFAR-100), else None
    coarse_classes: tuple[str, ...] | None = None


def fixed_order(n: int) -> torch.Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(FIXED_ORDER_SEED))


def prepared_dir(name: str, root: str | Path) -> Path:
    return Path(root) / "prepared" / name


def checked_data_root(root: str | Path | None = None) -> Path:
    """The data root (``paths.data_root``), resolved, or a ``DataError`` naming it and the cause (a
    missing root passes: a download makes it). Entry points resolve it once."""
    given = data_root(root)
    check_readable(given, "the data root", "set FROST_DATA (or --root, root=) to a readable folder",
                   folder=True, must_exist=False, error=DataError)
    return given.resolve()


def is_prepared(name: str, root: str | Path) -> bool:
    """Are both prepared parts there? (Existence only: `read_prepared` checks the contents.)"""
    return all((prepared_dir(name, root) / f"{p}.npz").is_file() for p in PARTS)


# --- Preparing, and reading what was prepared -------------------------------------------------

def prepare(name: str, root: str | Path | None = None, *, source: str | Path | None = None,
            download: bool = True, force: bool = False) -> Path:
    """``<root>/prepared/<name>/`` made from ``source`` or the first of `_PLACES`; `DataError` when no
    source is found or one is unreadable, ``paths.OutputError`` when it cannot be written."""
    if name not in _PLACES:
        raise DataError(f"name={name!r} is not prepared: expected one of {', '.join(map(repr, _PLACES))} "
                        "(digits comes with scikit-learn, imagenet100 is read from its class folders).")
    return prepare_at(name, checked_data_root(root), source=source, download=download,
                      offline=not downloads_allowed(), force=force)


def prepare_at(name: str, base: Path, *, download: bool, offline: bool, source: str | Path | None = None,
               force: bool = False) -> Path:
    """`prepare` into the resolved root ``base``; ``offline``: not ``paths.downloads_allowed()``."""
    if source is not None:
        check_readable(source, "the source folder", "pass a folder holding the set to --source (source=)",
                       folder=True, error=DataError)
    dest = prepared_dir(name, base)
    if not force and is_prepared(name, base):
        return dest
    hit, looked = find_source(name, base, source)
    if hit is None:
        note = (f"source={str(source)!r} holds no complete copy." if source is not None
                else "download=False, so torchvision's download was not tried." if not download
                else "Downloads are switched off (FROST_OFFLINE is set; make test sets it so that no test "
                     "depends on a data set it did not make)." if offline else None)
        if note is not None:
            raise missing_data_error(name, looked, note)
        hit = _download(name, base, looked)
    kind, place = hit
    # before seconds of decoding: a destination that cannot be written says so at once. Root
    # ignores permission bits, so a folder marked read-only (the shared copies) is refused here.
    fix = (f"set FROST_DATA (or root=) to a writable folder, or prepare it there from this copy: "
           f"python -m frost_nb.data.prepare {name} --source {place} --root <writable folder>")
    check_writable(dest, f"the prepared copy of {name}", fix, folder=True)
    if not os.stat(nearest_existing(dest)).st_mode & 0o222:
        raise OutputError(f"cannot write the prepared copy of {name} into {dest}: {nearest_existing(dest)} "
                          f"is marked read-only (a shared copy?); {fix}")
    log.info("preparing %s from %s into %s", name, place, dest)
    return write_prepared(dest, {p: _CONVERTERS[kind](place, name, p) for p in PARTS}, fix)  # both read first


def write_prepared(dest: Path, parts: dict[str, Part], fix: str = "choose a writable data root") -> Path:
    """Write ``parts`` (``PARTS`` -> Part) as ``dest/<part>.npz``, the format `read_prepared` reads:
    each to a temporary file, all renamed only when every one is written."""
    with contextlib.ExitStack() as stack:
        for p, part in parts.items():
            arrays = {k: np.asarray(v) for k, v in part._asdict().items() if v is not None}  # as write_sheets
            arrays |= {"x": np.ascontiguousarray(part.x), "format": np.array(FORMAT)}
            # a file object: savez would append .npz to the temporary name
            with open(stack.enter_context(atomic_path(dest / f"{p}.npz", fix)), "wb") as f:
                np.savez(f, **arrays)
    return dest


def read_prepared(name: str, root: str | Path, part: str) -> Part:
    """One prepared part, checked: shapes, dtypes, label ranges, the format version. The zip's
    CRC-32 turns a damaged file into a `DataError` that says how to prepare it again."""
    path = prepared_dir(name, root) / f"{part}.npz"
    fix = (f"delete {path.parent} and load again (it is prepared again from the source), or run "
           f"python -m frost_nb.data.prepare {name} --force")
    with _reading(name, path, fix), np.load(path) as z:  # no pickle; reading a member checks its CRC-32
        got = {k: z[k] for k in z.files}
    if got.get("format") != FORMAT:
        raise DataError(f"{path} is not a prepared file of format {FORMAT} (format "
                        f"{got.get('format', 'missing')}); {fix}.")
    x, y, classes, coarse, coarse_classes = map(got.get, ("x", "y", "classes", "coarse_y", "coarse_classes"))
    shape = (DATASETS[name].channels, DATASETS[name].image_size, DATASETS[name].image_size)  # (C, H, W)
    good = (x is not None and y is not None and classes is not None and "source" in got and y.ndim == 1
            and x.dtype == np.uint8 and x.shape == (len(y), *shape) and y.dtype == np.int64
            and (coarse is None) == (coarse_classes is None) and (coarse is None or coarse.dtype == np.int64)
            and _labels_fit(y, len(classes), coarse, 0 if coarse is None else len(coarse_classes)))
    if not good:
        raise DataError(f"{path}: arrays do not fit a prepared {name} part (x uint8 (N, "
                        f"{', '.join(map(str, shape))}), y int64 (N,) below len(classes)); {fix}.")
    return Part(x, y, _names(classes), str(got["source"]), coarse, _names(coarse_classes))


def write_sheets(part: Part, target: Path, *, method: int = 6, quality: int = 50) -> Path:
    """``part`` in the file ``target`` as WebP lossless sheets (image j of a sheet at row j // SHEET_COLS,
    column j % SHEET_COLS; scripts/gpu.py sends a training split so) with the pixels' SHA-256, checked."""
    from PIL import Image

    x = np.asarray(part.x).transpose(0, 2, 3, 1)  # (N, H, W, C)
    n, h, w, c = x.shape
    blobs = []
    for chunk in (x[i:i + SHEET] for i in range(0, n, SHEET)):
        tiles = np.concatenate([chunk, np.zeros((-len(chunk) % SHEET_COLS, h, w, c), np.uint8)])
        sheet = tiles.reshape(-1, SHEET_COLS, h, w, c).transpose(0, 2, 1, 3, 4).reshape(-1, SHEET_COLS * w, c)
        Image.fromarray(sheet.squeeze(-1) if c == 1 else sheet).save(
            out := io.BytesIO(), format="WEBP", lossless=True, method=method, quality=quality)
        blobs.append(np.frombuffer(out.getvalue(), np.uint8))
    rest = {k: np.asarray(v) for k, v in part._asdict().items() if k != "x" and v is not None}
    rest["sha256"] = np.array(hashlib.sha256(np.asarray(part.x).tobytes()).hexdigest())  # (N, C, H, W)'s
    np.savez(buf := io.BytesIO(), webp=np.concatenate(blobs), offsets=np.cumsum([0, *map(len, blobs)]),
             shape=np.array([n, c, h, w]), **rest)
    read_sheets(io.BytesIO(buf.getvalue()))  # the exact pixels, or nothing is written
    return write_atomic(target, buf.getvalue())


def read_sheets(source) -> Part:
    """The ``Part`` in ``write_sheets``'s file (a path or a file object), its pixels checked."""
    from PIL import Image

    with np.load(source) as z:
        got = {k: z[k] for k in z.files}
    (n, c, h, w), sheets, edges = (int(v) for v in got["shape"]), [], got["offsets"]
    for i in range(len(edges) - 1):
        with Image.open(io.BytesIO(got["webp"][edges[i]:edges[i + 1]].tobytes())) as im:
            sheet = np.asarray(im.convert("L" if c == 1 else "RGB")).reshape(-1, h, SHEET_COLS, w, c)
        sheets.append(sheet.transpose(0, 2, 1, 3, 4).reshape(-1, h, w, c)[:min(SHEET, n - i * SHEET)])
    x = np.ascontiguousarray(np.concatenate(sheets).transpose(0, 3, 1, 2))  # (N, C, H, W)
    if hashlib.sha256(x.tobytes()).hexdigest() != got["sha256"].item():
        raise DataError(f"{source}: the decoded images do not match their SHA-256 (damaged on the way): "
                        "write and send them again")
    return Part(x, got["y"], _names(got.get("classes")), str(got["source"]), got.get("coarse_y"),
                _names(got.get("coarse_classes")))


def _labels_fit(y: np.ndarray, k: int, coarse: np.ndarray | None = None, k_coarse: int = 0) -> bool:
    """y (N,) in 0..k-1; coarse None, or (N,) in 0..k_coarse-1."""
    fit = lambda v, k: v.ndim == 1 and (len(v) == 0 or 0 <= v.min() <= v.max() < k)
    return fit(y, k) and (coarse is None or (coarse.shape == y.shape and fit(coarse, k_coarse)))


@contextlib.contextmanager
def _reading(name: str, path: Path, fix: str):
    """A file that cannot be read (cut off, damaged, not of its format) as a `DataError` naming it."""
    try:
        yield
    except (OSError, EOFError, ValueError, KeyError, zlib.error, zipfile.BadZipFile, pickle.UnpicklingError,
            AttributeError, ImportError) as err:
        raise DataError(f"{name}: {path} is truncated or corrupt ({type(err).__name__}: {err}); "
                        f"{fix}.") from err


# --- Finding a source -------------------------------------------------------------------------

def find_source(name: str, root: Path, source: str | Path | None = None
                ) -> tuple[tuple[str, Path] | None, list[str]]:
    """((kind, folder) of the first complete local copy, or None; the places looked in). Only
    checks that the files exist: reading them may still fail."""
    looked, system = [], system_data_dir()
    for kind, folder in _PLACES[name][0 if source is None else 1]:
        place = (root if source is None else Path(source)) / folder.format(system=system)
        files, what = _FILES[name, kind]
        if all(_file(place, f, kind) for f in files):
            return (kind, place), looked
        looked.append(f"{place} ({what})")
    return None, looked


def _file(folder: Path, name: str, kind: str) -> Path | None:
    """``folder/name``, for IDX files ``name.gz`` first; None when not there."""
    candidates = ([folder / f"{name}.gz"] if kind == "idx" else []) + [folder / name]
    return next((path for path in candidates if path.is_file()), None)


def missing_data_error(name: str, looked: list[str], note: str) -> DataError:
    places = "".join(f"\n  - {p}" for p in looked)
    return DataError(f"data set {name!r} not found. Looked in:{places}\n{note}\n"
                     f"To get it: {DATASETS[name].how_to_get}.")


def _download(name: str, root: Path, looked: list[str]) -> tuple[str, Path]:
    """torchvision's download into the data root, where `find_source` then finds its files."""
    import torchvision.datasets as tvd

    klass, folder = {"fashion-mnist": ("FashionMNIST", root), "cifar10": ("CIFAR10", root / "cifar10"),
                     "cifar100": ("CIFAR100", root / "cifar100")}[name]
    # the folder this download makes (FashionMNIST writes into <root>/FashionMNIST): a failed
    # download removes it again, with the partial files in it, rather than leave an empty shell
    target = folder / klass if name == "fashion-mnist" else folder
    base = nearest_existing(target)
    made = base / target.relative_to(base).parts[0] if base != target else None
    try:
        getattr(tvd, klass)(str(folder), train=True, download=True)  # one archive holds both parts
    except Exception as err:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise missing_data_error(
            name, looked, f"download=True, but torchvision's {klass} download into {folder} failed "
            f"(no internet access?): {type(err).__name__}: {err}") from err
    hit, still = find_source(name, root)
    if hit is None:
        raise missing_data_error(name, still, f"torchvision's {klass} download into {folder} ended, but "
                                 "left no complete copy in these places.")
    return hit


# --- Converters: one per source kind, each (place, name, part) -> Part of numpy arrays --------

def _from_idx(folder: Path, name: str, part: str) -> Part:
    images, labels = _IDX[:2] if part == "train" else _IDX[2:]
    x = _read_idx(_file(folder, images, "idx"), ndim=3)  # (N, 28, 28)
    y = _read_idx(_file(folder, labels, "idx"), ndim=1)  # (N,)
    if len(x) != len(y):
        raise DataError(f"{folder}: {len(x)} {part} images but {len(y)} labels; replace the IDX files "
                        f"({DATASETS[name].how_to_get}).")
    return Part(x[:, None], y.astype(np.int64), FASHION_MNIST_CLASSES, str(folder))  # (N, 1, 28, 28)


def _read_idx(path: Path, ndim: int) -> np.ndarray:
    """An IDX array of unsigned bytes (LeCun's MNIST format): magic 0x0000080<ndim>, then
    `ndim` big-endian int32 sizes, then the bytes."""
    fix = f"delete it and get it again ({DATASETS['fashion-mnist'].how_to_get})"
    with _reading("fashion-mnist", path, fix), (gzip.open(path, "rb") if path.suffix == ".gz"
                                                else open(path, "rb")) as f:
        raw = f.read()
    header = 4 + 4 * ndim
    magic = int.from_bytes(raw[:4], "big")
    if len(raw) < header or magic != 0x0800 + ndim:
        raise DataError(f"{path} is not an IDX file of {ndim}-d unsigned bytes (magic {magic:#010x}, "
                        f"expected {0x0800 + ndim:#010x}); {fix}.")
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=header)
    if data.size != math.prod(dims):
        raise DataError(f"{path} is truncated or corrupt: {data.size} pixel bytes, the header says "
                        f"{dims} = {math.prod(dims)}; {fix}.")
    return data.reshape(dims).copy()  # copy: frombuffer views are read-only


def _from_packed(folder: Path, name: str, part: str) -> Part:
    """The packed format: all image files (JPEG or PNG) concatenated, image i jpeg[offsets[i]:offsets[i+1]];
    optional ``coarse_labels`` and ``coarse_classes`` (CIFAR-100's superclasses)."""
    from PIL import Image

    path = folder / f"{part}.npz"
    fix = f"replace it with a good copy ({DATASETS[name].how_to_get})"
    with _reading(name, path, fix), np.load(path) as z:  # allow_pickle stays False: no pickle needed
        jpeg, offsets, labels, classes = (z[k] for k in ("jpeg", "offsets", "labels", "classes"))
        coarse, coarse_classes = ((z["coarse_labels"], z["coarse_classes"]) if "coarse_labels" in z.files
                                  else (None, None))
    n = len(labels)
    if (offsets.ndim != 1 or len(offsets) != n + 1 or n == 0 or offsets[0] != 0
            or offsets[-1] != jpeg.size or (np.diff(offsets) <= 0).any()):
        raise DataError(f"{path}: inconsistent offsets (need N+1 = {n + 1} increasing values from 0 to "
                        f"len(jpeg) = {jpeg.size}); {fix}.")
    if not _labels_fit(labels, len(classes), coarse, 0 if coarse is None else len(coarse_classes)):
        raise DataError(f"{path}: labels outside 0..{len(classes) - 1}, or coarse_labels that do not match "
                        f"them or lie outside their classes; {fix}.")
    size = DATASETS[name].image_size
    x = np.empty((n, size, size, DATASETS[name].channels), dtype=np.uint8)  # (N, H, W, C) as Pillow gives it
    for i in range(n):  # ~13 us an image; threads do not help (Pillow's decoder holds the GIL here)
        try:
            with Image.open(io.BytesIO(jpeg[offsets[i]:offsets[i + 1]].tobytes())) as im:
                x[i] = np.asarray(im.convert("RGB"))
        except (OSError, ValueError) as err:  # undecodable image, or not size x size
            raise DataError(f"{path}: image {i} cannot be decoded as a {size}x{size} RGB image "
                            f"({type(err).__name__}: {err}); {fix}.") from err
    # The files are sorted by class: a fixed shuffle makes `limit` and in-order evaluation
    # see every class (the pickled CIFAR releases come in a random order already).
    order = fixed_order(n).numpy()
    return Part(x.transpose(0, 3, 1, 2)[order], labels.astype(np.int64)[order],  # (N, C, H, W), (N,)
                _names(classes), str(path), None if coarse is None else coarse.astype(np.int64)[order],
                _names(coarse_classes))


def _from_pickles(folder: Path, name: str, part: str) -> Part:
    """torchvision's CIFAR folders, read directly: torchvision's own class refuses files whose
    md5 differs from the release (any re-packed or test copy), and hashing costs time."""
    *batches, test_file, meta_file = _FILES[name, "pickles"][0]
    files = batches if part == "train" else [test_file]
    names_key, labels_key = (("label_names", "labels") if name == "cifar10"
                             else ("fine_label_names", "fine_labels"))
    replace = f"replace the files ({DATASETS[name].how_to_get})"
    xs, ys, coarse = [], [], []
    for file in files:
        entry = _unpickle(folder / file, name)
        try:
            # each row is the 1024 red, then green, then blue pixels: already (C, H, W) order
            xs.append(np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            ys.append(np.asarray(entry[labels_key], dtype=np.int64))
            if "coarse_labels" in entry:
                coarse.append(np.asarray(entry["coarse_labels"], dtype=np.int64))
        except (KeyError, ValueError, TypeError) as err:
            raise DataError(f"{folder / file}: not a CIFAR batch ({type(err).__name__}: {err}); "
                            f"{replace}.") from err
    try:
        meta = _unpickle(folder / meta_file, name)
        classes = _names(meta[names_key])
        coarse_classes = _names(meta.get("coarse_label_names", ()))
    except (KeyError, TypeError) as err:
        raise DataError(f"{folder / meta_file}: no {names_key!r} list; {replace}.") from err
    x, y = np.concatenate(xs), np.concatenate(ys)  # (N, 3, 32, 32), (N,)
    if len(x) != len(y) or not _labels_fit(y, len(classes)):
        raise DataError(f"{folder}: {len(x)} images, {len(y)} labels, {len(classes)} classes do not match; "
                        f"{replace}.")
    c = np.concatenate(coarse) if coarse else None
    if len(coarse) not in (0, len(files)) or (c is not None and not (
            coarse_classes and _labels_fit(y, len(classes), c, len(coarse_classes)))):
        raise DataError(f"{folder}: the coarse labels do not match the images or the meta file's "
                        f"coarse_label_names; {replace}.")
    return Part(x, y, classes, str(folder), c, None if c is None else coarse_classes)


def _unpickle(path: Path, name: str) -> dict:
    with _reading(name, path, f"delete it and get the data again ({DATASETS[name].how_to_get})"), \
            open(path, "rb") as f:
        return pickle.load(f, encoding="latin1")  # the releases are Python 2 pickles


_CONVERTERS = {"idx": _from_idx, "packed": _from_packed, "pickles": _from_pickles}


def main(argv: list[str] | None = None) -> int:
    """``python -m frost_nb.data.prepare NAME ...``: prepare each set; exit 1 when one could not be."""
    parser = argparse.ArgumentParser(prog="python -m frost_nb.data.prepare", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="+", choices=tuple(_PLACES), metavar="NAME", help=", ".join(_PLACES))
    parser.add_argument("--root", help="data root (default: $FROST_DATA, else <repo>/data)")
    parser.add_argument("--source", help="a folder holding the set in one of its source formats")
    parser.add_argument("--no-download", action="store_true", help="never try torchvision's download")
    parser.add_argument("--force", action="store_true", help="prepare again even when prepared")
    args = parser.parse_args(argv)
    failed = False
    for name in args.names:  # a bad root fails every set with its message
        try:
            folder = prepare(name, args.root, source=args.source, download=not args.no_download,
                             force=args.force)
            print(f"{name}: prepared in {folder}")
        except (DataError, OSError) as err:  # OSError: paths.OutputError, an unwritable destination
            print(f"{name}: {err}", file=sys.stderr)
            failed = True
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
