"""Numeric tests of the Unfold and Fold kernels (spec sections 5 and 6).

Oracles: the two DML seed examples, the plain references written from the spec formula
(:mod:`dml_onnx.reference_ops`), onnxruntime's native Col2Im (opset 18) for Fold, and the adjoint
identity between the two ops.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_ops.fold import fold
from custom_ops.fold import prepare as fold_check_attributes
from custom_ops.unfold import prepare as unfold_check_attributes
from custom_ops.unfold import unfold
from dml_onnx.ops import _window_cases as seeds
from dml_onnx.reference_ops.fold import fold as fold_reference
from dml_onnx.reference_ops.unfold import unfold as unfold_reference
from tests._support.native import run_native

INT_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
FLOAT_TYPES = [np.float16, np.float32, np.float64]
NUMERIC_TYPES = INT_TYPES + FLOAT_TYPES


# ----------------------------------------------------------------------------------------------
# Helpers.

def _unravel(index: int, sizes: tuple[int, ...]) -> list[int]:
    """Row-major multi-index of ``index`` in a grid of ``sizes``."""
    out = []
    for size in reversed(sizes):
        out.append(index % size)
        index //= size
    return out[::-1]


def _blocks(spatial, w, s, d, a, e) -> tuple[int, ...]:
    return tuple((spatial[i] + a[i] + e[i] - d[i] * (w[i] - 1) - 1) // s[i] + 1
                 for i in range(len(w)))


def _wrap(total: int, dtype: np.dtype):
    """An exact Python integer wrapped into ``dtype`` the way two's-complement addition wraps."""
    info = np.iinfo(dtype)
    modulus = 1 << info.bits
    total %= modulus
    if info.min < 0 and total > info.max:
        total -= modulus
    return total


def attrs(w, s=(), d=(), a=(), e=()):
    return dict(window_sizes=list(w), strides=list(s), dilations=list(d),
                start_padding=list(a), end_padding=list(e))


def filled(values, k, default):
    return tuple(values) if values else (default,) * k


def random_array(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


def fold_shape(n, c, w, s, d, a, e, out_size):
    return (n, c * math.prod(w), math.prod(_blocks(out_size, w, s, d, a, e)))


def assert_fold_matches(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:  # summation order may differ: rounding only
        tol = {np.float16: 2e-3, np.float32: 1e-5, np.float64: 1e-12}[want.dtype.type]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=tol, atol=tol * 10)


# ----------------------------------------------------------------------------------------------
# The two DML seed examples (seeds/unfold.es.txt), typed in from the seed page once, in
# dml_onnx.ops._window_cases, where they are also conformance cases (Unfold's examples).

SEED_INPUT = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)

SEED_1 = np.array([seeds.SEED_1], dtype=np.float32)
SEED_2 = np.array([seeds.SEED_2], dtype=np.float32)


def test_seed_example_1_unpadded():
    got = unfold(SEED_INPUT, window_sizes=[3, 3], strides=[1, 1], dilations=[1, 1],
                 start_padding=[0, 0], end_padding=[0, 0], node="seed1")
    assert got.shape == (1, 9, 9) and got.dtype == np.float32
    np.testing.assert_array_equal(got, SEED_1)


def test_seed_example_2_padded_rows():
    got = unfold(SEED_INPUT, window_sizes=[3, 3], strides=[1, 1], dilations=[1, 1],
                 start_padding=[1, 0], end_padding=[1, 0], node="seed2")
    assert got.shape == (1, 9, 15) and got.dtype == np.float32
    np.testing.assert_array_equal(got, SEED_2)


def test_seed_examples_with_defaults_omitted():
    np.testing.assert_array_equal(unfold(SEED_INPUT, **attrs([3, 3])), SEED_1)
    np.testing.assert_array_equal(unfold(SEED_INPUT, **attrs([3, 3], a=[1, 0], e=[1, 0])), SEED_2)


