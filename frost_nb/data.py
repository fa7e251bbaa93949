"""Data sets by name, the held-out split, per-image augmentation and device-resident batches.

``load_dataset(name, split, root=None, ...)`` returns an `ImageData`: for the small sets
(digits, Fashion-MNIST, CIFAR-10/100) the whole split as one uint8 tensor ``x`` of shape
(N, C, H, W) and int64 labels ``y``; for ImageNet-100 a torchvision ``ImageFolder`` view
(``x`` is None). ``make_batches`` turns either into an iterable of normalised float batches
on a device.

Where data comes from, in order (local copies always before any download):

- ``digits``: scikit-learn's bundled ``load_digits`` (offline; pixels 0..16 rescaled to 0..255).
- ``fashion-mnist``: IDX files in ``<root>/fashion-mnist/`` (or ``.../raw/``, or torchvision's
  ``<root>/FashionMNIST/raw/``), then the Debian package's ``/usr/share/datasets/fashion-mnist/`` (``$FROST_SYSTEM_DATA``),
  then torchvision's download.
- ``cifar10``: ``<root>/cifar10/{train,test}.npz`` (packed JPEG copy, see
  ``../shared/data/cifar10/README.md``), then torchvision's ``cifar-10-batches-py`` in
  ``<root>/cifar10/`` or ``<root>/``, then torchvision's download.
- ``cifar100``: ``<root>/cifar100/{train,test}.npz`` (packed lossless PNG copy of the official
  split, see ``../shared/data/cifar100/README.md``), then torchvision's ``cifar-100-python`` in
  ``<root>/cifar100/`` or ``<root>/``, then torchvision's download. Coarse labels (the 20
  superclasses) come with the packed copy and the pickles (``ImageData.coarse_y``).
- ``imagenet100``: ``<root>/imagenet100/{train,val}/<class>/*.JPEG`` (no download exists).

Splits: "test" is the set's own test split (digits: a fixed stratified 20%, seed 0);
"val" is a seeded random ``val_fraction`` of the training split and "train" the rest, so
the two are disjoint and together the whole training split. For CIFAR-100 (100 classes of 500
training images) "val" is stratified: ``round(val_fraction * n_c)`` images of each class c, so a
5,000-image held-out split has 50 of every class; the other sets keep their plain seeded split. "val" calibrates the halting
threshold on images the model was not trained on (docs/method.md section 7).

Decoded arrays are cached in-process (``functools.lru_cache``), never written to disk.
"""

from __future__ import annotations

import copy
import functools
import gzip
import io
import math
import pickle
import shutil
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Subset

from .paths import data_root, downloads_allowed, nearest_existing, system_data_dir


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


DATASETS: dict[str, DatasetInfo] = {
    "digits": DatasetInfo("digits", 1, 8, 10, (0.3,), (0.38,), "shift", True,
                          "bundled with scikit-learn: pip install scikit-learn"),
    "fashion-mnist": DatasetInfo(
        "fashion-mnist", 1, 28, 10, (0.286,), (0.353,), "crop_flip", True,
        "apt-get install dataset-fashion-mnist (Debian), or put the four IDX .gz files in "
        "<root>/fashion-mnist/, or allow torchvision's download (data.download=True)"),
    "cifar10": DatasetInfo(
        "cifar10", 3, 32, 10, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), "crop_flip", True,
        "put train.npz/test.npz (packed JPEG format) or torchvision's cifar-10-batches-py in "
        "<root>/cifar10/, or allow torchvision's download (data.download=True)"),
    "cifar100": DatasetInfo(
        "cifar100", 3, 32, 100, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), "crop_flip", True,
        "put train.npz/test.npz (packed PNG format) or torchvision's cifar-100-python in "
        "<root>/cifar100/ (make data links ../shared/data/cifar100 there), or allow torchvision's "
        "download (data.download=True)", stratified_val=True),
    "imagenet100": DatasetInfo(
        "imagenet100", 3, 224, 100, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), "resized_crop_flip",
        False, "put the ImageNet-100 class folders in <root>/imagenet100/train/ and .../val/ "
        "(100 ImageNet classes; no automatic download exists)"),
}

