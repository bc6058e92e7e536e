"""The compiled loops of Unfold (specification section 6), by :data:`dml_onnx._kernels._jit.jit`:
the adjoint of :mod:`dml_onnx._kernels._fold_loops`, a copy of each block's window values, over
the geometry of :mod:`dml_onnx._kernels._window_loops`.

Values are copied as bits (the kernel passes unsigned integers of the element's width), so one
loop serves every element type of a width.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._jit import jit, parallel_jit
from ._window_loops import leading_offset, line_axes, next_group, tap_runs


@jit
def _unfold_plane(x, y, offsets, blocks, strides, size, pitch, lead_index):
    """``y = Unfold(x)``: ``x [prod(size)]`` a plane flat (row-major, ``pitch[d] =
    prod(size[d + 1:])``), ``y [taps, L]``; ``lead_index``: a scratch of ``max(k - 2, 0)``
    integers.

    Tap ``t`` (row-major over the window) and block ``b`` (row-major over the block grid
    ``blocks``): ``y[t, b]`` is the value at ``p_d = b_d * strides[d] + offsets[t, d]`` where
    every ``p_d`` lies in ``[0, size[d])``, else 0 (padding). Each tap's values go one line of
    the block grid along the last axis at a time, its in-bounds run found beforehand; the
    lines of rows that read only padding are zeroed as one run."""
    last_blocks, last_stride, last_size, rows, row_stride, row_pitch, row_size = line_axes(
        blocks, strides, size, pitch)
    groups = y.shape[1] // last_blocks // rows  # combinations of the leading axes
    for t in range(y.shape[0]):
        line = y[t]
        shift, lo, hi, row_shift, first_row, stop_row = tap_runs(
            offsets, t, last_blocks, last_stride, last_size, rows, row_stride, row_size)
        lead_index[:] = 0
        for group in range(groups):
            lead, inside = leading_offset(offsets, t, strides, size, pitch, lead_index)
            base = lead + shift + lo * last_stride
            lines = group * rows * last_blocks  # this group's first line of blocks
            first = first_row if inside and hi > lo else 0  # its rows that read the image
            stop = stop_row if inside and hi > lo else 0
            for i in range(lines, lines + first * last_blocks):  # the others read padding
                line[np.uint64(i)] = 0
            for i in range(lines + stop * last_blocks, lines + rows * last_blocks):
                line[np.uint64(i)] = 0
            for row in range(first, stop):
                target = lines + row * last_blocks
                for i in range(lo):
                    line[np.uint64(target + i)] = 0
                start = base + (row * row_stride + row_shift) * row_pitch
                into = target + lo
                if last_stride == 1:
                    for i in range(hi - lo):
                        line[np.uint64(into + i)] = x[np.uint64(start + i)]
                else:
                    for i in range(hi - lo):
                        line[np.uint64(into + i)] = x[np.uint64(start + i * last_stride)]
                for i in range(hi, last_blocks):
                    line[np.uint64(target + i)] = 0
            next_group(lead_index, blocks)


@jit
def unfold_planes(X, Y, offsets, blocks, strides, size, pitch, first, stop):
    """``Y[m] = Unfold(X[m])`` for ``m`` in ``first:stop`` (:func:`_unfold_plane`):
    ``X [M, prod(size)]``, ``Y [M, taps, L]``."""
    lead_index = np.zeros(max(blocks.size - 2, 0), np.int64)
    for m in range(first, stop):
        _unfold_plane(X[m], Y[m], offsets, blocks, strides, size, pitch, lead_index)


@parallel_jit
def unfold_bands(cuts, X, Y, offsets, blocks, strides, size, pitch):
    """:func:`unfold_planes` on the bands of planes ``cuts[g]:cuts[g + 1]``, one thread each."""
    for g in prange(cuts.size - 1):
        unfold_planes(X, Y, offsets, blocks, strides, size, pitch, cuts[g], cuts[g + 1])
