"""LpPooling kernel against onnxruntime's native LpPool (opset 18), the plain reference
(:mod:`dml_onnx.reference_ops.lp_pooling`), and the spec's errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dml_onnx._kernels.lp_pooling import lp_pooling
from dml_onnx.reference_ops.lp_pooling import lp_pooling as reference
from tests._support.native import run_native
from tests.kernels._float16 import assert_rounded_once, halves, special_halves
from tests.kernels._float16 import threads as float16_threads


def _attributes(window, strides=None, start=None, end=None, dilations=None, p=2) -> dict:
    k = len(window)
    return {"window_size": list(window), "strides": list(strides or [1] * k),
            "start_padding": list(start or [0] * k), "end_padding": list(end or [0] * k),
            "dilations": list(dilations or [1] * k), "p": p}


def _native(x: np.ndarray, a: dict) -> np.ndarray:
    return run_native("LpPool", [x], opset=18, kernel_shape=a["window_size"],
                      strides=a["strides"], dilations=a["dilations"],
                      pads=[*a["start_padding"], *a["end_padding"]], p=a["p"])[0]


NATIVE_CASES = [
    ((9,), (2,), (1,), (1,), (2,), 1),
    ((10,), (3,), (0,), (2,), (3,), 4),
    ((7, 6), (3, 3), (1, 1), (1, 1), (1, 1), 2),
    ((8, 9), (2, 3), (0, 2), (1, 0), (2, 1), 3),
    ((12, 10), (3, 2), (1, 0), (2, 1), (1, 3), 1),
    ((5, 6, 7), (2, 2, 3), (1, 0, 1), (0, 1, 1), (2, 1, 2), 2),
    ((6, 5, 4), (3, 2, 2), (0, 1, 0), (1, 0, 1), (1, 2, 1), 4),
]


@pytest.mark.parametrize("spatial, window, start, end, dilations, p", NATIVE_CASES)
@pytest.mark.parametrize("stride", [1, 2])
def test_matches_onnxruntime_lppool(spatial, window, start, end, dilations, p, stride):
    rng = np.random.default_rng(len(spatial) * 10 + p)
    x = rng.standard_normal((2, 3, *spatial)).astype(np.float32)  # negatives: |x| is used
    a = _attributes(window, [stride] * len(window), start, end, dilations, p)
    got = lp_pooling(x, **a)
    want = _native(x, a)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(got, reference(x, **a), rtol=2e-6, atol=1e-6)


def test_absolute_value_not_signed_sum():
    x = np.array([[[-1, -2, 3, -4, 5]]], np.float32)
    got = lp_pooling(x, **_attributes([2], p=1))
    np.testing.assert_array_equal(got, [[[3, 5, 7, 9]]])  # torch's signed sum: [-3, 1, -1, 1]
    np.testing.assert_array_equal(got, _native(x, _attributes([2], p=1)))


def test_padding_taps_add_nothing():
    x = np.full((1, 1, 3), 2.0)
    got = lp_pooling(x, **_attributes([3], start=[2], end=[2], p=1))
    np.testing.assert_array_equal(got, [[[2, 4, 6, 4, 2]]])


def test_empty_list_attributes_mean_the_defaults():
    x = np.random.default_rng(3).standard_normal((1, 2, 5, 5)).astype(np.float32)
    explicit = lp_pooling(x, **_attributes([2, 3]))
    defaults = lp_pooling(x, window_size=[2, 3], strides=[], start_padding=[], end_padding=[],
                          dilations=[], p=2)
    np.testing.assert_array_equal(explicit, defaults)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_float16_is_computed_in_float32_and_rounded_once(p):
    x = np.random.default_rng(p).standard_normal((2, 2, 6, 6)).astype(np.float16)
    a = _attributes([3, 3], start=[1, 1], end=[1, 1], p=p)
    got = lp_pooling(x, **a)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, lp_pooling(x.astype(np.float32), **a).astype(np.float16))


LP_FLOAT16_GEOMETRIES = [  # window, strides, start, end, dilations, spatial: k = 1, 2, 3
    ((3,), (2,), (1,), (2,), (2,), (13,)),
    ((3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (9, 8)),
    ((2, 3), (2, 1), (0, 2), (1, 0), (1, 2), (7, 9)),
    ((2, 2, 3), (1, 2, 1), (1, 0, 1), (0, 1, 1), (2, 1, 1), (5, 6, 4)),
]


@pytest.mark.parametrize("geometry", LP_FLOAT16_GEOMETRIES, ids=lambda g: f"k{len(g[0])}")
@pytest.mark.parametrize("p", [1, 2, 3, 5])
@pytest.mark.parametrize("threads", [1, 3])
def test_float16_of_every_kind_is_float32_rounded_once_bit_for_bit(geometry, p, threads):
    """float16 read as its bits and written rounded once (p > 2: numpy's root of the float32
    sums, then rounded over the threads): numpy's rounding of the float32 result on the same
    values, for values of every kind (norms beyond float16's range, subnormal norms, both zeros,
    infinities, NaN), in bands over threads."""
    window, strides, start, end, dilations, spatial = geometry
    x = special_halves(np.random.default_rng(p * 10 + len(window)), (3, 4, *spatial))
    x[0, 0] = 60000  # norms of two or more beyond float16's range: infinity
    x[0, 1] = 2.0 ** -24  # p = 1: subnormal norms
    x[0, 2] = -0.0
    x[0, 3].flat[::3] = np.nan
    a = _attributes(window, strides, start, end, dilations, p)
    with float16_threads(threads):
        got = lp_pooling(x, **a)
    assert_rounded_once(got, lp_pooling(x.astype(np.float32), **a))
    assert np.isinf(got[0, 0]).any() and np.isnan(got).any() and not got[0, 2].any()
    if p == 1:
        assert ((got[0, 1] > 0) & (got[0, 1] < 2.0 ** -14)).all()


@pytest.mark.parametrize("p", [1, 2, 3])
def test_float16_of_every_value(p):
    """Each of the 65536 float16 values in a window of its own and beside its neighbour."""
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16).reshape(4, 4, 4096)
    for window in ([1], [2]):
        a = _attributes(window, p=p)
        assert_rounded_once(lp_pooling(every, **a), lp_pooling(every.astype(np.float32), **a))


@pytest.mark.parametrize("p", [2, 3])
def test_float16_empty_shapes(p):
    for shape, a in (((0, 3, 5, 5), _attributes([3, 3], p=p)),  # no batch
                     ((2, 0, 5, 5), _attributes([3, 3], p=p)),  # no channel
                     ((2, 3, 0, 5), _attributes([1, 3], start=[1, 0], end=[1, 0], p=p))):
        got = lp_pooling(np.ones(shape, np.float16), **a)
        want = lp_pooling(np.ones(shape, np.float32), **a)
        assert got.dtype == np.float16
        assert_rounded_once(got, want)


def test_float64_keeps_double_precision():
    x = np.random.default_rng(9).standard_normal((1, 2, 7)) * 1e-3
    a = _attributes([3], dilations=[2], p=3)
    got = lp_pooling(x, **a)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, reference(x, **a), rtol=1e-13)


@pytest.mark.parametrize("value, p, dtype", [
    (1e10, 4, np.float32),  # (1e10)^4 is beyond float32
    (2.0, 128, np.float32),  # 2^128 too
    (0.5, 200, np.float32),  # 0.5^200 is below float32's smallest subnormal
    (1e-30, 2, np.float32),
    (3e-5, 3, np.float16),
    (1e300, 2, np.float64),
    (1e-200, 2, np.float64),
    (0.75, (1 << 63) - 1, np.float32),  # the largest p: the norm is the largest magnitude
])
def test_the_norm_is_exact_where_powers_leave_the_float_range(value, p, dtype):
    x = np.full((1, 1, 4), value, dtype)
    x[0, 0, 1] *= -0.5  # windows of 3 over [v, -v/2, v, v, (0)]
    v = float(x[0, 0, 0])
    both = v * (2 + 0.5 ** p) ** (1 / p)
    want = [both, both, v * 2 ** (1 / p)]
    got = lp_pooling(x, **_attributes([3], end=[1], p=p))
    np.testing.assert_allclose(got[0, 0].astype(np.float64), want, rtol=4 * np.finfo(dtype).eps)
    np.testing.assert_array_equal(got, reference(x, **_attributes([3], end=[1], p=p)))


def test_extreme_values_where_no_tap_of_an_axis_reads_the_input():
    """Found by hypothesis: the recomputed outputs of a window that reads padding only."""
    x = np.array([[[[[np.inf, -0.5284]]], [[[-0.0, np.nan]]]]], np.float32)
    a = _attributes([2, 1, 1], strides=[2, 1, 1], dilations=[1, 1, 2], start=[2, 0, 0],
                    end=[0, 0, 1], p=16)
    np.testing.assert_array_equal(lp_pooling(x, **a), reference(x, **a))


def test_infinity_and_nan_in_a_window_of_extreme_values():
    x = np.array([[[1e30, np.inf, 1e-30, np.nan, 3.0]]], np.float32)
    got = lp_pooling(x, **_attributes([2], p=3))
    np.testing.assert_array_equal(got, [[[np.inf, np.inf, np.nan, np.nan]]])
    x = np.array([[[np.nan, 1e30, 1e30, 5.0]]], np.float32)  # NaN beside powers out of range
    got = lp_pooling(x, **_attributes([2], p=2))
    np.testing.assert_allclose(got, [[[np.nan, 2 ** 0.5 * 1e30, 1e30]]], rtol=1e-6)


def test_nan_propagates():
    x = np.zeros((1, 1, 4), np.float32)
    x[0, 0, 1] = np.nan
    got = lp_pooling(x, **_attributes([2]))
    assert np.isnan(got[0, 0, :2]).all() and got[0, 0, 2] == 0


def _drawn_geometry(data, k: int, p: int, largest_step: int, largest_side: int
                    ) -> tuple[dict, list[int]]:
    """Drawn attributes (windows up to 3, dilations and strides up to ``largest_step``,
    paddings up to 2) and spatial sizes up to ``largest_side`` that hold one window."""
    window = data.draw(st.lists(st.integers(1, 3), min_size=k, max_size=k))
    dilations = data.draw(st.lists(st.integers(1, largest_step), min_size=k, max_size=k))
    strides = data.draw(st.lists(st.integers(1, largest_step), min_size=k, max_size=k))
    start = data.draw(st.lists(st.integers(0, 2), min_size=k, max_size=k))
    end = data.draw(st.lists(st.integers(0, 2), min_size=k, max_size=k))
    spatial = [data.draw(st.integers(max(1, d * (w - 1) + 1 - a - b), largest_side))
               for w, d, a, b in zip(window, dilations, start, end)]
    return _attributes(window, strides, start, end, dilations, p), spatial


@settings(max_examples=120, deadline=None, derandomize=True)
@given(data=st.data(), k=st.integers(1, 3), p=st.integers(1, 4),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_property_matches_loop_reference(data, k, p, dtype):
    a, spatial = _drawn_geometry(data, k, p, largest_step=3, largest_side=7)
    x = np.random.default_rng(data.draw(st.integers(0, 2**16))).standard_normal(
        (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3)), *spatial)).astype(dtype)
    got = lp_pooling(x, **a)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, reference(x, **a), rtol=tolerance, atol=tolerance)


@settings(max_examples=120, deadline=None, derandomize=True)
@given(data=st.data(), k=st.integers(1, 3), p=st.integers(1, 8), threads=st.integers(1, 3))
def test_float16_property_is_float32_rounded_once(data, k, p, threads):
    """Any float16 values (NaN, infinities, subnormals, zeros of both signs), any geometry:
    numpy's rounding of the float32 result on the same values, bit for bit."""
    a, spatial = _drawn_geometry(data, k, p, largest_step=2, largest_side=6)
    x = data.draw(halves((data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3)),
                          *spatial)))
    with float16_threads(threads):
        got = lp_pooling(x, **a)
    assert_rounded_once(got, lp_pooling(x.astype(np.float32), **a))


