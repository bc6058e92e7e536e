"""LpPooling: DML_LP_POOLING(1)_OPERATOR_DESC as a numpy kernel (specification section 4).

``X`` is ``[N, C, D1, ..., Dk]`` with k = 1, 2 or 3; ``Y`` is ``[N, C, O1, ..., Ok]`` with
``O_d = (D_d + start_d + end_d - dilation_d * (window_d - 1) - 1) // stride_d + 1`` and

    Y[n, c, o] = (sum over window taps i of |X[n, c, o * stride - start + i * dilation]|^p)^(1/p)

Taps in the zero padding add nothing. float16 is computed in float32 and rounded once.

Implementation: the compiled loops of :mod:`dml_onnx._kernels._lp_pooling_loops`, planes ``N * C``
split over threads, each plane summed axis after axis. Where a nonzero ``|x|^p`` falls below the
normal range of the compute type or a term or sum overflows, the outputs concerned are
recomputed scaled by their window's largest ``|x|`` (:func:`_rescale`), so that no sum
overflows or loses precision.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from ._buffers import empty
from ._checks import (
    check_float_input,
    check_int,
    check_rank,
    compute_dtype,
    takes_attributes,
)
from ._threads import bands, compiled, run_bands
from ._window import (
    WindowGeometry,
    as_key,
    check_window_attributes,
    filled,
    sliding_block_counts,
    tap_ranges,
)
from .limits import check_memory, check_work, memory_limit, work_limit

OP = "LpPooling"


@lru_cache(maxsize=256)
def _attributes(node: str, window_size: tuple[int, ...], strides: tuple[int, ...],
                start_padding: tuple[int, ...], end_padding: tuple[int, ...],
                dilations: tuple[int, ...], p: int) -> tuple[tuple[int, ...], ...]:
    """Checked (cached; invalid ones raise every time): window, strides, dilations, start,
    end, with defaults filled in."""
    check_window_attributes(OP, node, window=("window_size", window_size), strides=strides,
                            dilations=dilations, start_padding=start_padding,
                            end_padding=end_padding, spatial_dims=(1, 2, 3))
    check_int(OP, node, "p", p, minimum=1)
    k = len(window_size)
    return (tuple(int(v) for v in window_size), filled(strides, k, 1), filled(dilations, k, 1),
            filled(start_padding, k, 0), filled(end_padding, k, 0))


class _Plan(NamedTuple):
    geometry: WindowGeometry
    reading: tuple[range, ...]  # per axis, the taps that read X (the others read padding)
    loops: tuple[np.ndarray, ...]  # first and stop taps, strides, dilations, start, over 3 axes
    planes: tuple[int, ...]  # one plane [D0, D1, D2] with leading axes of size 1
    taps: int  # the taps that read X, summed over the axes (an output's work, for bands)


@lru_cache(maxsize=256)
def _plan(node: str, shape: tuple[int, ...], dtype: np.dtype,
          attributes: tuple[tuple[int, ...], ...], limits: tuple[int, int]) -> _Plan:
    """Per input shape and type (cached): block counts, the taps that read X, memory, work."""
    window, strides, dilations, start, end = attributes
    spatial = shape[2:]
    counts = sliding_block_counts(OP, node, spatial, window, strides, dilations, start, end)
    g = WindowGeometry.of(window, strides, dilations, start, end, counts)
    check_memory(OP, node, "output Y", (*shape[:2], *counts), dtype)
    lead = 3 - g.k  # axes of size 1 in front
    plane, blocks = (1,) * lead + tuple(spatial), (1,) * lead + tuple(counts)
    # per thread: |x|^p of one plane, its sums along axis 0, then along axes 0 and 1
    for temporary in (plane, (blocks[0], *plane[1:]), (*blocks[:2], plane[2])):
        check_memory(OP, node, "temporary window sums of one plane", temporary,
                     compute_dtype(dtype))
    reading = tap_ranges(g, spatial)
    # the window sums, axis after axis: the taps that read X, over what is left of the plane
    check_work(OP, node, "window tap reads", math.prod(shape[:2]) * sum(
        len(reading[axis]) * math.prod(counts[:axis + 1]) * math.prod(spatial[axis + 1:])
        for axis in range(g.k)))
    pad = (0,) * lead
    loops = (np.array(pad + tuple(r.start for r in reading)),
             np.array((1,) * lead + tuple(r.stop for r in reading)),
             np.array((1,) * lead + g.window.strides),
             np.array((1,) * lead + g.window.dilations), np.array(pad + g.window.start))
    return _Plan(g, reading, loops, plane, sum(len(r) for r in reading))


@takes_attributes(OP)
def prepare(*, node: str = "", window_size: Sequence[int], strides: Sequence[int],
            start_padding: Sequence[int], end_padding: Sequence[int],
            dilations: Sequence[int], p: int) -> Callable[[np.ndarray], np.ndarray]:
    """:func:`lp_pooling` for one node, its attributes checked once: ``run(X) -> Y``; empty
    list attributes mean their default."""
    attributes = _attributes(node, as_key(window_size), as_key(strides), as_key(start_padding),
                             as_key(end_padding), as_key(dilations), int(p))
    return functools.partial(_run, node, attributes, int(p))


def lp_pooling(X: np.ndarray, *, node: str = "", **attributes: Any) -> np.ndarray:
    """Lp-norm pooling of ``X [N, C, D1..Dk]`` (attributes: :func:`prepare`)."""
    return prepare(node=node, **attributes)(X)


def _run(node: str, attributes: tuple[tuple[int, ...], ...], p: int, X: np.ndarray
         ) -> np.ndarray:
    X = np.asarray(X)
    check_float_input(OP, node, "X", X)
    check_rank(OP, node, "X", X, (len(attributes[0]) + 2,))
    plan = _plan(node, X.shape, X.dtype, attributes, (memory_limit(), work_limit()))
    Y = empty((*X.shape[:2], *plan.geometry.blocks), X.dtype)
    if X.size == 0:  # all taps read padding: zeros (without looping over a huge window)
        Y.fill(0)
    elif Y.size:
        _pool(X, Y, plan, p)
    return Y


def _pool(X: np.ndarray, Y: np.ndarray, plan: _Plan, p: int) -> None:
    """``Y`` from ``X``, planes split over threads, computed in the compute type and rounded
    once; then the outputs whose sums left the normal range, rescaled."""
    loops = compiled("_lp_pooling_loops")

    count = math.prod(X.shape[:2])
    planes = np.ascontiguousarray(X).reshape(count, *plan.planes)
    computed = Y
    if X.dtype == np.float16:  # its bits, read as float32 and written rounded once
        planes = planes.view(np.uint16)
        # p > 2: float32 sums for numpy's power, then rounded once over the threads
        computed = Y.view(np.uint16) if p <= 2 else empty(Y.shape, np.float32)
    out = computed.reshape(count, *((1,) * (3 - plan.geometry.k)), *Y.shape[2:])
    unusual = np.zeros(count, bool)
    work = Y.size * plan.taps + X.size

    run_bands(bands(count, work),
              lambda first, stop: loops.pool_planes(planes, first, stop, *plan.loops, p, out,
                                                    unusual),
              lambda cuts: loops.pool_bands(cuts, planes, *plan.loops, p, out, unusual))
    if p > 2:  # numpy's vectorised power: several times faster than a compiled scalar one
        with np.errstate(over="ignore", under="ignore"):
            np.power(out, out.dtype.type(1.0 / p), out=out)
        if computed.dtype != Y.dtype:
            floats, halves = computed.reshape(-1), Y.view(np.uint16).reshape(-1)
            run_bands(bands(Y.size, Y.size),
                      lambda start, stop: loops.halves_run(floats, halves, start, stop),
                      lambda cuts: loops.halves_bands(cuts, floats, halves))
    if np.count_nonzero(unusual):  # (a tiny call's any() took twice as long)
        with np.errstate(over="ignore", under="ignore"):
            _rescale(X, Y, plan, p)


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
            position = (b.reshape(-1, *[1] * g.k) * g.window.strides[axis]
                        + (t * g.window.dilations[axis] - g.window.start[axis]).reshape(shape))
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
