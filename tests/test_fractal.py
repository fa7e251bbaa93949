"""Fractal dimension estimators, validated on sets whose dimension is known exactly."""

import math

import numpy as np
import pytest

from frost_nb.analysis import fractal
from frost_nb.analysis.fractal import (
    box_counting_dimension,
    box_counts,
    correlation_dimension,
    correlation_integral,
    filled_square,
    koch_curve,
    resample_polyline,
    sierpinski_points,
    straight_line,
    summarise_dimensions,
    trajectory_dimensions,
)

# ---------------------------------------------------------------- reference sets of known dimension
# IFS attractors and Koch-like motifs the estimators are validated on (docs/fidelity.md section 1)
QUADRATIC_KOCH_2 = (0.0, 0.25, 0.25 + 0.25j, 0.5 + 0.25j, 0.5, 0.5 - 0.25j, 0.75 - 0.25j, 0.75,
                    1.0)  # 8 segments of 1/4 (the Minkowski sausage)


def cesaro_koch_motif(ratio: float) -> tuple[complex, ...]:
    """The Koch motif with 4 segments of length ``ratio`` in (1/4, 1/2): its peak rises until
    the middle segments are as long as the outer ones (dimension log 4 / log(1/ratio))."""
    if not 0.25 < ratio < 0.5:
        raise ValueError(f"ratio must be in (1/4, 1/2), got {ratio}")
    return (0.0, ratio, 0.5 + 1j * np.sqrt(ratio ** 2 - (0.5 - ratio) ** 2), 1 - ratio, 1.0)


def motif_curve(motif, level: int) -> np.ndarray:
    """Vertices of the curve that replaces every segment a -> b by a + (b - a) * ``motif`` (complex
    points from 0 to 1), ``level`` times: m segments of length r, no overlap: log m / log(1/r)."""
    m = np.asarray(motif, dtype=np.complex128)
    pts = np.array([0.0, 1.0], dtype=np.complex128)
    for _ in range(level):
        a, b = pts[:-1, None], pts[1:, None]  # (M, 1) segment ends
        pts = np.concatenate([(a + (b - a) * m[None, :-1]).reshape(-1), pts[-1:]])
    return np.stack([pts.real, pts.imag], 1)  # ((len(motif) - 1)^level + 1, 2)


def similarity(ratio: float, shift) -> tuple[np.ndarray, np.ndarray]:
    """The map x -> ratio * x + shift as (matrix (d, d), shift (d,))."""
    b = np.asarray(shift, dtype=np.float64)
    return ratio * np.eye(len(b)), b


def ifs_points(maps, resolution: float) -> np.ndarray:
    """Points of the attractor of the similarity maps ``maps`` (each (A, b): x -> A x + b),
    one per piece of a cover by pieces of diameter ratio below ``resolution``.

    Every word is refined until the product of its ratios falls below ``resolution`` (a Moran
    cover, not a fixed level), and the word's map is applied to the fixed point of the first
    map, a point of the attractor. With unequal ratios this spreads the points evenly over the
    set (each piece weighs about ratio^D), so the correlation dimension of the points is the
    set's dimension; a fixed level would weigh the pieces 1/m^level instead.
    """
    a = np.stack([np.asarray(m[0], dtype=np.float64) for m in maps])  # (m, d, d)
    b = np.stack([np.asarray(m[1], dtype=np.float64) for m in maps])  # (m, d)
    d = b.shape[1]
    ratios = np.abs(np.linalg.det(a)) ** (1 / d)  # (m,) similarity ratios
    if not (0 < resolution < 1) or not np.all((ratios > 0) & (ratios < 1)):
        raise ValueError("need contracting maps (ratios in (0, 1)) and a resolution in (0, 1)")
    base = np.linalg.solve(np.eye(d) - a[0], b[0])  # fixed point of the first map
    wa, wb, wr = np.eye(d)[None], np.zeros((1, d)), np.ones(1)  # words: x -> wa x + wb, ratio wr
    out = []
    while len(wr):
        small = wr < resolution
        out.append(wa[small] @ base + wb[small])
        wa, wb, wr = wa[~small], wb[~small], wr[~small]
        # word o map_i: x -> wa (a_i x + b_i) + wb
        wb = (np.einsum("wij,mj->wmi", wa, b) + wb[:, None]).reshape(-1, d)
        wa = np.einsum("wij,mjk->wmik", wa, a).reshape(-1, d, d)
        wr = (wr[:, None] * ratios[None]).reshape(-1)
    return np.concatenate(out)  # (about resolution^-D, d)


