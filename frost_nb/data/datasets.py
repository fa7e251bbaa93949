"""Data sets by name, the held-out split, per-image augmentation and device-resident batches
(docs/architecture.md, "Data"; sources: data/README.md)."""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Subset

from ..paths import downloads_allowed, shown_path
from .prepare import (DATASETS, FIXED_ORDER_SEED, DataError, DatasetInfo, Part, checked_data_root, find_source,
                      fixed_order, is_prepared, missing_data_error, prepare_at, prepared_dir, read_prepared)

SPLITS = ("train", "val", "test")
DIGITS_TEST_FRACTION = 0.2  # load_digits has no test split: a fixed stratified one (seed 0)
DIGITS_SOURCE = "sklearn.datasets.load_digits (bundled with scikit-learn)"


@dataclass
class ImageData:
    """One split of one data set. ``len(ds)`` is the number of images."""

    x: torch.Tensor | None  # (N, C, H, W) uint8; None for folder sets
    y: torch.Tensor  # (N,) int64
    info: DatasetInfo
    classes: list[str]
    name: str
    split: str
    source: str  # where the images were read from (prepared sets: "<file> (prepared from <source>)")
    folder: Any = None  # folder sets: a torch Subset of a torchvision ImageFolder, with transforms
    coarse_y: torch.Tensor | None = None  # (N,) int64 superclass labels, where the set has them
    coarse_classes: list[str] | None = None

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def __repr__(self) -> str:  # the default would print every pixel
        shape = "folder" if self.x is None else f"{tuple(self.x.shape)} {self.x.dtype}"
        return (f"ImageData(name={self.name!r}, split={self.split!r}, n={len(self)}, x={shape}, "
                f"source={self.source!r})")


# --- Public entry points ----------------------------------------------------------------------

def load_dataset(name: str, split: str, root: str | Path | None = None, *, val_fraction: float = 0.1,
                 split_seed: int = 0, download: bool = True, limit: int | None = None) -> ImageData:
    """One split of the data set `name` from ``root``, else ``$FROST_DATA``, else ``<repo>/data``;
    `DataError` when missing (listing every place looked in) or unreadable."""
    _check("name", name, name in DATASETS, "one of " + ", ".join(map(repr, DATASETS)))
    _check("split", split, split in SPLITS, "one of " + ", ".join(map(repr, SPLITS)))
    _check("val_fraction", val_fraction, _is_number(val_fraction, float) and 0.0 <= val_fraction < 1.0,
           "a fraction in [0, 1)")
    _check("limit", limit, limit is None or (_is_number(limit, int) and limit >= 1),
           "None or a positive integer")
    info = DATASETS[name]
    # root and download switch resolved once, here; digits (in scikit-learn) never reads the root
    base = None if name == "digits" else checked_data_root(root)
    if info.in_memory:
        part = _load_part(name, str(base or ""), "test" if split == "test" else "train", bool(download),
                          not downloads_allowed())
        y = part.y
    else:  # folder sets: the "test" split is the val/ folder
        if not _folder_complete(base / name):
            raise missing_data_error(name, [f"{base / name} (train/ and val/ class folders)"],
                                     "Folder sets are never downloaded.")
        path = str(base / name / ("val" if split == "test" else "train"))
        scanned = _scan_image_folder(path, name)
        y = torch.as_tensor(scanned.targets, dtype=torch.int64)
    if split == "test":  # ImageFolder sorts by class: a fixed shuffle so `limit` sees every class
        idx = torch.arange(len(y)) if info.in_memory else fixed_order(len(y))
    else:
        labels = y if info.stratified_val else torch.zeros_like(y)  # one class: a plain seeded split
        idx = _split_indices(labels, val_fraction, split_seed)[split == "val"]  # (train, val)
    idx = idx[:limit]  # limit None: all of them
    if not info.in_memory:
        folder = _with_transform(scanned, info, train=split == "train")
        return ImageData(x=None, y=y[idx], info=info, classes=list(scanned.classes), name=name, split=split,
                         source=path, folder=Subset(folder, idx.tolist()))
    # advanced indexing copies, so callers may modify x in place without touching the cache
    coarse = None if part.coarse_y is None else part.coarse_y[idx]
    return ImageData(x=part.x[idx], y=part.y[idx], info=info, classes=list(part.classes), name=name,
                     split=split, source=part.source, coarse_y=coarse,
                     coarse_classes=None if part.coarse_classes is None else list(part.coarse_classes))


