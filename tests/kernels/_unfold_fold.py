"""What the Unfold and Fold kernel tests share: the element types, the block count and the
integer wrap-around written out, the attribute dictionaries, random data of any type, and the
comparison of Fold's sums (exact for integers, up to rounding for floats)."""

from __future__ import annotations

import math

import numpy as np

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
    """The kernel's Fold equals the reference's exactly: both sum each output element in
    ascending block order in the compute type (spec section 6), so floats agree bit for bit
    (NaN equal to NaN, zeros by sign)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if want.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