def cantor_set(ratio: float = 1 / 3, resolution: float = 1e-4) -> np.ndarray:
    """The Cantor set of two pieces of ``ratio`` at the ends of [0, 1], on the x-axis of the
    plane (dimension log 2 / log(1/ratio): 0.631 at 1/3, 0.5 at 1/4)."""
    return ifs_points([similarity(ratio, (0.0, 0.0)), similarity(ratio, (1 - ratio, 0.0))], resolution)


def two_ratio_cantor(resolution: float = 1e-4) -> np.ndarray:
    """Pieces of ratio 1/2 and 1/4 at the ends of [0, 1] (dimension log2 of the golden ratio,
    0.694: 2^-s + 4^-s = 1)."""
    return ifs_points([similarity(0.5, (0.0, 0.0)), similarity(0.25, (0.75, 0.0))], resolution)


def cantor_dust(ratio: float = 1 / 3, dim: int = 2, resolution: float = 2e-3) -> np.ndarray:
    """The product Cantor dust: 2^dim pieces of ``ratio`` at the corners of the unit cube
    (dimension dim log 2 / log(1/ratio): 1.262 at 1/3 in 2-D, 1 at 1/4 in 2-D, 1.5 at 1/4 in 3-D)."""
    corners = np.stack(np.meshgrid(*[[0.0, 1 - ratio]] * dim, indexing="ij"), -1).reshape(-1, dim)
    return ifs_points([similarity(ratio, c) for c in corners], resolution)


def vicsek_fractal(resolution: float = 2e-3) -> np.ndarray:
    """Vicsek's box fractal: the four corner ninths and the centre one (log 5 / log 3 = 1.465)."""
    shifts = [(0, 0), (2 / 3, 0), (0, 2 / 3), (2 / 3, 2 / 3), (1 / 3, 1 / 3)]
    return ifs_points([similarity(1 / 3, s) for s in shifts], resolution)


def sierpinski_carpet(resolution: float = 3e-3) -> np.ndarray:
    """The Sierpinski carpet: the unit square less its middle ninth (log 8 / log 3 = 1.893)."""
    shifts = [(i / 3, j / 3) for i in range(3) for j in range(3) if (i, j) != (1, 1)]
    return ifs_points([similarity(1 / 3, s) for s in shifts], resolution)


def sierpinski_pentagon(resolution: float = 2e-3) -> np.ndarray:
    """Five pieces of ratio (3 - sqrt 5) / 2 at the corners of a regular pentagon, touching
    (dimension log 5 / log((3 + sqrt 5) / 2) = 1.672)."""
    r = (3 - np.sqrt(5)) / 2
    angles = np.pi / 2 + 2 * np.pi * np.arange(5) / 5
    corners = np.stack([np.cos(angles), np.sin(angles)], 1)  # (5, 2)
    return ifs_points([similarity(r, (1 - r) * c) for c in corners], resolution)


def hexaflake(resolution: float = 2e-3) -> np.ndarray:
    """Vicsek's hexagonal snowflake: six pieces of ratio 1/3 at the corners of a regular hexagon
    and one at its centre (log 7 / log 3 = 1.771)."""
    angles = np.pi * np.arange(6) / 3
    shifts = [(2 / 3 * np.cos(a), 2 / 3 * np.sin(a)) for a in angles] + [(0.0, 0.0)]
    return ifs_points([similarity(1 / 3, s) for s in shifts], resolution)


KOCH = math.log(4) / math.log(3)  # 1.2619
SIERPINSKI = math.log(3) / math.log(2)  # 1.585
GOLDEN = (1 + math.sqrt(5)) / 2