def available_datasets(root: str | Path | None = None) -> dict[str, str]:
    """name -> where `load_dataset` reads (or would prepare) it from, or ``"missing: <how to get it>"``;
    only checks that the files exist."""
    base = checked_data_root(root)
    found = {}
    for name, info in DATASETS.items():
        if name == "digits":
            place = DIGITS_SOURCE
        elif not info.in_memory:
            place = shown_path(base / name) if _folder_complete(base / name) else None
        elif is_prepared(name, base):
            place = shown_path(prepared_dir(name, base))
        else:
            hit = find_source(name, base)[0]
            place = hit and f"{shown_path(hit[1])} (prepared into {shown_path(prepared_dir(name, base))} on first use)"
        found[name] = place if place is not None else f"missing: {info.how_to_get}"
    return found


def clear_cache() -> None:
    """Forget loaded arrays and scanned folders (after replacing files on disk; a changed source needs
    ``python -m frost_nb.data.prepare NAME --force`` first)."""
    _load_part.cache_clear()
    _scan_image_folder.cache_clear()


def make_batches(ds: ImageData, batch_size: int, *, shuffle: bool, augment: bool,
                 device: str | torch.device, generator: torch.Generator | None = None,
                 drop_last: bool = False, num_workers: int = 0) -> Batches | FolderBatches:
    """Batches ``(x, y)`` of `ds` on `device`; all randomness comes from `generator` (None: torch's
    global one), one draw per pass. ``num_workers``: folder sets (a DataLoader)."""
    _check("batch_size", batch_size, _is_number(batch_size, int) and batch_size >= 1, "a positive integer")
    return (Batches if ds.x is not None else FolderBatches)(
        ds, batch_size, shuffle=shuffle, augment=augment, device=device, generator=generator,
        drop_last=drop_last, num_workers=num_workers)


# --- Batches ----------------------------------------------------------------------------------

class _Passes:
    """What both kinds of batches share: their arguments, ``len()``, and one seed drawn per pass."""

    def __init__(self, ds: ImageData, batch_size: int, *, shuffle: bool, augment: bool,
                 device: str | torch.device, generator: torch.Generator | None = None,
                 drop_last: bool = False, num_workers: int = 0) -> None:
        self.device, self.n = torch.device(device), len(ds)
        self.batch_size, self.shuffle, self.augment, self.drop_last = batch_size, shuffle, augment, drop_last
        self.generator, self.num_workers = generator, num_workers  # num_workers: folder sets only
        self.epoch_seed: int | None = None  # seed of the latest pass (None: pass needs no randomness)

    def __len__(self) -> int:
        return self.n // self.batch_size if self.drop_last else math.ceil(self.n / self.batch_size)

    def _draw_seed(self) -> int | None:
        # An evaluation pass draws nothing: it must not disturb the caller's random stream.
        randomised = self.shuffle or self.augment
        self.epoch_seed = int(torch.randint(0, 2**62, (1,), generator=self.generator)) if randomised else None
        return self.epoch_seed


