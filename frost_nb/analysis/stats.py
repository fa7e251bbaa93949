"""The intervals every reading uses (docs/method.md, "How a verdict is decided"): the t interval of a
seed mean, Welch's interval of a difference of models, and the test images' bootstrap."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
from scipy.stats import t as student_t  # scipy comes with scikit-learn

CONFIDENCE = 0.95  # two-sided
IMAGE_RESAMPLES = 1000  # the fewest bootstrap resamples of the test images behind an interval


def t_quantile(dof: float) -> float:
    """The two-sided CONFIDENCE quantile of Student's t with ``dof`` degrees of freedom."""
    return float(student_t.ppf(0.5 + CONFIDENCE / 2, dof))


def interval(values: Sequence[float]) -> tuple[float, float]:
    """(mean, half-width) of the two-sided ``CONFIDENCE`` t interval of the mean of ``values``
    (sample standard deviation, ddof = 1); needs two values or more."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        raise ValueError(f"a t interval needs two values or more, got {len(v)}")
    return float(v.mean()), t_quantile(len(v) - 1) * float(v.std(ddof=1)) / math.sqrt(len(v))


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(mean(a) - mean(b), half-width) of Welch's two-sided CONFIDENCE t interval (ddof = 1,
    Welch-Satterthwaite degrees of freedom); two values or more a side; no spread gives a half-width of 0."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's interval needs two values or more a side, got {len(a)} and {len(b)}")
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return float(a.mean() - b.mean()), 0.0
    dof = se ** 4 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return float(a.mean() - b.mean()), t_quantile(dof) * se


def with_images(h_seeds: float, h_images: float) -> float:
    """The half-width of a seed mean's interval with the test images' noise added: sqrt(h_seeds^2 +
    h_images^2) (the two are independent draws: the runs' and the images')."""
    return math.hypot(h_seeds, h_images)


def image_bootstrap(statistic: Callable[[np.ndarray], float], n_images: int) -> tuple[float, float]:
    """(value, half-width) of ``statistic(index)`` (the number from the images ``index``, n_images ints;
    a seed mean draws the same images for every seed): its central CONFIDENCE percentile interval over
    IMAGE_RESAMPLES draws with replacement (seed 0); a 1-d statistic gives arrays."""
    rng = np.random.default_rng(0)
    draws = np.array([statistic(rng.integers(0, n_images, n_images)) for _ in range(IMAGE_RESAMPLES)],
                     dtype=float)
    low, high = np.quantile(draws, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2], axis=0)
    value, half = np.asarray(statistic(np.arange(n_images)), dtype=float), (high - low) / 2
    return (float(value), float(half)) if value.ndim == 0 else (value, half)


MOVING_BLOCK = 432  # windows a block: the forecast windows overlap (look-back 336 + horizon), so the
# resampled unit is a run of consecutive windows, not one (DF-Mamba's Table 1 on one seed)


def block_bootstrap(values: Sequence[float], block: int = MOVING_BLOCK) -> tuple[float, float]:
    """(mean, half-width) of the mean of ``values`` (one per test window, in time order) by the moving-
    block bootstrap over blocks of ``block`` windows (central CONFIDENCE percentile interval over
    IMAGE_RESAMPLES resamples drawn from seed 0)."""
    v = np.asarray(values, dtype=float)
    if not 1 <= block <= len(v):
        raise ValueError(f"a block of {block} windows over {len(v)}: it needs 1 <= block <= the windows")
    rng = np.random.default_rng(0)
    blocks = -(-len(v) // block)  # ceil
    sums = np.concatenate([[0.0], np.cumsum(v)])
    starts = rng.integers(0, len(v) - block + 1, (IMAGE_RESAMPLES, blocks))  # (R, blocks)
    totals = (sums[starts + block] - sums[starts]).sum(1)  # every block whole ...
    cut = blocks * block - len(v)  # ... less the last block's tail beyond the series' length
    last = starts[:, -1]
    totals -= sums[last + block] - sums[last + block - cut]
    low, high = np.quantile(totals / len(v), [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
    return float(v.mean()), float(high - low) / 2
