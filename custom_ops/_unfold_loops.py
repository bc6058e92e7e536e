"""The compiled loops of Unfold (specification section 6), by :data:`dml_onnx._kernels._jit.jit`:
the adjoint of :mod:`dml_onnx._kernels._fold_loops`, a copy of each block's window values.

Values are copied as bits (the kernel passes unsigned integers of the element's width), so one
loop serves every element type of a width.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._jit import jit, parallel_jit


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
    k = blocks.size
    last_blocks, last_stride, last_size = blocks[k - 1], strides[k - 1], size[k - 1]
    rows, row_stride, row_pitch, row_size = 1, 1, 0, 1
    if k > 1:
        rows, row_stride, row_pitch, row_size = (blocks[k - 2], strides[k - 2], pitch[k - 2],
                                                 size[k - 2])
    groups = y.shape[1] // last_blocks // rows  # combinations of the leading axes
    for t in range(y.shape[0]):
        line = y[t]
        shift = offsets[t, k - 1]
        lo = min(last_blocks, max(0, -(shift // last_stride)))  # blocks whose position >= 0
        hi = max(lo, min(last_blocks, -((shift - last_size) // last_stride)))  # ... < size
        row_shift = offsets[t, k - 2] if k > 1 else 0
        first_row = max(0, -(row_shift // row_stride))
        stop_row = min(rows, -((row_shift - row_size) // row_stride))
        lead_index[:] = 0
        for group in range(groups):
            base, inside = shift + lo * last_stride, hi > lo
            for d in range(k - 2):
                p = lead_index[d] * strides[d] + offsets[t, d]
                if p < 0 or p >= size[d]:
                    inside = False
                    break
                base += p * pitch[d]
            lines = group * rows * last_blocks  # this group's first line of blocks
            first = min(first_row, rows) if inside else 0  # its rows that read the image
            stop = max(first, min(stop_row, rows)) if inside else 0
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
            d = k - 3  # the next group: row-major over the leading axes, no division
            while d >= 0:
                lead_index[d] += 1
                if lead_index[d] < blocks[d]:
                    break
                lead_index[d] = 0
                d -= 1


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
