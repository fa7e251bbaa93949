"""Data prepared once: whichever source of a data set exists, converted into one format.

``prepare(name, root=None, *, source=None, download=True, force=False)`` writes
``<root>/prepared/<name>/train.npz`` and ``test.npz`` (root: the data root, ``$FROST_DATA`` or
``<repo>/data``) and returns that folder. ``data.load_dataset`` runs it on first use, then reads
only those files: nanoGPT's ``data/*/prepare.py`` and airbench's ``CifarLoader`` (torchvision's
CIFAR converted once into a tensor file), for every source format this project meets.
``python -m frost_nb.prepare NAME ...`` runs it from the shell (``make data`` does).

Sources, in the order tried (local copies always before any download):

- ``fashion-mnist``: IDX files in ``<root>/fashion-mnist/`` (or ``.../raw/``, or torchvision's
  ``<root>/FashionMNIST/raw/``), then Debian's ``/usr/share/datasets/fashion-mnist/``
  (``$FROST_SYSTEM_DATA``), then torchvision's download.
- ``cifar10``: ``<root>/cifar10/{train,test}.npz`` (packed JPEG copy, see
  ``../shared/data/cifar10/README.md``), then torchvision's ``cifar-10-batches-py`` in
  ``<root>/cifar10/`` or ``<root>/``, then torchvision's download.
- ``cifar100``: ``<root>/cifar100/{train,test}.npz`` (packed lossless PNG copy of the official
  split, see ``../shared/data/cifar100/README.md``), then torchvision's ``cifar-100-python`` in
  ``<root>/cifar100/`` or ``<root>/``, then torchvision's download (whose pickles carry the
  20 superclasses, as the packed copy does).

``source=`` names one folder to convert instead (any of the set's formats; never a download).

The prepared format, one uncompressed ``.npz`` per part (``np.load`` needs no pickle): ``x``
uint8 (N, C, H, W), ``y`` int64 (N,), ``classes`` str (K,), ``source`` str (what it was made
from), ``format`` int (`FORMAT`), and for CIFAR-100 ``coarse_y`` int64 (N,) and
``coarse_classes`` str (20,). Images keep the order the loader has always used (the packed
copies' fixed shuffle included), so splits and committed results do not move. The files live
beside the sources, not inside them: ``<root>/cifar10`` is often a link to a shared read-only
copy (``make data`` links one), and nothing is ever written through it; a data root marked
read-only is refused even for root, whom permissions do not stop.

Both parts are written to temporary files, renamed only once both are complete, so an
interrupted prepare leaves no prepared file; a set counts as prepared when both parts are there.
The zip's CRC-32 turns a damaged file into a `DataError` that says how to prepare it again.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import logging
import math
import pickle
import shutil
import sys
import zipfile
import zlib
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from .paths import (
    OutputError,
    atomic_path,
    check_writable,
    data_root,
    downloads_allowed,
    nearest_existing,
    system_data_dir,
)

log = logging.getLogger("frost_nb")


class DataError(ValueError):
    """Data cannot be found or read, or a parameter is wrong; the message says how to fix it."""


FORMAT = 1  # version of the prepared files: a file of another version is prepared again by hand
PARTS = ("train", "test")
SHAPES = {"fashion-mnist": (1, 28, 28), "cifar10": (3, 32, 32), "cifar100": (3, 32, 32)}  # (C, H, W)
HOW_TO_GET = {  # shown when a set cannot be found
    "fashion-mnist": "apt-get install dataset-fashion-mnist (Debian), or put the four IDX .gz files in "
                     "<root>/fashion-mnist/, or allow torchvision's download (data.download=True)",
    "cifar10": "put train.npz/test.npz (packed JPEG format) or torchvision's cifar-10-batches-py in "
               "<root>/cifar10/, or allow torchvision's download (data.download=True)",
    "cifar100": "put train.npz/test.npz (packed PNG format) or torchvision's cifar-100-python in "
                "<root>/cifar100/ (make data links ../shared/data/cifar100 there), or allow torchvision's "
                "download (data.download=True)",
}
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                         "Sneaker", "Bag", "Ankle boot")  # label order of the IDX files
FIXED_ORDER_SEED = 0  # seed of every order that must not depend on split_seed


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


def fashion_mnist_system_dir() -> Path:
    """Where Debian's ``dataset-fashion-mnist`` puts the IDX files (moved by ``$FROST_SYSTEM_DATA``)."""
    return system_data_dir() / "fashion-mnist"