SPLITS = ("train", "val", "test")
DIGITS_TEST_FRACTION = 0.2  # load_digits has no test split: a fixed stratified one (seed 0)
FIXED_ORDER_SEED = 0  # seed of every order that must not depend on split_seed
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                         "Sneaker", "Bag", "Ankle boot")  # label order of the IDX files


@dataclass
class ImageData:
    """One split of one data set. ``len(ds)`` is the number of images."""

    x: torch.Tensor | None  # (N, C, H, W) uint8; None for folder sets
    y: torch.Tensor  # (N,) int64
    info: DatasetInfo
    classes: list[str]
    name: str
    split: str
    source: str  # where the images were read from
    folder: Any = None  # folder sets: a torch Subset of a torchvision ImageFolder, with transforms
    coarse_y: torch.Tensor | None = None  # (N,) int64 superclass labels, where the set has them
    coarse_classes: list[str] | None = None

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def __repr__(self) -> str:  # the default would print every pixel
        shape = "folder" if self.x is None else f"{tuple(self.x.shape)} {self.x.dtype}"
        return (f"ImageData(name={self.name!r}, split={self.split!r}, n={len(self)}, x={shape}, "
                f"source={self.source!r})")


class _Part(NamedTuple):
    """A decoded train or test part of an in-memory set (what the cache holds)."""

    x: torch.Tensor  # (N, C, H, W) uint8
    y: torch.Tensor  # (N,) int64
    classes: tuple[str, ...]
    source: str
    coarse: torch.Tensor | None = None  # (N,) int64 superclass labels (CIFAR-100), else None
    coarse_classes: tuple[str, ...] | None = None


# ---------------------------------------------------------------------------------------------
# Public entry points
# ---------------------------------------------------------------------------------------------

def load_dataset(name: str, split: str, root: str | Path | None = None, *, val_fraction: float = 0.1,
                 split_seed: int = 0, download: bool = True, limit: int | None = None) -> ImageData:
    """One split ("train", "val" or "test") of the data set `name` (a key of `DATASETS`).

    ``root`` is the data root (then ``$FROST_DATA``, then ``<repo>/data``). ``limit`` keeps the
    first ``limit`` images of the split, after splitting. Raises `DataError` when the data
    is missing (listing every place looked in) or unreadable.
    """
    _check_choice("name", name, tuple(DATASETS))
    _check_choice("split", split, SPLITS)
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float)) \
            or not 0.0 <= val_fraction < 1.0:
        raise DataError(f"val_fraction={val_fraction!r} is invalid: expected a fraction in [0, 1).")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise DataError(f"limit={limit!r} is invalid: expected None or a positive integer.")
    info = DATASETS[name]
    base = data_root(root).resolve()
    if not info.in_memory:
        return _load_folder_split(info, base, split, val_fraction, split_seed, limit)

    part = _load_part(name, str(base), "test" if split == "test" else "train", bool(download))
    n = part.y.shape[0]
    if split == "test":
        idx = torch.arange(n)
    else:
        train_idx, val_idx = (_stratified_split_indices(part.y, val_fraction, split_seed) if info.stratified_val
                              else _split_indices(n, val_fraction, split_seed))
        idx = train_idx if split == "train" else val_idx
    if limit is not None:
        idx = idx[:limit]
    # advanced indexing copies, so callers may modify x in place without touching the cache
    coarse = None if part.coarse is None else part.coarse[idx]
    return ImageData(x=part.x[idx], y=part.y[idx], info=info, classes=list(part.classes), name=name,
                     split=split, source=part.source, coarse_y=coarse,
                     coarse_classes=None if part.coarse_classes is None else list(part.coarse_classes))


def available_datasets(root: str | Path | None = None) -> dict[str, str]:
    """name -> where `load_dataset` would read it from, or ``"missing: <how to get it>"``.

    Only checks that the files exist: nothing is decoded or downloaded.
    """
    base = data_root(root).resolve()
    found = {}
    for name, info in DATASETS.items():
        hit, _ = _locate(name, base)
        found[name] = hit[1] if hit is not None else f"missing: {info.how_to_get}"
    return found


