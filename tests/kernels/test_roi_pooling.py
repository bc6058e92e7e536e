"""Numeric tests of the RoiPooling kernel (spec section 1).

Two oracles: the plain reference of the package (:mod:`dml_onnx.reference_ops.roi_pooling`,
Python scalars and ints straight from the spec formulas), and onnxruntime's native
``MaxRoiPool``. onnxruntime computes the bin edges as
``floor(p * float32(size / P))`` and ``ceil(...)`` in float32, where the spec uses exact integer
division; the two differ for a few region sizes (e.g. 57 rows in 7 bins). The ORT comparisons
therefore skip the ROIs whose float32 edges differ from the integer ones, and one test pins that
difference down.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_ops import _threads
from custom_ops.roi_pooling import prepare as check_attributes
from custom_ops.roi_pooling import roi_pooling
from dml_onnx.reference_ops.roi_pooling import bin_edges, region_corners
from dml_onnx.reference_ops.roi_pooling import roi_pooling as reference_roi_pooling
from tests._support.native import run_native

# ---------------------------------------------------------------------------------------------
# The package reference, and onnxruntime's bin edges


def reference(X, rois, pooled_size, spatial_scale=1.0) -> np.ndarray:
    """Y of :mod:`dml_onnx.reference_ops.roi_pooling`."""
    return reference_roi_pooling(X, rois, pooled_size=list(pooled_size),
                                 spatial_scale=spatial_scale)


def ort_edges(lo: int, hi: int, pooled: int, limit: int) -> list[tuple[int, int]]:
    """onnxruntime's MaxRoiPool bin edges: float32 bin size, floor/ceil of ``p * bin``."""
    size = max(hi - lo + 1, 1)
    bin_size = np.float32(size) / np.float32(pooled)
    edges = []
    for p in range(pooled):
        start = math.floor(float(np.float32(p) * bin_size)) + lo
        end = math.ceil(float(np.float32(p + 1) * bin_size)) + lo
        edges.append((min(max(start, 0), limit), min(max(end, 0), limit)))
    return edges


def spec_agrees_with_ort(rois, pooled_size, spatial_scale, h, w) -> np.ndarray:
    """Per ROI: do the spec's integer bin edges equal onnxruntime's float32 ones?"""
    ph_count, pw_count = pooled_size
    keep = []
    for row in np.asarray(rois).reshape(-1, 5):
        x1, y1, x2, y2 = region_corners(row, spatial_scale, np.float32)
        keep.append(bin_edges(y1, y2, ph_count, h) == ort_edges(y1, y2, ph_count, h)
                    and bin_edges(x1, x2, pw_count, w) == ort_edges(x1, x2, pw_count, w))
    return np.array(keep, dtype=bool)


def native(X, rois, pooled_size, spatial_scale=1.0) -> np.ndarray:
    """onnxruntime's MaxRoiPool on the corners scaled in float32 and rounded half to even, as
    DirectML rounds them (MaxRoiPool itself rounds half away from zero, which keeps the
    integers given here), with spatial_scale 1."""
    rows = np.asarray(rois, np.float32).reshape(-1, 5).copy()
    rows[:, 1:] = np.rint(rows[:, 1:] * np.float32(spatial_scale))
    (y,) = run_native("MaxRoiPool", [X, rows], opset=16, pooled_shape=list(pooled_size),
                      spatial_scale=1.0)
    return y


def f32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def random_rois(rng, count: int, n: int, extent: float, *, outside: float = 0.25,
                halves: bool = True) -> np.ndarray:
    """ROIs in an ``extent`` x ``extent`` image, some beyond it, some with x2 < x1."""
    lo, hi = -outside * extent, (1 + outside) * extent
    xy = rng.uniform(lo, hi, size=(count, 4))
    if halves:  # many exact .5 products
        xy = np.round(xy * 2) / 2
    batch = rng.integers(0, n, size=(count, 1)) + rng.uniform(0, 0.99, size=(count, 1))
    return np.concatenate([batch, xy], axis=1).astype(np.float32)


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(actual, expected)  # NaN == NaN here


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
# Shapes and types


@pytest.mark.parametrize("lead", [(), (1,), (1, 1)])
def test_rois_shapes(lead):
    rng = np.random.default_rng(6)
    X = rng.standard_normal((2, 3, 6, 7)).astype(np.float32)
    rois = random_rois(rng, 5, 2, 7.0)
    y = roi_pooling(X, rois.reshape(*lead, 5, 5), pooled_size=[2, 3])
    assert_same(y, reference(X, rois, [2, 3]))
    assert_same(y, roi_pooling(X, rois, pooled_size=[2, 3]))