class Batches(_Passes):
    """Device-resident batches of an in-memory set (cifar10-airbench's recipe); each pass draws one
    ``epoch_seed``, and ``iterate(epoch_seed, start)`` resumes a pass exactly at batch ``start``."""

    def __init__(self, ds: ImageData, batch_size: int, **kwargs: Any) -> None:
        super().__init__(ds, batch_size, **kwargs)
        self.x = ds.x.to(self.device)  # (N, C, H, W) uint8: 1 byte a pixel, 4x less than float
        self.y = ds.y.to(self.device)  # (N,)
        self.mean = torch.tensor(ds.info.mean, device=self.device).view(1, -1, 1, 1)  # (1, C, 1, 1)
        self.std = torch.tensor(ds.info.std, device=self.device).view(1, -1, 1, 1)
        self.augmentation = ds.info.augmentation if self.augment else None
        # 8 px digits: a 1 px shift already moves an eighth of the image; CIFAR's usual 4; 2 at 28 px
        self.pad = 1 if ds.info.augmentation == "shift" else 4 if ds.info.image_size >= 32 else 2

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self.iterate(self._draw_seed())

    def iterate(self, epoch_seed: int | None, start: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One pass with a given seed, from batch `start` (to resume an interrupted pass)."""
        n, dev = self.x.shape[0], self.device
        g = torch.Generator().manual_seed(epoch_seed if epoch_seed is not None else 0)
        # Random numbers are drawn on the CPU for the whole pass: the same seed gives the
        # same batches on every device, and a resumed pass skips batches without drawing.
        order = (torch.randperm(n, generator=g) if self.shuffle else torch.arange(n)).to(dev)  # (N,)
        if self.augmentation:
            # (N,) crop offsets into the padded images (rows, then columns), and mirror flags
            dy, dx = (torch.randint(0, 2 * self.pad + 1, (n,), generator=g).to(dev) for _ in range(2))
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
    """Per-image crop of the zero-padded x (B, C, H, W): image i shifted by (dy[i]-pad, dx[i]-pad), dy
    and dx (B,) integers in [0, 2*pad]; two gathers, no Python loop."""
    b, c, h, w = x.shape
    xp = F.pad(x, (pad, pad, pad, pad))  # (B, C, H+2p, W+2p), zeros
    rows = dy[:, None] + torch.arange(h, device=x.device)  # (B, H) rows of the padded image
    cols = dx[:, None] + torch.arange(w, device=x.device)  # (B, W)
    xp = xp.gather(2, rows[:, None, :, None].expand(b, c, h, w + 2 * pad))  # (B, C, H, W+2p)
    return xp.gather(3, cols[:, None, None, :].expand(b, c, h, w))  # (B, C, H, W)


def random_flip(x: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Mirror image i left-right where flip[i] is True. x (B, C, H, W), flip (B,) bool."""
    return torch.where(flip[:, None, None, None], x.flip(3), x)


class FolderBatches(_Passes):
    """Batches of a folder set through a DataLoader (JPEG decoding needs workers), as reproducible as
    ``Batches``: order and transforms seeded from a per-pass ``epoch_seed``, whatever ``num_workers``."""

    def __init__(self, ds: ImageData, batch_size: int, **kwargs: Any) -> None:
        super().__init__(ds, batch_size, **kwargs)
        base = _with_transform(ds.folder.dataset, ds.info, train=self.augment)
        self.dataset = _SeededImages(Subset(base, ds.folder.indices), seeded=self.augment)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.dataset.seed = self._draw_seed() or 0  # workers get a copy of the dataset per pass
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


# --- Splits -----------------------------------------------------------------------------------

def _split_indices(y: torch.Tensor, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, val) indices: of each class in `y`, the first ``round(val_fraction * n_c)`` images of a
    seeded permutation are val. Both stay permuted, so `limit` keeps a random subset, not the first classes."""
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))  # (n,)
    labels = y[perm]
    is_val = torch.zeros(len(y), dtype=torch.bool)
    for c, count in zip(*torch.unique(labels, return_counts=True)):  # rank within the class < its quota
        is_val[labels == c] = torch.arange(int(count)) < int(round(val_fraction * int(count)))
    return perm[~is_val], perm[is_val]


def _is_number(value: Any, kind: type) -> bool:
    """An int (kind int), or an int or float (kind float); bool is neither here."""
    return isinstance(value, (int, float) if kind is float else int) and not isinstance(value, bool)


def _check(param: str, value: Any, ok: bool, expected: str) -> None:
    if not ok:
        raise DataError(f"{param}={value!r} is invalid: expected {expected}.")


# --- In-memory sets: prepared files, digits ---------------------------------------------------

@functools.lru_cache(maxsize=16)
def _load_part(name: str, root: str, part: str, download: bool, offline: bool) -> Part:
    """The "train" or "test" part of an in-memory set as tensors (cached in-process); ``root``
    resolved, ``download`` and ``offline`` as ``prepare.prepare_at`` takes them."""
    if name == "digits":
        return _read_digits(part)
    if not is_prepared(name, root):  # once: later loads find the files
        prepare_at(name, Path(root), download=download, offline=offline)
    p = read_prepared(name, root, part)
    coarse = None if p.coarse_y is None else torch.from_numpy(p.coarse_y)
    source = f"{prepared_dir(name, root) / f'{part}.npz'} (prepared from {p.source})"
    return Part(torch.from_numpy(p.x), torch.from_numpy(p.y), p.classes, source, coarse, p.coarse_classes)


def _read_digits(part: str) -> Part:
    from sklearn.datasets import load_digits

    digits = load_digits()
    # (1797, 1, 8, 8): pixels 0..16 -> 0..255, so every set is uint8 with one normalisation rule
    x = np.rint(digits.images * (255.0 / 16.0)).astype(np.uint8)[:, None]
    y = torch.as_tensor(digits.target, dtype=torch.int64)
    # Fixed stratified test split: per class, a seeded round(20%) of its images. Own torch
    # code (not sklearn's train_test_split) so it cannot change with the sklearn version.
    g = torch.Generator().manual_seed(FIXED_ORDER_SEED)
    is_test = torch.zeros(len(y), dtype=torch.bool)
    for c in range(10):
        members = torch.nonzero(y == c).flatten()
        k = int(round(DIGITS_TEST_FRACTION * len(members)))
        is_test[members[torch.randperm(len(members), generator=g)[:k]]] = True
    keep = is_test if part == "test" else ~is_test
    return Part(torch.from_numpy(x)[keep], y[keep], tuple(str(c) for c in range(10)), DIGITS_SOURCE)


# --- Folder sets (ImageNet-100) ---------------------------------------------------------------

def _folder_complete(place: Path) -> bool:
    return (place / "train").is_dir() and (place / "val").is_dir()


@functools.lru_cache(maxsize=4)
def _scan_image_folder(path: str, name: str) -> Any:
    """An ImageFolder without transforms (scanning 130k files takes seconds: done once)."""
    from torchvision.datasets import ImageFolder

    try:
        return ImageFolder(path)
    except (FileNotFoundError, OSError) as err:  # e.g. no class folders, or none with images
        raise DataError(f"{name}: {path} is not an image folder ({err}). Expected one folder per "
                        f"class holding the images; to get it: {DATASETS[name].how_to_get}.") from err


def _with_transform(scanned: Any, info: DatasetInfo, train: bool) -> Any:
    """A shallow copy of a scanned ImageFolder (sharing its file list) with the ImageNet recipe:
    RandomResizedCrop + flip for training, Resize + CenterCrop else."""
    from torchvision.datasets.vision import StandardTransform
    from torchvision.transforms import v2

    size = info.image_size
    # not train: the standard resize-to-256, centre-crop-224 evaluation (scaled for other sizes)
    geometry = ([v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip()] if train
                else [v2.Resize(round(size * 256 / 224), antialias=True), v2.CenterCrop(size)])
    folder = copy.copy(scanned)
    folder.transform = v2.Compose([*geometry, v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                                   v2.Normalize(list(info.mean), list(info.std))])  # DatasetFolder applies it
    folder.transforms = StandardTransform(folder.transform, None)  # kept consistent for repr
    return folder