ERRORS = [
    ({"window_size": [0, 2]}, (1, 1, 4, 4), "window_size[0] 0 is below 1"),
    ({"window_size": [2, 2, 2, 2]}, (1, 1, 4, 4, 4, 4), "window_size [2, 2, 2, 2] must have 1 "
                                                        "to 3 values, not 4"),
    ({"window_size": [2, 2], "strides": [1, 0]}, (1, 1, 4, 4), "strides[1] 0 is below 1"),
    ({"window_size": [2, 2], "strides": [1]}, (1, 1, 4, 4), "strides [1] must have 2 values"),
    ({"window_size": [2, 2], "dilations": [0, 1]}, (1, 1, 4, 4), "dilations[0] 0 is below 1"),
    ({"window_size": [2], "start_padding": [-1]}, (1, 1, 4), "start_padding[0] -1 is below 0"),
    ({"window_size": [2], "end_padding": [-2]}, (1, 1, 4), "end_padding[0] -2 is below 0"),
    ({"window_size": [2], "p": 0}, (1, 1, 4), "p 0 is below 1"),
    ({"window_size": [2, 2]}, (1, 1, 4), "X rank 3 is not 4"),
    ({"window_size": [2]}, (4,), "X rank 1 is not 3"),
    ({"window_size": [5]}, (1, 1, 4), "spatial axis 0 output size 0 is below 1"),
    ({"window_size": [2], "dilations": [3]}, (1, 1, 3), "spatial axis 0 output size 0"),
]


@pytest.mark.parametrize("given_attributes, shape, message", ERRORS)
def test_errors_name_operator_node_field_and_value(given_attributes, shape, message):
    k = len(given_attributes["window_size"])
    a = {**_attributes([1] * k), **given_attributes}
    with pytest.raises(ValueError) as info:
        lp_pooling(np.zeros(shape, np.float32), node="pool7", **a)
    assert str(info.value).startswith("LpPooling 'pool7': ")
    assert message in str(info.value)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_])
def test_non_float_input_is_refused(dtype):
    with pytest.raises(ValueError, match=r"LpPooling 'n': X element type .* is not float16"):
        lp_pooling(np.zeros((1, 1, 3), dtype), node="n", **_attributes([2]))


def test_output_size_formula():
    a = _attributes([3, 2], strides=[2, 3], start=[1, 0], end=[2, 1], dilations=[2, 1])
    got = lp_pooling(np.ones((1, 1, 11, 8), np.float32), **a)
    assert got.shape == (1, 1, (11 + 3 - 4 - 1) // 2 + 1, (8 + 1 - 1 - 1) // 3 + 1)
    assert math.prod(got.shape) > 0
