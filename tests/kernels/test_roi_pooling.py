"""Numeric tests of the RoiPooling kernel (spec section 1).

Two oracles: the plain reference of the package (:mod:`dml_onnx.reference_ops.roi_pooling`,
Python scalars and ints straight from the spec formulas), and onnxruntime's native
``MaxRoiPool``. onnxruntime computes the bin edges as
``floor(p * float32(size / P))`` and ``ceil(...)`` in float32, where the spec uses exact integer
division; the two differ for a few region sizes (e.g. 57 rows in 7 bins). The ORT comparisons
therefore skip the ROIs whose float32 edges differ from the integer ones, and one test pins that
difference down. Shapes, element types and errors are in ``test_roi_pooling_shapes_and_errors``;
the references and helpers both use in ``_roi_pooling``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dml_onnx._kernels.roi_pooling import roi_pooling
from dml_onnx.reference_ops.roi_pooling import bin_edges
from tests.kernels._roi_pooling import (
    assert_same,
    f32,
    native,
    ort_edges,
    random_rois,
    reference,
    spec_agrees_with_ort,
)

# ---------------------------------------------------------------------------------------------
# Hand-computed values


def test_hand_computed_example():
    X = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    rois = f32([[0, 0, 0, 3, 3], [0, 1, 0, 2, 3]])
    y = roi_pooling(X, rois, pooled_size=[2, 2], spatial_scale=1.0)
    # ROI 0: rows [0,2) [2,4), cols [0,2) [2,4). ROI 1: cols 1..2, bins [1,2) [2,3).
    expected = f32([[[[5, 7], [13, 15]]], [[[5, 6], [13, 14]]]])
    assert_same(y, expected)


@pytest.mark.parametrize(("coordinate", "scale", "rounded"), [
    (2.5, 1.0, 2), (3.5, 1.0, 4), (0.5, 1.0, 0), (-0.5, 1.0, 0), (-1.5, 1.0, -2),
    (-2.5, 1.0, -2), (5.0, 0.5, 2), (3.0, 0.5, 2), (-1.0, 0.5, 0), (-3.0, 0.5, -2),
    (2.5, 0.5, 1), (7.0, 0.5, 4), (4.0, 0.5, 2), (2.4999998, 1.0, 2), (1.5, 1.0, 2),
    (float(np.nextafter(np.float32(2.5), np.float32(3))), 1.0, 3),
    (float(np.nextafter(np.float32(-0.5), np.float32(-1))), 1.0, -1),
    (float(np.nextafter(np.float32(-0.5), np.float32(0))), 1.0, 0),
])
def test_round_half_to_even(coordinate, scale, rounded):
    # X[..., x] = x + 1 and a region of exactly PW = 4 columns from the rounded x1: bin p is
    # the single column x1 + p, so the output row is [x1 + 1, ..., x1 + 4] with 0 outside.
    X = (np.arange(16, dtype=np.float32) + 1).reshape(1, 1, 1, 16)
    x2 = (rounded + 3) / scale  # exact: rounds to rounded + 3
    rois = f32([[0, coordinate, 0, x2, 0]])
    y = roi_pooling(X, rois, pooled_size=[1, 4], spatial_scale=scale)
    expected = [rounded + p + 1 if 0 <= rounded + p < 16 else 0 for p in range(4)]
    assert y[0, 0, 0].tolist() == expected
    assert_same(native(X, rois, [1, 4], scale), y)


def test_float64_products_keep_double_precision():
    X = np.arange(8, dtype=np.float64).reshape(1, 1, 1, 8)
    rois = np.array([[0, 2.4999999, 0, 2.4999999, 0]], np.float64)
    assert roi_pooling(X, rois, pooled_size=[1, 1])[0, 0, 0, 0] == 2.0  # float64: 2
    y32 = roi_pooling(X.astype(np.float32), rois.astype(np.float32), pooled_size=[1, 1])
    assert y32[0, 0, 0, 0] == 2.0  # float32(2.4999999) == 2.5 rounds half to even: 2
    rois = np.array([[0, 3.4999999, 0, 3.4999999, 0]], np.float64)
    assert roi_pooling(X, rois, pooled_size=[1, 1])[0, 0, 0, 0] == 3.0  # float64: 3
    y32 = roi_pooling(X.astype(np.float32), rois.astype(np.float32), pooled_size=[1, 1])
    assert y32[0, 0, 0, 0] == 4.0  # float32(3.4999999) == 3.5 rounds half to even: 4


# ---------------------------------------------------------------------------------------------
# Against onnxruntime's MaxRoiPool


def test_native_rounding_cases():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((1, 3, 10, 12)).astype(np.float32)
    rois = f32([
        [0, 2.5, -0.5, 5.0, 3.0], [0, -0.5, 2.5, 3.0, 5.0], [0, 1.0, 1.0, 7.0, 9.0],
        [0, 5.0, 5.0, 5.0, 5.0], [0, 3.0, 7.0, 11.0, 19.0], [0, -1.0, -3.0, 23.0, 19.0],
    ])
    for pooled in ([1, 1], [2, 3], [3, 2]):
        y = roi_pooling(X, rois, pooled_size=pooled, spatial_scale=0.5)
        assert_same(y, native(X, rois, pooled, 0.5))
        assert_same(y, reference(X, rois, pooled, 0.5))


def test_native_rois_outside_reversed_and_batches():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((3, 4, 9, 11)).astype(np.float32)
    rois = f32([
        [0, -6, -6, 3, 2],        # partly outside, top-left
        [1, 8, 6, 20, 15],        # partly outside, bottom-right
        [2, 30, 30, 40, 40],      # wholly outside: every bin empty -> 0
        [0, -10, 2, -3, 5],       # wholly left of the image
        [1, 7, 6, 2, 1],          # x2 < x1 and y2 < y1: a 1x1 region at (x1, y1)
        [2, 4, 3, 4, 3],          # a single pixel
        [0.9, 0, 0, 10, 8],       # batch 0.9 -> 0
        [1.5, 2, 1, 9, 7],        # batch 1.5 -> 1
        [-0.5, 1, 1, 5, 5],       # batch -0.5 -> 0 (truncation toward zero)
        [2.999, -1, -1, 11, 9],   # batch 2.999 -> 2, the whole image and a margin
    ])
    for pooled in ([1, 1], [3, 5], [7, 7], [2, 4]):
        y = roi_pooling(X, rois, pooled_size=pooled, spatial_scale=1.0)
        assert_same(y, native(X, rois, pooled, 1.0))
        assert_same(y, reference(X, rois, pooled, 1.0))
    assert np.all(y[2] == 0) and np.all(y[3] == 0)
    assert np.all(y[4] == X[1, :, 6:7, 7:8])


def test_native_negative_data():
    rng = np.random.default_rng(3)
    X = -rng.uniform(1, 10, size=(2, 3, 8, 8)).astype(np.float32)
    rois = f32([[0, -4, -4, 3, 3], [1, 2, 2, 12, 12], [1, 9, 9, 14, 14], [0, 0, 0, 7, 7]])
    for pooled in ([3, 5], [7, 7]):
        y = roi_pooling(X, rois, pooled_size=pooled)
        assert_same(y, native(X, rois, pooled))
        assert_same(y, reference(X, rois, pooled))
    assert np.all(y[2] == 0)  # wholly outside
    assert np.all(y[3] < 0)   # a full window never takes an empty-bin 0


@pytest.mark.parametrize("pooled", [[1, 1], [3, 5], [7, 7], [5, 2]])
@pytest.mark.parametrize("scale", [1.0, 0.5, 0.25, 1 / 16, 0.3])
def test_native_random(pooled, scale):
    rng = np.random.default_rng(int(scale * 1000) + 10 * pooled[0] + pooled[1])
    n, c, h, w = 2, 3, 13, 17
    X = rng.standard_normal((n, c, h, w)).astype(np.float32)
    scale = float(np.float32(scale))  # the attribute's float32 value
    rois = random_rois(rng, 40, n, max(h, w) / scale)
    y = roi_pooling(X, rois, pooled_size=pooled, spatial_scale=scale)
    assert_same(y, reference(X, rois, pooled, scale))
    keep = spec_agrees_with_ort(rois, pooled, scale, h, w)
    assert keep.mean() > 0.9
    assert_same(y[keep], native(X, rois, pooled, scale)[keep])


def test_native_larger_feature_map():
    # The benchmark's geometry, smaller: ROIs in a 1024 x 1024 image at spatial_scale 1/16.
    rng = np.random.default_rng(4)
    X = rng.standard_normal((2, 8, 64, 64)).astype(np.float32)
    corners_ = np.sort(rng.uniform(0, 1024, size=(64, 2, 2)), axis=1).reshape(64, 4)
    rois = np.concatenate([rng.integers(0, 2, size=(64, 1)), corners_], axis=1)
    rois = rois.astype(np.float32)
    y = roi_pooling(X, rois, pooled_size=[7, 7], spatial_scale=1 / 16)
    keep = spec_agrees_with_ort(rois, [7, 7], 1 / 16, 64, 64)
    assert keep.mean() > 0.9
    assert_same(y[keep], native(X, rois, [7, 7], 1 / 16)[keep])


def test_spec_integer_edges_differ_from_ort_float_edges():
    # 57 rows in 7 bins: ORT's last bin ends at ceil(7 * float32(57/7)) = 58, the spec's at 57.
    assert bin_edges(0, 56, 7, 100)[-1] == (48, 57)
    assert ort_edges(0, 56, 7, 100)[-1] == (48, 58)
    rng = np.random.default_rng(5)
    X = rng.standard_normal((1, 2, 64, 64)).astype(np.float32)
    X[:, :, 57, :] = 100.0  # the row just below the ROI
    rois = f32([[0, 0, 0, 56, 56]])
    y = roi_pooling(X, rois, pooled_size=[7, 7])
    assert_same(y, reference(X, rois, [7, 7]))
    assert np.all(y < 100)
    # onnxruntime takes the maxima over its float32 edges, and reads the row below.
    ort = native(X, rois, [7, 7])
    edges = ort_edges(0, 56, 7, 64)
    maxima = [[[X[0, c, hs:he, ws:we].max() for ws, we in edges] for hs, he in edges]
              for c in range(2)]
    assert_same(ort, np.array([maxima], np.float32))
    assert np.all(ort[0, :, 6, :] == 100) and np.all(ort[0, :, :6, :6] == y[0, :, :6, :6])


# ---------------------------------------------------------------------------------------------
# NaN


def test_nan_is_ignored_and_the_maximum_starts_at_lowest():
    """Measured: NaN never wins, a bin of only NaN or -inf gives lowest(T), +inf is kept."""
    rng = np.random.default_rng(12)
    X = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    X[0, 0, 0, 0] = np.nan   # first element of a bin
    X[0, 1, 3, 5] = np.nan   # inside
    X[1, 2, 7, 7] = np.nan   # last element
    X[1, 0, :2, :2] = np.nan  # a whole bin of NaN
    X[1, 1, :2, :2] = -np.inf  # a whole bin of -inf
    X[0, 2, 0, 0] = np.inf
    rois = f32([[0, 0, 0, 7, 7], [1, 0, 0, 7, 7], [0, 1, 1, 6, 6], [1, 6, 6, 12, 12]])
    clean = np.where(np.isnan(X), -np.inf, X)
    for dtype in (np.float16, np.float32, np.float64):
        Xd, rd = X.astype(dtype), rois.astype(dtype)
        y = roi_pooling(Xd, rd, pooled_size=[4, 4])
        assert_same(y, reference(Xd, rd, [4, 4]))
        assert not np.isnan(y).any()
        lowest = np.finfo(dtype).min
        assert y[1, 0, 0, 0] == lowest and y[1, 1, 0, 0] == lowest
        assert y[0, 2, 0, 0] == np.inf
        # every other bin is the largest of its non-NaN values
        assert y[0, 0, 0, 0] == clean[0, 0, :2, :2].astype(dtype).max()
        assert y[1, 2, 3, 3] == clean[1, 2, 6:8, 6:8].astype(dtype).max()


# ---------------------------------------------------------------------------------------------
# Properties


SCALES = [1.0, 0.5, 0.25, 2.0, 0.0625, float(np.float32(0.3)), 0.0, -0.5]
COORD = st.one_of(st.integers(-12, 24).map(lambda v: v / 2),
                  st.floats(-30, 60, width=32, allow_nan=False, allow_infinity=False))


@st.composite
def problems(draw, positive_scale: bool = False):
    n = draw(st.integers(1, 3))
    c = draw(st.integers(1, 3))
    h = draw(st.integers(1, 9))
    w = draw(st.integers(1, 9))
    pooled = [draw(st.integers(1, 5)), draw(st.integers(1, 5))]
    scales = [s for s in SCALES if s > 0] if positive_scale else SCALES
    scale = draw(st.sampled_from(scales))
    r = draw(st.integers(0, 6))
    dtype = np.float32 if positive_scale else draw(st.sampled_from([np.float16, np.float32,
                                                                    np.float64]))
    rows = []
    for _ in range(r):
        batch = draw(st.integers(0, n - 1)) + draw(st.sampled_from([0.0, 0.5, 0.99]))
        rows.append([batch] + [draw(COORD) for _ in range(4)])
    rois = np.array(rows, dtype=dtype).reshape(r, 5)
    seed = draw(st.integers(0, 2**32 - 1))
    X = np.random.default_rng(seed).standard_normal((n, c, h, w)).astype(dtype)
    if draw(st.booleans()):
        X = -np.abs(X)
    if draw(st.booleans()):  # one NaN somewhere
        X.reshape(-1)[draw(st.integers(0, X.size - 1))] = np.nan
    lead = draw(st.sampled_from([(), (1,), (1, 1)]))
    return X, rois.reshape(*lead, r, 5), pooled, scale


@settings(max_examples=150, deadline=None, derandomize=True)
@given(problems())
def test_property_matches_reference(problem):
    X, rois, pooled, scale = problem
    y = roi_pooling(X, rois, pooled_size=pooled, spatial_scale=scale)
    assert_same(y, reference(X, rois, pooled, scale))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(problems(positive_scale=True))
def test_property_matches_native(problem):
    X, rois, pooled, scale = problem
    X = np.nan_to_num(X, nan=5.0)  # onnxruntime keeps a NaN that comes last in a bin
    y = roi_pooling(X, rois, pooled_size=pooled, spatial_scale=scale)
    keep = spec_agrees_with_ort(rois, pooled, scale, X.shape[2], X.shape[3])
    if rois.size:
        assert_same(y[keep], native(X, rois, pooled, scale)[keep])
    else:
        assert y.shape == (0, X.shape[1], *pooled)
