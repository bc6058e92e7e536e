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
    check_work,
    compute_dtype,
    filled,
    memory_limit,
    padded_copy_slices,
    read_extent,
    sliding_block_counts,
    tap_ranges,
    work_limit,
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
    reading: tuple[range, ...]  # per axis, the taps that read X (the others read padding)


@lru_cache(maxsize=256)
def _plan(node: str, shape: tuple[int, ...], dtype: np.dtype,
          attributes: tuple[tuple[int, ...], ...], limits: tuple[int, int]) -> _Plan:
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
    reading = tap_ranges(g, spatial)
    # the window sums, axis after axis: the taps that read X, over what is left of the buffer
    check_work(OP, node, "window tap reads", math.prod(shape[:2]) * sum(
        len(reading[axis]) * math.prod(counts[:axis + 1]) * math.prod(extent[axis + 1:])
        for axis in range(g.k)))
    return _Plan(g, extent, *padded_copy_slices(g, spatial, extent), chunk, taps, reading)


def lp_pooling(X: np.ndarray, *, window_size: Sequence[int], strides: Sequence[int],
               start_padding: Sequence[int], end_padding: Sequence[int],
               dilations: Sequence[int], p: int, node: str = "") -> np.ndarray:
    """Lp-norm pooling of ``X [N, C, D1..Dk]``; empty list attributes mean their default."""
    attributes = _attributes(node, as_key(window_size), as_key(strides), as_key(start_padding),
                             as_key(end_padding), as_key(dilations), int(p))
    X = np.asarray(X)
    check_float_input(OP, node, "X", X)
    check_rank(OP, node, "X", X, (len(attributes[0]) + 2,))
    plan = _plan(node, X.shape, X.dtype, attributes, (memory_limit(), work_limit()))
    Y = np.empty((*X.shape[:2], *plan.geometry.blocks), X.dtype)
    if X.size == 0:  # all taps read padding: zeros (without looping over a huge window)
        Y.fill(0)
    elif Y.size:
        with np.errstate(over="ignore", under="ignore"):
            if plan.taps is None:
                _pool(X, Y, plan, int(p))
            else:
                _pool_small(X, Y, plan.taps, int(p))
            if not _in_range(X, plan, int(p)):
                _rescale(X, Y, plan, int(p))
    return Y


_RANGE_CHUNK = 1 << 16  # elements of X whose magnitudes are checked at once


def _in_range(X: np.ndarray, plan: _Plan, p: int) -> bool:
    """Whether every ``|x|^p`` and every window sum is a normal number of the compute type,
    so that the sums of powers are exact to rounding: no term overflows, and terms below the
    normal range (summed with less precision) weigh less than a rounding of the sum."""
    largest, smallest = 0.0, math.inf
    flat = X.reshape(-1)
    for lo in range(0, flat.size, _RANGE_CHUNK):  # small temporaries
        magnitude = np.abs(flat[lo:lo + _RANGE_CHUNK])
        chunk_largest = float(np.fmax.reduce(magnitude))  # NaN only when all are NaN
        if math.isinf(chunk_largest):
            return False
        largest = max(largest, chunk_largest) if chunk_largest == chunk_largest else largest
        smallest = min(smallest, float(np.min(magnitude, where=magnitude > 0,
                                              initial=np.inf)))
    info = np.finfo(compute_dtype(X.dtype))
    taps = math.log2(max(1, math.prod(len(r) for r in plan.reading)))
    fits = largest == 0 or p * math.log2(largest) + taps < math.log2(float(info.max)) - 1
    return fits and (smallest == math.inf or p * math.log2(smallest) >= _low(info, taps))


def _low(info: np.finfo, taps: float) -> float:
    """log2 of the smallest window sum of powers computed exactly to rounding: ``taps`` (log2)
    subnormal terms weigh less than one rounding of it."""
    return math.log2(float(info.tiny)) + taps - math.log2(float(info.eps))


_RESCALE_BUDGET = 1 << 20  # gathered tap values per batch of rescaled outputs


def _rescale(X: np.ndarray, Y: np.ndarray, plan: _Plan, p: int) -> None:
    """Recompute, scaled by its window's largest ``|x|`` (in float64), every output whose
    sum of powers may have overflowed or lost precision below the normal range:
    ``Y = m * (sum (|x| / m)^p)^(1/p)``, ``m`` the largest ``|x|`` (0 for m = 0, inf for an
    infinite m, NaN where the window holds NaN)."""
    g = plan.geometry
    info = np.finfo(compute_dtype(X.dtype))
    taps = [np.arange(r.start, r.stop) for r in plan.reading]
    low = 2.0 ** (_low(info, math.log2(max(1, math.prod(len(t) for t in taps)))) / p)
    flagged = np.flatnonzero(~np.isnan(Y) & (np.isinf(Y) | np.less(Y, low)))
    spatial = X.shape[2:]
    planes = X.reshape(math.prod(X.shape[:2]), math.prod(spatial))
    batch = max(1, _RESCALE_BUDGET // max(1, math.prod(len(t) for t in taps)))
    for lo in range(0, flagged.size, batch):
        outputs = flagged[lo:lo + batch]
        n, c, *blocks = np.unravel_index(outputs, Y.shape)
        flat, inside = np.zeros((outputs.size,) + (1,) * g.k, np.int64), True
        for axis, (b, t) in enumerate(zip(blocks, taps)):
            shape = [1] * (1 + g.k)
            shape[1 + axis] = t.size
            position = (b.reshape(-1, *[1] * g.k) * g.strides[axis]
                        + (t * g.dilations[axis] - g.start_padding[axis]).reshape(shape))
            inside = inside & (position >= 0) & (position < spatial[axis])
            flat = flat * spatial[axis] + position
        plane = (n * X.shape[1] + c).reshape(-1, *[1] * g.k)
        values = np.abs(planes[plane, np.where(inside, flat, 0)].astype(np.float64))
        values[~inside] = 0
        values = values.reshape(outputs.size, -1)
        largest = values.max(axis=1, keepdims=True, initial=0.0)  # no tap reads X: 0
        with np.errstate(invalid="ignore", divide="ignore"):
            sums = np.power(values / largest, float(p)).sum(axis=1)
            result = largest[:, 0] * np.power(sums, 1.0 / p)
        result[largest[:, 0] == 0] = 0
        result[np.isinf(largest[:, 0])] = np.inf
        result[np.isnan(largest[:, 0])] = np.nan
        Y.flat[outputs] = result


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
            acc = _window_sum(acc, out, 1 + axis, plan.reading[axis], g.strides[axis],
                              g.dilations[axis])
        _root(acc, p, target)


def _window_sum(values: np.ndarray, out: np.ndarray, axis: int, taps: range, stride: int,
                dilation: int) -> np.ndarray:
    """``out`` = the sum of the dilated ``taps`` along ``axis`` of ``values``, in tap order
    (the taps left out read zeros only)."""
    count = out.shape[axis]
    index: list[slice] = [slice(None)] * values.ndim
    if not taps:
        out.fill(0)
    for tap in taps:
        first = tap * dilation
        index[axis] = slice(first, first + (count - 1) * stride + 1, stride)
        if tap != taps.start:
            np.add(out, values[tuple(index)], out=out)
        else:
            np.copyto(out, values[tuple(index)])
    return out