def clear_cache() -> None:
    """Forget decoded arrays and scanned folders (e.g. after replacing files on disk)."""
    _load_part.cache_clear()
    _scan_image_folder.cache_clear()


def make_batches(ds: ImageData, batch_size: int, *, shuffle: bool, augment: bool,
                 device: str | torch.device, generator: torch.Generator | None = None,
                 drop_last: bool = False, num_workers: int = 0) -> Batches | FolderBatches:
    """Batches ``(x, y)`` of `ds`: x float32 (B, C, H, W) normalised with ``ds.info``, y int64,
    both on `device`. ``len()`` is the number of batches per pass.

    All randomness (order, augmentation) comes from `generator` (a CPU ``torch.Generator``;
    None: torch's global generator), one draw per pass: the same generator state gives the
    same pass. ``num_workers`` is used by folder sets only (a DataLoader).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise DataError(f"batch_size={batch_size!r} is invalid: expected a positive integer.")
    if ds.x is None:
        return FolderBatches(ds, batch_size, shuffle=shuffle, augment=augment, device=device,
                             generator=generator, drop_last=drop_last, num_workers=num_workers)
    return Batches(ds, batch_size, shuffle=shuffle, augment=augment, device=device,
                   generator=generator, drop_last=drop_last)


# ---------------------------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------------------------

class Batches:
    """Device-resident batches of an in-memory set (the cifar10-airbench recipe).

    The whole split is moved to the device once; a pass gathers batches with a permutation,
    so there is no per-image Python work. Each pass draws one ``epoch_seed`` from the
    generator and derives everything else from it, so the generator advances by the same
    amount however many batches are consumed, and ``iterate(epoch_seed, start)`` resumes a
    pass exactly at batch ``start``.
    """

    def __init__(self, ds: ImageData, batch_size: int, *, shuffle: bool, augment: bool,
                 device: str | torch.device, generator: torch.Generator | None = None,
                 drop_last: bool = False) -> None:
        self.device = torch.device(device)
        self.x = ds.x.to(self.device)  # (N, C, H, W) uint8: 1 byte a pixel, 4x less than float
        self.y = ds.y.to(self.device)  # (N,)
        self.mean = torch.tensor(ds.info.mean, device=self.device).view(1, -1, 1, 1)  # (1, C, 1, 1)
        self.std = torch.tensor(ds.info.std, device=self.device).view(1, -1, 1, 1)
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.augmentation = ds.info.augmentation if augment else None
        self.pad = _crop_padding(ds.info)
        self.generator = generator
        self.epoch_seed: int | None = None  # seed of the latest pass (None: pass needs no randomness)

    def __len__(self) -> int:
        n = self.x.shape[0]
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        # An evaluation pass draws nothing: it must not disturb the caller's random stream.
        self.epoch_seed = None
        if self.shuffle or self.augmentation:
            self.epoch_seed = int(torch.randint(0, 2**62, (1,), generator=self.generator))
        return self.iterate(self.epoch_seed)

    def iterate(self, epoch_seed: int | None,
                start: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One pass with a given seed, from batch `start` (to resume an interrupted pass)."""
        n, dev = self.x.shape[0], self.device
        g = torch.Generator().manual_seed(epoch_seed if epoch_seed is not None else 0)
        # Random numbers are drawn on the CPU for the whole pass: the same seed gives the
        # same batches on every device, and a resumed pass skips batches without drawing.
        order = torch.randperm(n, generator=g) if self.shuffle else torch.arange(n)  # (N,)
        order = order.to(dev)
        if self.augmentation:
            span = 2 * self.pad + 1
            # (N,) crop offsets into the padded images, and mirror flags
            dy = torch.randint(0, span, (n,), generator=g).to(dev)
            dx = torch.randint(0, span, (n,), generator=g).to(dev)
            flip = (torch.rand(n, generator=g) < 0.5).to(dev)  # drawn for "shift" too (unused there)
        for b in range(start, len(self)):
            sl = slice(b * self.batch_size, min((b + 1) * self.batch_size, n))
            idx = order[sl]
            x = self.x[idx]  # (B, C, H, W) uint8
            if self.augmentation:
                x = random_crop(x, dy[sl], dx[sl], self.pad)
                if self.augmentation == "crop_flip":
                    x = random_flip(x, flip[sl])
            # normalise after augmentation, so padding is black (0) like torchvision's RandomCrop
            x = (x.float().div_(255) - self.mean) / self.std  # (B, C, H, W) float32
            yield x, self.y[idx]