# name -> (generator, known dimension, minimum r2 of the automatic fit). Similarity dimensions
# (open set condition holds for each), from 0.5 to 2, ratios 1/4 .. 1/2 and 0.3 and 0.382, one in 3-D.
KNOWN = {
    "line": (lambda: straight_line(), 1.0, 0.99),
    "square": (lambda: filled_square(), 2.0, 0.99),
    "koch": (lambda: resample_polyline(koch_curve(7), 16384), KOCH, 0.99),
    "sierpinski": (lambda: sierpinski_points(50000), SIERPINSKI, 0.99),
    "cantor 1/4": (lambda: cantor_set(0.25, 1e-6), 0.5, 0.97),
    "cantor 1/3": (lambda: cantor_set(1 / 3, 1e-6), math.log(2) / math.log(3), 0.97),
    "cantor 1/2 and 1/4": (lambda: two_ratio_cantor(1e-6), math.log(GOLDEN) / math.log(2), 0.97),
    "four-corner dust": (lambda: cantor_dust(0.25, 2, 1e-4), 1.0, 0.97),
    "cesaro-koch 0.3": (lambda: motif_curve(cesaro_koch_motif(0.3), 7),
                        math.log(4) / math.log(1 / 0.3), 0.97),
    "cantor dust 1/3": (lambda: cantor_dust(1 / 3, 2, 1e-3), KOCH, 0.97),
    "vicsek": (lambda: vicsek_fractal(1e-3), math.log(5) / math.log(3), 0.97),
    "quadratic koch": (lambda: motif_curve(QUADRATIC_KOCH_2, 5), 1.5, 0.97),
    "cantor dust 3-D": (lambda: cantor_dust(0.25, 3, 1e-3), 1.5, 0.97),
    "pentagon": (lambda: sierpinski_pentagon(2e-3), math.log(5) / math.log(GOLDEN ** 2), 0.97),
    "hexaflake": (lambda: hexaflake(1.5e-3), math.log(7) / math.log(3), 0.97),
    "carpet": (lambda: sierpinski_carpet(3e-3), math.log(8) / math.log(3), 0.97),
}


@pytest.fixture(scope="module")
def known_sets():
    cache = {}

    def get(name):
        if name not in cache:
            make, truth, r2 = KNOWN[name]
            cache[name] = (make(), truth, r2)
        return cache[name]
    return get


@pytest.mark.parametrize("name", list(KNOWN))
@pytest.mark.parametrize("estimator", [box_counting_dimension, correlation_dimension])
def test_known_dimensions_within_005(known_sets, name, estimator):
    points, truth, r2 = known_sets(name)
    fit = estimator(points)
    assert fit.dimension == pytest.approx(truth, abs=0.05), (name, fit.dimension, fit.scales)
    assert fit.r2 > r2
    assert max(fit.scales) <= 0.25 + 1e-12 and len(fit.scales) >= 9  # at least 2 octaves, 4 per octave


def test_generators_have_the_right_pieces():
    assert len(cantor_set(1 / 3, 3.0 ** -5 * 1.01)) == 2 ** 5
    assert len(cantor_dust(0.25, 3, 4.0 ** -3 * 1.01)) == 8 ** 3
    assert len(sierpinski_carpet(3.0 ** -3 * 1.01)) == 8 ** 3
    # unequal ratios: a Moran cover, each piece cut until it is below the resolution; 1/2 and 1/4
    # pieces of size 2^-k count Fibonacci numbers
    assert len(two_ratio_cantor(2.0 ** -10 * 1.01)) == 144
    for points in (vicsek_fractal(1e-2), hexaflake(1e-2), sierpinski_pentagon(1e-2)):
        assert np.isfinite(points).all() and len(np.unique(points.round(12), axis=0)) == len(points)
    c = cantor_set(0.25, 1e-3)
    assert np.all(c[:, 1] == 0) and c[:, 0].min() == 0 and c[:, 0].max() < 1
    # curves: every segment of a generator level has the same length, none is visited twice
    for motif, ratio in ((cesaro_koch_motif(0.3), 0.3), (QUADRATIC_KOCH_2, 0.25),
                         (fractal.KOCH_MOTIF, 1 / 3)):
        v = motif_curve(motif, 3)
        np.testing.assert_allclose(np.linalg.norm(np.diff(v, axis=0), axis=1), ratio ** 3)
        assert len(np.unique(v.round(9), axis=0)) == len(v)
    with pytest.raises(ValueError, match="ratio"):
        cesaro_koch_motif(0.6)
    with pytest.raises(ValueError, match="contracting"):
        ifs_points([similarity(1.5, (0.0, 0.0))], 1e-3)


