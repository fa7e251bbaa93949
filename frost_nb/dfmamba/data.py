"""ETTh1 and ETTh2 under the usual long-term forecasting protocol (``../shared/data/ett/README.md``),
from ``<data root>/ett/``, as Informer's ``Dataset_ETT_hour`` (which DLinear's and RLinear's repositories
copy): the splits at ``BORDERS``, every column standardised with the training rows' mean and population sd
(as scikit-learn's ``StandardScaler``), every window counted (2,785 / 2,689 / 2,545 / 2,161 test windows at
H = 96 / 192 / 336 / 720; 1,345 and 625 in Table 14's series pooled by 2 and 4: ``windows(scale=)``)."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..data.prepare import DataError, checked_data_root

FILES = {"etth1": "ETTh1.csv", "etth2": "ETTh2.csv"}  # in <data root>/ett/
COLUMNS = ("HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT")
BORDERS = (8640, 11520, 14400)  # ends of train, val, test: 12, 4 and 4 months of 30 days
SPLITS = ("train", "val", "test")
LOOKBACK, HORIZONS = 336, (96, 192, 336, 720)
HOW_TO_GET = ("link the shared copy (make data links data/ett -> ../shared/data/ett), or put ETTh1.csv, "
              "ETTh2.csv and their SHA256SUMS (zhouhaoyi/ETDataset, ETT-small/) in <data root>/ett/")


@dataclass(frozen=True)
class Series:
    values: torch.Tensor  # (T, C) float32, standardised
    mean: np.ndarray  # (C,) of the raw training rows
    std: np.ndarray  # (C,) population standard deviation
    sha256: str


DAMAGED = f"a damaged or edited copy; replace it with the original ({HOW_TO_GET})"


def _text(file: Path, raw: bytes) -> str:
    """``raw`` as UTF-8 text; a one-line ``DataError`` naming the line of the first byte that is not."""
    try:
        return raw.decode()
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise DataError(f"{file}, line {line}: byte 0x{raw[err.start]:02x} is not UTF-8 text: "
                        f"{DAMAGED}") from err


def _finite(cell: str) -> bool:
    """Whether the CSV cell ``cell`` reads as a finite float64."""
    try:
        return bool(np.isfinite(np.float64(cell)))
    except ValueError:
        return False


def _bad_row(file: Path, lines: list[str]) -> DataError:
    """The error naming the first row of ``lines`` (after the header) not a date and 7 finite numbers."""
    for number, line in enumerate(lines[1:], 2):
        cells = line.split(",")[1:]
        if line and len(cells) != len(COLUMNS):
            return DataError(f"{file}, line {number}: {len(cells) + 1} fields, expected {len(COLUMNS) + 1} "
                             f"(date,{','.join(COLUMNS)}): {DAMAGED}")
        if line and (bad := [c for c in cells if not _finite(c)]):
            return DataError(f"{file}, line {number}: cell {bad[0]!r} is not a finite number: {DAMAGED}")
    return DataError(f"{file}: its rows are not a date and {len(COLUMNS)} numbers each: {DAMAGED}")


@functools.lru_cache(maxsize=4)
def _read(path: str, stamps: tuple) -> tuple[np.ndarray, str]:  # stamps: both files' times and sizes
    """The raw (T, 7) float64 columns of the CSV ``path``, checked against its folder's SHA256SUMS."""
    file, sums_file = Path(path), Path(path).parent / "SHA256SUMS"
    try:
        listing = sums_file.read_bytes()
    except OSError as err:
        raise DataError(f"{sums_file} cannot be read ({err.strerror or err}); {HOW_TO_GET}") from err
    sums = dict(reversed(line.split()) for line in _text(sums_file, listing).splitlines()
                if len(line.split()) == 2)
    raw = file.read_bytes()
    got, want = hashlib.sha256(raw).hexdigest(), sums.get(file.name, sums.get("*" + file.name))
    if got != want:
        raise DataError(f"{file} does not match its SHA256SUMS (sha256 {got[:12]}..., listed "
                        f"{str(want)[:12]}...): {DAMAGED}")
    lines = _text(file, raw).splitlines()
    if not lines:
        raise DataError(f"{file} is empty: {DAMAGED}")
    if tuple(lines[0].split(",")[1:]) != COLUMNS:
        raise DataError(f"{file}: columns {lines[0]!r}, expected date,{','.join(COLUMNS)}; {HOW_TO_GET}")
    try:
        values = np.array([row.split(",")[1:] for row in lines[1:] if row], dtype=np.float64)
    except ValueError:  # a row cut short or with a cell too many, an empty or a text cell
        raise _bad_row(file, lines) from None
    if values.size and (values.shape[1:] != (len(COLUMNS),) or not np.isfinite(values).all()):
        raise _bad_row(file, lines)  # every row short or long alike; nan or inf
    return values, got


