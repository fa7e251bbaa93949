"""Where each sample exits at a quantile, read off one cached full-depth pass (notebook 05): the exits
of ``ExitCache.at(q)`` are ``halting.exit_steps``' (eq. (exit)), as ``adaptive_predict`` takes them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..halting import HaltingCalibrator, exit_steps
from ..inputs import check_scores, check_split, number_in
from ..training import FullDepthPass, evaluate


@dataclass(frozen=True)
class Exits:
    """Per-sample exits at one quantile: depth (N,) in 1..T, and whether its prediction is correct."""

    quantile: float
    threshold: float
    depth: Tensor
    correct: Tensor
    margin: Tensor  # (N,) score at the exit step minus the threshold (-inf where tau = +inf)
    steps: int

    @property
    def accuracy(self) -> float:
        return self.correct.double().mean().item()

    @property
    def mean_depth(self) -> float:
        return self.depth.double().mean().item()

    @property
    def std_depth(self) -> float:
        return self.depth.double().std(unbiased=False).item()

    def histogram(self) -> np.ndarray:
        """Number of samples exiting at each step 1..T, shape (T,)."""
        return torch.bincount(self.depth - 1, minlength=self.steps).numpy()

    def order(self) -> Tensor:
        """Sample indices, earliest exit first; at equal depth, the larger margin over tau first."""
        key = self.depth.double() * 4.0 - self.margin.clamp(-1.0, 1.0).double()  # depth dominates
        return torch.argsort(key, stable=True)

    def summary(self) -> dict[str, float]:
        return {"quantile": self.quantile, "threshold": self.threshold, "accuracy": self.accuracy,
                "mean_depth": self.mean_depth, "std_depth": self.std_depth}


@dataclass(frozen=True)
class DepthBudget:
    """A mean-depth budget, the quantile meeting it on the split it was found on, the depth reached."""

    budget: float
    quantile: float
    threshold: float
    mean_depth: float


@dataclass
class ExitCache:
    """One full-depth pass over a split (``training.FullDepthPass``, scores checked) and a calibrator."""

    outputs: FullDepthPass
    calibrator: HaltingCalibrator
    label: str = ""
    _memo: dict[tuple[float, float], Exits] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.calibrator, HaltingCalibrator):
            raise TypeError(f"calibrator must be a HaltingCalibrator, got {type(self.calibrator).__name__}")
        check_scores(self.outputs.scores.detach().float().cpu().numpy(), "ExitCache: outputs.scores hold")

    @classmethod
    def from_model(cls, model: torch.nn.Module, calibrator: HaltingCalibrator, dataset, *,
                   batch_size: int = 512, label: str = "", allow_other_size: bool = False) -> ExitCache:
        """Run ``model`` once over ``dataset`` (an ImageData split) at full depth, its images checked
        first (``inputs.check_split``; ``allow_other_size``: the ResNet family at another size)."""
        check_split(model, dataset, allow_other_size=allow_other_size)
        return cls(evaluate(model, dataset, batch_size=batch_size), calibrator, label)

    @property
    def steps(self) -> int:
        return self.outputs.steps

    @property
    def y(self) -> Tensor:
        return self.outputs.y

    def at(self, quantile: float) -> Exits:
        """Exits at quantile q of the calibrator (q in [0, 1]; q = 1: full depth for all)."""
        tau = self.calibrator.threshold(quantile)  # validates q
        q = float(quantile)
        if (q, tau) not in self._memo:  # by threshold too: a calibrator updated since moves it
            scores, correct = self.outputs.scores, self.outputs.correct
            depth = exit_steps(scores, tau)  # (N,)
            at_exit = (depth - 1)[:, None]
            self._memo[q, tau] = Exits(q, tau, depth, correct.gather(1, at_exit).squeeze(1),
                                       scores.gather(1, at_exit).squeeze(1).double() - tau, self.steps)
        return self._memo[q, tau]

    def quantile_for_depth(self, depth: float, *, rounds: int = 50) -> DepthBudget:
        """The quantile whose mean exit depth on this split is closest to ``depth`` (in [1, T]), by
        bisection on q (the mean depth never falls as q rises); the depth reached is reported."""
        depth = number_in("depth", depth, 1.0, float(self.steps),
                          hint=f": a mean depth in steps, from 1 to this model's T = {self.steps}")
        low, high = 0.0, 1.0  # mean depth at q = 1 is T >= depth
        for _ in range(rounds):
            mid = (low + high) / 2
            low, high = (low, mid) if self.at(mid).mean_depth >= depth else (mid, high)
        best = min((low, high), key=lambda q: (abs(self.at(q).mean_depth - depth), q))
        exits = self.at(best)
        return DepthBudget(depth, best, exits.threshold, exits.mean_depth)

    def per_class(self, quantile: float, classes: list[str] | None = None):
        """Mean exit depth and accuracy of each true class at quantile q."""
        e = self.at(quantile)
        y = self.y.numpy()
        frame = pd.DataFrame({"class": y, "depth": e.depth.numpy(), "correct": e.correct.numpy()})
        table = frame.groupby("class").agg(samples=("depth", "size"), mean_depth=("depth", "mean"),
                                           std_depth=("depth", lambda d: d.std(ddof=0)),
                                           accuracy=("correct", "mean")).reset_index()
        if classes is not None:
            table["class"] = [classes[int(c)] for c in table["class"]]
        return table


def sweep_image_halves(caches: dict, quantiles, shown, depths) -> dict[str, dict[float, float] | float]:
    """The test images' bootstrap half-widths (``stats.image_bootstrap``, jointly across the seeds'
    ``caches``, all over the same images) of Table 2's seed means, which the claims add to the seeds' in
    quadrature: per quantile of ``shown``, the share kept at q and at the mean depth ``depths[q]`` (as the
    verdicts read it), and the mean gain over a fixed depth below q = 1."""
    from .stats import IMAGE_RESAMPLES, image_bootstrap

    n, steps = next(iter(caches.values())).outputs.correct.shape
    quantiles = sorted(float(q) for q in quantiles)
    below = [i for i, q in enumerate(quantiles) if q < 1.0]
    seeds = []  # per seed (N, Q) exit depths and correctness at the exit, and (N, T) correctness per step
    for cache in caches.values():
        if cache.outputs.correct.shape != (n, steps):
            raise ValueError("sweep_image_halves: every seed's pass must cover the same test images")
        exits = [cache.at(q) for q in quantiles]
        seeds.append((torch.stack([e.depth for e in exits], 1).double().numpy(),
                      torch.stack([e.correct for e in exits], 1).double().numpy(),
                      cache.outputs.correct.double().numpy()))
    at = {q: quantiles.index(float(q)) for q in shown}

    def statistic(index: np.ndarray) -> np.ndarray:
        values = []
        for depth, correct, per_step in seeds:
            d, a, f = depth[index].mean(0), correct[index].mean(0), per_step[index].mean(0)  # (Q,), (Q,), (T,)
            order = np.argsort(d, kind="stable")
            values.append([a[at[q]] / f[-1] for q in shown]
                          + [np.interp(depths[q], d[order], a[order]) / f[-1] for q in shown]
                          + [np.mean([a[i] - np.interp(d[i], np.arange(1, steps + 1), f) for i in below])])
        return np.mean(values, axis=0)  # the seed mean of each number

    _, half = image_bootstrap(statistic, n)
    k = len(shown)
    return {"kept_at_quantile": dict(zip(map(float, shown), half[:k].tolist())),
            "kept_at_depth": dict(zip(map(float, shown), half[k:2 * k].tolist())),
            "gain_over_fixed": float(half[-1]), "resamples": IMAGE_RESAMPLES}
