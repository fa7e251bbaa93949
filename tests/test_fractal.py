"""Fractal dimension estimators, validated on sets whose dimension is known exactly."""

import math

import numpy as np
import pytest

from frost_nb.fractal import (
    box_counting_dimension,
    correlation_dimension,
    filled_square,
    koch_curve,
    pca_projection,
    resample_polyline,
    sierpinski_points,
    straight_line,
    summarise_dimensions,
    trajectory_dimensions,
)

KOCH = math.log(4) / math.log(3)  # 1.2619
SIERPINSKI = math.log(3) / math.log(2)  # 1.585


@pytest.fixture(scope="module")
def known_sets():
    return {"line": (straight_line(), 1.0), "square": (filled_square(), 2.0),
            "koch": (resample_polyline(koch_curve(7), 16384), KOCH),
            "sierpinski": (sierpinski_points(50000), SIERPINSKI)}


@pytest.mark.parametrize("name", ["line", "square", "koch", "sierpinski"])
@pytest.mark.parametrize("estimator", [box_counting_dimension, correlation_dimension])
def test_known_dimensions_within_005(known_sets, name, estimator):
    points, truth = known_sets[name]
    fit = estimator(points)
    assert fit.dimension == pytest.approx(truth, abs=0.05), (name, fit)
    assert fit.r2 > 0.99


def test_koch_curve_polyline_is_what_it_should_be():
    v = koch_curve(3)
    assert v.shape == (4 ** 3 + 1, 2)
    seg = np.linalg.norm(np.diff(v, axis=0), axis=1)
    np.testing.assert_allclose(seg, 3.0 ** -3)  # every segment a third of its parent's
    np.testing.assert_allclose(v[[0, -1]], [[0, 0], [1, 0]], atol=1e-12)


@pytest.mark.parametrize("estimator", [box_counting_dimension, correlation_dimension])
def test_invariant_to_translation_and_scale(known_sets, estimator):
    points, _ = known_sets["koch"]
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
    proj = pca_projection(np.concatenate([straight, walks]))
    assert proj.shape == (d, 2)
    lines = trajectory_dimensions(straight, projection=proj)
    np.testing.assert_allclose(lines, 1.0, atol=0.05)
    wiggly = trajectory_dimensions(walks)
    assert np.all(wiggly > 1.05)  # 33 vertices: well above a line, far below the limit 2
    corr = trajectory_dimensions(walks, method="correlation")
    assert np.all(corr > 1.05)
    still = trajectory_dimensions(np.ones((2, 5, 3)))
    assert np.isnan(still).all()
    s = summarise_dimensions(np.concatenate([wiggly, [np.nan]]))
    assert s["n"] == n and s["q25"] <= s["median"] <= s["q75"]


@pytest.mark.parametrize("call, message", [
    (lambda: box_counting_dimension(np.zeros(5)), r"\(n, d\)"),
    (lambda: box_counting_dimension(np.zeros((1, 2))), "at least 2 points"),
    (lambda: box_counting_dimension(np.array([[0.0, np.nan], [1.0, 1.0]])), "NaN"),
    (lambda: box_counting_dimension(np.ones((5, 2))), "zero extent"),
    (lambda: box_counting_dimension(straight_line(), scales=(0.5,)), "at least two"),
    (lambda: correlation_dimension(straight_line(), max_points=1), "max_points"),
    (lambda: trajectory_dimensions(np.zeros((2, 3, 4)), method="hausdorff"), "method"),
    (lambda: trajectory_dimensions(np.zeros((2, 3))), r"\(N, T\+1, D\)"),
    (lambda: resample_polyline(np.zeros((3, 2)), 1), "n must be"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()
