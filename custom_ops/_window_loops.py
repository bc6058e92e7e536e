"""The sliding-window geometry the compiled Fold and Unfold loops share
(:mod:`dml_onnx._kernels._fold_loops`, :mod:`dml_onnx._kernels._unfold_loops`), over the
tables of :func:`dml_onnx._kernels._window.loop_tables`: an image of ``size`` (flat,
row-major with ``pitch[d] = prod(size[d + 1:])``) and its block grid ``blocks``, where tap
``t`` of block ``b`` sits at ``p_d = b_d * strides[d] + offsets[t, d]``. Both loops walk a
tap's blocks one line along the last axis at a time, the lines in rows along the second-last
axis, the rows in groups over the leading axes.
"""

from __future__ import annotations

from ._jit import jit


@jit
def line_axes(blocks, strides, size, pitch):
    """``(last_blocks, last_stride, last_size, rows, row_stride, row_pitch, row_size)``: the
    last axis (a line of blocks) and the second-last (rows of lines; one row where k = 1)."""
    k = blocks.size
    if k == 1:
        return blocks[0], strides[0], size[0], 1, 1, 0, 1
    return (blocks[k - 1], strides[k - 1], size[k - 1], blocks[k - 2], strides[k - 2],
            pitch[k - 2], size[k - 2])


@jit
def tap_runs(offsets, t, last_blocks, last_stride, last_size, rows, row_stride, row_size):
    """``(shift, lo, hi, row_shift, first_row, stop_row)`` of tap ``t``: its offsets along
    the last two axes, the blocks ``lo:hi`` of a line and the rows ``first_row:stop_row``
    whose positions lie in the image (each range clipped to the grid, possibly empty)."""
    k = offsets.shape[1]
    shift = offsets[t, k - 1]
    lo = min(last_blocks, max(0, -(shift // last_stride)))  # positions >= 0 ...
    hi = max(lo, min(last_blocks, -((shift - last_size) // last_stride)))  # ... and < size
    row_shift = offsets[t, k - 2] if k > 1 else 0
    first_row = min(rows, max(0, -(row_shift // row_stride)))
    stop_row = max(first_row, min(rows, -((row_shift - row_size) // row_stride)))
    return shift, lo, hi, row_shift, first_row, stop_row


@jit
def leading_offset(offsets, t, strides, size, pitch, lead_index):
    """``(offset, inside)``: the flat offset of tap ``t``'s position along the leading axes
    (all but the last two) at the group ``lead_index``, and whether it lies in the image."""
    offset = 0
    for d in range(lead_index.size):
        p = lead_index[d] * strides[d] + offsets[t, d]
        if p < 0 or p >= size[d]:
            return 0, False
        offset += p * pitch[d]
    return offset, True


@jit
def next_group(lead_index, blocks):
    """Advance ``lead_index`` to the next group, row-major over the leading axes (no
    division)."""
    d = lead_index.size - 1
    while d >= 0:
        lead_index[d] += 1
        if lead_index[d] < blocks[d]:
            return
        lead_index[d] = 0
        d -= 1
