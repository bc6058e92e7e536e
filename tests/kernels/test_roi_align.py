"""Numeric tests of the RoiAlign1 kernel (specification section 2).

Oracles: the worked examples of the DML page, onnxruntime's native RoiAlign (opset 16) on the
subset it shares with RoiAlign1, the package's plain reference written straight from the spec
(:mod:`dml_onnx.reference_ops.roi_align1`, independent of the kernels). The gradient is in
``test_roi_align_grad``; layouts, element types and errors of both in
``test_roi_align_shapes_and_errors``; what they share in ``_roi_align``.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings

from dml_onnx._kernels._checks import UINT32_MAX
from tests._support.native import run_native
from tests.kernels._roi_align import (
    ATTRIBUTE_SETS,
    DEFAULTS,
    SEED_ATTRS,
    SEED_BATCH,
    SEED_ROIS,
    SEED_X,
    backward,
    cases,
    forward,
    random_case,
    ref_forward,
)

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


@pytest.mark.parametrize("run", [forward, ref_forward], ids=["kernel", "reference"])
@pytest.mark.parametrize("value, expected", [(np.float32(3e38), np.inf), (3e38, 3e38),
                                             (np.float16(60000), 60000)],
                         ids=["float32", "float64", "float16"])
def test_average_sums_and_divides_in_the_compute_type(run, value, expected):
    """Four samples of ``value``: their sum overflows float32 (+inf, as DirectML 1.15.4
    measured; specification section 2, average overflow) but not float64, and float16 sums in
    float32 (a float16 sum would overflow)."""
    X = np.full((1, 1, 2, 2), value)
    Y = run(X, np.array([[0.0, 0.0, 2.0, 2.0]], X.dtype), np.zeros(1, np.int64), (1, 1),
            minimum_samples_per_output=2, maximum_samples_per_output=2)
    assert Y.dtype == X.dtype and Y[0, 0, 0, 0] == expected


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
# property tests against the reference


@settings(max_examples=150, deadline=None, derandomize=True)
@given(cases())
def test_property_forward_matches_reference(case):
    X, rois, batch, size, out_of_bounds, attrs, _ = case
    np.testing.assert_allclose(forward(X, rois, batch, size, out_of_bounds, **attrs),
                               ref_forward(X, rois, batch, size, out_of_bounds, **attrs),
                               rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("attrs", ATTRIBUTE_SETS, ids=range(len(ATTRIBUTE_SETS)))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_both_image_layouts_give_the_same_bits(attrs, dtype):
    """The channels-last loop (many samples against the image) and the plane-by-plane loop
    (few samples against a large image: no copy) compute the same bits, NaN and infinities
    included; a call picks its loop by the work."""
    from dml_onnx._kernels import _roi_loops as loops
    from dml_onnx._kernels._roi_grid import Plan, check_sampling, loop_settings
    from dml_onnx._kernels.roi_align1 import SMALL_IMAGE

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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("offsets", [(0.5, -0.5), (0.25, 0.3)])
def test_two_by_two_means_are_the_row_major_sums_of_their_samples(dtype, offsets):
    """Outputs of 2 x 2 averaged linear samples (torchvision's detectors; computed in one pass
    over the channels where all four are in bounds) hold the bits of their four samples summed
    from -0.0 in row-major order, then divided by 4. Sample ``(sy, sx)`` of a ``(OH, OW)``
    output is output ``(sy, sx)`` of a ``(2 OH, 2 OW)`` output of one sample each (the same
    ``S = O n`` positions). Regions in, across and out of the image edges; 40 channels."""
    _, X, rois, batch = random_case(47, c=40, regions=24, dtype=dtype)
    attrs = dict(input_pixel_offset=offsets[0], output_pixel_offset=offsets[1])
    Y = forward(X, rois, batch, (3, 4), 0.75, minimum_samples_per_output=2,
                maximum_samples_per_output=2, **attrs)
    S = forward(X, rois, batch, (6, 8), 0.75, minimum_samples_per_output=1,
                maximum_samples_per_output=1, **attrs)
    total = dtype(-0.0) + S[:, :, 0::2, 0::2]
    for sy, sx in [(0, 1), (1, 0), (1, 1)]:
        total = total + S[:, :, sy::2, sx::2]
    np.testing.assert_array_equal(Y.view(np.uint8), (total / dtype(4)).view(np.uint8))


FLOAT16_EDGES = np.array([65504, -65504, 65472, -60000, 2 ** -14, -(2 ** -14), 2 ** -24,
                          -(3 * 2 ** -24), 1023 * 2 ** -24, -0.0, 0.0, np.nan, np.inf,
                          -np.inf, 1.0, -2.5], np.float16)
"""float16's extremes: its largest values, the smallest normal, subnormals, both zeros, NaN
and the infinities."""


def _float16_image(rng, shape):
    """A float16 image whose channels hold :data:`FLOAT16_EDGES` tiled over the plane, values
    near float16's largest, subnormals of either sign, -0.0 everywhere, then plain values."""
    n, c, h, w = shape
    X = rng.standard_normal(shape).astype(np.float16)
    sign = np.where(rng.random((n, h, w)) < 0.5, -1.0, 1.0)
    X[:, 0] = np.resize(FLOAT16_EDGES, (n, h, w))
    X[:, 1] = sign * rng.uniform(60000, 65504, (n, h, w))
    X[:, 2] = sign * rng.integers(1, 1 << 10, (n, h, w)) * 2.0 ** -24
    X[:, 3] = -0.0
    return X


