"""The compiled loops of Fold (specification section 6), by :data:`dml_onnx._kernels._jit.jit`.

One loop folds a plane (:func:`_fold_plane`); the drivers differ in where it sums a plane:
:func:`fold_planes` in ``Y``, in ``Y``'s element type; :func:`fold_half_planes`, for float16
bits, in a float32 line of the thread's, whose values it then writes as float16 bits.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._half_float_loops import narrowed, summand
from ._jit import jit, parallel_jit
from ._window_loops import leading_offset, line_axes, next_group, tap_runs


@jit
def _fold_plane(x, y, offsets, blocks, strides, output, pitch, lead_index):
    """``y = Fold(x)``: ``x [taps, L]``, its values added as
    :func:`~dml_onnx._kernels._half_float_loops.summand` reads them (float16 bits into a
    float32 ``y``), into ``y [prod(output)]`` flat, row-major with
    ``pitch[d] = prod(output[d + 1:])``; ``lead_index``: a scratch of ``max(k - 2, 0)``
    integers.

    Tap ``t`` (row-major over the window) and block ``b`` (row-major over the block grid
    ``blocks``): the value at ``(t, b)`` is added at the position
    ``p_d = b_d * strides[d] + offsets[t, d]`` when every ``p_d`` lies in ``[0, output[d])``
    (``offsets[t, d] = i_d * dilation_d - start_d``). Each output element is a sequential sum
    from 0 of its values in ascending block order, as DirectML sums (specification section 6):
    along an axis a larger tap meets a given position from a smaller block, so the taps go in
    descending row-major order, which is ascending row-major block order. Each tap's values go
    in block order: one run per line of the block grid along the last axis, the lines of each
    row range along the second-last axis clipped to the output beforehand.
    """
    last_blocks, last_stride, last_size, rows, row_stride, row_pitch, row_size = line_axes(
        blocks, strides, output, pitch)  # read once: stores into y may alias any array
    groups = x.shape[1] // last_blocks // rows  # combinations of the leading axes
    y[:] = 0
    for t in range(x.shape[0] - 1, -1, -1):  # ascending blocks (docstring)
        line = x[t]
        shift, lo, hi, row_shift, first_row, stop_row = tap_runs(
            offsets, t, last_blocks, last_stride, last_size, rows, row_stride, row_size)
        if lo == hi or first_row == stop_row:
            continue
        lead_index[:] = 0
        for group in range(groups):
            lead, inside = leading_offset(offsets, t, strides, output, pitch, lead_index)
            if inside:  # unsigned indices: no negative-index wrap, vector instructions
                base = lead + shift + lo * last_stride
                for row in range(first_row, stop_row):
                    start = base + (row * row_stride + row_shift) * row_pitch
                    source = (group * rows + row) * last_blocks + lo
                    if last_stride == 1:
                        for i in range(hi - lo):
                            y[np.uint64(start + i)] += summand(y, line[np.uint64(source + i)])
                    else:
                        for i in range(hi - lo):
                            y[np.uint64(start + i * last_stride)] += summand(
                                y, line[np.uint64(source + i)])
            next_group(lead_index, blocks)


@jit
def fold_planes(X, Y, offsets, blocks, strides, output, pitch, first, stop):
    """``Y[m] = Fold(X[m])`` for ``m`` in ``first:stop``, in ``Y``'s element type
    (:func:`_fold_plane`): ``X [M, taps, L]``, ``Y [M, prod(output)]``."""
    lead_index = np.zeros(max(blocks.size - 2, 0), np.int64)
    for m in range(first, stop):
        _fold_plane(X[m], Y[m], offsets, blocks, strides, output, pitch, lead_index)


@jit
def fold_half_planes(X, Y, offsets, blocks, strides, output, pitch, first, stop):
    """:func:`fold_planes` of float16 bits (uint16 ``X`` and ``Y``): each plane summed in a
    float32 line, then rounded once to float16."""
    lead_index = np.zeros(max(blocks.size - 2, 0), np.int64)
    sums = np.empty(Y.shape[1], np.float32)
    for m in range(first, stop):
        _fold_plane(X[m], sums, offsets, blocks, strides, output, pitch, lead_index)
        out = Y[m]
        for i in range(sums.size):  # indices from 0: no wraparound check, so it vectorises
            out[i] = narrowed(out, sums[i])


@parallel_jit
def fold_bands(cuts, X, Y, offsets, blocks, strides, output, pitch):
    """:func:`fold_planes` on the bands of planes ``cuts[g]:cuts[g + 1]``, one thread each."""
    for g in prange(cuts.size - 1):
        fold_planes(X, Y, offsets, blocks, strides, output, pitch, cuts[g], cuts[g + 1])


@parallel_jit
def fold_half_bands(cuts, X, Y, offsets, blocks, strides, output, pitch):
    """:func:`fold_half_planes` on the bands of planes ``cuts[g]:cuts[g + 1]``, one thread
    each."""
    for g in prange(cuts.size - 1):
        fold_half_planes(X, Y, offsets, blocks, strides, output, pitch, cuts[g], cuts[g + 1])