def random_crop(x: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, pad: int) -> torch.Tensor:
    """Per-image crop of the zero-padded images: image i is shifted by (dy[i]-pad, dx[i]-pad).

    x (B, C, H, W), dy and dx (B,) integers in [0, 2*pad]. Two gathers, no Python loop.
    """
    b, c, h, w = x.shape
    xp = F.pad(x, (pad, pad, pad, pad))  # (B, C, H+2p, W+2p), zeros
    rows = dy[:, None] + torch.arange(h, device=x.device)  # (B, H) rows of the padded image
    cols = dx[:, None] + torch.arange(w, device=x.device)  # (B, W)
    xp = xp.gather(2, rows[:, None, :, None].expand(b, c, h, w + 2 * pad))  # (B, C, H, W+2p)
    return xp.gather(3, cols[:, None, None, :].expand(b, c, h, w))  # (B, C, H, W)


def random_flip(x: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Mirror image i left-right where flip[i] is True. x (B, C, H, W), flip (B,) bool."""
    return torch.where(flip[:, None, None, None], x.flip(3), x)


def _crop_padding(info: DatasetInfo) -> int:
    if info.augmentation == "shift":
        return 1  # 8 px digits: a 1 px translation already moves an eighth of the image
    return 4 if info.image_size >= 32 else 2  # the usual pad 4 of CIFAR; 2 for 28 px images


class FolderBatches:
    """Batches of a folder set through a DataLoader (JPEG decoding needs worker processes).

    Same interface and reproducibility as `Batches`: the order and each image's random
    transform come from a per-pass ``epoch_seed`` (each image's transform is seeded from it
    and the image's position), so results do not depend on ``num_workers``.
    """

    def __init__(self, ds: ImageData, batch_size: int, *, shuffle: bool, augment: bool,
                 device: str | torch.device, generator: torch.Generator | None = None,
                 drop_last: bool = False, num_workers: int = 0) -> None:
        self.device = torch.device(device)
        subset = ds.folder
        base = copy.copy(subset.dataset)  # shallow: shares the scanned file list
        _set_transform(base, _folder_transform(ds.info, train=augment))
        self.dataset = _SeededImages(Subset(base, subset.indices), seeded=augment)
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.augment, self.num_workers, self.generator = augment, num_workers, generator
        self.epoch_seed: int | None = None

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.epoch_seed = None
        if self.shuffle or self.augment:
            self.epoch_seed = int(torch.randint(0, 2**62, (1,), generator=self.generator))
        self.dataset.seed = self.epoch_seed or 0  # workers get a copy of the dataset per pass
        loader = DataLoader(self.dataset, self.batch_size, shuffle=self.shuffle, drop_last=self.drop_last,
                            num_workers=self.num_workers, pin_memory=self.device.type == "cuda",
                            generator=torch.Generator().manual_seed(self.dataset.seed))
        for x, y in loader:
            yield (x.to(self.device, non_blocking=True),  # (B, 3, 224, 224) float32, normalised
                   y.to(self.device, non_blocking=True))


class _SeededImages(Dataset):
    """Applies each image's random transform under its own seed (pass seed, image index)."""

    def __init__(self, subset: Any, seeded: bool) -> None:
        self.subset, self.seeded, self.seed = subset, seeded, 0

    def __len__(self) -> int:
        return len(self.subset)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if not self.seeded:
            return self.subset[i]
        # torchvision's transforms draw from torch's global generator; fork it so the caller's
        # stream is untouched and image i gets the same crop whichever worker loads it
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed((self.seed + i * 0x9E3779B97F4A7C15) % 2**63)
            return self.subset[i]


# ---------------------------------------------------------------------------------------------
# Splits
# ---------------------------------------------------------------------------------------------

def _split_indices(n: int, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, val) indices: a seeded permutation, the first round(val_fraction * n) are val.

    Indices stay in permuted order, so `limit` keeps a random subset rather than (for sets
    stored sorted by class) the first classes. Val sets of one seed are nested in val_fraction.
    """
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))  # (n,)
    n_val = int(round(val_fraction * n))
    return perm[n_val:], perm[:n_val]


def _stratified_split_indices(y: torch.Tensor, val_fraction: float,
                              seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, val) indices with ``round(val_fraction * n_c)`` val images of each class c: the
    first of each class in a seeded permutation. Both stay in permuted order (as in
    `_split_indices`), and val sets of one seed are nested in val_fraction."""
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))  # (n,)
    labels = y[perm]
    rank = torch.zeros(len(y), dtype=torch.int64)  # rank of each permuted image within its class
    quota = torch.zeros(len(y), dtype=torch.int64)
    for c, count in zip(*torch.unique(labels, return_counts=True)):
        members = labels == c
        rank[members] = torch.arange(int(count))
        quota[members] = int(round(val_fraction * int(count)))
    is_val = rank < quota
    return perm[~is_val], perm[is_val]