def _check_reached(Y, sampling):
    """The outputs read :func:`_float16_image`'s extremes (what they show of them depends on
    the sampling): values near float16's largest, subnormals, NaN in linear averages (never
    in a maximum), and -0.0 where nearest_neighbor reads it as it is."""
    assert (np.abs(Y[np.isfinite(Y)]) > 2 ** 14).any()
    assert ((Y != 0) & (np.abs(Y) < 2 ** -14)).any()
    if sampling.average and sampling.linear:
        assert np.isnan(Y).any()
    elif not sampling.average:
        assert not np.isnan(Y).any()
    if not sampling.linear:
        assert (np.signbit(Y) & (Y == 0)).any()


@pytest.mark.parametrize("attrs", ATTRIBUTE_SETS, ids=range(len(ATTRIBUTE_SETS)))
def test_plane_by_plane_loop_reads_float16_bits_as_float32(attrs):
    """The plane-by-plane loop reads float16 X as its bits, through the table of the 65536
    values: the bits of the channels-last loop on X converted to float32 (float16's largest
    values, subnormals, -0.0, NaN and the infinities included)."""
    from dml_onnx._kernels import _roi_loops as loops
    from dml_onnx._kernels._roi_grid import Plan, check_sampling, loop_settings

    rng = np.random.default_rng(43)
    X = _float16_image(rng, (2, 6, 7, 8))
    _, _, rois, batch = random_case(43, c=6, regions=9, dtype=np.float32)
    sampling = check_sampling("RoiAlign1", "", **{**DEFAULTS, **attrs})
    plan = Plan("RoiAlign1", "", X.shape, rois, batch, sampling, (3, 4), np.dtype(np.float32))
    settings = loop_settings(sampling, np.dtype(np.float16), 0.25)
    flags = sampling.align_corners, sampling.linear, sampling.average
    regions = np.arange(len(batch))
    last, planar = (np.empty((len(batch), 6, 3, 4), np.float32) for _ in range(2))
    wide = X.astype(np.float32)
    loops.forward(np.ascontiguousarray(wide.transpose(0, 2, 3, 1)), plan.batch, plan.first,
                  plan.size, plan.n, regions, settings, *flags, last)
    loops.forward_planar(X.view(np.uint16), plan.batch, plan.first, plan.size, plan.n, regions,
                         settings, *flags, planar)
    np.testing.assert_array_equal(last.view(np.uint8), planar.view(np.uint8))
    _check_reached(planar, sampling)