def test_koch_curve_polyline_is_what_it_should_be():
    v = koch_curve(3)
    assert v.shape == (4 ** 3 + 1, 2)
    seg = np.linalg.norm(np.diff(v, axis=0), axis=1)
    np.testing.assert_allclose(seg, 3.0 ** -3)  # every segment a third of its parent's
    np.testing.assert_allclose(v[[0, -1]], [[0, 0], [1, 0]], atol=1e-12)


def test_shifted_grids_overhang_by_one_box():
    # a dense lattice filling the unit square: every grid shifted by a fraction of a box has
    # exactly 1/eps + 1 occupied columns and rows (the edge term the automatic range avoids)
    g = np.linspace(0.0, 1.0, 401)
    lattice = np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)
    np.testing.assert_allclose(box_counts(lattice, [1 / 8, 1 / 16], offsets=5), [81, 289])


def test_correlation_integral_counts_pairs():
    rng = np.random.default_rng(0)
    p = rng.random((300, 2))
    r = np.array([0.05, 0.1, 0.3])
    c = correlation_integral(p, r)
    q = fractal.normalise(p)
    d = np.linalg.norm(q[:, None] - q[None], axis=2)
    brute = [((d <= x).sum() - 300) / (300 * 299) for x in r]  # ordered pairs, self excluded
    np.testing.assert_allclose(c, brute)


def test_stable_range_finds_the_straight_part():
    x = np.arange(0, 8.01, 0.25)
    y = 1.5 * x - np.where(x < 2, (2 - x) ** 2, 0)  # bent at coarse scales, straight from x = 2
    keep = fractal.stable_range(x, y)
    assert x[keep].min() >= 1.0 and x[keep].max() == 8
    assert np.polyfit(x[keep], y[keep], 1)[0] == pytest.approx(1.5, abs=0.02)
    wobble = x + 0.4 * np.sin(2 * np.pi * x / 1.5)  # never stable: every point
    assert fractal.stable_range(x, wobble).all()
    with pytest.raises(ValueError, match="octaves"):
        fractal.stable_range(x[:5], y[:5])


@pytest.mark.parametrize("estimator", [box_counting_dimension, correlation_dimension])
def test_invariant_to_translation_and_scale(known_sets, estimator):
    points, _, _ = known_sets("koch")
    base = estimator(points).dimension
    assert estimator(points * 7.5 + np.array([3.0, -2.0])).dimension == pytest.approx(base, abs=1e-6)


def test_rotation_changes_little():
    line = straight_line()
    a = 0.7
    rot = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
    assert box_counting_dimension(line @ rot.T).dimension == pytest.approx(
        box_counting_dimension(line).dimension, abs=0.02)
    # distances do not see rotation, but the normalising bounding box (and so the window of
    # radii relative to the extent) does
    koch = resample_polyline(koch_curve(6), 8192)
    assert correlation_dimension(koch @ rot.T).dimension == pytest.approx(
        correlation_dimension(koch).dimension, abs=0.02)


def test_fixed_windows_are_used_as_given():
    koch = resample_polyline(koch_curve(7), 8192)
    fit = box_counting_dimension(koch, fractal.BOX_SCALES)
    assert fit.scales == fractal.BOX_SCALES
    fit = correlation_dimension(koch, fractal.CORRELATION_SCALES)
    assert fit.scales == fractal.CORRELATION_SCALES and fit.dimension == pytest.approx(KOCH, abs=0.05)


def test_resampled_polyline_is_evenly_spaced():
    v = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 3.0]])  # arc length 4
    p = resample_polyline(v, 9)
    np.testing.assert_allclose(np.linalg.norm(np.diff(p, axis=0), axis=1), 0.5, atol=1e-12)
    np.testing.assert_allclose(p[[0, -1]], v[[0, -1]])
    assert p[2].tolist() == [1.0, 0.0]  # the corner, reached after length 1


