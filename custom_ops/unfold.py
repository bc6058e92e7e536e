"""Unfold (DML_UNFOLD_OPERATOR_DESC): extract sliding blocks (im2col), k = 1..6 spatial axes.

``X [N, C, D1..Dk]`` becomes ``Y [N, C * prod(window_sizes), L]`` with ``L = prod(B_d)``::

    B_d = (D_d + start_d + end_d - dilation_d * (window_d - 1) - 1) // stride_d + 1   # >= 1
    Y[n, c * prod(window) + kidx, bidx] = Xpad[n, c, b_1*stride_1 + k_1*dilation_1, ...]

``kidx`` is the row-major index of the window tap ``(k_1..k_k)``, ``bidx`` the row-major index
of the block ``(b_1..b_k)``, and ``Xpad`` is ``X`` zero-padded (False for bool) by ``start_d``
before and ``end_d`` after each spatial axis: ``torch.nn.functional.unfold`` generalised to k
axes and asymmetric padding. Every ONNX numeric type and bool; values are copied exactly.

The kernel pads once into a buffer that holds only the part the blocks read (or uses ``X``
itself when they read no padding), builds a ``[N, C, window..., blocks...]`` strided view of
it and copies that view into the output in one pass. This module also holds the window
geometry that Fold (Unfold's adjoint) shares: :func:`window_geometry` and :func:`block_range`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from custom_ops._common import (
    KernelError,
    check_memory,
    check_rank,
    check_window_attributes,
    filled,
    sliding_block_counts,
)

OP = "Unfold"

#: Element types of Unfold (T_any): every ONNX numeric type numpy has natively, and bool.
UNFOLD_TYPES = tuple(np.dtype(t) for t in (
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.bool_))


class WindowGeometry(NamedTuple):
    """Checked sliding-window attributes with their defaults filled in, and the block counts."""

    window: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    start_padding: tuple[int, ...]
    end_padding: tuple[int, ...]
    blocks: tuple[int, ...]  # B_d per spatial axis, each >= 1

    @property
    def k(self) -> int:
        return len(self.window)


def window_attributes(op: str, node: str, window_sizes: Sequence[int], strides: Sequence[int],
                      dilations: Sequence[int], start_padding: Sequence[int],
                      end_padding: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """Check the window attributes of Unfold / Fold; return them with defaults filled in.

    Returns ``(window, strides, dilations, start_padding, end_padding)``, each of length k.
    """
    k = check_window_attributes(op, node, window=("window_sizes", window_sizes), strides=strides,
                                dilations=dilations, start_padding=start_padding,
                                end_padding=end_padding)
    return (tuple(int(v) for v in window_sizes), filled(strides, k, 1), filled(dilations, k, 1),
            filled(start_padding, k, 0), filled(end_padding, k, 0))


def as_ints(values: Sequence[int] | None) -> tuple[int, ...]:
    """A list attribute as a hashable tuple (absent: empty)."""
    return tuple(int(v) for v in values) if values is not None else ()


@lru_cache(maxsize=256)
def window_geometry(op: str, node: str, spatial_shape: tuple[int, ...],
                    window_sizes: tuple[int, ...], strides: tuple[int, ...],
                    dilations: tuple[int, ...], start_padding: tuple[int, ...],
                    end_padding: tuple[int, ...]) -> WindowGeometry:
    """Check the attributes and compute the block counts over ``spatial_shape`` (k sizes).

    Cached (invalid attributes raise every time): every argument must be hashable, the lists
    as tuples (:func:`as_ints`).
    """
    window, strides, dilations, start, end = window_attributes(
        op, node, window_sizes, strides, dilations, start_padding, end_padding)
    blocks = sliding_block_counts(op, node, spatial_shape, window, strides, dilations, start, end,
                                  what="block count")
    return WindowGeometry(window, strides, dilations, start, end, blocks)


def block_range(size: int, blocks: int, stride: int, offset: int) -> tuple[slice, slice] | None:
    """The blocks ``b < blocks`` whose position ``b * stride + offset`` lies in ``[0, size)``.

    Returns ``(positions, block_range)``: a slice of the axis and the matching contiguous slice
    of the block axis; ``None`` when no block lands inside.
    """
    lo = max(0, (stride - 1 - offset) // stride)  # ceil(-offset / stride), at least 0
    hi = min(blocks, (size - 1 - offset) // stride + 1)
    if lo >= hi:
        return None
    first = lo * stride + offset
    return slice(first, first + (hi - lo - 1) * stride + 1, stride), slice(lo, hi)


def check_attributes(*, node: str, window_sizes: Sequence[int], strides: Sequence[int] = (),
                     dilations: Sequence[int] = (), start_padding: Sequence[int] = (),
                     end_padding: Sequence[int] = ()) -> None:
    """Check the attribute-only rules: k in 1..6, list lengths, value ranges."""
    window_attributes(OP, node, window_sizes, strides, dilations, start_padding, end_padding)


def unfold(X: np.ndarray, *, window_sizes: Sequence[int], strides: Sequence[int] = (),
           dilations: Sequence[int] = (), start_padding: Sequence[int] = (),
           end_padding: Sequence[int] = (), node: str = "") -> np.ndarray:
    """``[N, C, D1..Dk]`` to ``[N, C * prod(window_sizes), L]``, same element type as ``X``."""
    X = np.asarray(X)
    window_sizes = as_ints(window_sizes)
    attributes = (window_sizes, as_ints(strides), as_ints(dilations), as_ints(start_padding),
                  as_ints(end_padding))
    if X.ndim != len(window_sizes) + 2 or X.dtype not in UNFOLD_TYPES:
        window_attributes(OP, node, *attributes)  # attribute errors come first
        check_rank(OP, node, "X", X, (len(window_sizes) + 2,))
        raise KernelError(OP, node, "X element type", X.dtype.name,
                          "is not an integer, float16/32/64 or bool type")
    n, c, *spatial = X.shape
    window, strides, dilations, start, _, blocks = window_geometry(OP, node, tuple(spatial),
                                                                   *attributes)
    # Extent of the padded input that the blocks read (the tail of the end padding may be unused).
    extent = tuple((b - 1) * s + (w - 1) * d + 1
                   for b, s, w, d in zip(blocks, strides, window, dilations))
    if any(start) or any(e > size for e, size in zip(extent, spatial)):
        # zero-pad into a buffer of that extent
        check_memory(OP, node, "temporary padded X", (n, c, *extent), X.dtype)
        source = np.zeros((n, c, *extent), dtype=X.dtype)
        kept = [max(0, min(size, e - a)) for size, e, a in zip(spatial, extent, start)]
        source[(..., *(slice(a, a + m) for a, m in zip(start, kept)))] = \
            X[(..., *(slice(0, m) for m in kept))]
    else:
        source = X  # no start padding and no end padding read: view the input itself
    axis_strides = source.strides[2:]
    view = as_strided(
        source, shape=(n, c, *window, *blocks),
        strides=(*source.strides[:2], *(st * d for st, d in zip(axis_strides, dilations)),
                 *(st * s for st, s in zip(axis_strides, strides))),
        writeable=False)
    Y = np.empty(view.shape, dtype=X.dtype)
    np.copyto(Y, view)
    return Y.reshape(n, c * math.prod(window), math.prod(blocks))
