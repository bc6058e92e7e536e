"""LpPooling: DML_LP_POOLING(1)_OPERATOR_DESC as a numpy kernel (specification section 4).

``X`` is ``[N, C, D1, ..., Dk]`` with k = 1, 2 or 3; ``Y`` is ``[N, C, O1, ..., Ok]`` with
``O_d = (D_d + start_d + end_d - dilation_d * (window_d - 1) - 1) // stride_d + 1`` and

    Y[n, c, o] = (sum over window taps i of |X[n, c, o * stride - start + i * dilation]|^p)^(1/p)

Taps in the zero padding add nothing. float16 is computed in float32 and rounded once.

The window sum is separable: one spatial axis after the other, each a sum of strided slices
(taps in order). The planes ``N * C`` go through in chunks of about :data:`CHUNK_BYTES`, so that
the padded ``|X|^p`` and the partial sums of a chunk stay in cache and the temporaries stay
small; the zero-padded buffer is filled once per chunk (its border stays zero). Inputs whose
taps number at most :data:`~custom_ops.unfold.SMALL` are instead gathered tap by tap with
Unfold's cached positions and summed by ``np.add.accumulate`` over one tap axis after the
other: the same sums in the same order, in a handful of numpy calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from custom_ops._common import (
    WindowGeometry,
    as_key,
    check_float_input,
    check_int,
    check_memory,
    check_rank,
    check_window_attributes,
    compute_dtype,
    filled,
    memory_limit,
    padded_copy_slices,
    read_extent,
    sliding_block_counts,
)
from custom_ops.unfold import SMALL, block_positions

OP = "LpPooling"
CHUNK_BYTES = 1 << 18
"""Padded ``|X|^p`` of the planes computed together (at least one plane)."""


def check_attributes(*, node: str, window_size: Sequence[int], strides: Sequence[int],
                     start_padding: Sequence[int], end_padding: Sequence[int],
                     dilations: Sequence[int], p: int) -> None:
    check_window_attributes(OP, node, window=("window_size", window_size), strides=strides,
                            dilations=dilations, start_padding=start_padding,
                            end_padding=end_padding, spatial_dims=(1, 2, 3))
    check_int(OP, node, "p", p, minimum=1)


@lru_cache(maxsize=256)
def _attributes(node: str, window_size: tuple[int, ...], strides: tuple[int, ...],
                start_padding: tuple[int, ...], end_padding: tuple[int, ...],
                dilations: tuple[int, ...], p: int) -> tuple[tuple[int, ...], ...]:
    """Checked (cached; invalid ones raise every time): window, strides, dilations, start,
    end, with defaults filled in."""
    check_attributes(node=node, window_size=window_size, strides=strides,
                     start_padding=start_padding, end_padding=end_padding, dilations=dilations,
                     p=p)
    k = len(window_size)
    return (tuple(int(v) for v in window_size), filled(strides, k, 1), filled(dilations, k, 1),
            filled(start_padding, k, 0), filled(end_padding, k, 0))


class _Plan(NamedTuple):
    geometry: WindowGeometry
    extent: tuple[int, ...]  # padded input the windows read, per spatial axis
    inside: tuple[slice, ...]  # where the read input goes in the padded buffer
    kept: tuple[slice, ...]  # the input it reads
    chunk: int  # planes per chunk
    taps: np.ndarray | None  # small inputs: [N*C, *window, *blocks] positions in X, X.size: 0


@lru_cache(maxsize=256)
def _plan(node: str, shape: tuple[int, ...], dtype: np.dtype,
          attributes: tuple[tuple[int, ...], ...], limit: int) -> _Plan:
    """Per input shape and type (cached): block counts, padded layout, chunking, memory."""
    window, strides, dilations, start, end = attributes
    spatial = shape[2:]
    counts = sliding_block_counts(OP, node, spatial, window, strides, dilations, start, end)
    g = WindowGeometry.of(window, strides, dilations, start, end, counts)
    extent = read_extent(g, spatial)[0]
    plane = math.prod(extent) * compute_dtype(dtype).itemsize
    chunk = max(1, min(math.prod(shape[:2]), CHUNK_BYTES // max(plane, 1)))
    check_memory(OP, node, "output Y", (*shape[:2], *counts), dtype)
    check_memory(OP, node, "temporary padded |X|^p", (chunk, *extent), compute_dtype(dtype))
    taps = None
    if math.prod(shape[:2]) * math.prod(window) * math.prod(counts) <= SMALL:
        taps = block_positions(shape, g).reshape(-1, *window, *counts)
    return _Plan(g, extent, *padded_copy_slices(g, spatial, extent), chunk, taps)


def lp_pooling(X: np.ndarray, *, window_size: Sequence[int], strides: Sequence[int],
               start_padding: Sequence[int], end_padding: Sequence[int],
               dilations: Sequence[int], p: int, node: str = "") -> np.ndarray:
    """Lp-norm pooling of ``X [N, C, D1..Dk]``; empty list attributes mean their default."""
    attributes = _attributes(node, as_key(window_size), as_key(strides), as_key(start_padding),
                             as_key(end_padding), as_key(dilations), int(p))
    X = np.asarray(X)
    check_float_input(OP, node, "X", X)
    check_rank(OP, node, "X", X, (len(attributes[0]) + 2,))
    plan = _plan(node, X.shape, X.dtype, attributes, memory_limit())
    Y = np.empty((*X.shape[:2], *plan.geometry.blocks), X.dtype)
    if X.size == 0:  # all taps read padding: zeros (without looping over a huge window)
        Y.fill(0)
    elif Y.size:
        with np.errstate(over="ignore"):  # |x|^p beyond the range is inf, as the formula says
            if plan.taps is None:
                _pool(X, Y, plan, int(p))
            else:
                _pool_small(X, Y, plan.taps, int(p))
    return Y


def _pool_small(X: np.ndarray, Y: np.ndarray, taps: np.ndarray, p: int) -> None:
    """``Y`` by one gather of ``|X|^p`` (a zero appended for the padding) at every tap."""
    dtype = compute_dtype(X.dtype)
    values = np.empty(X.size + 1, dtype)
    magnitude = values[:-1].reshape(X.shape)
    np.abs(X, out=magnitude)
    values[-1] = 0
    _power(magnitude, p)
    summed = values.take(taps)  # [planes, *window, *blocks]
    for _ in range(taps.ndim // 2):  # tap axes in order, each summed tap after tap
        summed = np.add.accumulate(summed, axis=1)[:, -1]  # (reduce may add pairwise)
    _root(summed.reshape(Y.shape), p, Y)


def _power(values: np.ndarray, p: int) -> None:
    """``values **= p`` in place (|x| times itself for p = 2, like the formula)."""
    if p == 2:
        np.multiply(values, values, out=values)
    elif p != 1:
        np.power(values, values.dtype.type(p), out=values)


def _root(sums: np.ndarray, p: int, out: np.ndarray) -> None:
    """``out = sums ** (1 / p)`` (rounded once to ``out``'s type)."""
    if p == 1:
        if sums is not out:
            np.copyto(out, sums, casting="same_kind")
    elif p == 2:
        np.sqrt(sums, out=out)
    else:
        np.power(sums, sums.dtype.type(1.0 / p), out=out)


def _pool(X: np.ndarray, Y: np.ndarray, plan: _Plan, p: int) -> None:
    """``Y`` from ``X`` chunk by chunk of planes (both ``[N, C, ...]``)."""
    g, dtype = plan.geometry, compute_dtype(X.dtype)
    planes = math.prod(X.shape[:2])
    X, Y = X.reshape(planes, *X.shape[2:]), Y.reshape(planes, *Y.shape[2:])
    padded = np.zeros((plan.chunk, *plan.extent), dtype)
    # partial sums: axis 0 reduced, then axes 0 and 1, ...; the last goes into Y itself when
    # Y has the compute type
    partial = [np.empty((plan.chunk, *g.blocks[:axis + 1], *plan.extent[axis + 1:]), dtype)
               for axis in range(g.k - (Y.dtype == dtype))]
    inside = (slice(None), *plan.inside)
    for lo in range(0, planes, plan.chunk):
        hi = min(planes, lo + plan.chunk)
        magnitude = padded[:hi - lo][inside]
        np.abs(X[(slice(lo, hi), *plan.kept)], out=magnitude)
        _power(magnitude, p)
        acc, target = padded[:hi - lo], Y[lo:hi]
        for axis in range(g.k):
            out = partial[axis][:hi - lo] if axis < len(partial) else target
            acc = _window_sum(acc, out, 1 + axis, g.window[axis], g.strides[axis],
                              g.dilations[axis])
        _root(acc, p, target)


def _window_sum(values: np.ndarray, out: np.ndarray, axis: int, window: int, stride: int,
                dilation: int) -> np.ndarray:
    """``out`` = the sum of ``window`` dilated taps along ``axis`` of ``values``, in tap order."""
    count = out.shape[axis]
    index: list[slice] = [slice(None)] * values.ndim
    for tap in range(window):
        first = tap * dilation
        index[axis] = slice(first, first + (count - 1) * stride + 1, stride)
        if tap:
            np.add(out, values[tuple(index)], out=out)
        else:
            np.copyto(out, values[tuple(index)])
    return out
