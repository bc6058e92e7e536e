"""LpPooling (specification section 4), one output element at a time.

``X [N, C, D1..Dk]`` (k = 1, 2 or 3, float16/32/64) gives ``Y [N, C, O1..Ok]`` of ``X``'s type::

    O_d = (D_d + start_d + end_d - dilation_d * (window_d - 1) - 1) / stride_d + 1
    Y[n, c, o] = (sum over window taps i of |X[n, c, o * stride - start + i * dilation]|^p)^(1/p)

Taps in the zero padding add nothing. Each sum and root is computed in float64 (Python floats)
and rounded once to ``Y``'s type; ``|x|^p`` beyond float64's range is +inf.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from custom_ops._common import check_float_input, check_rank, sliding_block_counts
from custom_ops.lp_pooling import OP
from dml_onnx.reference_ops._window import block_counts, grid, reads, window_of


def lp_pooling(X: np.ndarray, *, window_size: Sequence[int], strides: Sequence[int],
               start_padding: Sequence[int], end_padding: Sequence[int],
               dilations: Sequence[int], p: int, node: str = "") -> np.ndarray:
    """Lp-norm pooling of ``X [N, C, D1..Dk]``; empty list attributes mean their default."""
    X = np.asarray(X)
    check_float_input(OP, node, "X", X)
    check_rank(OP, node, "X", X, (len(window_size) + 2,))
    window = window_of(window_size, strides, dilations, start_padding, end_padding)
    spatial = X.shape[2:]
    sliding_block_counts(OP, node, spatial, *window)  # raises for an output size below 1
    Y = np.empty((*X.shape[:2], *block_counts(window, spatial)), X.dtype)
    for n, c, *o in grid(Y.shape):
        total = 0.0
        for tap in grid(window.sizes):
            position = reads(window, o, tap, spatial)
            if position is not None:
                total += _power(abs(float(X[(n, c, *position)])), p)
        with np.errstate(over="ignore"):  # beyond Y's range: inf, at the one rounding
            Y[(n, c, *o)] = total ** (1 / p)
    return Y


def _power(magnitude: float, p: int) -> float:
    """``magnitude ** p``; +inf beyond float64's range (where Python raises instead)."""
    try:
        return magnitude ** p
    except OverflowError:
        return math.inf