def prepared_dir(name: str, root: str | Path | None = None) -> Path:
    return data_root(root) / "prepared" / name


def is_prepared(name: str, root: str | Path | None = None) -> bool:
    """Are both prepared parts there? (Existence only: `read_prepared` checks the contents.)"""
    return all((prepared_dir(name, root) / f"{p}.npz").is_file() for p in PARTS)


# ---------------------------------------------------------------------------------------------
# Preparing
# ---------------------------------------------------------------------------------------------

def prepare(name: str, root: str | Path | None = None, *, source: str | Path | None = None,
            download: bool = True, force: bool = False) -> Path:
    """Convert `name`'s source into ``<root>/prepared/<name>/{train,test}.npz``; return the folder.

    Nothing is done when both files are there, unless ``force``. ``source`` is a folder to
    convert instead of the places searched (see the module docstring). Raises `DataError`
    when no source is found (listing every place looked in) or one is unreadable, and
    ``paths.OutputError`` when the prepared folder cannot be written.
    """
    if name not in SHAPES:
        raise DataError(f"name={name!r} is not prepared: expected one of {', '.join(map(repr, SHAPES))} "
                        "(digits comes with scikit-learn, imagenet100 is read from its class folders).")
    base = data_root(root).resolve()
    dest = prepared_dir(name, base)
    if not force and is_prepared(name, base):
        return dest
    hit, looked = find_source(name, base, source)
    if hit is None and source is not None:
        raise missing_data_error(name, looked, f"source={str(source)!r} holds no complete copy.",
                                 HOW_TO_GET[name])
    if hit is None and not download:
        raise missing_data_error(name, looked, "download=False, so torchvision's download was not tried.",
                                 HOW_TO_GET[name])
    if hit is None and not downloads_allowed():
        raise missing_data_error(name, looked, "Downloads are switched off (FROST_OFFLINE is set; make test "
                                 "sets it so that no test depends on a data set it did not make).",
                                 HOW_TO_GET[name])
    if hit is None:
        hit = _download(name, base, looked)
    kind, place = hit
    # before seconds of decoding: a destination that cannot be written says so at once. Root
    # ignores permission bits, so a folder marked read-only (the shared copies) is refused here.
    fix = (f"set FROST_DATA (or root=) to a writable folder, or prepare it there from this copy: "
           f"python -m frost_nb.prepare {name} --source {place} --root <writable folder>")
    if not nearest_existing(dest).stat().st_mode & 0o222:
        raise OutputError(f"cannot write the prepared copy of {name} into {dest}: {nearest_existing(dest)} "
                          f"is marked read-only (a shared copy?); {fix}")
    check_writable(dest, f"the prepared copy of {name}", fix, folder=True)
    log.info("preparing %s from %s into %s", name, place, dest)
    parts = {p: _CONVERTERS[kind](place, name, p) for p in PARTS}  # both read before either is written
    with contextlib.ExitStack() as stack:  # both parts to temporary files, renamed only when both are done
        for p in PARTS:
            _write(stack.enter_context(atomic_path(dest / f"{p}.npz")), parts[p])
    return dest


def _write(path: Path, part: Part) -> None:
    arrays = {"x": np.ascontiguousarray(part.x), "y": part.y, "classes": np.array(part.classes),
              "source": np.array(part.source), "format": np.array(FORMAT)}
    if part.coarse_y is not None:
        arrays |= {"coarse_y": part.coarse_y, "coarse_classes": np.array(part.coarse_classes)}
    with open(path, "wb") as f:  # a file object: savez would append .npz to the temporary name
        np.savez(f, **arrays)