@pytest.mark.parametrize("attrs", ATTRIBUTE_SETS[:4], ids=range(4))
@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("with_drois", [True, False])
def test_float16_gradients_are_the_float32_computation_rounded_once(attrs, threads,
                                                                   with_drois, monkeypatch):
    """RoiAlignGrad on float16, over 1 or several threads: the float32 computation on the same
    values, rounded as numpy rounds, float16's extremes in X and dY (NaN, infinities,
    subnormals, the largest) included. dX alone by average reads dY's bits and writes dX's
    (no float32 copy of either); the other kinds convert them."""
    from dml_onnx._kernels import _threads
    from dml_onnx._kernels import roi_align_grad as module

    conversions: list[np.dtype] = []
    convert = module.converted
    monkeypatch.setattr(module, "converted",
                        lambda a, dtype: conversions.append(a.dtype) or convert(a, dtype))

    rng = np.random.default_rng(45)
    X = _float16_image(rng, (2, 5, 40, 50))
    corner = rng.uniform(-10, 40, (12, 2))
    rois = np.concatenate([corner, corner + rng.uniform(5, 30, (12, 2))], 1).astype(np.float16)
    batch = rng.integers(0, 2, 12)
    dY = rng.standard_normal((12, 5, 3, 4)).astype(np.float16)
    dY.reshape(-1)[::7] = np.resize(FLOAT16_EDGES, dY.reshape(-1)[::7].shape)
    monkeypatch.setattr(_threads, "THREADS", threads)
    monkeypatch.setattr(_threads, "GRAIN", 256)  # several threads' work even here
    monkeypatch.setattr(_threads, "POOL_GRAINS", 1)
    dX, drois = backward(X, dY, rois, batch, drois=with_drois, **attrs)
    bits_alone = not with_drois and attrs.get("reduction_function", "average") == "average"
    assert conversions == ([] if bits_alone else [np.float16, np.float32])
    assert dX.dtype == np.float16
    wide_dx, wide_drois = backward(X.astype(np.float32), dY.astype(np.float32),
                                   rois.astype(np.float32), batch, drois=with_drois, **attrs)
    with np.errstate(over="ignore", invalid="ignore"):
        expected_dx = wide_dx.astype(np.float16)
    assert np.isnan(dX).any() and np.isinf(dX).any()  # the extremes reached dX
    np.testing.assert_array_equal(dX.view(np.uint16), expected_dx.view(np.uint16))
    if with_drois:
        assert drois.dtype == np.float16
        with np.errstate(over="ignore", invalid="ignore"):
            expected_drois = wide_drois.astype(np.float16)
        np.testing.assert_array_equal(drois.view(np.uint16), expected_drois.view(np.uint16))


@pytest.mark.parametrize("attrs", ATTRIBUTE_SETS[:4], ids=range(4))
@pytest.mark.parametrize("threads", [1, 4])
def test_float16_on_a_large_image_is_read_where_it_lies(attrs, threads, monkeypatch):
    """A large float16 image with few samples takes the plane-by-plane loop on its bits (no
    converted copy), its regions over 1 or several threads, and writes Y as float16 bits: the
    float32 computation on the same values, rounded once to float16 as numpy rounds."""
    from dml_onnx._kernels import _roi_loops as loops
    from dml_onnx._kernels import _threads, roi_align1
    from dml_onnx._kernels._roi_grid import check_sampling

    rng = np.random.default_rng(44)
    X = _float16_image(rng, (2, 5, 160, 200))
    assert X.size > roi_align1.SMALL_IMAGE
    corner = rng.uniform(-10, 150, (12, 2))
    rois = np.concatenate([corner, corner + rng.uniform(5, 40, (12, 2))], 1).astype(np.float16)
    batch = rng.integers(0, 2, 12)
    calls = []  # (groups, image) of each call of a loop from Python
    planar, launched = loops.forward_planar, loops.forward_groups

    outputs = []  # the Y each loop writes

    def spying_loop(image, *args):
        calls.append((1, image))
        outputs.append(args[-1])
        return planar(image, *args)

    def spying_launch(is_planar, groups, image, *args):
        assert is_planar
        calls.append((groups, image))
        outputs.append(args[-1])
        return launched(is_planar, groups, image, *args)
    monkeypatch.setattr(loops, "forward_planar", spying_loop)
    monkeypatch.setattr(loops, "forward_groups", spying_launch)
    monkeypatch.setattr(_threads, "THREADS", threads)
    monkeypatch.setattr(_threads, "GRAIN", 1024)  # several threads' work even here
    monkeypatch.setattr(_threads, "POOL_GRAINS", 1)
    Y = forward(X, rois, batch, (3, 4), 0.25, **attrs)
    assert Y.dtype == np.float16
    assert sum(groups for groups, _ in calls) == threads  # a launch, or the pool's groups
    assert all(image.dtype == np.uint16 and np.shares_memory(image, X) for _, image in calls)
    # Y written as float16 bits where it is returned: no float32 Y, no conversion pass
    assert all(out.dtype == np.uint16 and np.shares_memory(out, Y) for out in outputs)
    wide = forward(X.astype(np.float32), rois.astype(np.float32), batch, (3, 4), 0.25, **attrs)
    # a maximum of only -inf and NaN samples is lowest(T): float16's own, not float32's
    wide[wide == np.finfo(np.float32).min] = np.finfo(np.float16).min
    with np.errstate(over="ignore"):
        expected = wide.astype(np.float16)
    np.testing.assert_array_equal(Y.view(np.uint16), expected.view(np.uint16))
    _check_reached(Y, check_sampling("RoiAlign1", "", **{**DEFAULTS, **attrs}))


