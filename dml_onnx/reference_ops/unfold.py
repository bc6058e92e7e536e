"""Unfold (specification section 5): sliding blocks (im2col), one output element at a time.

``X [N, C, D1..Dk]`` (k = 1..6, any numeric type or bool) gives ``Y [N, C * prod(window), L]``
of ``X``'s type, ``L = prod(B_d)``::

    B_d = (D_d + start_d + end_d - dilation_d * (window_d - 1) - 1) / stride_d + 1
    Y[n, c * prod(window) + kidx, bidx] = Xpad[n, c, b_1*stride_1 + k_1*dilation_1, ...]

``kidx`` and ``bidx`` are the row-major indices of the tap ``(k_1..k_k)`` and the block
``(b_1..b_k)``; ``Xpad`` is ``X`` zero-padded (False for bool). Values are copied exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dml_onnx._kernels._window import Window, sliding_block_counts
from dml_onnx._kernels.unfold import OP, check_input
from dml_onnx.reference_ops._window import block_counts, grid, reads


def unfold(X: np.ndarray, *, node: str = "", window_sizes: Sequence[int],
           **window_attributes: Sequence[int]) -> np.ndarray:
    """``[N, C, D1..Dk]`` to ``[N, C * prod(window_sizes), L]``, same element type as ``X``
    (``window_attributes``: strides, dilations, padding; absent or empty: their default)."""
    X = np.asarray(X)
    check_input(node, X, len(window_sizes))
    window = Window.of(window_sizes, window_attributes)
    spatial = X.shape[2:]
    sliding_block_counts(OP, node, spatial, *window, what="block count")  # raises below 1
    blocks = block_counts(window, spatial)
    taps = math.prod(window.sizes)
    images, channels = X.shape[:2]
    Y = np.zeros((images, channels * taps, math.prod(blocks)), X.dtype)  # padding: 0 or False
    for n, c in grid((images, channels)):
        for kidx, tap in enumerate(grid(window.sizes)):
            for bidx, block in enumerate(grid(blocks)):
                position = reads(window, block, tap, spatial)
                if position is not None:
                    Y[n, c * taps + kidx, bidx] = X[(n, c, *position)]
    return Y