def read_prepared(name: str, root: str | Path | None, part: str) -> Part:
    """One prepared part, checked: shapes, dtypes, label ranges, the format version."""
    path = prepared_dir(name, root) / f"{part}.npz"
    fix = (f"delete {path.parent} and load again (it is prepared again from the source), or run "
           f"python -m frost_nb.prepare {name} --force")
    try:
        with np.load(path) as z:  # allow_pickle stays False; reading a member checks its CRC-32
            got = {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, EOFError, ValueError, OSError, zlib.error) as err:
        raise DataError(f"{path} is truncated or corrupt ({type(err).__name__}: {err}); {fix}.") from err
    if got.get("format") != FORMAT:
        raise DataError(f"{path} is not a prepared file of format {FORMAT} (format "
                        f"{got.get('format', 'missing')}); {fix}.")
    x, y, classes = got.get("x"), got.get("y"), got.get("classes")
    coarse, coarse_classes = got.get("coarse_y"), got.get("coarse_classes")
    n = -1 if y is None else len(y)
    good = (x is not None and x.dtype == np.uint8 and x.shape == (n, *SHAPES[name]) and y.shape == (n,)
            and y.dtype == np.int64
            and classes is not None and "source" in got and (n == 0 or 0 <= y.min() <= y.max() < len(classes))
            and (coarse is None) == (coarse_classes is None)
            and (coarse is None or (coarse.dtype == np.int64 and coarse.shape == y.shape
                                    and (n == 0 or 0 <= coarse.min() <= coarse.max() < len(coarse_classes)))))
    if not good:
        raise DataError(f"{path}: arrays do not fit a prepared {name} part (x uint8 (N, "
                        f"{', '.join(map(str, SHAPES[name]))}), y int64 (N,) below len(classes)); {fix}.")
    return Part(x, y, tuple(str(c) for c in classes), str(got["source"]), coarse,
                None if coarse_classes is None else tuple(str(c) for c in coarse_classes))


# ---------------------------------------------------------------------------------------------
# Finding a source
# ---------------------------------------------------------------------------------------------

_IDX_STEMS = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
              "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
_PICKLE_FILES = {"cifar10": tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch", "batches.meta"),
                 "cifar100": ("train", "test", "meta")}
_PICKLE_FOLDER = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}


def _candidates(name: str, root: Path, source: str | Path | None) -> list[tuple[str, Path, str]]:
    """(kind, place, what is looked for) for each local place, in the order tried."""
    if name == "fashion-mnist":
        folders = ([Path(source), Path(source) / "raw"] if source is not None else
                   [root / "fashion-mnist", root / "fashion-mnist" / "raw", root / "FashionMNIST" / "raw",
                    fashion_mnist_system_dir()])
        return [("idx", folder, "four IDX files (.gz or uncompressed)") for folder in folders]
    packed = ("packed", f"train.npz and test.npz (packed {'JPEG' if name == 'cifar10' else 'PNG'})")
    pickled = ("pickles", "torchvision's pickled batches" if name == "cifar10"
               else "torchvision's pickled train, test, meta")
    sub = _PICKLE_FOLDER[name]
    places = ([(packed, Path(source)), (pickled, Path(source)), (pickled, Path(source) / sub)]
              if source is not None else
              [(packed, root / name), (pickled, root / name / sub), (pickled, root / sub)])
    return [(kind, place, what) for (kind, what), place in places]


def _idx_file(folder: Path, stem: str) -> Path | None:
    for path in (folder / f"{stem}.gz", folder / stem):
        if path.is_file():
            return path
    return None


def _complete(kind: str, place: Path, name: str) -> bool:
    """Are all the files of the set there? (Existence only: reading may still fail.)"""
    if kind == "idx":
        return all(_idx_file(place, s) for stems in _IDX_STEMS.values() for s in stems)
    if kind == "packed":
        return all((place / f"{p}.npz").is_file() for p in PARTS)
    return all((place / f).is_file() for f in _PICKLE_FILES[name])