def test_the_layout_follows_the_share_of_the_image_the_samples_read(monkeypatch):
    """Samples that read 0.6 of the image: float32 reads it where it lies, float16 (whose reads
    there go through a table) from its channels-last copy (``PLANAR_SHARE``); both compute
    the same values, float16 rounded once."""
    from dml_onnx._kernels import _roi_loops as loops
    from dml_onnx._kernels import roi_align1

    rng = np.random.default_rng(45)
    X = _float16_image(rng, (2, 5, 160, 200))
    corner = rng.uniform(-10, 150, (800, 2))
    rois = np.concatenate([corner, corner + rng.uniform(5, 40, (800, 2))], 1)
    batch = rng.integers(0, 2, 800)
    attrs = dict(minimum_samples_per_output=2, maximum_samples_per_output=2)
    work = 800 * (3 * 2) * (4 * 2) * 5  # sample reads: 2 x 2 samples a bin, 5 channels
    assert roi_align1.PLANAR_SHARE[np.dtype(np.float16)] < work / X.size < 1
    planar_calls = []
    for name in ("forward_planar", "forward"):
        monkeypatch.setattr(loops, name, functools.partial(
            lambda loop, planar, *args: (planar_calls.append(planar), loop(*args))[1],
            getattr(loops, name), name == "forward_planar"))
    launched = loops.forward_groups
    monkeypatch.setattr(loops, "forward_groups", lambda planar, *args: (
        planar_calls.append(planar), launched(planar, *args))[1])
    Y = forward(X, rois.astype(np.float16), batch, (3, 4), **attrs)
    half_planar, planar_calls[:] = set(planar_calls), []
    wide = forward(X.astype(np.float32), rois.astype(np.float16).astype(np.float32), batch,
                   (3, 4), **attrs)
    assert half_planar == {False} and set(planar_calls) == {True}
    np.testing.assert_array_equal(Y.view(np.uint16), wide.astype(np.float16).view(np.uint16))


# ----------------------------------------------------------------------------------------------
# the channels-last copy of only the pixels the regions read


def _pixels_read(X_shape, plan, sampling, size, settings):
    """``[N, H, W]`` bool: the pixels the forward loop reads, sample by sample (the corners of
    every in-bounds sample, as :func:`dml_onnx._kernels._roi_loops.forward` reads them)."""
    from dml_onnx._kernels import _roi_loops as loops

    n, _, h, w = X_shape
    read = np.zeros((n, h, w), bool)
    for r in range(plan.batch.size):
        ys = loops.axis_samples(plan.first[0, r], plan.size[0, r], plan.n[0, r], size[0], h,
                                settings, sampling.align_corners, sampling.linear)
        xs = loops.axis_samples(plan.first[1, r], plan.size[1, r], plan.n[1, r], size[1], w,
                                settings, sampling.align_corners, sampling.linear)
        rows = np.concatenate([ys[0][ys[4]], ys[1][ys[4]]])
        columns = np.concatenate([xs[0][xs[4]], xs[1][xs[4]]])
        read[plan.batch[r], rows[:, None], columns[None, :]] = True
    return read


def _region_plan(rois, batch, X_shape, attrs, size, dtype):
    from dml_onnx._kernels._roi_grid import Plan, check_sampling, loop_settings

    sampling = check_sampling("RoiAlign1", "", **{**DEFAULTS, **attrs})
    plan = Plan("RoiAlign1", "", X_shape, rois, batch, sampling, size, np.dtype(dtype))
    return plan, sampling, loop_settings(sampling, np.dtype(dtype), 0.0)


