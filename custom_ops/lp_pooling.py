"""LpPooling: DML_LP_POOLING(1)_OPERATOR_DESC as a numpy kernel (specification section 4).

``X`` is ``[N, C, D1, ..., Dk]`` with k = 1, 2 or 3; ``Y`` is ``[N, C, O1, ..., Ok]`` with
``O_d = (D_d + start_d + end_d - dilation_d * (window_d - 1) - 1) // stride_d + 1`` and

    Y[n, c, o] = (sum over window taps i of |X[n, c, o * stride - start + i * dilation]|^p)^(1/p)

Taps in the zero padding add nothing. float16 is computed in float32 and rounded once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from custom_ops._common import (
    check_float_input,
    check_int,
    check_memory,
    check_rank,
    check_window_attributes,
    compute_dtype,
    filled,
    sliding_block_counts,
)

OP = "LpPooling"


def check_attributes(*, node: str, window_size: Sequence[int], strides: Sequence[int],
                     start_padding: Sequence[int], end_padding: Sequence[int],
                     dilations: Sequence[int], p: int) -> None:
    check_window_attributes(OP, node, window=("window_size", window_size), strides=strides,
                            dilations=dilations, start_padding=start_padding,
                            end_padding=end_padding, spatial_dims=(1, 2, 3))
    check_int(OP, node, "p", p, minimum=1)


def lp_pooling(X: np.ndarray, *, window_size: Sequence[int], strides: Sequence[int],
               start_padding: Sequence[int], end_padding: Sequence[int],
               dilations: Sequence[int], p: int, node: str = "") -> np.ndarray:
    """Lp-norm pooling of ``X [N, C, D1..Dk]``; empty list attributes mean their default."""
    check_attributes(node=node, window_size=window_size, strides=strides,
                     start_padding=start_padding, end_padding=end_padding,
                     dilations=dilations, p=p)
    check_float_input(OP, node, "X", X)
    k = len(window_size)
    check_rank(OP, node, "X", X, (k + 2,))
    strides, dilations = filled(strides, k, 1), filled(dilations, k, 1)
    start, end = filled(start_padding, k, 0), filled(end_padding, k, 0)
    counts = sliding_block_counts(OP, node, X.shape[2:], window_size, strides, dilations,
                                  start, end)

    dtype = compute_dtype(X.dtype)
    check_memory(OP, node, "temporary padded |X|^p",  # bounds every axis's padded sums
                 (*X.shape[:2], *(d + a + b for d, a, b in zip(X.shape[2:], start, end))), dtype)
    with np.errstate(over="ignore"):  # |x|^p beyond the type's range is inf, as the formula says
        return _pool(X, dtype, window_size, strides, dilations, start, end, counts, p)


def _pool(X: np.ndarray, dtype: np.dtype, window_size: Sequence[int], strides: Sequence[int],
          dilations: Sequence[int], start: Sequence[int], end: Sequence[int],
          counts: Sequence[int], p: int) -> np.ndarray:
    k = len(window_size)
    magnitude = np.abs(X.astype(dtype, copy=False))
    powered = magnitude * magnitude if p == 2 else magnitude ** dtype.type(p)
    # The window sum is separable: reduce one spatial axis after the other, each over its taps.
    acc = powered
    for axis in range(k):
        acc = _window_sum_along(acc, 2 + axis, window_size[axis], strides[axis], dilations[axis],
                                start[axis], end[axis], counts[axis])
    if p == 1:
        result = acc
    elif p == 2:
        result = np.sqrt(acc)
    else:
        result = acc ** dtype.type(1.0 / p)
    return result.astype(X.dtype, copy=False)


def _window_sum_along(values: np.ndarray, axis: int, window: int, stride: int, dilation: int,
                      start: int, end: int, count: int) -> np.ndarray:
    """Sum of ``window`` dilated taps along ``axis``, with zero padding, at ``count`` outputs."""
    if start or end:
        pad = [(0, 0)] * values.ndim
        pad[axis] = (start, end)
        values = np.pad(values, pad)
    index: list[slice] = [slice(None)] * values.ndim
    out = None
    for tap in range(window):
        first = tap * dilation
        index[axis] = slice(first, first + (count - 1) * stride + 1, stride)
        term = values[tuple(index)]
        out = term.copy() if out is None else np.add(out, term, out=out)
    return out