def find_source(name: str, root: Path, source: str | Path | None = None
                ) -> tuple[tuple[str, Path] | None, list[str]]:
    """((kind, place) of the first complete local copy, or None; the places looked in)."""
    looked = []
    for kind, place, what in _candidates(name, root, source):
        if _complete(kind, place, name):
            return (kind, place), looked
        looked.append(f"{place} ({what})")
    return None, looked


def where(name: str, root: Path) -> str | None:
    """Where `load_dataset` reads `name` from, or would prepare it from; None when missing."""
    if is_prepared(name, root):
        return str(prepared_dir(name, root))
    hit, _ = find_source(name, root)
    return None if hit is None else f"{hit[1]} (prepared into {prepared_dir(name, root)} on first use)"


def missing_data_error(name: str, looked: list[str], note: str, how_to_get: str) -> DataError:
    places = "".join(f"\n  - {p}" for p in looked)
    return DataError(f"data set {name!r} not found. Looked in:{places}\n{note}\nTo get it: {how_to_get}.")


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
        raise missing_data_error(name, looked, f"download=True, but torchvision's {klass} download into "
                                 f"{folder} failed (no internet access?): {type(err).__name__}: {err}",
                                 HOW_TO_GET[name]) from err
    hit, still = find_source(name, root)
    if hit is None:
        raise missing_data_error(name, still, f"torchvision's {klass} download into {folder} ended, but "
                                 "left no complete copy in these places.", HOW_TO_GET[name])
    return hit


# ---------------------------------------------------------------------------------------------
# Converters: one per source kind, each (place, name, part) -> Part of numpy arrays
# ---------------------------------------------------------------------------------------------

def _from_idx(folder: Path, name: str, part: str) -> Part:
    images_stem, labels_stem = _IDX_STEMS[part]
    x = _read_idx(_idx_file(folder, images_stem), ndim=3)  # (N, 28, 28)
    y = _read_idx(_idx_file(folder, labels_stem), ndim=1)  # (N,)
    if len(x) != len(y):
        raise DataError(f"{folder}: {len(x)} {part} images but {len(y)} labels; replace the IDX files "
                        f"({HOW_TO_GET[name]}).")
    return Part(x[:, None], y.astype(np.int64), FASHION_MNIST_CLASSES, str(folder))  # (N, 1, 28, 28)


def _read_idx(path: Path, ndim: int) -> np.ndarray:
    """An IDX array of unsigned bytes (LeCun's MNIST format): magic 0x0000080<ndim>, then
    `ndim` big-endian int32 sizes, then the bytes."""
    fix = f"delete it and get it again ({HOW_TO_GET['fashion-mnist']})"
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as err:  # truncated or damaged gzip stream
        raise DataError(f"{path} is truncated or corrupt ({type(err).__name__}: {err}); {fix}.") from err
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
    """The packed format: all image files concatenated (JPEG for CIFAR-10, PNG for CIFAR-100; Pillow
    tells them apart), image i is jpeg[offsets[i]:offsets[i+1]]; optional ``coarse_labels`` and
    ``coarse_classes`` (CIFAR-100's superclasses)."""
    from PIL import Image

    path = folder / f"{part}.npz"
    fix = f"replace it with a good copy ({HOW_TO_GET[name]})"
    try:
        with np.load(path) as z:  # allow_pickle stays False: the format needs no pickle
            jpeg, offsets, labels, classes = (z[k] for k in ("jpeg", "offsets", "labels", "classes"))
            coarse, coarse_classes = ((z["coarse_labels"], z["coarse_classes"]) if "coarse_labels" in z.files
                                      else (None, None))
    except (zipfile.BadZipFile, EOFError, ValueError, KeyError, OSError, zlib.error) as err:
        raise DataError(f"{path} is truncated or corrupt ({type(err).__name__}: {err}); {fix}.") from err
    n = len(labels)
    diffs = np.diff(offsets)
    if (offsets.ndim != 1 or len(offsets) != n + 1 or n == 0 or offsets[0] != 0
            or offsets[-1] != jpeg.size or (diffs <= 0).any()):
        raise DataError(f"{path}: inconsistent offsets (need N+1 = {n + 1} increasing values from 0 to "
                        f"len(jpeg) = {jpeg.size}); {fix}.")
    if labels.min() < 0 or labels.max() >= len(classes):
        raise DataError(f"{path}: labels outside 0..{len(classes) - 1}; {fix}.")
    if coarse is not None and (coarse.shape != labels.shape or coarse.min() < 0
                               or coarse.max() >= len(coarse_classes)):
        raise DataError(f"{path}: coarse_labels do not match labels or lie outside "
                        f"0..{len(coarse_classes) - 1}; {fix}.")
    channels, size, _ = SHAPES[name]
    x = np.empty((n, size, size, channels), dtype=np.uint8)  # (N, H, W, C) as Pillow gives it
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
                tuple(str(c) for c in classes), str(path),
                None if coarse is None else coarse.astype(np.int64)[order],
                None if coarse is None else tuple(str(c) for c in coarse_classes))


