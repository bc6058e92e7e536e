"""RoiPooling kernel: the layouts of the regions, no regions, empty channels and images, the
element types (float16 computed in float32 and rounded once, float64 kept), non-contiguous
inputs, the thread count, extreme coordinates and scales, and the errors of inputs and
attributes, each naming the operator, the node and the value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dml_onnx._kernels import _threads
from dml_onnx._kernels.roi_pooling import prepare as check_attributes
from dml_onnx._kernels.roi_pooling import roi_pooling
from tests.kernels._roi_pooling import (
    assert_same,
    f32,
    random_rois,
    reference,
)

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