def test_fold_of_seed_example_counts_overlaps():
    # Fold(Unfold(x)) multiplies every pixel by the number of blocks that read it.
    counts = fold(np.ones_like(SEED_1), **attrs([3, 3]), output_size=[5, 5])
    want = np.outer([1, 2, 3, 2, 1], [1, 2, 3, 2, 1]).astype(np.float32)
    np.testing.assert_array_equal(counts[0, 0], want)
    folded = fold(SEED_2, **attrs([3, 3], a=[1, 0], e=[1, 0]), output_size=[5, 5])
    rows = np.array([2, 3, 3, 3, 2])[:, None] * np.array([1, 2, 3, 2, 1])[None]
    np.testing.assert_array_equal(folded[0, 0], SEED_INPUT[0, 0] * rows)


# ----------------------------------------------------------------------------------------------
# Fixed cases against the loop references: k = 1..6, asymmetric padding, strides, dilations.

CASES = [
    # (spatial shape, window, strides, dilations, start_padding, end_padding)
    ((7,), (3,), (2,), (1,), (1,), (0,)),
    ((9,), (2,), (1,), (3,), (0,), (2,)),
    ((5,), (5,), (), (), (), ()),  # window = full size: one block
    ((6, 7), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),  # the benchmark geometry, small
    ((6, 7), (2, 3), (2, 1), (2, 1), (1, 0), (0, 2)),
    ((5, 8), (3, 2), (3, 4), (1, 2), (2, 1), (1, 3)),  # stride > window
    ((8, 8), (3, 3), (2, 2), (1, 1), (1, 1), (0, 0)),  # output = blocks * stride (flat path)
    ((1, 6), (1, 3), (1, 1), (1, 2), (0, 2), (0, 2)),  # size-1 axis
    ((5, 7), (2, 3), (), (), (), ()),  # no padding: blocks shorter than the output lines
    ((6, 9), (2, 2), (1, 2), (1, 3), (0, 0), (0, 0)),
    ((3, 4), (4, 5), (1, 1), (1, 1), (1, 1), (0, 0)),  # window = padded size: one block
    ((4, 5, 6), (2, 3, 2), (1, 2, 1), (1, 1, 2), (0, 1, 1), (1, 0, 2)),
    ((3, 3, 3), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    ((3, 2, 3), (5, 4, 5), (1, 2, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),  # one block
    ((3, 4, 2, 3), (2, 2, 1, 2), (1, 2, 1, 1), (1, 1, 1, 2), (1, 0, 0, 1), (0, 1, 1, 1)),
    ((2, 3, 2, 2, 3), (2, 1, 2, 1, 2), (), (1, 2, 1, 1, 1), (0, 1, 0, 1, 0), (1, 0, 0, 0, 1)),
    ((2, 2, 3, 1, 2, 2), (1, 2, 2, 1, 2, 1), (1, 1, 2, 1, 1, 2), (), (1, 0, 0, 1, 0, 1), ()),
]


def _case_id(case):
    return "x".join(map(str, case[0])) + "_w" + "x".join(map(str, case[1]))


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_unfold_matches_loop_reference(case):
    spatial, w, s, d, a, e = case
    rng = np.random.default_rng(11)
    x = rng.integers(-1000, 1000, size=(2, 3, *spatial)).astype(np.int64)
    got = unfold(x, **attrs(w, s, d, a, e))
    want = unfold_reference(x, **attrs(w, s, d, a, e))
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_fold_matches_loop_reference(case):
    spatial, w, s, d, a, e = case
    k = len(w)
    s, d, a, e = filled(s, k, 1), filled(d, k, 1), filled(a, k, 0), filled(e, k, 0)
    rng = np.random.default_rng(12)
    y = rng.integers(-1000, 1000, size=fold_shape(2, 3, w, s, d, a, e, spatial))
    got = fold(y, **attrs(w, s, d, a, e), output_size=list(spatial))
    np.testing.assert_array_equal(got, fold_reference(y, **attrs(w, s, d, a, e),
                                                      output_size=list(spatial)))
    yf = rng.standard_normal(y.shape)
    assert_fold_matches(fold(yf, **attrs(w, s, d, a, e), output_size=list(spatial)),
                        fold_reference(yf, **attrs(w, s, d, a, e), output_size=list(spatial)))


@pytest.mark.parametrize("case", [c for c in CASES if any(c[4]) or any(c[5])], ids=_case_id)
def test_fold_drops_nan_and_inf_that_fall_into_padding(case):
    spatial, w, s, d, a, e = case
    k = len(w)
    s, d, a, e = filled(s, k, 1), filled(d, k, 1), filled(a, k, 0), filled(e, k, 0)
    blocks = _blocks(spatial, w, s, d, a, e)
    shape = fold_shape(1, 2, w, s, d, a, e, spatial)
    y = np.random.default_rng(19).standard_normal(shape).astype(np.float32)
    poisoned = y.copy()
    count = 0
    for kidx in range(math.prod(w)):
        kk = _unravel(kidx, w)
        for bidx in range(shape[2]):
            bb = _unravel(bidx, blocks)
            pos = [bb[i] * s[i] + kk[i] * d[i] - a[i] for i in range(k)]
            if not all(0 <= p < size for p, size in zip(pos, spatial)):
                y[:, kidx::math.prod(w), bidx] = 0
                poisoned[:, kidx::math.prod(w), bidx] = [np.nan, np.inf][count % 2]
                count += 1
    assert count
    got = fold(poisoned, **attrs(w, s, d, a, e), output_size=list(spatial))
    assert np.isfinite(got).all()
    np.testing.assert_array_equal(got, fold(y, **attrs(w, s, d, a, e), output_size=list(spatial)))
    assert_fold_matches(got, fold_reference(y, **attrs(w, s, d, a, e), output_size=list(spatial)))


def test_unfold_and_fold_of_non_contiguous_input():
    rng = np.random.default_rng(13)
    x = rng.integers(-50, 50, size=(3, 2, 9, 8)).astype(np.int32).transpose(1, 0, 3, 2)[..., ::2]
    assert not x.flags.c_contiguous
    for a in ((0, 0), (1, 2)):
        got = unfold(x, **attrs([2, 3], [1, 2], [2, 1], a, [0, 1]))
        want = unfold_reference(x, **attrs([2, 3], [1, 2], [2, 1], a, [0, 1]))
        np.testing.assert_array_equal(got, want)
    y = rng.integers(-50, 50, size=(20, 2, 9)).astype(np.int32).transpose(1, 0, 2)[:, ::2]
    assert not y.flags.c_contiguous
    got = fold(y, **attrs([2, 5]), output_size=[4, 7])
    np.testing.assert_array_equal(got, fold_reference(y, **attrs([2, 5]), output_size=[4, 7]))


def test_empty_batch_and_channels():
    assert unfold(np.zeros((0, 3, 4, 4), np.float32), **attrs([2, 2])).shape == (0, 12, 9)
    assert unfold(np.zeros((2, 0, 4), np.int8), **attrs([3])).shape == (2, 0, 2)
    assert fold(np.zeros((0, 4, 9), np.float32), **attrs([2, 2]), output_size=[4, 4]).shape == \
        (0, 1, 4, 4)
    assert fold(np.zeros((2, 0, 9), np.int16), **attrs([2, 2]), output_size=[4, 4]).shape == \
        (2, 0, 4, 4)


def test_unfold_of_empty_spatial_axis_reads_only_padding():
    x = np.zeros((1, 2, 0, 3), np.float32)
    got = unfold(x, **attrs([1, 2], a=[1, 0], e=[1, 0]))
    assert got.shape == (1, 4, 4)
    assert not got.any()


def test_fold_to_empty_spatial_axis_drops_everything():
    # the adjoint of unfolding a size-0 axis that only padding feeds
    got = fold(np.ones((1, 4, 4), np.float32), **attrs([1, 2], a=[1, 0], e=[1, 0]),
               output_size=[0, 3])
    assert got.shape == (1, 2, 0, 3) and got.dtype == np.float32


def test_fold_drops_values_in_padding():
    # window 2x1, start padding 2 rows, output 2x3: B = (3, 3). Tap row 0 reads padded rows
    # b - 2 (only block row 2 is inside); tap row 1 reads b - 1 (block rows 1 and 2).
    y = np.arange(1, 19, dtype=np.int64).reshape(1, 2, 9)
    got = fold(y, **attrs([2, 1], a=[2, 0]), output_size=[2, 3])
    want = np.array([[7 + 13, 8 + 14, 9 + 15], [16, 17, 18]])
    np.testing.assert_array_equal(got[0, 0], want)
    # every block of a tap in the padding: the whole tap vanishes
    got = fold(np.ones((1, 3, 1), np.float32), **attrs([3], a=[2], e=[0]), output_size=[1])
    np.testing.assert_array_equal(got, np.ones((1, 1, 1), np.float32))


# ----------------------------------------------------------------------------------------------
# Fold against onnxruntime's native Col2Im (opset 18): 2-D, and 3-D without dilation.

COL2IM_CASES = [
    ((6, 7), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    ((6, 7), (2, 3), (2, 1), (2, 1), (1, 0), (0, 2)),
    ((9, 8), (3, 2), (3, 4), (1, 2), (2, 1), (1, 3)),
    ((10, 10), (3, 3), (2, 2), (2, 3), (2, 2), (2, 2)),
    ((8, 8), (3, 3), (2, 2), (1, 1), (1, 1), (0, 0)),
    ((4, 5, 6), (2, 3, 2), (1, 2, 1), (1, 1, 1), (0, 1, 1), (1, 0, 2)),
    ((5, 5, 5), (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
]


@pytest.mark.parametrize("case", COL2IM_CASES, ids=_case_id)
def test_fold_matches_onnxruntime_col2im(case):
    spatial, w, s, d, a, e = case
    rng = np.random.default_rng(14)
    y = rng.standard_normal(fold_shape(2, 3, w, s, d, a, e, spatial)).astype(np.float32)
    (native,) = run_native("Col2Im", [y, np.array(spatial, np.int64), np.array(w, np.int64)],
                           opset=18, constant_inputs=(1, 2), pads=[*a, *e], strides=list(s),
                           dilations=list(d))
    got = fold(y, **attrs(w, s, d, a, e), output_size=list(spatial))
    assert got.shape == native.shape
    np.testing.assert_allclose(got, native, rtol=1e-5, atol=1e-5)


def test_fold_matches_col2im_at_benchmark_geometry():
    rng = np.random.default_rng(15)
    y = rng.standard_normal((2, 4 * 9, 14 * 14)).astype(np.float32)
    (native,) = run_native("Col2Im", [y, np.array([14, 14], np.int64),
                                      np.array([3, 3], np.int64)],
                           opset=18, constant_inputs=(1, 2), pads=[1, 1, 1, 1])
    got = fold(y, **attrs([3, 3], a=[1, 1], e=[1, 1]), output_size=[14, 14])
    np.testing.assert_allclose(got, native, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------------------
# Adjoint identity <Unfold(x), y> == <x, Fold(y)>.

def _inner(u, v, dtype):
    """Inner product: exact modulo 2**bits for integers, float64 for floats."""
    if np.dtype(dtype).kind in "iu":
        total = sum(int(p) * int(q) for p, q in zip(u.ravel().tolist(), v.ravel().tolist()))
        return _wrap(total, dtype)
    return float(np.dot(u.astype(np.float64).ravel(), v.astype(np.float64).ravel()))


@pytest.mark.parametrize("dtype", NUMERIC_TYPES, ids=lambda t: np.dtype(t).name)
def test_adjoint_identity(dtype):
    rng = np.random.default_rng(16)
    for spatial, w, s, d, a, e in CASES:
        k = len(w)
        s, d, a, e = filled(s, k, 1), filled(d, k, 1), filled(a, k, 0), filled(e, k, 0)
        x = random_array(rng, (1, 2, *spatial), dtype)
        y = random_array(rng, fold_shape(1, 2, w, s, d, a, e, spatial), dtype)
        ux = unfold(x, **attrs(w, s, d, a, e))
        fy = fold(y, **attrs(w, s, d, a, e), output_size=list(spatial))
        left, right = _inner(ux, y, dtype), _inner(x, fy, dtype)
        if np.dtype(dtype).kind in "iu":
            assert left == right  # exact, with the wrap-around of the element type
        else:
            scale = float(np.abs(ux.astype(np.float64)).ravel()
                          @ np.abs(y.astype(np.float64)).ravel())
            rel = 1e-2 if dtype == np.float16 else 1e-5
            assert abs(left - right) <= rel * scale + 1e-12


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
    (dict(dilations=[0, 1]), "dilations[0]", "0"),
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


# ----------------------------------------------------------------------------------------------
# Property tests against the loop references.

MAX_EXTRA = {1: 6, 2: 4, 3: 2, 4: 1, 5: 1, 6: 0}


@st.composite
def geometries(draw, max_k=4):
    """(spatial, window, strides, dilations, start, end) with every block count >= 1."""
    k = draw(st.integers(1, max_k))
    small = k >= 3
    w = [draw(st.integers(1, 2 if small else 3)) for _ in range(k)]
    s = [draw(st.integers(1, 2 if small else 4)) for _ in range(k)]
    d = [draw(st.integers(1, 1 if small else 2)) for _ in range(k)]
    a = [draw(st.integers(0, 1 if small else 2)) for _ in range(k)]
    e = [draw(st.integers(0, 1 if small else 2)) for _ in range(k)]
    spatial = []
    for i in range(k):
        least = max(0 if a[i] + e[i] else 1, d[i] * (w[i] - 1) + 1 - a[i] - e[i])
        spatial.append(draw(st.integers(least, least + MAX_EXTRA[k])))
    return tuple(spatial), tuple(w), tuple(s), tuple(d), tuple(a), tuple(e)


def _maybe_default(draw, values, default):
    return [] if all(v == default for v in values) and draw(st.booleans()) else list(values)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(geometry=geometries(), n=st.integers(1, 2), c=st.integers(1, 2),
       dtype=st.sampled_from([np.int64, np.float64, np.uint8, np.bool_]), data=st.data())
def test_unfold_property(geometry, n, c, dtype, data):
    spatial, w, s, d, a, e = geometry
    x = random_array(np.random.default_rng(len(spatial) * 7 + sum(spatial)), (n, c, *spatial),
                     dtype)
    kw = dict(window_sizes=list(w), strides=_maybe_default(data.draw, s, 1),
              dilations=_maybe_default(data.draw, d, 1),
              start_padding=_maybe_default(data.draw, a, 0),
              end_padding=_maybe_default(data.draw, e, 0))
    got = unfold(x, **kw)
    np.testing.assert_array_equal(got, unfold_reference(x, **attrs(w, s, d, a, e)))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(geometry=geometries(), n=st.integers(1, 2), c=st.integers(1, 2),
       dtype=st.sampled_from([np.int64, np.int8, np.float64, np.float32, np.float16]))
def test_fold_property(geometry, n, c, dtype):
    spatial, w, s, d, a, e = geometry
    y = random_array(np.random.default_rng(sum(spatial) + 3 * len(w)),
                     fold_shape(n, c, w, s, d, a, e, spatial), dtype)
    got = fold(y, **attrs(w, s, d, a, e), output_size=list(spatial))
    assert_fold_matches(got, fold_reference(y, **attrs(w, s, d, a, e), output_size=list(spatial)))


@settings(max_examples=80, deadline=None, derandomize=True)
@given(geometry=geometries(max_k=6))
def test_adjoint_property(geometry):
    spatial, w, s, d, a, e = geometry
    rng = np.random.default_rng(sum(spatial) + len(w))
    x = rng.integers(-(2 ** 20), 2 ** 20, size=(1, 2, *spatial))
    y = rng.integers(-(2 ** 20), 2 ** 20, size=fold_shape(1, 2, w, s, d, a, e, spatial))
    ux = unfold(x, **attrs(w, s, d, a, e))
    fy = fold(y, **attrs(w, s, d, a, e), output_size=list(spatial))
    assert int((ux * y).sum()) == int((x * fy).sum())


def test_fixed_cases_cover_the_edges():
    # the hand-written CASES hold the edges the strategy may rarely draw
    def blocks(case):
        spatial, w, s, d, a, e = case
        k = len(w)
        return _blocks(spatial, w, filled(s, k, 1), filled(d, k, 1), filled(a, k, 0),
                       filled(e, k, 0))
    all_blocks = [blocks(c) for c in CASES]
    assert (1,) in all_blocks and (1, 1) in all_blocks and (1, 1, 1) in all_blocks
    assert any(1 in c[0] for c in CASES)
    assert any(s > w for c in CASES for s, w in zip(c[2], c[1]))
    assert {len(c[1]) for c in CASES} == {1, 2, 3, 4, 5, 6}
