"""LpPooling (specification section 4), one output element at a time.

``X [N, C, D1..Dk]`` (k = 1, 2 or 3, float16/32/64) gives ``Y [N, C, O1..Ok]`` of ``X``'s type::

    O_d = (D_d + start_d + end_d - dilation_d * (window_d - 1) - 1) / stride_d + 1
    Y[n, c, o] = (sum over window taps i of |X[n, c, o * stride - start + i * dilation]|^p)^(1/p)

Taps in the zero padding add nothing. Each norm is computed in float64 (Python floats) scaled
by the window's largest magnitude ``m``, ``m * (sum (|x| / m)^p)^(1/p)``, so that no power
overflows or underflows for any p (0 when m is 0, +inf when m is, NaN when the window holds
NaN), and rounded once to ``Y``'s type.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dml_onnx._kernels._checks import check_float_input, check_rank
from dml_onnx._kernels._window import Window, sliding_block_counts
from dml_onnx._kernels.limits import check_work
from dml_onnx._kernels.lp_pooling import OP
from dml_onnx.reference_ops._window import block_counts, grid, reads


def lp_pooling(X: np.ndarray, *, node: str = "", window_size: Sequence[int], p: int,
               **window_attributes: Sequence[int]) -> np.ndarray:
    """Lp-norm pooling of ``X [N, C, D1..Dk]`` (``window_attributes``: strides, dilations,
    padding; empty: their default)."""
    X = np.asarray(X)
    check_float_input(OP, node, "X", X)
    check_rank(OP, node, "X", X, (len(window_size) + 2,))
    window = Window.of(window_size, window_attributes)
    spatial = X.shape[2:]
    sliding_block_counts(OP, node, spatial, *window)  # raises for an output size below 1
    Y = np.empty((*X.shape[:2], *block_counts(window, spatial)), X.dtype)
    # as the kernel, never start loops beyond the work limit (window taps read)
    check_work(OP, node, "window tap reads", Y.size * math.prod(window.sizes))
    for n, c, *o in grid(Y.shape):
        magnitudes = []
        for tap in grid(window.sizes):
            position = reads(window, o, tap, spatial)
            if position is not None:
                magnitudes.append(abs(float(X[(n, c, *position)])))
        with np.errstate(over="ignore"):  # beyond Y's range: inf, at the one rounding
            Y[(n, c, *o)] = _norm(magnitudes, p)
    return Y


def _norm(magnitudes: list[float], p: int) -> float:
    """``(sum m_i^p)^(1/p)`` of non-negative floats, scaled by the largest."""
    if any(math.isnan(m) for m in magnitudes):
        return math.nan
    largest = max(magnitudes, default=0.0)
    if largest == 0 or math.isinf(largest):
        return largest
    return largest * math.fsum((m / largest) ** p for m in magnitudes) ** (1 / p)
