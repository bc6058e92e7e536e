"""Fold (specification section 6), the adjoint of Unfold, one input element at a time.

``X [N, C * prod(window), L]`` (numeric types) gives ``Y [N, C, O1..Ok]`` of ``X``'s type,
``O = output_size``. ``Y`` starts at zero and every value of ``X`` is added at the position
Unfold reads it from::

    Y[n, c, b_1*stride_1 + k_1*dilation_1 - start_1, ...] += X[n, c * prod(window) + kidx, bidx]

(``kidx`` / ``bidx``: row-major tap / block index); values that land in the padding are
dropped. Each output element of a float type is a sequential sum from 0, in the compute type
(float32 for float16 and float32, float64 for double), of its values in ascending block index,
as DirectML sums (**Measured**); float16 is rounded once at the end. Integers are summed
exactly (Python ints) and wrapped into the element type as its two's-complement addition
wraps, so ``<Unfold(x), y> == <x, Fold(y)>`` holds exactly. With a dilation of 0 the output is
all zeros (**Measured**: DirectML's Fold).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dml_onnx._kernels._window import Window
from dml_onnx._kernels.fold import check_input
from dml_onnx.reference_ops._window import block_counts, grid, reads


def fold(X: np.ndarray, *, node: str = "", window_sizes: Sequence[int],
         output_size: Sequence[int], **window_attributes: Sequence[int]) -> np.ndarray:
    """``[N, C * prod(window_sizes), L]`` to ``[N, C, *output_size]``, same element type
    (``window_attributes``: strides, dilations, padding; absent or empty: their default)."""
    X = np.asarray(X)
    window = Window.of(window_sizes, window_attributes)
    output = tuple(output_size)
    blocks = block_counts(window, output)
    check_input(node, X, window.sizes, blocks, output)
    integer = X.dtype.kind in "iu"
    # exact sums, or sums in the compute type
    scalar = int if integer else np.float64 if X.dtype == np.float64 else np.float32
    taps = math.prod(window.sizes)
    images, channels = X.shape[0], X.shape[1] // taps
    sums = {position: scalar(0) for position in grid((images, channels, *output))}
    with np.errstate(over="ignore", invalid="ignore"):  # float sums may overflow: inf, NaN
        planes = grid((images, channels)) if 0 not in window.dilations else ()  # else zeros
        for n, c in planes:
            for bidx, block in enumerate(grid(blocks)):  # ascending blocks: DirectML's order
                for kidx, tap in enumerate(grid(window.sizes)):
                    position = reads(window, block, tap, output)
                    if position is not None:
                        sums[(n, c, *position)] += scalar(X[n, c * taps + kidx, bidx])
        Y = np.empty((images, channels, *output), X.dtype)
        for index, total in sums.items():  # float16: the float32 sum rounded once
            Y[index] = _wrap(int(total), X.dtype) if integer else total
    return Y


def _wrap(total: int, dtype: np.dtype) -> int:
    """``total`` reduced modulo ``2**bits`` into the range of the integer ``dtype``."""
    info = np.iinfo(dtype)
    return (total - info.min) % (1 << info.bits) + info.min
