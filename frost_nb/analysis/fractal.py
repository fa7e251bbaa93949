"""Fractal dimension of point sets and of latent trajectories (docs/method.md section 9.2): box counting
over shifted grids and Grassberger-Procaccia on sets normalised to the unit cube; the estimators, their
validation and the constants: docs/fidelity.md section 1; PROTOCOLS: its section 2."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BOX_SCALES = tuple(2.0 ** -k for k in range(2, 8))  # box sides, in units of the set's extent
CORRELATION_SCALES = tuple(2.0 ** -k for k in np.arange(3, 6.01, 0.5))  # pair distances r
AUTO_BOX_SCALES = tuple(2.0 ** (-k / 4) for k in range(8, 49))  # 1/4 .. 1/4096, 4 per octave
AUTO_CORRELATION_SCALES = tuple(2.0 ** (-k / 4) for k in range(8, 65))  # 1/4 .. 1/65536
BOX_OFFSETS = 8  # shifted grids averaged per box side (4 leave the 3-D Cantor dust 0.06 off)
MIN_POINTS_PER_BOX = 8  # automatic sides: uniform random points then miss 0.03% of the boxes
CORRELATION_POINTS = 10000  # subsample paired with the whole set
MIN_NEIGHBOURS = 8  # automatic radii keep at least this many neighbours per point on average
FIT_WIDTH = 2.0  # octaves of a local (secant) slope: exact over one period of ratio 1/4 or 1/2
FIT_TOLERANCE = 0.03  # local slopes of a stable range lie within 2 * this of each other
FIT_MIN_SPAN = 3.0  # octaves a stable range must span
PROTOCOL_SCALES = tuple(2.0 ** (-k / 4) for k in range(8, 29))  # 1/4 .. 1/128, 4 per octave
COARSE_BOX_SCALES = PROTOCOL_SCALES[:13]  # 1/4 .. 1/32
FINE_BOX_SCALES = PROTOCOL_SCALES[4:]  # 1/8 .. 1/128
WINDOWS = {"coarse": COARSE_BOX_SCALES, "fine": FINE_BOX_SCALES}
PROTOCOLS = tuple((point_set, dims, window) for point_set in ("polyline", "cloud")
                  for dims in (2, 3) for window in WINDOWS)


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


def filled_square(n: int = 400000, seed: int = 0) -> np.ndarray:
    """n uniform random points in the unit square (dimension 2). Box counting needs about 8
    points per box: 400,000 resolve boxes down to 1/215 of the side."""
    return np.random.default_rng(seed).random((n, 2))  # (n, 2)


KOCH_MOTIF = (0.0, 1 / 3, 0.5 + 1j * np.sqrt(3) / 6, 2 / 3, 1.0)  # 4 segments of 1/3


def koch_curve(level: int = 7) -> np.ndarray:
    """Vertices of the Koch curve polyline after ``level`` refinements (dimension log4/log3): every
    segment a -> b replaced by a + (b - a) * KOCH_MOTIF, ``level`` times."""
    m = np.asarray(KOCH_MOTIF, dtype=np.complex128)
    pts = np.array([0.0, 1.0], dtype=np.complex128)
    for _ in range(level):
        a, b = pts[:-1, None], pts[1:, None]  # (M, 1) segment ends
        pts = np.concatenate([(a + (b - a) * m[None, :-1]).reshape(-1), pts[-1:]])
    return np.stack([pts.real, pts.imag], 1)  # (4^level + 1, 2)


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


def _check_scales(scales, name: str) -> tuple[float, ...]:
    scales = tuple(float(e) for e in scales)
    if len(scales) < 2 or min(scales) <= 0:
        what = "box sides" if name == "scales" else "distances"
        raise ValueError(f"{name} must be at least two positive {what}, got {scales}")
    return scales


def stable_range(x, y) -> np.ndarray:
    """Mask of the longest range of x (octaves) over which the slope of y is stable (docs/fidelity.md
    section 1; ties: the finest scales); none stable: every point."""
    order = np.argsort(x, kind="stable")
    x, y = np.asarray(x, dtype=np.float64)[order], np.asarray(y, dtype=np.float64)[order]
    if len(x) < 3 or x[-1] - x[0] < FIT_MIN_SPAN - 1e-9:
        raise ValueError(f"the scales span {x[-1] - x[0] if len(x) else 0.0:.2f} octaves in {len(x)} "
                         f"points; a fit range needs at least {FIT_MIN_SPAN}")
    # secant slope over FIT_WIDTH octaves centred on each x_i (y interpolated linearly), NaN where
    # that leaves the data: exact over one period of a self-similar set's log-periodic wobble
    lo, hi = x - FIT_WIDTH / 2, x + FIT_WIDTH / 2
    inside = (lo >= x[0] - 1e-9) & (hi <= x[-1] + 1e-9)
    slopes = np.where(inside, (np.interp(hi, x, y) - np.interp(lo, x, y)) / FIT_WIDTH, np.nan)
    valid = np.flatnonzero(np.isfinite(slopes))  # consecutive: the interior of x
    best = None
    for ia, a in enumerate(valid):
        lo = hi = slopes[a]
        for b in valid[ia:]:
            lo, hi = min(lo, slopes[b]), max(hi, slopes[b])
            if hi - lo > 2 * FIT_TOLERANCE:
                break
            span = x[b] - x[a] + FIT_WIDTH
            if span >= FIT_MIN_SPAN - 1e-9 and (best is None or (span, x[b]) > best[0]):
                best = ((span, x[b]), a, b)
    if best is None:
        return np.ones(len(x), dtype=bool)
    _, a, b = best
    keep = (x >= x[a] - FIT_WIDTH / 2 - 1e-9) & (x <= x[b] + FIT_WIDTH / 2 + 1e-9)
    return keep[np.argsort(order)]  # in the caller's order of x


def _occupied(cols: list[np.ndarray], shift: np.ndarray, size: int) -> int:
    """Occupied boxes of a grid shifted by ``shift`` (in boxes): ``cols`` are the coordinates
    of the normalised set in units of the box side, one array per axis, each below ``size`` - 1."""
    d = len(cols)
    if float(size) ** d >= 2.0 ** 52:  # the cell index would not be exact in float64
        idx = np.stack([np.floor(c + s) for c, s in zip(cols, shift)], 1).astype(np.int64)
        return len(np.unique(idx, axis=0))
    key = np.floor(cols[0] + shift[0])
    for c, s in zip(cols[1:], shift[1:]):
        key = key * size + np.floor(c + s)  # row-major cell index, exact in float64
    key = key.astype(np.int64)
    if size ** d <= 2 ** 22:  # a flag per cell: linear time
        mark = np.zeros(size ** d, dtype=bool)
        mark[key] = True
        return int(np.count_nonzero(mark))
    return len(np.unique(key))


def box_counts(points, scales, offsets: int = BOX_OFFSETS, seed: int = 0,
               max_count: float = np.inf) -> np.ndarray:
    """Mean occupied boxes of each side in ``scales`` over ``offsets`` grids shifted by a seeded random
    fraction of a box per axis (normalised set); stops at the first count above ``max_count``."""
    p = normalise(points)
    scales = _check_scales(scales, "scales")
    if offsets < 1:
        raise ValueError(f"offsets must be at least 1, got {offsets}")
    shifts = np.random.default_rng(seed).random((offsets, p.shape[1]))  # (offsets, d) in boxes
    counts = []
    for eps in scales:
        cols = [np.ascontiguousarray(p[:, j] / eps) for j in range(p.shape[1])]  # in [0, 1/eps]
        size = int(np.ceil(1 / eps)) + 2
        n_eps = float(np.mean([_occupied(cols, s, size) for s in shifts]))
        if n_eps > max_count:
            break
        counts.append(n_eps)
    return np.array(counts)


def box_counting_dimension(points, scales=None, offsets: int = BOX_OFFSETS, seed: int = 0) -> DimensionFit:
    """Minkowski (box-counting) dimension over the sides ``scales`` (None: automatic), ``offsets`` grids."""
    p = normalise(points)
    if scales is None:  # coarse to fine, down to the points' resolution
        counts = box_counts(p, AUTO_BOX_SCALES, offsets, seed, max_count=len(p) / MIN_POINTS_PER_BOX)
        cand = np.asarray(AUTO_BOX_SCALES[:len(counts)])
        keep = stable_range(np.log2(1 / cand), np.log2(counts))
        scales, counts = tuple(cand[keep]), counts[keep]
    else:
        scales = _check_scales(scales, "scales")
        counts = box_counts(p, scales, offsets, seed)
    slope, intercept, r2 = _fit(1 / np.asarray(scales), counts)  # log N against log(1/eps)
    return DimensionFit(slope, tuple(map(float, scales)), tuple(map(float, counts)), intercept, r2)


def correlation_integral(points, radii) -> np.ndarray:
    """C(r) for each r in ``radii``: the share of pairs (q, p), q from a subsample (seed 0) of at
    most CORRELATION_POINTS points and p from the whole normalised set, p != q, at most r apart."""
    from scipy.spatial import cKDTree  # scipy comes with scikit-learn

    p = normalise(points)
    radii = _check_scales(radii, "radii")
    n = CORRELATION_POINTS
    q = p[np.random.default_rng(0).choice(len(p), n, replace=False)] if len(p) > n else p
    close = cKDTree(q).count_neighbors(cKDTree(p), np.asarray(radii)) - len(q)  # self-pairs out
    return close / (len(q) * (len(p) - 1.0))


def correlation_dimension(points, radii=None) -> DimensionFit:
    """Grassberger-Procaccia correlation dimension over the pair distances ``radii`` (None: automatic)."""
    p = normalise(points)
    if radii is None:
        cand = np.asarray(AUTO_CORRELATION_SCALES)
        frac = correlation_integral(p, cand)
        usable = frac * (len(p) - 1) >= MIN_NEIGHBOURS  # coarser than the points' resolution
        cand, frac = cand[usable], frac[usable]
        keep = stable_range(np.log2(cand), np.log2(frac))
        radii, frac = tuple(cand[keep]), frac[keep]
    else:
        radii = _check_scales(radii, "radii")
        q = min(len(p), CORRELATION_POINTS)  # an empty count is floored at one pair
        frac = np.maximum(correlation_integral(p, radii), 1 / (q * (len(p) - 1.0)))
    slope, intercept, r2 = _fit(radii, frac)
    return DimensionFit(slope, tuple(float(r) for r in radii), tuple(float(c) for c in frac), intercept, r2)


# ---------------------------------------------------------------- trajectories
def project(states, projection=None, dims: int = 2) -> np.ndarray:
    """(N, T+1, D) states -> (N, T+1, k) on the top ``dims`` principal directions of all of
    them together (``projection`` (D, k) to reuse one), after centring on the mean state."""
    s = np.asarray(states, dtype=np.float64)
    if s.ndim != 3 or s.shape[1] < 2:
        raise ValueError(f"states must be (N, T+1, D) with T+1 >= 2, got shape {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError("states contain NaN or infinite values")
    if projection is None and not 1 <= dims <= s.shape[2]:  # a slice of the SVD's rows would not say so
        raise ValueError(f"dims must be from 1 to D = {s.shape[2]}, got {dims}")
    flat = s.reshape(-1, s.shape[2])
    proj = (np.linalg.svd(flat - flat.mean(0), full_matrices=False)[2][:dims].T if projection is None
            else np.asarray(projection, dtype=np.float64))  # (D, k): the top principal directions
    if proj.ndim != 2 or proj.shape[0] != s.shape[2]:
        raise ValueError(f"projection must be (D, k) with D = {s.shape[2]}, got {proj.shape}")
    return (s - flat.mean(0)) @ proj  # (N, T+1, k)


def _per_polyline(planar: np.ndarray, n_points: int, measure, missing) -> list:
    """``measure`` of each polyline of ``planar`` (N, T+1, k) resampled to ``n_points`` points, ``missing``
    for one without extent (nothing to measure)."""
    has_extent = lambda p: np.ptp(p, axis=0).max() > 1e-12 * max(1.0, np.abs(p).max())
    return [measure(resample_polyline(p, n_points)) if has_extent(p) else missing for p in planar]


def trajectory_dimensions(states, method: str = "box", n_points: int = 8192,
                          projection=None, dims: int = 2, scales=None) -> np.ndarray:
    """Per-sample dimension (N,) of the polylines through h_0 .. h_T on ``dims`` principal components
    (or ``projection``), over the fixed window ``scales`` (default BOX_SCALES, or CORRELATION_SCALES
    for "correlation"); ``n_points`` along each keep the spacing below half the smallest box for
    curves up to 16 times longer than their extent."""
    if method not in ("box", "correlation"):
        raise ValueError(f"method must be 'box' or 'correlation', got {method!r}")
    planar = project(states, projection, dims)  # (N, T+1, k)
    estimate, default = {"box": (box_counting_dimension, BOX_SCALES),
                         "correlation": (correlation_dimension, CORRELATION_SCALES)}[method]
    scales = default if scales is None else scales
    dimension = lambda pts: estimate(pts, scales).dimension
    return np.array(_per_polyline(planar, n_points, dimension, np.nan), dtype=float)


def resolution(states: int = 17) -> tuple[float, float]:
    """The estimator's resolution at ``states`` points (claim 3): (Koch, line), ``trajectory_dimensions``
    of a Koch curve of ``states`` vertices (4^level + 1; dimension 1.26) and of a ``states``-point line."""
    level = round(math.log(max(states - 1, 1), 4))  # any count below 5 fails below, by name
    if states < 5 or 4 ** level + 1 != states:
        raise ValueError(f"{states} states: a Koch curve has 4^level + 1 vertices (5, 17, 65, ...)")
    koch, line = koch_curve(level), straight_line(states)
    return tuple(float(trajectory_dimensions(pts[None])[0]) for pts in (koch, line))


def protocol_name(point_set: str, dims: int, window: str) -> str:
    """"polyline, 2-D, coarse" and the like: the key of a protocol in ``minkowski_protocols``."""
    return f"{point_set}, {dims}-D, {window}"


def window_dimensions(counts) -> dict[str, float]:
    """Box counts over PROTOCOL_SCALES -> the least-squares dimension over each of WINDOWS."""
    scales, counts = np.asarray(PROTOCOL_SCALES), np.asarray(counts, dtype=np.float64)
    masks = {window: np.isin(scales, np.asarray(sides)) for window, sides in WINDOWS.items()}
    return {window: _fit(1 / scales[m], counts[m])[0] for window, m in masks.items()}


def minkowski_protocols(states, n_points: int = 8192) -> dict[str, dict]:
    """Box dimension of the trajectories ``states`` (N, T+1, D) under each of the PROTOCOLS: name ->
    {"point_set", "dims", "window", "dimension"} plus, for polylines, "per_sample"."""
    windows = lambda pts: window_dimensions(box_counts(pts, PROTOCOL_SCALES))
    out: dict[str, dict] = {}
    for dims in sorted({d for _, d, _ in PROTOCOLS}):
        planar = project(states, dims=dims)  # (N, T+1, dims)
        fits = _per_polyline(planar, n_points, windows, dict.fromkeys(WINDOWS, np.nan))
        per_sample = {w: summarise_dimensions([fit[w] for fit in fits]) for w in WINDOWS}
        cloud = windows(planar.reshape(-1, dims))
        for point_set, window in ((p, w) for p, d, w in PROTOCOLS if d == dims):
            row = {"point_set": point_set, "dims": dims, "window": window, "dimension": cloud[window]}
            if point_set == "polyline":
                row.update(dimension=per_sample[window]["mean"], per_sample=per_sample[window])
            out[protocol_name(point_set, dims, window)] = row
    return out


def protocol_order(dimensions: dict[str, dict[int, float]], above: str = "frost",
                   below: tuple[str, ...] = ("vanilla", "basic_ssm")) -> dict[str, bool | None]:
    """For one protocol: ``dimensions`` family -> seed -> dimension. Per seed, whether
    ``above`` has a higher dimension than every family in ``below`` (None where one is missing)."""
    out: dict[str, bool | None] = {}
    for seed in sorted(dimensions.get(above, {})):
        top, *values = [dimensions[above][seed], *(dimensions.get(f, {}).get(seed) for f in below)]
        known = top is not None and all(v is not None for v in values) and np.isfinite([top, *values]).all()
        out[str(seed)] = bool(all(top > v for v in values)) if known else None
    return out


def summarise_dimensions(values) -> dict:
    """Mean, std, median, quartiles and count of per-sample dimensions (NaN ignored)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return {**dict.fromkeys(("mean", "std", "median", "q25", "q75"), float("nan")), "n": 0}
    q25, med, q75 = np.quantile(v, [0.25, 0.5, 0.75])
    return {"mean": float(v.mean()), "std": float(v.std()), "median": float(med),
            "q25": float(q25), "q75": float(q75), "n": int(len(v))}