def test_trajectory_dimensions():
    rng = np.random.default_rng(0)
    n, t1, d = 6, 33, 8
    direction = rng.normal(size=(n, 1, d))
    straight = np.linspace(0, 1, t1)[None, :, None] * direction  # (n, T+1, D) straight lines
    walks = np.cumsum(rng.normal(size=(n, t1, d)), axis=1)  # random walks of 32 steps
    both = np.concatenate([straight, walks]).reshape(-1, d)
    proj = np.linalg.svd(both - both.mean(0), full_matrices=False)[2][:2].T  # (D, 2): their top directions
    lines = trajectory_dimensions(straight, projection=proj)
    np.testing.assert_allclose(lines, 1.0, atol=0.05)
    wiggly = trajectory_dimensions(walks)
    assert np.all(wiggly > 1.05)  # 33 vertices: well above a line, far below the limit 2
    corr = trajectory_dimensions(walks, method="correlation")
    assert np.all(corr > 1.05)
    assert np.all(trajectory_dimensions(walks, dims=3) > 1.05)
    still = trajectory_dimensions(np.ones((2, 5, 3)))
    assert np.isnan(still).all()
    s = summarise_dimensions(np.concatenate([wiggly, [np.nan]]))
    assert s["n"] == n and s["q25"] <= s["median"] <= s["q75"]


def test_minkowski_protocols():
    rng = np.random.default_rng(1)
    n, t1, d = 12, 17, 6
    walks = np.cumsum(rng.normal(size=(n, t1, d)), axis=1)
    out = fractal.minkowski_protocols(walks, n_points=2048)
    assert list(out) == [fractal.protocol_name(*p) for p in fractal.PROTOCOLS if p[1] == 2] + \
        [fractal.protocol_name(*p) for p in fractal.PROTOCOLS if p[1] == 3]
    assert len(out) == 8
    for name, row in out.items():
        assert np.isfinite(row["dimension"]), name
        if row["point_set"] == "polyline":
            assert row["per_sample"]["n"] == n
            assert row["dimension"] == pytest.approx(row["per_sample"]["mean"])
    # a polyline protocol is the per-sample measure over its window
    planar = fractal.project(walks, dims=2)
    poly = resample_polyline(planar[0], 2048)
    one = fractal.box_counting_dimension(poly, fractal.FINE_BOX_SCALES).dimension
    assert one == pytest.approx(fractal.window_dimensions(box_counts(poly, fractal.PROTOCOL_SCALES))["fine"])
    assert fractal.COARSE_BOX_SCALES[0] == 0.25 and fractal.COARSE_BOX_SCALES[-1] == 1 / 32
    assert fractal.FINE_BOX_SCALES[0] == 1 / 8 and fractal.FINE_BOX_SCALES[-1] == 1 / 128


def test_protocol_order():
    dims = {"frost": {0: 1.3, 1: 1.2, 2: 1.25}, "vanilla": {0: 1.1, 1: 1.25, 2: 1.0},
            "basic_ssm": {0: 1.0, 1: 1.0, 2: 1.0}}
    assert fractal.protocol_order(dims) == {"0": True, "1": False, "2": True}
    missing = {"frost": {0: 1.0}, "vanilla": {0: 0.5}}  # no basic_ssm
    assert fractal.protocol_order(missing) == {"0": None}


@pytest.mark.parametrize("call, message", [
    (lambda: box_counting_dimension(np.zeros(5)), r"\(n, d\)"),
    (lambda: box_counting_dimension(np.zeros((1, 2))), "at least 2 points"),
    (lambda: box_counting_dimension(np.array([[0.0, np.nan], [1.0, 1.0]])), "NaN"),
    (lambda: box_counting_dimension(np.ones((5, 2))), "zero extent"),
    (lambda: box_counting_dimension(straight_line(), scales=(0.5,)), "at least two"),
    (lambda: box_counting_dimension(straight_line(), offsets=0), "offsets"),
    (lambda: trajectory_dimensions(np.zeros((2, 3, 4)), method="hausdorff"), "method"),
    (lambda: trajectory_dimensions(np.zeros((2, 3))), r"\(N, T\+1, D\)"),
    (lambda: resample_polyline(np.zeros((3, 2)), 1), "n must be"),
    (lambda: fractal.project(np.ones((2, 3, 4)), dims=5), r"dims must be from 1 to D = 4, got 5"),
    (lambda: fractal.project(np.ones((2, 3, 4)), dims=0), r"dims must be from 1 to D = 4, got 0"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("states", [-3, 0, 1, 2, 4, 16])
def test_resolution_names_what_a_koch_curve_needs_for_any_count_it_cannot_take(states):
    with pytest.raises(ValueError, match=r"a Koch curve has 4\^level \+ 1 vertices"):
        fractal.resolution(states)
