"""Unfold and Fold kernels: every element type (Unfold copies exactly, Fold's integers wrap
around, float16 accumulates in float32 and rounds once), and the errors of attributes, shapes
and types, each a ValueError naming the operator, the node, the field and the value."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from dml_onnx._kernels.fold import fold
from dml_onnx._kernels.fold import prepare as fold_check_attributes
from dml_onnx._kernels.unfold import prepare as unfold_check_attributes
from dml_onnx._kernels.unfold import unfold
from dml_onnx.reference_ops.fold import fold as fold_reference
from dml_onnx.reference_ops.unfold import unfold as unfold_reference
from tests.kernels._float16 import assert_rounded_once, special_halves
from tests.kernels._float16 import threads as float16_threads
from tests.kernels._unfold_fold import (
    INT_TYPES,
    NUMERIC_TYPES,
    _wrap,
    assert_fold_matches,
    attrs,
    fold_shape,
    random_array,
)

# ----------------------------------------------------------------------------------------------
# Element types.

@pytest.mark.parametrize("dtype", [*NUMERIC_TYPES, np.bool_], ids=lambda t: np.dtype(t).name)
def test_unfold_every_type_copies_exactly(dtype):
    rng = np.random.default_rng(17)
    x = random_array(rng, (2, 2, 5, 4), dtype)
    if np.dtype(dtype).kind == "f":
        x[0, 0, 0, :3] = [np.inf, -np.inf, np.nan]
        x[0, 1, 1, 1] = -0.0
    got = unfold(x, **attrs([2, 3], [1, 1], [2, 1], [1, 0], [0, 2]))
    want = unfold_reference(x, **attrs([2, 3], [1, 1], [2, 1], [1, 0], [0, 2]))
    assert got.dtype == np.dtype(dtype)
    # bitwise: nan payloads, -0.0 and extreme integers survive unchanged
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_unfold_bool_pads_with_false():
    x = np.ones((1, 1, 2, 2), dtype=bool)
    got = unfold(x, **attrs([2, 2], a=[1, 1], e=[1, 1]))
    assert got.dtype == np.bool_
    assert got.sum() == 4 * 4 and not got[0, 0, 0]  # first tap of the first block: padding


@pytest.mark.parametrize("dtype", NUMERIC_TYPES, ids=lambda t: np.dtype(t).name)
def test_fold_every_numeric_type(dtype):
    rng = np.random.default_rng(18)
    w, s, d, a, e, out = (2, 3), (1, 2), (2, 1), (1, 0), (0, 2), (6, 7)
    y = random_array(rng, fold_shape(2, 2, w, s, d, a, e, out), dtype)
    got = fold(y, **attrs(w, s, d, a, e), output_size=list(out))
    assert got.dtype == np.dtype(dtype)
    assert_fold_matches(got, fold_reference(y, **attrs(w, s, d, a, e), output_size=list(out)))


@pytest.mark.parametrize("dtype", INT_TYPES, ids=lambda t: np.dtype(t).name)
def test_fold_integers_wrap_around(dtype):
    info = np.iinfo(dtype)
    y = np.full((1, 4, 1), info.max, dtype=dtype)  # four taps of a 2x2 window on one pixel
    got = fold(y, **attrs([2, 2], d=[1, 1]), output_size=[2, 2])
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, np.full((1, 1, 2, 2), info.max, dtype=dtype))
    y = np.full((1, 3, 3), info.max, dtype=dtype)  # window 3 over size 3 + padding 1 + 1
    got = fold(y, **attrs([3], a=[1], e=[1]), output_size=[3])
    want = [_wrap(2 * int(info.max), dtype), _wrap(3 * int(info.max), dtype),
            _wrap(2 * int(info.max), dtype)]
    np.testing.assert_array_equal(got[0, 0], np.array(want, dtype=dtype))


def test_fold_float16_accumulates_in_float32_and_rounds_once():
    # Three taps land on the centre of a 1-D output: 2048 + 1 + 1. Summed in float16 this is
    # 2048 (2049 rounds to even at each step); in float32 it is 2050, exactly representable.
    y = np.array([[[0, 0, 2048], [0, 1, 0], [1, 0, 0]]], dtype=np.float16)
    got = fold(y, **attrs([3]), output_size=[5])
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got[0, 0], np.array([0, 0, 2050, 0, 0], np.float16))
    # An intermediate sum beyond float16's range (120000) does not saturate to inf.
    y = np.array([[[0, 0, 60000], [0, 60000, 0], [-60000, 0, 0]]], dtype=np.float16)
    np.testing.assert_array_equal(fold(y, **attrs([3]), output_size=[5])[0, 0],
                                  np.array([0, 0, 60000, 0, 0], np.float16))
    # A final sum beyond float16's range becomes inf at the one rounding.
    y = np.full((1, 2, 2), 60000.0, dtype=np.float16)
    got = fold(y, **attrs([2]), output_size=[3])
    np.testing.assert_array_equal(got[0, 0], np.array([60000.0, np.inf, 60000.0], np.float16))


FLOAT16_GEOMETRIES = [  # window, strides, dilations, start, end, output: k = 1, 2, 3
    ((3,), (2,), (2,), (3,), (0,), (11,)),
    ((3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (7, 6)),
    ((2, 3), (2, 1), (1, 2), (0, 2), (1, 0), (6, 9)),
    ((2, 2, 2), (1, 2, 1), (2, 1, 1), (1, 0, 1), (0, 1, 1), (4, 5, 3)),
]


@pytest.mark.parametrize("geometry", FLOAT16_GEOMETRIES, ids=lambda g: f"k{len(g[0])}-{g[-1]}")
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_fold_float16_is_float32_rounded_once_bit_for_bit(geometry, threads):
    """float16 read as its bits, summed in float32 and written as float16 bits: numpy's
    rounding of the float32 fold of the same values, for values of every kind (sums that
    overflow to infinity, subnormals, both zeros, infinities, NaN), in bands over threads."""
    w, s, d, a, e, out = geometry
    y = special_halves(np.random.default_rng(len(w) * 10 + threads),
                       fold_shape(3, 5, w, s, d, a, e, out))
    taps = math.prod(w)
    y[0, :taps] = 30000  # channel 0: sums of two or more overflow float16
    y[0, taps:2 * taps] = 2.0 ** -24  # channel 1: sums of the smallest subnormal
    y[0, 2 * taps:3 * taps, ::3] = np.nan  # channel 2: NaN in some sums
    kw = {**attrs(w, s, d, a, e), "output_size": list(out)}
    with float16_threads(threads):
        got = fold(y, **kw)
    assert_rounded_once(got, fold(y.astype(np.float32), **kw))
    assert np.isinf(got[0, 0]).any() and np.isnan(got).any()
    assert ((got[0, 1] > 2.0 ** -24) & (got[0, 1] < 2.0 ** -14)).any()


@pytest.mark.parametrize("threads", [1, 3])
def test_fold_float16_of_every_value_and_empty_shapes(threads):
    """Each of the 65536 float16 values alone in its output (a 1x1 window), and beside one
    another (a 2x1 window adds pairs), then empty batches, channels and outputs."""
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    with float16_threads(threads):
        alone = fold(every.reshape(16, 1, 4096), **attrs([1]), output_size=[4096])
        pairs = fold(every.reshape(8, 2, 4096), **attrs([2], e=[1]), output_size=[4096])
        assert_rounded_once(alone, fold(every.astype(np.float32).reshape(16, 1, 4096),
                                        **attrs([1]), output_size=[4096]))
        np.testing.assert_array_equal(alone.reshape(-1).view(np.uint16)[:0x7C00],
                                      np.arange(0x7C00, dtype=np.uint16))  # finite, positive
        assert_rounded_once(pairs, fold(every.astype(np.float32).reshape(8, 2, 4096),
                                        **attrs([2], e=[1]), output_size=[4096]))
        for shape, kw in (((0, 9, 16), {**attrs([3, 3], a=[1, 1], e=[1, 1]),
                                        "output_size": [4, 4]}),  # no batch
                          ((2, 0, 9), {**attrs([2, 2]), "output_size": [4, 4]}),  # no channel
                          ((1, 4, 4), {**attrs([1, 2], a=[1, 0], e=[1, 0]),
                                       "output_size": [0, 3]})):  # an empty output axis
            got = fold(np.ones(shape, np.float16), **kw)
            assert got.shape == fold(np.ones(shape, np.float32), **kw).shape
            assert got.dtype == np.float16 and got.size == 0


# ----------------------------------------------------------------------------------------------
# Errors: ValueError naming op, node, field and value.

def raises_kernel_error(op, node, field, value):
    return pytest.raises(ValueError, match=re.escape(f"{op} '{node}': {field} {value}"))


def raises_block_count_error(op, node):
    """The block-count field is worded by the shared helper: the caller checks its parts."""
    return pytest.raises(ValueError, match=rf"^{op} '{node}': .* 0 is below 1")


UNFOLD_ATTRIBUTE_ERRORS = [
    # (attribute overrides, field, value shown)
    (dict(window_sizes=[]), "window_sizes", "[]"),
    (dict(window_sizes=[1] * 7), "window_sizes", "[1, 1, 1, 1, 1, 1, 1]"),
    (dict(window_sizes=[2, 0]), "window_sizes[1]", "0"),
    (dict(window_sizes=[-1, 2]), "window_sizes[0]", "-1"),
    (dict(strides=[1]), "strides", "[1]"),
    (dict(strides=[1, 0]), "strides[1]", "0"),
    (dict(dilations=[1, 1, 1]), "dilations", "[1, 1, 1]"),
    (dict(dilations=[-1, 1]), "dilations[0]", "-1"),  # 0 is DirectML's (spec section 5)
    (dict(start_padding=[0]), "start_padding", "[0]"),
    (dict(start_padding=[0, -1]), "start_padding[1]", "-1"),
    (dict(end_padding=[1, 1, 1]), "end_padding", "[1, 1, 1]"),
    (dict(end_padding=[-2, 0]), "end_padding[0]", "-2"),
]


@pytest.mark.parametrize("override, field, value", UNFOLD_ATTRIBUTE_ERRORS)
def test_unfold_attribute_errors(override, field, value):
    kw = {**attrs([2, 2]), **override}
    with raises_kernel_error("Unfold", "u1", field, value):
        unfold_check_attributes(node="u1", **kw)
    x = np.zeros((1, 1, 4, 4), np.float32) if len(kw["window_sizes"]) == 2 else \
        np.zeros((1, 1) + (2,) * len(kw["window_sizes"]), np.float32)
    with raises_kernel_error("Unfold", "u1", field, value):
        unfold(x, node="u1", **kw)


@pytest.mark.parametrize("override, field, value", UNFOLD_ATTRIBUTE_ERRORS)
def test_fold_attribute_errors(override, field, value):
    kw = {**attrs([2, 2]), **override, "output_size": [4, 4]}
    if len(kw["window_sizes"]) != 2 and kw["window_sizes"]:
        kw["output_size"] = [4] * len(kw["window_sizes"])
    with raises_kernel_error("Fold", "f1", field, value):
        fold_check_attributes(node="f1", **kw)
    with raises_kernel_error("Fold", "f1", field, value):
        fold(np.zeros((1, 4, 9), np.float32), node="f1", **kw)


def test_unfold_block_count_below_one():
    x = np.zeros((1, 1, 4, 3), np.float32)
    with raises_block_count_error("Unfold", "u2") as info:
        unfold(x, node="u2", **attrs([2, 3], d=[1, 2]))
    assert "block count" in str(info.value) and "axis 1" in str(info.value)
    with raises_block_count_error("Unfold", "u2") as info:
        unfold(x, node="u2", **attrs([6, 1], a=[1, 0]))
    assert "block count" in str(info.value) and "axis 0" in str(info.value)
    # exactly one block is fine
    assert unfold(x, node="u2", **attrs([5, 1], a=[1, 0])).shape == (1, 5, 3)


def test_unfold_rank_and_type_errors():
    with raises_kernel_error("Unfold", "u3", "X rank", "3"):
        unfold(np.zeros((1, 1, 4), np.float32), node="u3", **attrs([2, 2]))
    with raises_kernel_error("Unfold", "u3", "X rank", "5"):
        unfold(np.zeros((1, 1, 4, 4, 4), np.float32), node="u3", **attrs([2, 2]))
    with raises_kernel_error("Unfold", "u3", "X element type", "'complex64'"):
        unfold(np.zeros((1, 1, 4, 4), np.complex64), node="u3", **attrs([2, 2]))
    with raises_kernel_error("Unfold", "u3", "X element type", "'str"):
        unfold(np.full((1, 1, 4, 4), "a"), node="u3", **attrs([2, 2]))


def test_fold_output_size_errors():
    for output_size, field, value in (([4], "output_size", "[4]"),
                                      ([4, 4, 4], "output_size", "[4, 4, 4]"),
                                      ([], "output_size", "[]"),
                                      ([4, -1], "output_size[1]", "-1")):
        with raises_kernel_error("Fold", "f2", field, value):
            fold_check_attributes(node="f2", **attrs([2, 2]), output_size=output_size)
        with raises_kernel_error("Fold", "f2", field, value):
            fold(np.zeros((1, 4, 9), np.float32), node="f2", **attrs([2, 2]),
                 output_size=output_size)


def test_fold_block_count_below_one():
    kw = attrs([3, 2], d=[2, 1]) | {"output_size": [4, 4]}
    for call in (lambda: fold_check_attributes(node="f3", **kw),
                 lambda: fold(np.zeros((1, 6, 3), np.float32), node="f3", **kw)):
        with raises_block_count_error("Fold", "f3") as info:
            call()
        assert "block count" in str(info.value) and "axis 0" in str(info.value)


def test_fold_shape_and_type_errors():
    kw = attrs([2, 2]) | {"output_size": [4, 4]}  # 4 taps, 9 blocks
    with raises_kernel_error("Fold", "f4", "X dim 2", "8"):
        fold(np.zeros((1, 4, 8), np.float32), node="f4", **kw)
    with raises_kernel_error("Fold", "f4", "X dim 1", "6"):
        fold(np.zeros((1, 6, 9), np.float32), node="f4", **kw)
    with raises_kernel_error("Fold", "f4", "X rank", "4"):
        fold(np.zeros((1, 1, 4, 9), np.float32), node="f4", **kw)
    with raises_kernel_error("Fold", "f4", "X rank", "2"):
        fold(np.zeros((4, 9), np.float32), node="f4", **kw)
    with raises_kernel_error("Fold", "f4", "X element type", "'bool'"):
        fold(np.zeros((1, 4, 9), bool), node="f4", **kw)
    with raises_kernel_error("Fold", "f4", "X element type", "'complex128'"):
        fold(np.zeros((1, 4, 9), np.complex128), node="f4", **kw)


def test_valid_attributes_pass_the_checks():
    unfold_check_attributes(node="u", window_sizes=[3] * 6, strides=[], dilations=[],
                            start_padding=[], end_padding=[])
    fold_check_attributes(node="f", window_sizes=[1], strides=[2], dilations=[3],
                          start_padding=[0], end_padding=[4], output_size=[1])
