"""What the sliding-window references (LpPooling, Unfold, Fold) share, from the spec formulas:
the block counts and the position each tap reads (the window attributes with their defaults
are :class:`dml_onnx._kernels._window.Window`).

Spatial positions are tuples of k ints. Block ``b`` (``b_1..b_k``) and window tap ``i``
(``i_1..i_k``) read the padded input at ``b * stride + i * dilation``, that is the unpadded
input at ``b * stride + i * dilation - start``; positions outside ``[0, D)`` are padding.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from dml_onnx._kernels._window import Window


def grid(sizes: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Every index of a grid of ``sizes``, in row-major order (the i-th index has flat index i)."""
    return itertools.product(*(range(size) for size in sizes))


def block_counts(window: Window, spatial: Sequence[int]) -> tuple[int, ...]:
    """``B_d = (D_d + start_d + end_d - dilation_d * (window_d - 1) - 1) / stride_d + 1`` per
    spatial axis (the caller has checked that each is at least 1)."""
    return tuple((size + a + e - d * (w - 1) - 1) // s + 1 for size, w, s, d, a, e
                 in zip(spatial, window.sizes, window.strides, window.dilations, window.start,
                        window.end))


def reads(window: Window, block: Sequence[int], tap: Sequence[int], spatial: Sequence[int]
          ) -> tuple[int, ...] | None:
    """The position in the unpadded input of ``spatial`` sizes that ``tap`` of ``block``
    reads, ``None`` where it lies in the padding."""
    position = tuple(b * s + i * d - a for b, i, s, d, a
                     in zip(block, tap, window.strides, window.dilations, window.start))
    if all(0 <= p < size for p, size in zip(position, spatial)):
        return position
    return None
