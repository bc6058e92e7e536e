"""Numeric tests of the RoiAlignGrad kernel (specification section 3).

Oracles: the worked examples of the DML page, the package's plain reference written straight
from the spec (:mod:`dml_onnx.reference_ops.roi_align_grad`, independent of the kernels), the
adjoint identity, and central finite differences; the thread count changes no bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from dml_onnx._kernels import _threads
from tests.kernels._roi_align import (
    ATTRIBUTE_SETS,
    SEED_ATTRS,
    SEED_BATCH,
    SEED_DY,
    SEED_ROIS,
    SEED_X,
    backward,
    cases,
    forward,
    random_case,
    ref_backward,
    ref_forward,
)

# ----------------------------------------------------------------------------------------------
# worked examples (spec sections 2 and 3, seeds/roi_align_grad.ja.txt)


@pytest.mark.parametrize("reduction", ["average", "max"])
def test_seed_gradient_with_offsets_half_and_zero(reduction):
    dX, drois = backward(SEED_X, SEED_DY, SEED_ROIS, SEED_BATCH, output_pixel_offset=0.0,
                         reduction_function=reduction, **SEED_ATTRS)
    expected = [[3, 3, 9, 6], [0, 0, 0, 0], [15, 9, 21, 12], [0, 0, 0, 0]]
    # one sample per output: max routes the gradient exactly as average does
    np.testing.assert_array_equal(dX[0, 0], np.array(expected, np.float32))
    # DirectML's drois is not 0 for nearest_neighbor (measured); the exact derivative is
    _, want = ref_backward(SEED_X, SEED_DY, SEED_ROIS, SEED_BATCH, dx=False,
                           output_pixel_offset=0.0, reduction_function=reduction, **SEED_ATTRS)
    np.testing.assert_allclose(drois, want, rtol=1e-6)
    assert drois.any()
    _, exact = backward(SEED_X, SEED_DY, SEED_ROIS, SEED_BATCH, output_pixel_offset=0.0,
                        reduction_function=reduction, exact_roi_gradient=True, **SEED_ATTRS)
    np.testing.assert_array_equal(exact, np.zeros_like(SEED_ROIS))


def test_seed_gradient_with_default_offsets_and_without_x():
    dX, drois = backward(None, SEED_DY, SEED_ROIS, SEED_BATCH, drois=False,
                         input_shape=(1, 1, 4, 4), output_pixel_offset=-0.5, **SEED_ATTRS)
    expected = [[0, 0, 0, 0], [1, 5, 4, 11], [0, 0, 0, 0], [7, 17, 10, 23]]
    np.testing.assert_array_equal(dX[0, 0], np.array(expected, np.float32))
    assert drois is None
    ref_dx, _ = ref_backward(None, SEED_DY, SEED_ROIS, SEED_BATCH, drois=False,
                             input_shape=(1, 1, 4, 4), output_pixel_offset=-0.5, **SEED_ATTRS)
    np.testing.assert_array_equal(dX, ref_dx)


# ----------------------------------------------------------------------------------------------
# gradients


@pytest.mark.parametrize("attrs", [a for a in ATTRIBUTE_SETS
                                   if a.get("reduction_function") != "max"])
def test_dx_is_the_adjoint_of_the_forward(attrs):
    rng, X, rois, batch = random_case(21, regions=7)
    Y = forward(X, rois, batch, (3, 4), **attrs)
    g = rng.standard_normal(Y.shape)
    dX, _ = backward(X, g, rois, batch, drois=False, **attrs)
    assert abs(np.vdot(Y, g) - np.vdot(X, dX)) <= 1e-12 * np.abs(Y * g).sum()
    dX2, _ = backward(None, g, rois, batch, drois=False, input_shape=X.shape, **attrs)
    np.testing.assert_array_equal(dX, dX2)


def central_differences(function, values: np.ndarray, g: np.ndarray,
                        eps: float = 1e-6) -> np.ndarray:
    """The gradient of ``vdot(function(values), g)`` in ``values``, one central difference
    per entry."""
    numeric = np.zeros_like(values)
    for index in np.ndindex(values.shape):
        up, down = values.copy(), values.copy()
        up[index] += eps
        down[index] -= eps
        numeric[index] = np.vdot(function(up) - function(down), g) / (2 * eps)
    return numeric


@pytest.mark.parametrize("interpolation", ["linear", "nearest_neighbor"])
def test_max_dx_matches_finite_differences(interpolation):
    rng, X, rois, batch = random_case(22, n=1, c=2, h=5, w=6, regions=4)
    attrs = dict(reduction_function="max", interpolation_mode=interpolation,
                 minimum_samples_per_output=2, maximum_samples_per_output=2)
    g = rng.standard_normal((4, 2, 2, 3))
    dX, _ = backward(X, g, rois, batch, drois=False, **attrs)
    numeric = central_differences(lambda image: forward(image, rois, batch, (2, 3), **attrs),
                                  X, g)
    np.testing.assert_allclose(dX, numeric, rtol=1e-6, atol=1e-7)
    assert np.abs(dX).max() > 0.1


def generic_regions(rng, count, h, w):
    """Regions whose samples stay away from integer coordinates and from the clamping edges:
    a random inner box, its corners off integers by at least 0.05."""
    x1 = rng.uniform(0.6, w / 2, count)
    y1 = rng.uniform(0.6, h / 2, count)
    x2 = x1 + rng.uniform(1.3, w / 2 - 1.0, count)
    y2 = y1 + rng.uniform(1.3, h / 2 - 1.0, count)
    return np.stack([x1, y1, x2, y2], axis=1)


@pytest.mark.parametrize("attrs", [
    {},
    dict(minimum_samples_per_output=2, maximum_samples_per_output=2),
    dict(reduction_function="max", minimum_samples_per_output=2, maximum_samples_per_output=2),
    dict(reduction_function="max"),
    dict(spatial_scale_x=0.5, spatial_scale_y=0.75, input_pixel_offset=0.0,
         output_pixel_offset=0.25, minimum_samples_per_output=1, maximum_samples_per_output=3),
    dict(align_regions_to_corners=1, output_pixel_offset=0.0, minimum_samples_per_output=2,
         maximum_samples_per_output=2),
    dict(spatial_scale_x=1.5, spatial_scale_y=1.25, reduction_function="max",
         align_regions_to_corners=1, minimum_samples_per_output=1,
         maximum_samples_per_output=1),
], ids=range(7))
def test_drois_matches_finite_differences(attrs):
    rng = np.random.default_rng(23)
    X = rng.standard_normal((2, 2, 9, 11))
    sx, sy = attrs.get("spatial_scale_x", 1.0), attrs.get("spatial_scale_y", 1.0)
    rois = generic_regions(rng, 5, 9, 11) / np.array([sx, sy, sx, sy])
    batch = rng.integers(0, 2, 5)
    g = rng.standard_normal((5, 2, 3, 2))
    _, drois = backward(X, g, rois, batch, dx=False, exact_roi_gradient=True, **attrs)
    numeric = central_differences(lambda boxes: forward(X, boxes, batch, (3, 2), **attrs),
                                  rois, g)
    assert np.abs(drois - numeric).max() <= 1e-6 * np.abs(numeric).max()
    assert np.abs(numeric).max() > 0.1


def test_exact_drois_of_nearest_neighbor_is_zero_and_directml_is_not():
    rng, X, rois, batch = random_case(24)
    g = rng.standard_normal((5, 2, 2, 2))
    for reduction in ("average", "max"):
        attrs = dict(interpolation_mode="nearest_neighbor", reduction_function=reduction)
        dX, drois = backward(X, g, rois, batch, exact_roi_gradient=True, **attrs)
        assert drois.shape == rois.shape and not drois.any() and dX.any()
        _, drois = backward(X, g, rois, batch, **attrs)
        assert drois.any()
        np.testing.assert_allclose(drois, ref_backward(X, g, rois, batch, **attrs)[1],
                                   rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("attrs", ATTRIBUTE_SETS, ids=range(len(ATTRIBUTE_SETS)))
def test_gradient_matches_reference(attrs):
    rng, X, rois, batch = random_case(25, regions=6)
    rois[0] = [1.5, 2.5, 1.5, 2.5]
    rois[1] = [6.0, 5.0, 1.0, 0.5]
    rois[2] = [-9.0, -9.0, -3.0, -4.0]
    rois[3] = [-3.0, 2.0, 12.0, 20.0]
    g = rng.standard_normal((6, 2, 3, 2))
    dX, drois = backward(X, g, rois, batch, **attrs)
    ref_dx, ref_drois = ref_backward(X, g, rois, batch, **attrs)
    np.testing.assert_allclose(dX, ref_dx, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(drois, ref_drois, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("interpolation", ["linear", "nearest_neighbor"])
def test_max_gradient_ignores_losing_samples_next_to_minus_infinity(interpolation):
    """A sample that loses the max adds nothing, not 0 times its infinite corner terms."""
    rng = np.random.default_rng(31)
    X = rng.standard_normal((1, 2, 6, 6))
    X[0, 0, 2, 2] = -np.inf
    rois = np.array([[0.3, 0.6, 5.2, 4.7]])
    g = rng.standard_normal((1, 2, 2, 2))
    attrs = dict(reduction_function="max", interpolation_mode=interpolation)
    dX, drois = backward(X, g, rois, np.zeros(1, np.int64), **attrs)
    ref_dx, ref_drois = ref_backward(X, g, rois, np.zeros(1, np.int64), **attrs)
    assert np.isfinite(dX).all()
    np.testing.assert_allclose(dX, ref_dx, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(drois, ref_drois, rtol=1e-11, atol=1e-11, equal_nan=True)
    # the exact derivative reads the interpolation's own corners: nearest ones have none,
    # bilinear ones no -inf next to the winners; DirectML's takes the bilinear image
    # gradient in both modes, so nearest_neighbor's may meet the -inf pixel
    _, exact = backward(X, g, rois, np.zeros(1, np.int64), exact_roi_gradient=True, **attrs)
    assert np.isfinite(exact).all()
    if interpolation == "linear":
        assert np.isfinite(drois).all()


def test_gradient_with_non_finite_data_follows_the_reference():
    rng, X, rois, batch = random_case(26, regions=6)
    X[0, 1, 2, 3] = np.nan
    X[1, 0, 4, 4] = np.inf
    # samples on integer coordinates next to a NaN (the derivative uses ceil, not y0 + 1),
    # and samples all clamped onto an infinite edge row (no derivative along y there)
    rois[:2] = [[1.0, 1.0, 3.0, 4.0], [1.0, 7.1, 3.0, 7.4]]
    batch[:2] = [0, 1]
    X[0, :, 4, 1] = np.nan
    X[1, :, 6, 1] = np.inf
    for attrs in ATTRIBUTE_SETS[:4]:
        g = rng.standard_normal((6, 2, 3, 2))
        g[2, 0, 1, 1] = np.nan
        g[4, 1, 0, 0] = -np.inf
        for exact in (False, True):
            dX, drois = backward(X, g, rois, batch, exact_roi_gradient=exact, **attrs)
            ref_dx, ref_drois = ref_backward(X, g, rois, batch, exact_roi_gradient=exact,
                                             **attrs)
            np.testing.assert_allclose(dX, ref_dx, rtol=1e-11, atol=1e-12, equal_nan=True)
            np.testing.assert_allclose(drois, ref_drois, rtol=1e-11, atol=1e-11,
                                       equal_nan=True)
            assert np.isnan(dX).any()
        if attrs.get("interpolation_mode", "linear") == "linear" and \
                attrs.get("reduction_function") != "max":  # max: NaN samples never win
            assert np.isnan(drois[1, 0]) and drois[1, 1] == 0  # exact: ceil corners


@pytest.mark.parametrize("attrs", ATTRIBUTE_SETS, ids=range(len(ATTRIBUTE_SETS)))
@pytest.mark.parametrize("nonfinite", [False, True])
def test_thread_count_changes_no_bit(attrs, nonfinite, monkeypatch):
    """Regions split over threads, dX scattered by bands of rows: the same bits on one
    thread and on several (with NaN and infinity in X and dY too)."""
    rng, X, rois, batch = random_case(27, n=3, regions=9)
    g = rng.standard_normal((9, 2, 2, 3))
    if nonfinite:
        X[0, 1, 2, 3], X[2, 0, 5, 5], g[4, 1, 1, 2] = np.nan, np.inf, -np.inf

    def run():
        return [forward(X, rois, batch, (2, 3), 1.5, **attrs), *backward(X, g, rois, batch,
                                                                         **attrs)]
    monkeypatch.setattr(_threads, "THREADS", 1)
    serial = run()
    monkeypatch.setattr(_threads, "THREADS", 4)
    monkeypatch.setattr(_threads, "GRAIN", 1)  # split even this small work
    for threaded, alone in zip(run(), serial):
        np.testing.assert_array_equal(threaded, alone)


@pytest.mark.parametrize("reduction", ["average", "max"])
def test_sparse_windows_match_reference(reduction):
    """Large regions read by few samples: the touched rows and columns are gathered."""
    rng = np.random.default_rng(28)
    X = rng.standard_normal((1, 2, 40, 50))
    rois = np.array([[2.3, 1.7, 45.1, 37.9], [30.2, 3.1, 8.6, 30.4], [-5.0, 20.0, 60.0, 26.0]])
    batch = np.zeros(3, np.int64)
    attrs = dict(reduction_function=reduction, minimum_samples_per_output=1,
                 maximum_samples_per_output=2)
    g = rng.standard_normal((3, 2, 3, 4))
    np.testing.assert_allclose(forward(X, rois, batch, (3, 4), 0.5, **attrs),
                               ref_forward(X, rois, batch, (3, 4), 0.5, **attrs), rtol=1e-12)
    dX, drois = backward(X, g, rois, batch, **attrs)
    ref_dx, ref_drois = ref_backward(X, g, rois, batch, **attrs)
    np.testing.assert_allclose(dX, ref_dx, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(drois, ref_drois, rtol=1e-11, atol=1e-11)


def test_max_gradient_goes_to_the_first_of_tied_samples():
    X = np.zeros((1, 1, 3, 3))
    X[0, 0, 1, 1] = 5.0
    rois = np.array([[0.0, 0.0, 3.0, 3.0]])
    attrs = dict(reduction_function="max", interpolation_mode="nearest_neighbor",
                 minimum_samples_per_output=3, maximum_samples_per_output=3,
                 output_pixel_offset=0.0)
    dY = np.ones((1, 1, 1, 1))
    dX, _ = backward(X, dY, rois, np.zeros(1, np.int64), drois=False, **attrs)
    assert dX.sum() == 1.0 and dX[0, 0, 1, 1] == 1.0
    X[...] = 0.0  # all nine samples tie: the first one (row-major) takes it
    dX, _ = backward(X, dY, rois, np.zeros(1, np.int64), drois=False, **attrs)
    ref_dx, _ = ref_backward(X, dY, rois, np.zeros(1, np.int64), **attrs)
    np.testing.assert_array_equal(dX, ref_dx)
    assert dX.sum() == 1.0


# ----------------------------------------------------------------------------------------------
# property tests against the reference


@settings(max_examples=100, deadline=None, derandomize=True)
@given(cases())
def test_property_gradient_matches_reference(case):
    X, rois, batch, size, _, attrs, rng = case
    g = rng.standard_normal((len(batch), X.shape[1], *size))
    dX, drois = backward(X, g, rois, batch, **attrs)
    ref_dx, ref_drois = ref_backward(X, g, rois, batch, **attrs)
    np.testing.assert_allclose(dX, ref_dx, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(drois, ref_drois, rtol=1e-10, atol=1e-10)
    if attrs["reduction_function"] == "average":
        Y = forward(X, rois, batch, size, **attrs)
        assert abs(np.vdot(Y, g) - np.vdot(X, dX)) <= 1e-11 * (1 + np.abs(Y * g).sum())
