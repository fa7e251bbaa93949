"""Fractal dimension of point sets and of latent trajectories (docs/method.md section 9.2).

The paper says the latent trajectories of vanilla and basic_ssm have a box-counting
(Minkowski) dimension close to the Koch curve's log 4 / log 3 = 1.2619 and FROST's is
"significantly higher", without a protocol. Ours, stated so that anyone can repeat it:

Estimators (pure numpy):
- Normalisation: the set is translated to the origin and divided by its largest side, so it
  fits the unit cube with its shape kept (the dimension is invariant to this).
- Box counting: N(eps) = number of occupied boxes of side eps = 2^-k, k = 2..7 (BOX_SCALES:
  1/4 .. 1/128 of the set's extent), on the grid anchored at the normalised set's corner with
  the far faces counted as inside (so a side of length 1 takes exactly 1/eps boxes, not one
  more); the dimension is the least-squares slope of log N against log(1/eps). The grid is
  axis-aligned, and for a fractal the estimate depends on orientation at these scales: the
  Koch curve gives 1.29 as generated and 1.23 turned by 40 degrees. Averaging over rotations
  was tried and dropped: it biases filled sets (the turned bounding box is half empty).
- Correlation dimension (Grassberger-Procaccia): C(r) = share of point pairs closer than r,
  on at most ``max_points`` points (a seeded subsample), the slope of log C against log r for
  r in CORRELATION_SCALES (1/64 .. 1/8 of the extent).
- Validation (tests and notebook 03): a straight line (1), a filled square (2) and the Koch
  curve (1.2619) must come out within 0.05.

Trajectories (``trajectory_dimensions``): each sample's trajectory is the polyline through
its pooled states h_0 .. h_T; all samples are projected onto the same top-2 principal
components (fitted once on every sample's states together); each projected polyline is
resampled at ``n_points`` points spaced evenly along its arc length (so we measure the curve,
not its T+1 vertices; 8192 points keep the spacing below half the smallest box for curves up
to 16 times longer than their extent) and measured as above; a sample whose projection has no extent gets NaN.

Be aware what this measures: a polyline through finitely many vertices has dimension 1 as
eps -> 0. What comes out is an effective dimension over the stated window of scales,
relative to each trajectory's own extent; the Koch curve is measured with the same window,
which is what makes a comparison with 1.26 meaningful. (A single contracting orbit, the
vertices alone, has box dimension 0.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BOX_SCALES = tuple(2.0 ** -k for k in range(2, 8))  # box sides, in units of the set's extent
CORRELATION_SCALES = tuple(2.0 ** -k for k in np.arange(3, 6.01, 0.5))  # pair distances r


@dataclass(frozen=True)
class DimensionFit:
    dimension: float  # the fitted slope
    scales: tuple[float, ...]  # eps (box sides) or r (pair distances), relative to the extent
    counts: tuple[float, ...]  # N(eps), or C(r)
    intercept: float
    r2: float  # coefficient of determination of the log-log fit


# ---------------------------------------------------------------- sets of known dimension
def straight_line(n: int = 8192) -> np.ndarray:
    """n points evenly spaced on a segment in the plane (dimension 1), at a generic slope."""
    t = np.linspace(0.0, 1.0, n)
    return np.stack([t, 0.37 * t], 1)  # (n, 2)


def filled_square(n: int = 100000, seed: int = 0) -> np.ndarray:
    """n uniform random points in the unit square (dimension 2)."""
    return np.random.default_rng(seed).random((n, 2))  # (n, 2)


def koch_curve(level: int = 7) -> np.ndarray:
    """Vertices of the Koch curve polyline after ``level`` refinements (dimension log4/log3)."""
    pts = np.array([[0.0, 0.0], [1.0, 0.0]])
    rot = np.array([[0.5, -np.sqrt(3) / 2], [np.sqrt(3) / 2, 0.5]])  # +60 degrees
    for _ in range(level):
        a, b = pts[:-1], pts[1:]  # (M, 2) segment ends
        d = (b - a) / 3
        p1, p2 = a + d, a + 2 * d
        peak = p1 + d @ rot.T
        pts = np.concatenate([np.stack([a, p1, peak, p2], 1).reshape(-1, 2), pts[-1:]])
    return pts  # (4^level + 1, 2)


def sierpinski_points(n: int = 20000, seed: int = 0) -> np.ndarray:
    """Chaos-game points of the Sierpinski triangle (dimension log3/log2 = 1.585)."""
    rng = np.random.default_rng(seed)
    corners = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, np.sqrt(3) / 2]])
    p, out = np.array([0.25, 0.25]), np.empty((n + 100, 2))
    for i, c in enumerate(rng.integers(0, 3, n + 100)):
        p = (p + corners[c]) / 2
        out[i] = p
    return out[100:]  # the first points, before the orbit reaches the set, dropped


# ---------------------------------------------------------------- helpers
def _check_points(points, name: str = "points") -> np.ndarray:
    p = np.asarray(points, dtype=np.float64)
    if p.ndim != 2:
        raise ValueError(f"{name} must be an (n, d) array, got shape {p.shape}")
    if p.shape[0] < 2:
        raise ValueError(f"{name} needs at least 2 points, got {p.shape[0]}")
    if not np.isfinite(p).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return p


def normalise(points) -> np.ndarray:
    """Translate to the origin and divide by the largest side (shape kept); zero extent raises."""
    p = _check_points(points)
    p = p - p.min(0)
    extent = p.max()
    if extent <= 0:
        raise ValueError("the points have zero extent (all equal): no dimension to measure")
    return p / extent


def resample_polyline(vertices, n: int) -> np.ndarray:
    """(M, d) polyline -> (n, d) points evenly spaced along its arc length, ends included."""
    v = _check_points(vertices, "vertices")
    if n < 2:
        raise ValueError(f"n must be at least 2, got {n}")
    seg = np.linalg.norm(np.diff(v, axis=0), axis=1)  # (M-1,)
    s = np.concatenate([[0.0], np.cumsum(seg)])  # (M,) arc length at each vertex
    if s[-1] <= 0:
        return np.repeat(v[:1], n, axis=0)
    targets = np.linspace(0.0, s[-1], n)  # (n,)
    return np.stack([np.interp(targets, s, v[:, j]) for j in range(v.shape[1])], 1)


def _fit(scales, counts) -> tuple[float, float, float]:
    x, y = np.log(np.asarray(scales)), np.log(np.asarray(counts, dtype=np.float64))
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    ss = ((y - y.mean()) ** 2).sum()
    return float(slope), float(intercept), float(1 - (resid ** 2).sum() / ss) if ss > 0 else 1.0


# ---------------------------------------------------------------- estimators
def box_counting_dimension(points, scales=BOX_SCALES) -> DimensionFit:
    """Minkowski (box-counting) dimension over the box sides ``scales`` (see module docstring)."""
    p = normalise(points)
    scales = tuple(float(e) for e in scales)
    if len(scales) < 2 or min(scales) <= 0:
        raise ValueError(f"scales must be at least two positive box sides, got {scales}")
    p = np.minimum(p, np.nextafter(1.0, 0.0))  # the far faces belong to the last box
    counts = [len(np.unique(np.floor(p / eps).astype(np.int64), axis=0)) for eps in scales]
    slope, intercept, r2 = _fit(1 / np.asarray(scales), counts)  # log N against log(1/eps)
    return DimensionFit(slope, scales, tuple(float(c) for c in counts), intercept, r2)


def correlation_dimension(points, radii=CORRELATION_SCALES, max_points: int = 2000,
                          seed: int = 0) -> DimensionFit:
    """Grassberger-Procaccia correlation dimension over the pair distances ``radii``."""
    p = normalise(points)
    radii = tuple(float(r) for r in radii)
    if len(radii) < 2 or min(radii) <= 0:
        raise ValueError(f"radii must be at least two positive distances, got {radii}")
    if max_points < 2:
        raise ValueError(f"max_points must be at least 2, got {max_points}")
    if len(p) > max_points:
        p = p[np.random.default_rng(seed).choice(len(p), max_points, replace=False)]
    n = len(p)
    r = np.asarray(radii)
    close = np.zeros(len(r), dtype=np.int64)  # pairs (i < j) closer than each r
    for start in range(0, n, 256):  # chunks of rows keep memory at 256 x n
        block = p[start:start + 256]  # (b, d)
        d = np.linalg.norm(block[:, None, :] - p[None, :, :], axis=2)  # (b, n)
        upper = np.arange(n)[None, :] > (start + np.arange(len(block)))[:, None]
        dist = d[upper]  # each pair once
        close += (dist[:, None] < r[None, :]).sum(0)
    pairs = n * (n - 1) / 2
    frac = np.maximum(close, 1) / pairs  # C(r); an empty count floored at one pair
    slope, intercept, r2 = _fit(r, frac)
    return DimensionFit(slope, radii, tuple(float(c) for c in frac), intercept, r2)


# ---------------------------------------------------------------- trajectories
def pca_projection(states, k: int = 2) -> np.ndarray:
    """(N, T1, D) states -> (D, k) top-k principal directions of all states together."""
    s = np.asarray(states, dtype=np.float64)
    if s.ndim != 3:
        raise ValueError(f"states must be (N, T+1, D), got shape {s.shape}")
    flat = s.reshape(-1, s.shape[2])
    flat = flat - flat.mean(0)
    _, _, vt = np.linalg.svd(flat, full_matrices=False)
    return vt[:k].T  # (D, k)


def project(states, projection=None) -> np.ndarray:
    """(N, T+1, D) states -> (N, T+1, k) on the principal directions of all of them together
    (``projection`` (D, k) to reuse one), after centring on the mean state."""
    s = np.asarray(states, dtype=np.float64)
    if s.ndim != 3 or s.shape[1] < 2:
        raise ValueError(f"states must be (N, T+1, D) with T+1 >= 2, got shape {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError("states contain NaN or infinite values")
    proj = pca_projection(s) if projection is None else np.asarray(projection, dtype=np.float64)
    if proj.ndim != 2 or proj.shape[0] != s.shape[2]:
        raise ValueError(f"projection must be (D, k) with D = {s.shape[2]}, got {proj.shape}")
    return (s - s.reshape(-1, s.shape[2]).mean(0)) @ proj  # (N, T+1, k)


def trajectory_dimensions(states, method: str = "box", n_points: int = 8192,
                          projection=None) -> np.ndarray:
    """Per-sample dimension (N,) of the polylines through h_0 .. h_T (module docstring)."""
    if method not in ("box", "correlation"):
        raise ValueError(f"method must be 'box' or 'correlation', got {method!r}")
    planar = project(states, projection)  # (N, T+1, 2)
    estimate = box_counting_dimension if method == "box" else correlation_dimension
    out = np.full(len(planar), np.nan)
    for i, poly in enumerate(planar):
        if np.ptp(poly, axis=0).max() <= 1e-12 * max(1.0, np.abs(poly).max()):
            continue  # no extent: nothing to measure
        out[i] = estimate(resample_polyline(poly, n_points)).dimension
    return out


def summarise_dimensions(values) -> dict:
    """Mean, std, median, quartiles and count of per-sample dimensions (NaN ignored)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return {"mean": float("nan"), "std": float("nan"), "median": float("nan"),
                "q25": float("nan"), "q75": float("nan"), "n": 0}
    q25, med, q75 = np.quantile(v, [0.25, 0.5, 0.75])
    return {"mean": float(v.mean()), "std": float(v.std()), "median": float(med),
            "q25": float(q25), "q75": float(q75), "n": int(len(v))}
