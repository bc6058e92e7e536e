"""Numeric tests of the RoiAlign1 and RoiAlignGrad kernels (specification sections 2 and 3).

Oracles: the worked examples of the DML page, onnxruntime's native RoiAlign (opset 16) on the
subset it shares with RoiAlign1, the package's plain references written straight from the spec
(:mod:`dml_onnx.reference_ops.roi_align1` and ``.roi_align_grad``, independent of the kernels),
the adjoint identity, and central finite differences.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import custom_ops.roi_align1 as forward_module
import custom_ops.roi_align_grad as grad_module
from custom_ops import _threads
from custom_ops._checks import UINT32_MAX, KernelError
from custom_ops.roi_align1 import roi_align1
from custom_ops.roi_align_grad import roi_align_grad
from dml_onnx.reference_ops.roi_align1 import roi_align1 as reference_forward
from dml_onnx.reference_ops.roi_align_grad import roi_align_grad as reference_backward
from tests._support.native import run_native

DEFAULTS = dict(reduction_function="average", interpolation_mode="linear",
                spatial_scale_x=1.0, spatial_scale_y=1.0, input_pixel_offset=0.5,
                output_pixel_offset=-0.5, minimum_samples_per_output=1,
                maximum_samples_per_output=UINT32_MAX, align_regions_to_corners=0)


def forward(X, rois, batch, output_size, out_of_bounds_input_value=0.0, node="ra", *,
            implementation=roi_align1, **attrs):
    return implementation(X, rois, batch, output_size=list(output_size),
                          out_of_bounds_input_value=out_of_bounds_input_value, node=node,
                          **{**DEFAULTS, **attrs})


def backward(X, dY, rois, batch, *, dx=True, drois=True, input_shape=(), node="rag",
             implementation=roi_align_grad, **attrs):
    return implementation(X, dY, rois, batch, input_shape=list(input_shape), compute_dx=dx,
                          compute_drois=drois, node=node, **{**DEFAULTS, **attrs})


def ref_forward(*args, **kwargs):
    """:func:`forward` through the package reference."""
    return forward(*args, implementation=reference_forward, **kwargs)


def ref_backward(*args, **kwargs):
    """:func:`backward` through the package reference."""
    return backward(*args, implementation=reference_backward, **kwargs)


# ----------------------------------------------------------------------------------------------
# data


def random_case(seed, *, n=2, c=2, h=7, w=8, regions=5, dtype=np.float64, lo=-2.0, span=None):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, c, h, w)).astype(dtype)
    span = span or (w + 4, h + 4)
    x1 = rng.uniform(lo, lo + span[0], regions)
    y1 = rng.uniform(lo, lo + span[1], regions)
    x2 = rng.uniform(lo, lo + span[0], regions)
    y2 = rng.uniform(lo, lo + span[1], regions)
    rois = np.stack([x1, y1, x2, y2], axis=1).astype(dtype)
    batch = rng.integers(0, n, regions).astype(np.int64)
    return rng, X, rois, batch


SEED_X = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
SEED_ROIS = np.array([[0, 0, 2, 2], [2, 0, 4, 2], [0, 2, 2, 4], [2, 2, 4, 4]], np.float32)
SEED_BATCH = np.zeros(4, np.int64)
SEED_DY = np.arange(1, 13, dtype=np.float32).reshape(4, 1, 1, 3)
SEED_ATTRS = dict(interpolation_mode="nearest_neighbor", minimum_samples_per_output=1,
                  maximum_samples_per_output=1, input_pixel_offset=0.5)

ATTRIBUTE_SETS = [
    {},
    dict(interpolation_mode="nearest_neighbor"),
    dict(reduction_function="max"),
    dict(reduction_function="max", interpolation_mode="nearest_neighbor"),
    dict(align_regions_to_corners=1, input_pixel_offset=0.0, output_pixel_offset=0.0,
         minimum_samples_per_output=1, maximum_samples_per_output=1),
    dict(align_regions_to_corners=1, minimum_samples_per_output=2,
         maximum_samples_per_output=3, reduction_function="max"),
    dict(spatial_scale_x=0.75, spatial_scale_y=1.25, input_pixel_offset=0.25,
         output_pixel_offset=0.3, minimum_samples_per_output=2, maximum_samples_per_output=2),
    dict(spatial_scale_x=-0.5, spatial_scale_y=0.5, minimum_samples_per_output=1,
         maximum_samples_per_output=3, interpolation_mode="nearest_neighbor"),
    dict(input_pixel_offset=0.0, output_pixel_offset=0.0, minimum_samples_per_output=3,
         maximum_samples_per_output=3),
]


# ----------------------------------------------------------------------------------------------
# worked examples (spec sections 2 and 3, seeds/roi_align_grad.ja.txt)


def test_seed_forward_with_offsets_half_and_zero():
    Y = forward(SEED_X, SEED_ROIS, SEED_BATCH, (1, 3), output_pixel_offset=0.0, **SEED_ATTRS)
    expected = [[[[1, 1, 2]]], [[[3, 3, 4]]], [[[9, 9, 10]]], [[[11, 11, 12]]]]
    np.testing.assert_array_equal(Y, np.array(expected, np.float32))


def test_seed_forward_with_default_offsets():
    Y = forward(SEED_X, SEED_ROIS, SEED_BATCH, (1, 3), output_pixel_offset=-0.5, **SEED_ATTRS)
    expected = [[[[5, 6, 6]]], [[[7, 8, 8]]], [[[13, 14, 14]]], [[[15, 16, 16]]]]
    np.testing.assert_array_equal(Y, np.array(expected, np.float32))


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
# onnxruntime's native RoiAlign


@pytest.mark.parametrize("sampling_ratio", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("mode", ["half_pixel", "output_half_pixel"])
def test_matches_onnxruntime_roi_align(sampling_ratio, mode):
    rng = np.random.default_rng(100 + sampling_ratio)
    X = rng.standard_normal((2, 3, 12, 14)).astype(np.float32)
    scale = 0.5
    regions = 24
    x1, y1 = rng.uniform(-4, 26, regions), rng.uniform(-4, 22, regions)
    w, h = rng.uniform(0.2, 16, regions), rng.uniform(0.2, 16, regions)
    if mode == "output_half_pixel":  # ONNX clamps the size to 1 there; keep it >= 1 pixel
        w, h = w + 2.0, h + 2.0
    rois = np.stack([x1, y1, x1 + w, y1 + h], axis=1).astype(np.float32)
    batch = rng.integers(0, 2, regions).astype(np.int64)
    (native,) = run_native("RoiAlign", [X, rois, batch], opset=16, mode="avg",
                           output_height=3, output_width=4, sampling_ratio=sampling_ratio,
                           spatial_scale=scale, coordinate_transformation_mode=mode)
    low, high = (sampling_ratio, sampling_ratio) if sampling_ratio else (1, UINT32_MAX)
    ours = forward(X, rois, batch, (3, 4), spatial_scale_x=scale, spatial_scale_y=scale,
                   input_pixel_offset=0.5 if mode == "half_pixel" else 0.0,
                   output_pixel_offset=-0.5, minimum_samples_per_output=low,
                   maximum_samples_per_output=high)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, native, rtol=1e-5, atol=2e-5)


def test_matches_onnxruntime_on_float64():
    _, X, rois, batch = random_case(7, c=3, h=9, w=10, regions=10)
    rois = np.abs(rois)
    (native,) = run_native("RoiAlign", [X, rois, batch], opset=16, mode="avg",
                           output_height=2, output_width=3, sampling_ratio=2,
                           spatial_scale=1.0, coordinate_transformation_mode="half_pixel")
    ours = forward(X, rois, batch, (2, 3), minimum_samples_per_output=2,
                   maximum_samples_per_output=2)
    np.testing.assert_allclose(ours, native, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# the package reference, every attribute combination


@pytest.mark.parametrize("attrs", ATTRIBUTE_SETS, ids=range(len(ATTRIBUTE_SETS)))
@pytest.mark.parametrize("out_of_bounds", [0.0, 2.5])
def test_forward_matches_reference(attrs, out_of_bounds):
    _, X, rois, batch = random_case(11, regions=6)
    rois[0] = [1.5, 2.5, 1.5, 2.5]  # empty region
    rois[1] = [6.0, 5.0, 1.0, 0.5]  # inverted region (mirrored)
    rois[2] = [-9.0, -9.0, -3.0, -4.0]  # wholly outside
    rois[3] = [-3.0, 2.0, 12.0, 20.0]  # partly outside
    Y = forward(X, rois, batch, (3, 2), out_of_bounds, **attrs)
    np.testing.assert_allclose(Y, ref_forward(X, rois, batch, (3, 2), out_of_bounds, **attrs),
                               rtol=1e-12, atol=1e-12)


def test_forward_float32_matches_reference():
    _, X, rois, batch = random_case(12, dtype=np.float32)
    for attrs in ATTRIBUTE_SETS:
        np.testing.assert_allclose(forward(X, rois, batch, (2, 3), **attrs),
                                   ref_forward(X, rois, batch, (2, 3), **attrs),
                                   rtol=1e-5, atol=1e-5)


def test_corner_alignment_with_a_single_sample_reads_the_centre():
    _, X, _, _ = random_case(13, n=1, c=1)
    rois = np.array([[1.0, 2.0, 5.0, 4.0]])
    attrs = dict(align_regions_to_corners=1, minimum_samples_per_output=1,
                 maximum_samples_per_output=1, input_pixel_offset=0.0, output_pixel_offset=0.0)
    Y = forward(X, rois, np.zeros(1, np.int64), (1, 1), **attrs)
    np.testing.assert_allclose(Y[0, 0, 0, 0], X[0, 0, 3, 3], rtol=1e-12)  # (x, y) = (3, 3)
    np.testing.assert_allclose(Y, ref_forward(X, rois, np.zeros(1, np.int64), (1, 1), **attrs),
                               rtol=1e-12)


def test_corner_alignment_reaches_both_corners():
    _, X, _, _ = random_case(14, n=1, c=1)
    rois = np.array([[1.0, 2.0, 6.0, 5.0]])
    Y = forward(X, rois, np.zeros(1, np.int64), (2, 3), align_regions_to_corners=1,
                minimum_samples_per_output=1, maximum_samples_per_output=1,
                input_pixel_offset=0.0, output_pixel_offset=0.0)
    np.testing.assert_allclose(Y[0, 0, 0, 0], X[0, 0, 2, 1], rtol=1e-12)
    np.testing.assert_allclose(Y[0, 0, 1, 2], X[0, 0, 5, 6], rtol=1e-12)


def test_out_of_bounds_rule_and_value():
    X = np.arange(1, 17, dtype=np.float64).reshape(1, 1, 4, 4)
    one = dict(minimum_samples_per_output=1, maximum_samples_per_output=1,
               input_pixel_offset=0.0, output_pixel_offset=-0.5)
    # single sample at the region centre; (-1, H) reads (clamped), -1, H and beyond read the
    # value (measured: the interval is open); aligning corners, only [0, H - 1] reads
    for centre, expected in [(-1.0, 7.0), (-0.999, 1.0), (-0.4, 1.0), (-1.1, 7.0),
                             (3.5, 16.0), (3.999, 16.0), (4.0, 7.0), (4.1, 7.0)]:
        rois = np.array([[centre - 0.5, centre - 0.5, centre + 0.5, centre + 0.5]])
        Y = forward(X, rois, np.zeros(1, np.int64), (1, 1), 7.0, **one)
        assert Y[0, 0, 0, 0] == expected, centre
    for centre, expected in [(-0.001, 7.0), (0.0, 1.0), (3.0, 16.0), (3.001, 7.0)]:
        rois = np.array([[centre, centre, centre, centre]])
        Y = forward(X, rois, np.zeros(1, np.int64), (1, 1), 7.0, **one,
                    align_regions_to_corners=1)
        assert Y[0, 0, 0, 0] == expected, centre


def test_out_of_bounds_minus_infinity_drops_samples_from_max():
    _, X, _, _ = random_case(15, n=1, c=2)
    rois = np.array([[-2.0, -2.0, 3.0, 3.0], [-9.0, -9.0, -5.0, -5.0]])
    attrs = dict(reduction_function="max", minimum_samples_per_output=2,
                 maximum_samples_per_output=2)
    Y = forward(X, rois, np.zeros(2, np.int64), (2, 2), -np.inf, **attrs)
    np.testing.assert_allclose(Y, ref_forward(X, rois, np.zeros(2, np.int64), (2, 2),
                                              -np.inf, **attrs), rtol=1e-12)
    # a max over samples that all read -inf is lowest(T), as measured
    assert np.isfinite(Y[0]).all() and (Y[1] == np.finfo(np.float64).min).all()


def test_average_counts_out_of_bounds_samples_with_infinite_value():
    _, X, _, _ = random_case(16, n=1, c=1)
    rois = np.array([[-3.0, 1.0, 5.0, 5.0]])
    Y = forward(X, rois, np.zeros(1, np.int64), (1, 2), np.inf)
    assert Y[0, 0, 0, 0] == np.inf and np.isfinite(Y[0, 0, 0, 1])


@pytest.mark.parametrize("attrs", ATTRIBUTE_SETS[:4], ids=range(4))
def test_non_finite_pixels_reach_only_the_outputs_that_read_them(attrs):
    _, X, rois, batch = random_case(17, regions=6)
    rois[:3] = [[1.0, 1.0, 6.0, 5.0], [-1.0, -1.5, 2.0, 3.0], [0.0, 2.0, 4.0, 7.0]]
    batch[:3] = [0, 1, 1]
    X[0, 0, 3, 4] = np.nan
    X[1, 1, 0, 0] = np.inf
    X[1, 0, 5, 2] = -np.inf
    Y = forward(X, rois, batch, (3, 3), 0.5, **attrs)
    expected = ref_forward(X, rois, batch, (3, 3), 0.5, **attrs)
    np.testing.assert_allclose(Y, expected, rtol=1e-12, atol=1e-12, equal_nan=True)
    if attrs.get("reduction_function") == "max":  # NaN samples are ignored (measured)
        assert not np.isnan(Y).any() and np.isfinite(Y).any()
    else:
        assert np.isnan(Y).any() and np.isfinite(Y).any()


def test_adaptive_sample_count_uses_ceil_of_absolute_size():
    _, X, _, _ = random_case(18, n=1, c=1, h=12, w=12)
    rois = np.array([[0.0, 0.0, 5.5, 5.5], [5.5, 5.5, 0.0, 0.0]])
    adaptive = forward(X, rois, np.zeros(2, np.int64), (2, 2))
    three = forward(X, rois, np.zeros(2, np.int64), (2, 2), minimum_samples_per_output=3,
                    maximum_samples_per_output=3)
    np.testing.assert_array_equal(adaptive, three)
    np.testing.assert_allclose(adaptive[1], adaptive[0][:, ::-1, ::-1], rtol=1e-12)


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
# shapes and types


@pytest.mark.parametrize("index_type", [np.int64, np.int32, np.uint32, np.uint64])
def test_every_region_and_index_layout(index_type):
    rng, X, rois, batch = random_case(31, dtype=np.float32)
    g = rng.standard_normal((5, 2, 2, 2)).astype(np.float32)
    Y0 = forward(X, rois, batch, (2, 2))
    dX0, dr0 = backward(X, g, rois, batch)
    for roi_shape in [(5, 4), (1, 5, 4), (1, 1, 5, 4)]:
        for index_shape in [(5,), (1, 5), (1, 1, 5), (1, 1, 1, 5)]:
            r, b = rois.reshape(roi_shape), batch.astype(index_type).reshape(index_shape)
            np.testing.assert_array_equal(forward(X, r, b, (2, 2)), Y0)
            dX, drois = backward(X, g, r, b)
            np.testing.assert_array_equal(dX, dX0)
            assert drois.shape == roi_shape
            np.testing.assert_array_equal(drois.reshape(5, 4), dr0)


@pytest.mark.parametrize("roi_shape", [(0, 4), (1, 0, 4), (1, 1, 0, 4)])
def test_no_regions(roi_shape):
    X = np.ones((2, 3, 4, 5), np.float32)
    rois = np.zeros(roi_shape, np.float32)
    batch = np.zeros(0, np.int32)
    Y = forward(X, rois, batch, (2, 3), reduction_function="max")
    assert Y.shape == (0, 3, 2, 3) and Y.dtype == np.float32
    dX, drois = backward(X, np.zeros((0, 3, 2, 3), np.float32), rois, batch)
    assert dX.shape == X.shape and not dX.any() and drois.shape == roi_shape


@pytest.mark.parametrize("reduction", ["average", "max"])
def test_float16_is_computed_in_float32_and_rounded_once(reduction):
    rng, X, rois, batch = random_case(32, dtype=np.float16)
    Y = forward(X, rois, batch, (3, 2), reduction_function=reduction)
    assert Y.dtype == np.float16
    wide = forward(X.astype(np.float32), rois.astype(np.float32), batch, (3, 2),
                   reduction_function=reduction)
    np.testing.assert_array_equal(Y, wide.astype(np.float16))
    g = rng.standard_normal((5, 2, 3, 2)).astype(np.float16)
    dX, drois = backward(X, g, rois, batch, reduction_function=reduction)
    assert dX.dtype == np.float16 and drois.dtype == np.float16
    wide_dx, wide_drois = backward(X.astype(np.float32), g.astype(np.float32),
                                   rois.astype(np.float32), batch, reduction_function=reduction)
    np.testing.assert_array_equal(dX, wide_dx.astype(np.float16))
    np.testing.assert_array_equal(drois, wide_drois.astype(np.float16))


def test_float64_stays_float64():
    rng, X, rois, batch = random_case(33)
    assert forward(X, rois, batch, (2, 2)).dtype == np.float64
    dX, drois = backward(X, rng.standard_normal((5, 2, 2, 2)), rois, batch)
    assert dX.dtype == np.float64 and drois.dtype == np.float64


# ----------------------------------------------------------------------------------------------
# errors


def raises(call, *fragments):
    with pytest.raises(ValueError) as info:
        call()
    assert isinstance(info.value, KernelError)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


def test_error_message_shape():
    X = np.zeros((2, 1, 4, 4), np.float32)
    rois = np.zeros((3, 4), np.float32)
    with pytest.raises(ValueError, match=r"^RoiAlign1 'ra': batch_indices\[2\] 5 is outside "
                                         r"\[0, 2\)$"):
        forward(X, rois, np.array([0, 1, 5]), (1, 1))


FX = np.zeros((2, 3, 4, 5), np.float32)
FROIS = np.array([[0, 0, 2, 2], [1, 1, 3, 3]], np.float32)
FBATCH = np.array([0, 1], np.int64)


@pytest.mark.parametrize("args, fragments", [
    ((FX[0], FROIS, FBATCH), ["X rank", "3"]),
    ((FX.astype(np.int32), FROIS, FBATCH), ["X element type", "int32"]),
    ((FX[:, :, :0], FROIS, FBATCH), ["X shape", "[2, 3, 0, 5]"]),
    ((FX, FROIS[:, :3], FBATCH), ["rois shape", "[2, 3]"]),
    ((FX, FROIS.reshape(2, 1, 4), FBATCH), ["rois shape", "[2, 1, 4]"]),
    ((FX, FROIS.reshape(1, 1, 1, 2, 4), FBATCH), ["rois rank", "5"]),
    ((FX, FROIS[0], FBATCH), ["rois rank", "1"]),
    ((FX, FROIS.astype(np.float64), FBATCH), ["rois element type", "float64"]),
    ((FX, FROIS, FBATCH.astype(np.float32)), ["batch_indices element type", "float32"]),
    ((FX, FROIS, FBATCH.astype(np.int16)), ["batch_indices element type", "int16"]),
    ((FX, FROIS, FBATCH.reshape(2, 1)), ["batch_indices shape", "[2, 1]"]),
    ((FX, FROIS, FBATCH.reshape(1, 1, 1, 1, 2)), ["batch_indices rank", "5"]),
    ((FX, FROIS, FBATCH[:1]), ["batch_indices length", "1", "2 regions"]),
    ((FX, FROIS, np.array([0, 2])), ["batch_indices[1]", " 2 ", "[0, 2)"]),
    ((FX, FROIS, np.array([-1, 0])), ["batch_indices[0]", "-1", "[0, 2)"]),
    ((FX, FROIS, np.array([0, 2**63], np.uint64)), ["batch_indices[1]", str(2**63)]),
    ((FX, np.array([[0, 0, 2, 2], [1, np.nan, 3, 3]], np.float32), FBATCH),
     ["rois[1]", "nan", "not finite"]),
    ((FX, np.array([[0, 0, np.inf, 2], [1, 1, 3, 3]], np.float32), FBATCH),
     ["rois[0]", "inf", "not finite"]),
])
def test_input_errors(args, fragments):
    raises(lambda: forward(*args, (2, 2)), "RoiAlign1", "'ra'", *fragments)


@pytest.mark.parametrize("attrs, fragments", [
    (dict(output_size=[2]), ["output_size", "[2]", "2 values"]),
    (dict(output_size=[2, 0]), ["output_size[1]", "0"]),
    (dict(reduction_function="sum"), ["reduction_function", "'sum'"]),
    (dict(interpolation_mode="cubic"), ["interpolation_mode", "'cubic'"]),
    (dict(minimum_samples_per_output=0), ["minimum_samples_per_output", "0"]),
    (dict(minimum_samples_per_output=3, maximum_samples_per_output=2),
     ["maximum_samples_per_output", "2", "minimum_samples_per_output 3"]),
    (dict(maximum_samples_per_output=UINT32_MAX + 1), ["maximum_samples_per_output",
                                                        str(UINT32_MAX + 1)]),
    (dict(spatial_scale_x=math.inf), ["spatial_scale_x", "inf"]),
    (dict(spatial_scale_y=math.nan), ["spatial_scale_y", "nan"]),
    (dict(input_pixel_offset=math.inf), ["input_pixel_offset", "inf"]),
    (dict(output_pixel_offset=-math.inf), ["output_pixel_offset", "-inf"]),
    (dict(align_regions_to_corners=2), ["align_regions_to_corners", "2"]),
])
def test_attribute_errors(attrs, fragments):
    attrs = {"output_size": [2, 2], "out_of_bounds_input_value": 0.0, **DEFAULTS, **attrs}
    raises(lambda: forward_module.prepare(node="ra", **attrs),
           "RoiAlign1", "'ra'", *fragments)
    raises(lambda: roi_align1(FX, FROIS, FBATCH, node="ra", **attrs),
           "RoiAlign1", "'ra'", *fragments)
    if "output_size" not in fragments[0] and "out_of_bounds" not in fragments[0]:
        grad_attrs = {k: v for k, v in attrs.items()
                      if k not in ("output_size", "out_of_bounds_input_value")}
        raises(lambda: grad_module.prepare(node="g", input_shape=[], compute_dx=True,
                                           compute_drois=False, **grad_attrs),
               "RoiAlignGrad", "'g'", *fragments)


def test_scaled_region_overflow_and_sample_limit_errors():
    rois = np.array([[0, 0, 2, 2], [0, 0, 3e38, 2]], np.float32)
    raises(lambda: forward(FX, rois, FBATCH, (2, 2), spatial_scale_x=10.0),
           "rois[1]", "overflows float32")
    rois = np.array([[0, 0, 2, 2], [0, 0, 2, 1e9]], np.float32)
    raises(lambda: forward(FX, rois, FBATCH, (2, 2)), "rois[1] samples along y",
           "maximum_samples_per_output")
    raises(lambda: backward(FX, np.zeros((2, 3, 2, 2), np.float32), rois, FBATCH),
           "RoiAlignGrad", "rois[1] samples along y")
    # a capped count makes the same region fine
    forward(FX, rois, FBATCH, (2, 2), maximum_samples_per_output=4)


GDY = np.zeros((2, 3, 2, 2), np.float32)


@pytest.mark.parametrize("call, fragments", [
    (lambda: backward(FX, GDY, FROIS, FBATCH, dx=False, drois=False),
     ["requested outputs", "dX or drois"]),
    (lambda: backward(None, GDY, FROIS, FBATCH, dx=False, input_shape=FX.shape),
     ["X None", "required"]),
    (lambda: backward(None, GDY, FROIS, FBATCH, drois=False, reduction_function="max",
                      input_shape=FX.shape), ["X None", "'max'"]),
    (lambda: backward(None, GDY, FROIS, FBATCH, drois=False), ["input_shape []", "omitted"]),
    (lambda: backward(FX, GDY, FROIS, FBATCH, input_shape=(2, 3, 4, 6)),
     ["input_shape [2, 3, 4, 6]", "[2, 3, 4, 5]"]),
    (lambda: backward(None, GDY, FROIS, FBATCH, drois=False, input_shape=(2, 3, 4)),
     ["input_shape", "4 values"]),
    (lambda: backward(None, GDY, FROIS, FBATCH, drois=False, input_shape=(2, 3, -4, 5)),
     ["input_shape[2]", "-4"]),
    (lambda: backward(FX, GDY[:1], FROIS, FBATCH), ["dY shape", "[1, 3, 2, 2]", "[2, 3]"]),
    (lambda: backward(FX, GDY[:, :2], FROIS, FBATCH), ["dY shape", "[2, 2, 2, 2]"]),
    (lambda: backward(None, GDY[:, :2], FROIS, FBATCH, drois=False, input_shape=FX.shape),
     ["dY shape", "[2, 2, 2, 2]"]),
    (lambda: backward(FX, GDY[:, :, :0], FROIS, FBATCH), ["dY shape", "[2, 3, 0, 2]"]),
    (lambda: backward(FX, GDY[0], FROIS, FBATCH), ["dY rank", "3"]),
    (lambda: backward(FX, GDY.astype(np.float64), FROIS, FBATCH),
     ["dY element type", "float64"]),
    (lambda: backward(FX, GDY.astype(np.int32), FROIS, FBATCH), ["dY element type", "int32"]),
    (lambda: backward(FX[0], GDY, FROIS, FBATCH), ["X rank", "3"]),
    (lambda: backward(FX, GDY, FROIS, np.array([0, 3])), ["batch_indices[1]", "3", "[0, 2)"]),
    (lambda: backward(FX, GDY, FROIS[:1], FBATCH), ["batch_indices length"]),
    (lambda: backward(FX, GDY, FROIS.astype(np.float64), FBATCH),
     ["rois element type", "float64"]),
    (lambda: backward(FX, GDY, np.array([[0, 0, 2, 2], [1, np.nan, 3, 3]], np.float32),
                      FBATCH), ["rois[1]", "not finite"]),
    (lambda: backward(FX, GDY, FROIS, FBATCH, minimum_samples_per_output=0),
     ["minimum_samples_per_output", "0"]),
    (lambda: backward(FX, GDY, FROIS, FBATCH, interpolation_mode="area"),
     ["interpolation_mode", "'area'"]),
])
def test_gradient_errors(call, fragments):
    raises(call, "RoiAlignGrad", "'rag'", *fragments)


# ----------------------------------------------------------------------------------------------
# property tests against the reference


ATTRIBUTES = st.fixed_dictionaries({
    "reduction_function": st.sampled_from(["average", "max"]),
    "interpolation_mode": st.sampled_from(["linear", "nearest_neighbor"]),
    "spatial_scale_x": st.sampled_from([1.0, 0.5, 1.25, -0.75]),
    "spatial_scale_y": st.sampled_from([1.0, 0.75, 2.0]),
    "input_pixel_offset": st.sampled_from([0.5, 0.0, 0.25]),
    "output_pixel_offset": st.sampled_from([-0.5, 0.0, 0.375]),
    "samples": st.sampled_from([(1, 1), (2, 2), (1, 3), (1, UINT32_MAX), (2, 4)]),
    "align_regions_to_corners": st.sampled_from([0, 1]),
})

COORDINATE = st.one_of(st.floats(-4, 12, allow_nan=False, width=32),
                       st.integers(-3, 11).map(float), st.integers(-6, 22).map(lambda v: v / 2))


@st.composite
def cases(draw, grad=False):
    attrs = draw(ATTRIBUTES)
    low, high = attrs.pop("samples")
    attrs.update(minimum_samples_per_output=low, maximum_samples_per_output=high)
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    h, w = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    regions = draw(st.integers(1, 3))
    rois = np.array([[draw(COORDINATE) for _ in range(4)] for _ in range(regions)],
                    np.float64).reshape(regions, 4)
    batch = np.array([draw(st.integers(0, n - 1)) for _ in range(regions)], np.int64)
    size = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, c, h, w))
    out_of_bounds = draw(st.sampled_from([0.0, -1.5, 3.0]))
    return X, rois, batch, size, out_of_bounds, attrs, rng


@settings(max_examples=150, deadline=None, derandomize=True)
@given(cases())
def test_property_forward_matches_reference(case):
    X, rois, batch, size, out_of_bounds, attrs, _ = case
    np.testing.assert_allclose(forward(X, rois, batch, size, out_of_bounds, **attrs),
                               ref_forward(X, rois, batch, size, out_of_bounds, **attrs),
                               rtol=1e-11, atol=1e-11)


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


@pytest.mark.parametrize("attrs", ATTRIBUTE_SETS, ids=range(len(ATTRIBUTE_SETS)))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_both_image_layouts_give_the_same_bits(attrs, dtype):
    """The channels-last loop (many samples against the image) and the plane-by-plane loop
    (few samples against a large image: no copy) compute the same bits, NaN and infinities
    included; a call picks its loop by the work."""
    from custom_ops import _roi_loops as loops
    from custom_ops._roi_grid import Plan, check_sampling, loop_settings
    from custom_ops.roi_align1 import SMALL_IMAGE

    rng, X, rois, batch = random_case(41, c=5, regions=9, dtype=dtype)
    X[0, 1, 2, 3], X[1, 4, 0, 0], X[0, 2, 6, 7] = np.nan, np.inf, -np.inf
    full = {**DEFAULTS, **attrs}
    sampling = check_sampling("RoiAlign1", "", **full)
    plan = Plan("RoiAlign1", "", X.shape, rois, batch, sampling, (3, 4), np.dtype(dtype))
    settings = loop_settings(sampling, np.dtype(dtype), 0.25)
    flags = sampling.align_corners, sampling.linear, sampling.average
    regions = np.arange(len(batch))
    last, planar = (np.empty((len(batch), 5, 3, 4), dtype) for _ in range(2))
    loops.forward(np.ascontiguousarray(X.transpose(0, 2, 3, 1)), plan.batch, plan.first,
                  plan.size, plan.n, regions, settings, *flags, last)
    loops.forward_planar(X, plan.batch, plan.first, plan.size, plan.n, regions, settings,
                         *flags, planar)
    np.testing.assert_array_equal(last.view(np.uint8), planar.view(np.uint8))
    # a large image with one small region takes the plane-by-plane loop through the kernel
    image = rng.standard_normal((1, 3, 300, 300)).astype(dtype)
    assert image.size > SMALL_IMAGE
    box = np.array([[10.5, 20.25, 30.0, 41.0]], dtype)
    got = forward(image, box, np.zeros(1, np.int64), (3, 4), 0.25, **attrs)
    np.testing.assert_allclose(got, ref_forward(image, box, np.zeros(1, np.int64), (3, 4),
                                                0.25, **attrs), rtol=1e-6, atol=1e-6)