def _fixed_order(n: int) -> torch.Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(FIXED_ORDER_SEED))


def _check_choice(param: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise DataError(f"{param}={value!r} is invalid: expected one of {', '.join(map(repr, choices))}.")


# ---------------------------------------------------------------------------------------------
# Finding the files
# ---------------------------------------------------------------------------------------------

_IDX_STEMS = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
              "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
_CIFAR10_FILES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch", "batches.meta")
_CIFAR100_FILES = ("train", "test", "meta")


def fashion_mnist_system_dir() -> Path:
    """Where Debian's ``dataset-fashion-mnist`` puts the IDX files (moved by ``$FROST_SYSTEM_DATA``)."""
    return system_data_dir() / "fashion-mnist"


def _candidates(name: str, root: Path) -> list[tuple[str, Path, str]]:
    """(format, place, what is looked for) for each local place, in the order tried."""
    if name == "fashion-mnist":
        idx = "four IDX files (.gz or uncompressed)"
        return [("idx", root / "fashion-mnist", idx), ("idx", root / "fashion-mnist" / "raw", idx),
                ("idx", root / "FashionMNIST" / "raw", idx), ("idx", fashion_mnist_system_dir(), idx)]
    if name == "cifar10":
        pickled = "torchvision's pickled batches"
        return [("packed", root / "cifar10", "train.npz and test.npz (packed JPEG)"),
                ("cifar-pickle", root / "cifar10" / "cifar-10-batches-py", pickled),
                ("cifar-pickle", root / "cifar-10-batches-py", pickled)]
    if name == "cifar100":
        pickled = "torchvision's pickled train, test, meta"
        return [("packed", root / "cifar100", "train.npz and test.npz (packed PNG)"),
                ("cifar-pickle", root / "cifar100" / "cifar-100-python", pickled),
                ("cifar-pickle", root / "cifar-100-python", pickled)]
    if name == "imagenet100":
        return [("folder", root / "imagenet100", "train/ and val/ class folders")]
    return []


def _idx_file(folder: Path, stem: str) -> Path | None:
    for path in (folder / f"{stem}.gz", folder / stem):
        if path.is_file():
            return path
    return None


def _complete(fmt: str, place: Path, name: str) -> bool:
    """Are all the files of the set there? (Existence only: reading may still fail.)"""
    if fmt == "idx":
        return all(_idx_file(place, s) for stems in _IDX_STEMS.values() for s in stems)
    if fmt == "packed":
        return (place / "train.npz").is_file() and (place / "test.npz").is_file()
    if fmt == "cifar-pickle":
        files = _CIFAR10_FILES if name == "cifar10" else _CIFAR100_FILES
        return all((place / f).is_file() for f in files)
    if fmt == "folder":
        return (place / "train").is_dir() and (place / "val").is_dir()
    raise AssertionError(fmt)


def _locate(name: str, root: Path) -> tuple[tuple[str, str] | None, list[str]]:
    """((format, place) of the first complete local copy, or None; the places looked in)."""
    if name == "digits":
        return ("sklearn", "sklearn.datasets.load_digits (bundled with scikit-learn)"), []
    looked = []
    for fmt, place, what in _candidates(name, root):
        if _complete(fmt, place, name):
            return (fmt, str(place)), looked
        looked.append(f"{place} ({what})")
    return None, looked


def _missing(name: str, looked: list[str], note: str) -> DataError:
    places = "".join(f"\n  - {p}" for p in looked)
    return DataError(f"data set {name!r} not found. Looked in:{places}\n{note}\n"
                     f"To get it: {DATASETS[name].how_to_get}.")


# ---------------------------------------------------------------------------------------------
# Loading in-memory sets
# ---------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=16)
def _load_part(name: str, root: str, part: str, download: bool) -> _Part:
    """The decoded "train" or "test" part of an in-memory set (cached: decoding takes seconds)."""
    hit, looked = _locate(name, Path(root))
    if hit is not None:
        fmt, place = hit
        if fmt == "sklearn":
            return _read_digits(part)
        if fmt == "idx":
            return _read_fashion_mnist(Path(place), part)
        if fmt == "packed":
            return _read_packed(Path(place) / f"{part}.npz", DATASETS[name])
        return _read_cifar_pickle(Path(place), name, part)
    if not download:
        raise _missing(name, looked, "download=False, so torchvision's download was not tried.")
    if not downloads_allowed():
        raise _missing(name, looked, "Downloads are switched off (FROST_OFFLINE is set; make test sets "
                       "it so that no test depends on a data set it did not make).")
    return _download(name, Path(root), part, looked)


def _read_digits(part: str) -> _Part:
    from sklearn.datasets import load_digits

    digits = load_digits()
    # (1797, 1, 8, 8): pixels 0..16 -> 0..255, so every set is uint8 with one normalisation rule
    x = np.rint(digits.images * (255.0 / 16.0)).astype(np.uint8)[:, None]
    y = torch.as_tensor(digits.target, dtype=torch.int64)
    # Fixed stratified test split: per class, a seeded round(20%) of its images. Own torch
    # code (not sklearn's train_test_split) so it cannot change with the sklearn version.
    g = torch.Generator().manual_seed(FIXED_ORDER_SEED)
    test = []
    for c in range(10):
        members = torch.nonzero(y == c).flatten()
        k = int(round(DIGITS_TEST_FRACTION * len(members)))
        test.append(members[torch.randperm(len(members), generator=g)[:k]])
    is_test = torch.zeros(len(y), dtype=torch.bool)
    is_test[torch.cat(test)] = True
    keep = is_test if part == "test" else ~is_test
    return _Part(torch.from_numpy(x)[keep], y[keep], tuple(str(c) for c in range(10)),
                 "sklearn.datasets.load_digits (bundled with scikit-learn)")


def _read_fashion_mnist(folder: Path, part: str) -> _Part:
    images_stem, labels_stem = _IDX_STEMS[part]
    x = _read_idx(_idx_file(folder, images_stem), ndim=3)  # (N, 28, 28)
    y = _read_idx(_idx_file(folder, labels_stem), ndim=1)  # (N,)
    if len(x) != len(y):
        raise DataError(f"{folder}: {len(x)} {part} images but {len(y)} labels; replace the IDX files "
                        f"({DATASETS['fashion-mnist'].how_to_get}).")
    return _Part(torch.from_numpy(x)[:, None], torch.from_numpy(y.astype(np.int64)),
                 FASHION_MNIST_CLASSES, str(folder))


def _read_idx(path: Path, ndim: int) -> np.ndarray:
    """An IDX array of unsigned bytes (LeCun's MNIST format): magic 0x0000080<ndim>, then
    `ndim` big-endian int32 sizes, then the bytes."""
    fix = f"delete it and get it again ({DATASETS['fashion-mnist'].how_to_get})"
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


def _read_packed(path: Path, info: DatasetInfo) -> _Part:
    """The packed format: all image files concatenated (JPEG for CIFAR-10, PNG for CIFAR-100; Pillow
    tells them apart), image i is jpeg[offsets[i]:offsets[i+1]]; optional ``coarse_labels`` and
    ``coarse_classes`` (CIFAR-100's superclasses)."""
    from PIL import Image

    fix = f"replace it with a good copy ({info.how_to_get})"
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
        raise DataError(f"{path}: coarse_labels do not match labels or lie outside 0..{len(coarse_classes) - 1}; "
                        f"{fix}.")
    size = info.image_size
    x = np.empty((n, size, size, info.channels), dtype=np.uint8)  # (N, H, W, C) as Pillow gives it
    for i in range(n):  # ~13 us an image; threads do not help (Pillow's decoder holds the GIL here)
        try:
            with Image.open(io.BytesIO(jpeg[offsets[i]:offsets[i + 1]].tobytes())) as im:
                x[i] = np.asarray(im.convert("RGB"))
        except (OSError, ValueError) as err:  # undecodable JPEG, or not size x size
            raise DataError(f"{path}: image {i} cannot be decoded as a {size}x{size} RGB image "
                            f"({type(err).__name__}: {err}); {fix}.") from err
    # The files are sorted by class: a fixed shuffle makes `limit` and in-order evaluation
    # see every class (the pickled CIFAR releases come in a random order already).
    order = _fixed_order(n)
    x_t = torch.from_numpy(x).permute(0, 3, 1, 2)[order].contiguous()  # (N, C, H, W)
    y_t = torch.from_numpy(labels.astype(np.int64))[order]
    if coarse is None:
        return _Part(x_t, y_t, tuple(str(c) for c in classes), str(path))
    return _Part(x_t, y_t, tuple(str(c) for c in classes), str(path),
                 torch.from_numpy(coarse.astype(np.int64))[order], tuple(str(c) for c in coarse_classes))


def _read_cifar_pickle(folder: Path, name: str, part: str) -> _Part:
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
                            f"replace it ({DATASETS[name].how_to_get}).") from err
    try:
        meta = _unpickle(folder / meta_file, name)
        classes = tuple(str(c) for c in meta[names_key])
        coarse_classes = tuple(str(c) for c in meta.get("coarse_label_names", ()))
    except (KeyError, TypeError) as err:
        raise DataError(f"{folder / meta_file}: no {names_key!r} list; replace it "
                        f"({DATASETS[name].how_to_get}).") from err
    x, y = np.concatenate(xs), np.concatenate(ys)  # (N, 3, 32, 32), (N,)
    if len(x) != len(y) or (len(y) and (y.min() < 0 or y.max() >= len(classes))):
        raise DataError(f"{folder}: {len(x)} images, {len(y)} labels, {len(classes)} classes "
                        "do not match; "
                        f"replace the files ({DATASETS[name].how_to_get}).")
    if not coarse:
        return _Part(torch.from_numpy(x), torch.from_numpy(y), classes, str(folder))
    c = np.concatenate(coarse)
    if len(coarse) != len(files) or len(c) != len(y) or not coarse_classes \
            or (len(c) and (c.min() < 0 or c.max() >= len(coarse_classes))):
        raise DataError(f"{folder}: the coarse labels do not match the images or the meta file's "
                        f"coarse_label_names; replace the files ({DATASETS[name].how_to_get}).")
    return _Part(torch.from_numpy(x), torch.from_numpy(y), classes, str(folder), torch.from_numpy(c), coarse_classes)