def load_series(name: str, root: str | Path | None = None) -> Series:
    """The standardised series of ``name`` from ``<root>/ett/`` (``root``: this, then ``$FROST_DATA``,
    then ``<repo>/data``); a one-line ``DataError`` when missing or damaged."""
    if name not in FILES:
        raise DataError(f"dataset={name!r} is not a forecasting set: expected one of {', '.join(FILES)}.")
    path = checked_data_root(root) / "ett" / FILES[name]
    if not path.is_file():
        raise DataError(f"data set {name!r} not found: no file {path}; {HOW_TO_GET}.")
    stamps = tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in (path, path.parent / "SHA256SUMS")
                   if p.exists())
    raw, digest = _read(str(path), stamps)
    if len(raw) < BORDERS[-1]:
        raise DataError(f"{path} has {len(raw)} rows, the protocol reads {BORDERS[-1]}; {HOW_TO_GET}.")
    mean, std = raw[: BORDERS[0]].mean(0), raw[: BORDERS[0]].std(0)  # ddof 0
    return Series(torch.from_numpy(((raw - mean) / std).astype(np.float32)), mean, std, digest)


def write_generated(root: str | Path, rows: int = BORDERS[-1] + 20, seed: int = 0) -> Path:
    """A generated ETTh2.csv (a daily cycle per variable, a slow trend, noise) and its SHA256SUMS in
    ``<root>/ett/``, returning ``root``: the series of the tests and of notebook 11's smoke runs."""
    t, noise = np.arange(rows)[:, None], np.random.default_rng(seed).normal(0, 0.5, (rows, len(COLUMNS)))
    values = 5 * np.sin(2 * np.pi * t / 24 + np.arange(len(COLUMNS))) + 0.001 * t + noise
    text = "\n".join(["date," + ",".join(COLUMNS)] + [f"t{i}," + ",".join(f"{v:.5f}" for v in row)
                                                      for i, row in enumerate(values)]) + "\n"
    folder = Path(root) / "ett"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / FILES["etth2"]).write_text(text)
    (folder / "SHA256SUMS").write_text(f"{hashlib.sha256(text.encode()).hexdigest()}  {FILES['etth2']}\n")
    return Path(root)


def coarse(values: torch.Tensor, factor: int) -> torch.Tensor:
    """(T, C) -> (T // factor, C): the means of non-overlapping blocks of ``factor`` rows from row 0."""
    n = values.shape[0] // factor
    return values[: n * factor].double().reshape(n, factor, -1).mean(1).float()


class Windows:
    """One split's windows over ``series`` (T, C), its rows from ``lookback`` before its border; ``batch``
    gathers x (B, L, C) and y (B, H, C) when asked (a batch's copy, no more)."""

    def __init__(self, series: torch.Tensor, lookback: int, horizon: int, name: str = "") -> None:
        self.series, self.lookback, self.horizon, self.name = series, lookback, horizon, name
        self.channels, self.count = series.shape[1], series.shape[0] - lookback - horizon + 1
        if self.count < 1:
            raise DataError(f"{name}: {series.shape[0]} rows hold no window of {lookback} + {horizon} rows")

    def __len__(self) -> int:
        return self.count

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.series[idx[:, None] + torch.arange(self.lookback + self.horizon)]  # (B, L + H, C)
        return w[:, : self.lookback], w[:, self.lookback:]

    def batches(self, batch_size: int, order: torch.Tensor | None = None, drop_last: bool = False):
        """(x, y) batches in ``order`` (default: time order), the last short one kept unless ``drop_last``."""
        order = torch.arange(self.count) if order is None else order
        stop = self.count - self.count % batch_size if drop_last else self.count
        return (self.batch(order[i:i + batch_size]) for i in range(0, stop, batch_size))


def split_rows(split: str, lookback: int, scale: int = 1) -> tuple[int, int]:
    """(first, end) rows of ``split``'s windows at ``scale``: from ``lookback`` rows before its border."""
    if split not in SPLITS or scale < 1 or any(b % scale for b in BORDERS):
        raise DataError(f"split={split!r}, scale={scale!r}: expected one of {SPLITS} and a factor of "
                        f"{BORDERS}.")
    i = SPLITS.index(split)
    return (0 if i == 0 else BORDERS[i - 1] // scale - lookback), BORDERS[i] // scale


def windows(name: str, split: str, lookback: int = LOOKBACK, horizon: int = 96, *, scale: int = 1,
            root: str | Path | None = None) -> Windows:
    """The windows of ``split`` of the set ``name``; ``scale``: of the series pooled by that factor."""
    first, end = split_rows(split, lookback, scale)  # checked before the file is read
    values = load_series(name, root).values
    values = coarse(values, scale) if scale != 1 else values
    tag = f"{name} {split}" + (f" x{scale}" if scale != 1 else "")
    return Windows(values[first:end], lookback, horizon, tag)
