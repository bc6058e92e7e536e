"""The regions whose samples lie on (or within rounding of) an out-of-bounds edge, where ONNX
``RoiAlign`` and RoiAlign1 may differ, and the replacement of their outputs (the raise of
``RoiAlign`` and RoiAlign1's native standard form compute those regions another way).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from dml_onnx.form import StandardNode
from dml_onnx.ops._roi_sampling import float_compute_type

EDGE_TOLERANCE = 1e-5
"""A sample within ``EDGE_TOLERANCE * (|edge| + |start| + |size|)`` of an out-of-bounds edge
(-1 or L) counts as on it in :func:`edge_regions`: far wider than any rounding difference
between two ways of computing the position, so that no sample exactly on the edge in either
arithmetic is missed."""


def edge_regions(node: StandardNode, boxes: str, image_size: tuple[str, str],
                 output_size: tuple[int, int], *, scale: float, offset: float,
                 clamp_small: bool, ratio: int) -> str:
    """``[R]`` bool: the regions with a sample on (or within rounding of) an out-of-bounds
    edge -1 or H (W), where ONNX ``RoiAlign`` (closed bounds ``[-1, H]``, its own rounding)
    and RoiAlign1 (open bounds ``(-1, H)``, DirectML's rounding) may differ.

    ``boxes``: compute-type ``[R, 4]``; the positions are ``RoiAlign``'s: ``start = x1 * scale
    - offset``, ``size = x2 * scale - offset - start`` (at least 1 with ``clamp_small``),
    ``n = ratio`` or ``max(ceil(|size| / O), 1)``, sample ``k`` of ``S = O n`` at ``start + (k
    + 1/2) size / S``. Per edge only the nearest sample is tested: ``[R, 2 axes, 2 edges]``
    values, so the work is ``O(R)``."""
    ct = float_compute_type(node)

    def scalar(value: float) -> str:
        return node.constant(value, ct)

    def corner(indices: list[int]) -> str:  # [R, 2, 1] (y, x) scaled and shifted
        picked = node.op("Gather", boxes, node.constant(indices), axis=1)
        return node.unsqueeze(node.op("Sub", node.op("Mul", picked, scalar(scale)),
                                      scalar(offset)), [2])

    start = corner([1, 0])
    size = node.op("Sub", corner([3, 2]), start)
    if clamp_small:
        size = node.op("Max", size, scalar(1.0))
    outputs = node.constant(np.array(output_size, np.float64).reshape(2, 1), ct)
    n = (scalar(float(ratio)) if ratio > 0 else
         node.op("Max", node.op("Ceil", node.op("Div", node.op("Abs", size), outputs)),
                 scalar(1.0)))
    total = node.op("Mul", n, outputs)
    step = node.op("Div", size, total)
    flat = node.op("Equal", step, scalar(0.0))
    lengths = node.cast(node.op("Concat", *(node.unsqueeze(d, [0]) for d in image_size),
                                axis=0), ct)
    edges = node.op("Concat", node.constant([[-1.0], [-1.0]], ct),
                    node.unsqueeze(lengths, [1]), axis=1)  # [2 axes, 2 edges]
    nearest = node.op("Round", node.op("Sub", node.op("Div", node.op("Sub", edges, start),
                                                      node.op("Where", flat, scalar(1.0),
                                                              step)), scalar(0.5)))
    k = node.op("Where", flat, scalar(0.0), node.op("Min", node.op("Max", nearest, scalar(0.0)),
                                                   node.op("Sub", total, scalar(1.0))))
    position = node.op("Add", start, node.op("Mul", node.op("Add", k, scalar(0.5)), step))
    magnitude = node.op("Add", node.op("Add", node.op("Abs", edges), node.op("Abs", start)),
                        node.op("Abs", size))
    near = node.op("LessOrEqual", node.op("Abs", node.op("Sub", position, edges)),
                   node.op("Mul", magnitude, scalar(EDGE_TOLERANCE)))
    count = node.reduce("ReduceMax", node.cast(near, TensorProto.INT32), [1, 2], keepdims=0)
    return node.cast(count, TensorProto.BOOL)


def replace_regions(node: StandardNode, outputs: str, chosen: str, compute: Any,
                    rois: str, batch: str, result: str) -> None:
    """``result``: ``outputs [R, ...]`` with the rows of the ``chosen [R]`` regions replaced
    by ``compute(rois_k, batch_k) -> [K, ...]`` on those regions alone (``rois [R, 4]``,
    ``batch [R]``), so that the replacement costs nothing when no region is chosen."""
    rows = node.op("Transpose", node.op("NonZero", chosen), perm=[1, 0])  # [K, 1]
    index = node.squeeze(rows, [1])
    replaced = compute(node.op("Gather", rois, index, axis=0),
                       node.op("Gather", batch, index, axis=0))
    node.op("ScatterND", outputs, rows, replaced, outputs=[result])


__all__ = ["EDGE_TOLERANCE", "edge_regions", "replace_regions"]