def _unpickle(path: Path, name: str) -> dict:
    try:
        with open(path, "rb") as f:
            return pickle.load(f, encoding="latin1")  # the releases are Python 2 pickles
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, AttributeError, ImportError) as err:
        raise DataError(f"{name}: {path} is truncated or corrupt ({type(err).__name__}: {err}); "
                        f"delete it and get the data again ({DATASETS[name].how_to_get}).") from err


def _download(name: str, root: Path, part: str, looked: list[str]) -> _Part:
    """torchvision's download into the data root (where the next call finds it locally)."""
    import torchvision.datasets as tvd

    klass, folder = {"fashion-mnist": ("FashionMNIST", root), "cifar10": ("CIFAR10", root / "cifar10"),
                     "cifar100": ("CIFAR100", root / "cifar100")}[name]
    # the folder this download makes (FashionMNIST writes into <root>/FashionMNIST): a failed
    # download removes it again, with the partial files in it, rather than leave an empty shell
    target = folder / klass if name == "fashion-mnist" else folder
    base = nearest_existing(target)
    made = base / target.relative_to(base).parts[0] if base != target else None
    try:
        ds = getattr(tvd, klass)(str(folder), train=part == "train", download=True)
    except Exception as err:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise _missing(name, looked, f"download=True, but torchvision's {klass} download into {folder} "
                       f"failed (no internet access?): {type(err).__name__}: {err}") from err
    x = torch.as_tensor(np.asarray(ds.data), dtype=torch.uint8)
    # FashionMNIST holds (N, H, W), the CIFARs (N, H, W, C)
    x = x[:, None] if x.ndim == 3 else x.permute(0, 3, 1, 2)  # (N, C, H, W)
    y = torch.as_tensor(np.asarray(ds.targets), dtype=torch.int64)
    return _Part(x.contiguous(), y, tuple(str(c) for c in ds.classes),
                 f"torchvision {klass} download ({folder})")