def _from_pickles(folder: Path, name: str, part: str) -> Part:
    """torchvision's CIFAR folders, read directly: torchvision's own class refuses files whose
    md5 differs from the release (any re-packed or test copy), and hashing costs time."""
    if name == "cifar10":
        files = [f"data_batch_{i}" for i in range(1, 6)] if part == "train" else ["test_batch"]
        meta_file, names_key, labels_key = "batches.meta", "label_names", "labels"
    else:
        files, meta_file, names_key, labels_key = [part], "meta", "fine_label_names", "fine_labels"
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
                            f"replace it ({HOW_TO_GET[name]}).") from err
    try:
        meta = _unpickle(folder / meta_file, name)
        classes = tuple(str(c) for c in meta[names_key])
        coarse_classes = tuple(str(c) for c in meta.get("coarse_label_names", ()))
    except (KeyError, TypeError) as err:
        raise DataError(f"{folder / meta_file}: no {names_key!r} list; replace it "
                        f"({HOW_TO_GET[name]}).") from err
    x, y = np.concatenate(xs), np.concatenate(ys)  # (N, 3, 32, 32), (N,)
    if len(x) != len(y) or (len(y) and (y.min() < 0 or y.max() >= len(classes))):
        raise DataError(f"{folder}: {len(x)} images, {len(y)} labels, {len(classes)} classes do not match; "
                        f"replace the files ({HOW_TO_GET[name]}).")
    if not coarse:
        return Part(x, y, classes, str(folder))
    c = np.concatenate(coarse)
    if len(coarse) != len(files) or len(c) != len(y) or not coarse_classes \
            or (len(c) and (c.min() < 0 or c.max() >= len(coarse_classes))):
        raise DataError(f"{folder}: the coarse labels do not match the images or the meta file's "
                        f"coarse_label_names; replace the files ({HOW_TO_GET[name]}).")
    return Part(x, y, classes, str(folder), c, coarse_classes)


def _unpickle(path: Path, name: str) -> dict:
    try:
        with open(path, "rb") as f:
            return pickle.load(f, encoding="latin1")  # the releases are Python 2 pickles
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, AttributeError, ImportError) as err:
        raise DataError(f"{name}: {path} is truncated or corrupt ({type(err).__name__}: {err}); "
                        f"delete it and get the data again ({HOW_TO_GET[name]}).") from err


_CONVERTERS = {"idx": _from_idx, "packed": _from_packed, "pickles": _from_pickles}


def main(argv: list[str] | None = None) -> int:
    """``python -m frost_nb.prepare NAME ...``: prepare each set; exit 1 when one could not be."""
    parser = argparse.ArgumentParser(prog="python -m frost_nb.prepare", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="+", choices=tuple(SHAPES), metavar="NAME", help=", ".join(SHAPES))
    parser.add_argument("--root", help="data root (default: $FROST_DATA, else <repo>/data)")
    parser.add_argument("--source", help="a folder holding the set in one of its source formats")
    parser.add_argument("--no-download", action="store_true", help="never try torchvision's download")
    parser.add_argument("--force", action="store_true", help="prepare again even when prepared")
    args = parser.parse_args(argv)
    failed = False
    for name in args.names:
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