@pytest.mark.parametrize("lead", [(), (1,), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_no_rois(lead, dtype):
    X = np.ones((2, 3, 4, 5), dtype)
    y = roi_pooling(X, np.zeros((*lead, 0, 5), dtype), pooled_size=[2, 3], spatial_scale=0.5)
    assert y.shape == (0, 3, 2, 3) and y.dtype == dtype


def test_empty_channels_and_image():
    rois = f32([[0, 0, 0, 3, 3], [1, -2, 1, 5, 2]])
    assert_same(roi_pooling(np.ones((2, 0, 4, 4), np.float32), rois, pooled_size=[2, 2]),
                np.zeros((2, 0, 2, 2), np.float32))
    assert_same(roi_pooling(np.ones((2, 3, 0, 4), np.float32), rois, pooled_size=[2, 2]),
                np.zeros((2, 3, 2, 2), np.float32))


def test_float16_is_float32_rounded_once():
    rng = np.random.default_rng(7)
    X = (rng.standard_normal((2, 3, 10, 9)) * 1000).astype(np.float16)
    rois = random_rois(rng, 30, 2, 20.0).astype(np.float16)
    scale = 0.5
    y = roi_pooling(X, rois, pooled_size=[3, 4], spatial_scale=scale)
    y32 = roi_pooling(X.astype(np.float32), rois.astype(np.float32), pooled_size=[3, 4],
                      spatial_scale=scale)
    assert_same(y, y32.astype(np.float16))
    assert_same(y, reference(X, rois, [3, 4], scale))


def test_float16_products_in_float32():
    # 27.125 * float32(0.35) = 9.49375 rounds to 9 (a float16 product would be 9.5 -> 10);
    # 47.125 * float32(0.35) = 16.49375 rounds to 16.
    scale = float(np.float32(0.35))
    X = (np.arange(20, dtype=np.float16) + 1).reshape(1, 1, 1, 20)
    rois = np.array([[0, 27.125, 0, 27.125, 0], [0, 47.125, 0, 47.125, 0]], np.float16)
    y = roi_pooling(X, rois, pooled_size=[1, 1], spatial_scale=scale)
    assert y[:, 0, 0, 0].tolist() == [10.0, 17.0]  # columns 9 and 16 hold 10 and 17
    assert_same(y, reference(X, rois, [1, 1], scale))


def test_float64():
    rng = np.random.default_rng(8)
    X = rng.standard_normal((2, 3, 11, 10))
    rois = random_rois(rng, 30, 2, 22.0, halves=False).astype(np.float64)
    rois[:5, 1:] = np.round(rois[:5, 1:] * 3) / 3  # products near .5 in float64 at scale 1.5
    y = roi_pooling(X, rois, pooled_size=[4, 3], spatial_scale=0.5)
    assert_same(y, reference(X, rois, [4, 3], 0.5))
    y = roi_pooling(X, rois, pooled_size=[2, 2], spatial_scale=1.5)
    assert_same(y, reference(X, rois, [2, 2], 1.5))


def test_non_contiguous_inputs():
    rng = np.random.default_rng(9)
    base = rng.standard_normal((2, 9, 12, 3)).astype(np.float32)
    X = base.transpose(0, 3, 1, 2)  # [2, 3, 9, 12], not C-contiguous
    rois = np.asfortranarray(random_rois(rng, 12, 2, 12.0))
    y = roi_pooling(X, rois, pooled_size=[3, 3])
    assert_same(y, reference(np.ascontiguousarray(X), rois, [3, 3]))


def test_many_regions_on_one_thread_and_on_several(monkeypatch):
    """Regions split over threads: the reference's values on one thread and on several."""
    rng = np.random.default_rng(10)
    X = rng.standard_normal((2, 3, 40, 40)).astype(np.float32)
    X[1, 2, 5, 7] = np.nan
    rois = np.concatenate([random_rois(rng, 25, 2, 40.0), f32([[1, 3, 4, 8, 6]])])
    expected = reference(X, rois, [3, 2])
    monkeypatch.setattr(_threads, "THREADS", 1)
    assert_same(roi_pooling(X, rois, pooled_size=[3, 2]), expected)
    monkeypatch.setattr(_threads, "THREADS", 4)
    monkeypatch.setattr(_threads, "GRAIN", 1)  # split even this small work
    assert_same(roi_pooling(X, rois, pooled_size=[3, 2]), expected)


def test_huge_coordinates_stay_exact():
    # Corners far beyond int64 after scaling: the bin arithmetic must stay exact.
    X = np.arange(2 * 8 * 8, dtype=np.float32).reshape(1, 2, 8, 8)
    rois = f32([[0, -1e20, 2, 5, 6], [0, 1, -3e30, 7, 3e30], [0, -1e38, -1e38, 1e38, 1e38],
                [0, 3, 3, 1e25, 4]])
    for pooled in ([1, 1], [3, 3], [7, 5]):
        y = roi_pooling(X, rois, pooled_size=pooled, spatial_scale=2.0)
        assert_same(y, reference(X, rois, pooled, 2.0))
    X64 = X.astype(np.float64)
    rois64 = np.array([[0, -1e300, 2, 5, 6], [0, 1, 3, 1e300, 4]], np.float64)
    assert_same(roi_pooling(X64, rois64, pooled_size=[3, 2], spatial_scale=1e8),
                reference(X64, rois64, [3, 2], 1e8))


def test_zero_and_negative_spatial_scale():
    rng = np.random.default_rng(11)
    X = rng.standard_normal((1, 2, 7, 7)).astype(np.float32)
    rois = f32([[0, -3, -6, -1, -2], [0, 2, 3, -4, 5], [0, 1, 1, 5, 5]])
    for scale in (0.0, -1.0, -0.5):
        y = roi_pooling(X, rois, pooled_size=[2, 3], spatial_scale=scale)
        assert_same(y, reference(X, rois, [2, 3], scale))


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
# Errors


def raises(match_parts, call):
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    for part in ("RoiPooling", "'pool1'", *match_parts):
        assert part in message, (part, message)
    return message


GOOD_X = np.zeros((2, 3, 5, 5), np.float32)
GOOD_ROIS = f32([[0, 0, 0, 4, 4], [1, 1, 1, 3, 3]])


def run(X=GOOD_X, rois=GOOD_ROIS, pooled_size=(2, 2), spatial_scale=1.0):
    return lambda: roi_pooling(X, rois, pooled_size=list(pooled_size),
                               spatial_scale=spatial_scale, node="pool1")


@pytest.mark.parametrize("shape", [(3, 5, 5), (1, 2, 3, 5, 5), (5,)])
def test_error_x_rank(shape):
    raises(["X rank", str(len(shape))], run(X=np.zeros(shape, np.float32)))


@pytest.mark.parametrize("shape", [(2, 4), (2, 6), (2, 2, 5), (1, 2, 2, 5), (5,),
                                   (1, 1, 1, 2, 5), (2, 1, 1, 5)])
def test_error_rois_shape(shape):
    message = raises(["rois shape", str(list(shape))], run(rois=np.zeros(shape, np.float32)))
    assert "[R, 5]" in message


def test_error_batch_index_outside():
    message = raises(["rois[3] batch index 7", "outside [0, 2)"],
                     run(rois=f32([[0, 0, 0, 1, 1]] * 3 + [[7, 0, 0, 1, 1]])))
    assert message == "RoiPooling 'pool1': rois[3] batch index 7 is outside [0, 2)"
    raises(["rois[1] batch index 2", "[0, 2)"], run(rois=f32([[1.9, 0, 0, 1, 1],
                                                             [2.0, 0, 0, 1, 1]])))
    raises(["rois[0] batch index -1.5", "[0, 2)"], run(rois=f32([[-1.5, 0, 0, 1, 1]])))
    raises(["rois[0] batch index -1", "[0, 2)"], run(rois=f32([[-1, 0, 0, 1, 1]])))
    raises(["rois[1] batch index inf"], run(rois=f32([[0, 0, 0, 1, 1], [np.inf, 0, 0, 1, 1]])))
    raises(["rois[0] batch index 0", "[0, 0)"],
           run(X=np.zeros((0, 3, 5, 5), np.float32), rois=f32([[0, 0, 0, 1, 1]])))


def test_error_batch_index_nan():
    raises(["rois[1] batch index nan", "NaN"],
           run(rois=f32([[0, 0, 0, 1, 1], [np.nan, 0, 0, 1, 1]])))


@pytest.mark.parametrize("column", [1, 2, 3, 4])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_error_coordinate_not_finite(column, bad):
    rois = GOOD_ROIS.copy()
    rois[1, column] = bad
    name = ["x1", "y1", "x2", "y2"][column - 1]
    raises([f"rois[1] {name} {bad}", "not finite"], run(rois=rois))


def test_error_scaled_coordinate_overflows():
    rois = f32([[0, 0, 0, 1, 3e38]])
    raises(["rois[0] y2", "spatial_scale 4.0", "overflows float32"],
           run(rois=rois, spatial_scale=4.0))


@pytest.mark.parametrize(("pooled", "field", "value"), [
    ([7], "pooled_size", "[7]"), ([7, 7, 7], "pooled_size", "[7, 7, 7]"),
    ([], "pooled_size", "[]"), ([0, 7], "pooled_size[0]", "0"), ([7, -1], "pooled_size[1]", "-1"),
])
def test_error_pooled_size(pooled, field, value):
    raises([f"{field} {value}"], run(pooled_size=pooled))
    raises([f"{field} {value}"],
           lambda: check_attributes(node="pool1", pooled_size=pooled, spatial_scale=1.0))


@pytest.mark.parametrize(("scale", "shown"), [(math.nan, "nan"), (math.inf, "inf"),
                                              (-math.inf, "-inf"), (1e39, "1e+39")])
def test_error_spatial_scale(scale, shown):
    raises([f"spatial_scale {shown}", "not finite"], run(spatial_scale=scale))
    raises([f"spatial_scale {shown}"],
           lambda: check_attributes(node="pool1", pooled_size=[2, 2], spatial_scale=scale))


def test_check_attributes_accepts_valid():
    check_attributes(node="n", pooled_size=[1, 1], spatial_scale=0.0625)
    check_attributes(node="n", pooled_size=(7, 3), spatial_scale=-2.0)


def test_error_element_types():
    raises(["rois element type 'float64'", "X element type float32"],
           run(rois=GOOD_ROIS.astype(np.float64)))
    raises(["X element type 'int32'"], run(X=GOOD_X.astype(np.int32)))
    raises(["rois element type 'int64'"], run(rois=GOOD_ROIS.astype(np.int64)))


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