# ---------------------------------------------------------------------------------------------
# Folder sets (ImageNet-100)
# ---------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=4)
def _scan_image_folder(path: str, name: str) -> Any:
    """An ImageFolder without transforms (scanning 130k files takes seconds: done once)."""
    from torchvision.datasets import ImageFolder

    try:
        return ImageFolder(path)
    except (FileNotFoundError, OSError) as err:  # e.g. no class folders, or none with images
        raise DataError(f"{name}: {path} is not an image folder ({err}). Expected one folder per "
                        f"class holding the images; to get it: {DATASETS[name].how_to_get}.") from err


def _folder_transform(info: DatasetInfo, train: bool) -> Any:
    """The ImageNet recipe: RandomResizedCrop + flip for training, Resize + CenterCrop else."""
    from torchvision.transforms import v2

    size = info.image_size
    if train:
        geometry = [v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip()]
    else:
        # the standard resize-to-256, centre-crop-224 evaluation (scaled for other sizes)
        geometry = [v2.Resize(round(size * 256 / 224), antialias=True), v2.CenterCrop(size)]
    return v2.Compose([*geometry, v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(list(info.mean), list(info.std))])


def _set_transform(folder: Any, transform: Any) -> None:
    from torchvision.datasets.vision import StandardTransform

    folder.transform = transform  # what DatasetFolder.__getitem__ applies
    folder.transforms = StandardTransform(transform, None)  # kept consistent for repr


def _load_folder_split(info: DatasetInfo, root: Path, split: str, val_fraction: float,
                       split_seed: int, limit: int | None) -> ImageData:
    hit, looked = _locate(info.name, root)
    if hit is None:
        raise _missing(info.name, looked, "Folder sets are never downloaded.")
    place = Path(hit[1])
    if split == "test":
        scanned = _scan_image_folder(str(place / "val"), info.name)
        # ImageFolder sorts by class: a fixed shuffle so `limit` sees every class
        idx = _fixed_order(len(scanned))
    else:
        scanned = _scan_image_folder(str(place / "train"), info.name)
        train_idx, val_idx = _split_indices(len(scanned), val_fraction, split_seed)
        idx = train_idx if split == "train" else val_idx
    if limit is not None:
        idx = idx[:limit]
    base = copy.copy(scanned)  # shallow: shares the file list, own transform
    _set_transform(base, _folder_transform(info, train=split == "train"))
    y = torch.as_tensor(scanned.targets, dtype=torch.int64)[idx]
    return ImageData(x=None, y=y, info=info, classes=list(scanned.classes), name=info.name, split=split,
                     source=str(place / ("val" if split == "test" else "train")),
                     folder=Subset(base, idx.tolist()))