@settings(max_examples=120, deadline=None, derandomize=True)
@given(cases())
def test_property_the_runs_hold_every_pixel_a_sample_reads(case):
    """:func:`~dml_onnx._kernels._roi_loops.read_runs`: ascending runs of whole 8-pixel blocks (the
    last may stop at the image's end), no two closer than the gap, holding every pixel that a
    sample reads and the pixel count they say; and each region's
    :func:`~dml_onnx._kernels._roi_loops.read_span` along y and x holds every pixel its samples read
    there. Regions out of bounds, reversed, or of size 0 included."""
    from dml_onnx._kernels import _roi_loops as loops

    X, rois, batch, size, _, attrs, _ = case
    for dtype in (np.float32, np.float64):
        plan, sampling, loop_settings = _region_plan(rois.astype(dtype), batch, X.shape, attrs,
                                                     size, dtype)
        n, _, h, w = X.shape
        for gap in (1, 2, 5):
            runs, held = loops.read_runs(n, h, w, plan.batch, plan.first, plan.size, plan.n,
                                         size, loop_settings, sampling.align_corners, gap)
            pixels = n * h * w
            assert runs.ndim == 2 and runs.shape[1] == 2 and len(runs) >= 1
            assert (runs[:, 0] % 8 == 0).all() and (runs[:, 0] < runs[:, 1]).all()
            assert ((runs[:, 1] % 8 == 0) | (runs[:, 1] == pixels)).all()
            assert (runs[1:, 0] - runs[:-1, 1] >= 8 * gap).all()
            assert held == (runs[:, 1] - runs[:, 0]).sum() <= pixels
            covered = np.zeros(pixels, bool)
            for start, stop in runs:
                covered[start:stop] = True
            read = _pixels_read(X.shape, plan, sampling, size, loop_settings).reshape(-1)
            assert covered[read].all()
        for r in range(len(batch)):  # the spans themselves, pixel by pixel
            for axis, length in ((0, X.shape[2]), (1, X.shape[3])):
                args = (plan.first[axis, r], plan.size[axis, r], plan.n[axis, r], size[axis],
                        length, loop_settings, sampling.align_corners)
                a, b = loops.read_span(*args)
                lo, hi, _, _, inside, _, _ = loops.axis_samples(*args, sampling.linear)
                assert 0 <= a <= b < length
                assert (lo[inside] >= a).all() and (hi[inside] <= b).all()


@pytest.mark.parametrize("attrs", ATTRIBUTE_SETS, ids=range(len(ATTRIBUTE_SETS)))
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_a_copy_of_the_pixels_read_gives_the_bits_of_a_whole_copy(attrs, dtype, monkeypatch):
    """A large image of many channels is copied channels-last only where the regions read it
    (:data:`~dml_onnx._kernels.roi_align1.RUN_CHANNELS`); the rest of the copy holds NaN here, which
    a read would carry into the outputs. The outputs are the whole copy's, bit for bit, on one
    thread and on several; and a copy that leaves out one run the regions read does show."""
    from dml_onnx._kernels import _threads, roi_align1

    rng = np.random.default_rng(47)
    X = rng.standard_normal((2, 16, 60, 70)).astype(dtype)
    assert X.size > roi_align1.SMALL_IMAGE and X.shape[1] >= roi_align1.RUN_CHANNELS
    corner = rng.uniform(-6, 50, (14, 2))
    rois = np.concatenate([corner, corner + rng.uniform(-4, 18, (14, 2))], 1).astype(dtype)
    batch = rng.integers(0, 2, 14)

    def poisoned(shape, dtype):
        return np.full(shape, np.nan, dtype)
    monkeypatch.setattr(_threads, "empty", poisoned)
    copies = []
    copy = _threads.channels_last
    monkeypatch.setattr(roi_align1, "channels_last", lambda X, dtype, runs=None: (
        copies.append(runs), copy(X, dtype, runs))[1])
    monkeypatch.setattr(roi_align1, "PLANAR_SHARE", {np.dtype(dtype): 0.0})  # never planar
    results = []
    for threads in (1, 3):
        monkeypatch.setattr(_threads, "THREADS", threads)
        monkeypatch.setattr(_threads, "GRAIN", 1024)  # bands of the runs on every thread
        results.append(forward(X, rois, batch, (3, 4), 0.25, **attrs))
    assert all(runs is not None for runs in copies)
    held = (copies[0][:, 1] - copies[0][:, 0]).sum()
    assert 0 < held < X.shape[0] * X.shape[2] * X.shape[3]  # some pixels are left out
    monkeypatch.setattr(roi_align1, "RUN_CHANNELS", X.shape[1] + 1)  # the whole image
    whole = forward(X, rois, batch, (3, 4), 0.25, **attrs)
    assert copies[-1] is None
    for got in results:
        np.testing.assert_array_equal(got.view(np.uint8), whole.view(np.uint8))
    assert not np.isnan(whole).all()
    # without the longest run the regions read, NaN reaches the outputs (a maximum ignores
    # NaN samples: there, the outputs change)
    monkeypatch.setattr(roi_align1, "RUN_CHANNELS", 0)
    longest = int(np.argmax(copies[0][:, 1] - copies[0][:, 0]))
    monkeypatch.setattr(roi_align1, "channels_last", lambda X, dtype, runs=None: copy(
        X, dtype, np.delete(runs, longest, axis=0)))
    short = forward(X, rois, batch, (3, 4), 0.25, **attrs)
    assert not np.array_equal(short.view(np.uint8), whole.view(np.uint8))
