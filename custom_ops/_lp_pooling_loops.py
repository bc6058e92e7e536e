"""The compiled loops of LpPooling (specification section 4), by :data:`dml_onnx._kernels._jit.jit`.

Planes are ``X [P, D0, D1, D2]`` (inputs of one or two spatial axes get leading axes of size 1,
with window 1, stride 1, dilation 1, no padding) and ``Y [P, O0, O1, O2]``, both in the compute
type, or float16 bits (uint16: read as float32 exactly, written rounded once). The window sum
is separable: ``|x|^p`` summed along axis 0, then axis 1, then axis 2, each over the taps in
order; a tap that reads padding adds nothing (a zero), and the taps that read padding only are
left out. The innermost loops run over contiguous rows.
"""

from __future__ import annotations

import numpy as np
from numba import prange, types
from numba.extending import overload

from ._half_float_loops import narrowed, widened
from ._jit import jit, parallel_jit


@jit
def pool_planes(X, start_plane, stop_plane, first_tap, stop_tap, strides, dilations, start, p, Y,
                unusual):
    """``Y[q] = (window sums of |X[q]|^p)^(1/p)`` for the planes ``start_plane:stop_plane``,
    over the taps ``first_tap:stop_tap`` of each axis (the others read padding only); for
    ``p > 2`` the sums alone (the caller takes the root with numpy's vectorised power), computed
    in ``Y``'s element type, or in float32 where ``Y`` is float16 bits (``p <= 2``), written
    rounded once. ``unusual[q]`` is set when a nonzero ``|x|^p`` of the plane is below the
    normal range or infinite, or a window sum is infinite: there the sums are not exact to
    rounding."""
    _, d0, d1, d2 = X.shape
    _, o0, o1, o2 = Y.shape
    power = np.empty((d0, d1, d2), _compute_type(Y))
    along0 = np.empty((o0, d1, d2), power.dtype)
    along1 = np.empty((o0, o1, d2), power.dtype)
    sums = np.empty(o2, power.dtype)
    tiny = power.dtype.type(np.finfo(power.dtype).tiny)
    for q in range(start_plane, stop_plane):
        flag = False
        for i in range(d0):
            for j in range(d1):
                flag |= _powers(X[q, i, j], p, tiny, power[i, j])
        along0[:] = 0
        for b0 in range(o0):
            for t in range(first_tap[0], stop_tap[0]):
                i = b0 * strides[0] + t * dilations[0] - start[0]
                if 0 <= i < d0:
                    for j in range(d1):
                        _add(along0[b0, j], 0, power[i, j], 0, 1, d2)
        along1[:] = 0
        for b0 in range(o0):
            for b1 in range(o1):
                for t in range(first_tap[1], stop_tap[1]):
                    j = b1 * strides[1] + t * dilations[1] - start[1]
                    if 0 <= j < d1:
                        _add(along1[b0, b1], 0, along0[b0, j], 0, 1, d2)
        for b0 in range(o0):
            for b1 in range(o1):
                sums[:] = 0
                for t in range(first_tap[2], stop_tap[2]):
                    offset = t * dilations[2] - start[2]  # reads b2 * stride + offset
                    low = max(0, -(offset // strides[2]))
                    high = min(o2, (d2 - 1 - offset) // strides[2] + 1) if offset < d2 else 0
                    if low < high:
                        _add(sums, low, along1[b0, b1], low * strides[2] + offset, strides[2],
                             high - low)
                flag |= _roots(sums, p, Y[q, b0, b1])
        unusual[q] = flag


@parallel_jit
def pool_bands(cuts, X, first_tap, stop_tap, strides, dilations, start, p, Y, unusual):
    """:func:`pool_planes` on the bands of planes ``cuts[g]:cuts[g + 1]``, one thread each."""
    for g in prange(cuts.size - 1):
        pool_planes(X, cuts[g], cuts[g + 1], first_tap, stop_tap, strides, dilations, start, p,
                    Y, unusual)


@jit
def _powers(values, p, tiny, power):
    """``power = |values|^p`` (one row; float16 bits read as float32,
    :func:`~dml_onnx._kernels._half_float_loops.widened`); whether a nonzero one is below
    ``tiny`` or infinite."""
    if p == 1:
        for e in range(values.size):
            power[e] = abs(widened(power, values[e]))
    elif p == 2:
        for e in range(values.size):
            value = abs(widened(power, values[e]))
            power[e] = value * value
    elif power.itemsize == 4:  # in float64 by squaring, rounded once: exact and fast
        for e in range(values.size):
            power[e] = np.float64(abs(widened(power, values[e]))) ** p
    else:
        exponent = power.dtype.type(p)
        for e in range(values.size):
            power[e] = abs(widened(power, values[e])) ** exponent
    unusual = False
    for e in range(values.size):
        unusual |= (power[e] < tiny and widened(power, values[e]) != 0) or power[e] == np.inf
    return unusual


@jit
def _add(target, target_start, source, source_start, source_step, length):
    """``target[target_start + e] += source[source_start + e * source_step]``."""
    out = target[target_start:target_start + length]
    if source_step == 1:
        read = source[source_start:source_start + length]
        for e in range(length):
            out[e] += read[e]
    else:
        for e in range(length):
            out[e] += source[source_start + e * source_step]


@jit
def _roots(sums, p, out):
    """``out = sums^(1/p)`` for ``p <= 2``, else ``out = sums``, each value as ``out`` stores it
    (:func:`~dml_onnx._kernels._half_float_loops.narrowed`: float16 bits, rounded once);
    whether a sum is infinite."""
    if p == 2:
        for e in range(sums.size):
            out[e] = narrowed(out, np.sqrt(sums[e]))
    else:
        for e in range(sums.size):
            out[e] = narrowed(out, sums[e])
    unusual = False
    for e in range(sums.size):
        unusual |= sums[e] == np.inf
    return unusual


def _compute_type(Y):
    """The element type the loops compute ``Y`` in (compiled through :func:`_compute_type_of`):
    ``Y``'s own, float32 for float16 bits."""


@overload(_compute_type, inline="always")
def _compute_type_of(Y):
    if Y.dtype == types.uint16:
        return lambda Y: np.dtype(np.float32)
    return lambda Y: Y.dtype


@jit
def halves_run(floats, out, start, stop):
    """``out[start:stop]`` = the float16 bits nearest ``floats[start:stop]`` (flat float32)."""
    source, target = floats[start:stop], out[start:stop]
    for i in range(source.size):  # indices from 0: no wraparound check, so it vectorises
        target[i] = narrowed(target, source[i])


@parallel_jit
def halves_bands(cuts, floats, out):
    """:func:`halves_run` on the runs ``cuts[g]:cuts[g + 1]``, one thread each."""
    for g in prange(cuts.size - 1):
        halves_run(floats, out, cuts[g], cuts[g + 1])
