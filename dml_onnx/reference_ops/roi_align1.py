"""RoiAlign1 (specification section 2), one output element at a time.

``X [N, C, H, W]``, ``rois [R, 4]`` (or ``[1, R, 4]``, ``[1, 1, R, 4]``), rows
``[x1, y1, x2, y2]``, and ``batch_indices [R]`` (or with leading 1s up to rank 4) give
``Y [R, C, OH, OW]`` of ``X``'s type::

    Y[r, c, oy, ox] = average or max of the n_y * n_x samples of output (oy, ox) of region r,
                      each read from X[batch_indices[r], c]

with the sample grid and the reading of one sample of :mod:`dml_onnx.reference_ops._roi`: a
sample out of bounds reads ``out_of_bounds_input_value``, the others are clamped into the image
and read by nested linear interpolations or at ``floor(v + 0.5)``. ``max`` is ``maxnum`` from
``lowest(T)`` (NaN samples ignored). ``average`` sums the samples in the compute type (float32
for float16 and float32, float64 for double), from -0 one at a time in row-major sample order,
and divides that sum by the sample count in the compute type, as the kernel and DirectML do: a
float32 sum of four samples of 3e38 is +inf (specification section 2, average overflow). The
result is rounded once to ``Y``'s type.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dml_onnx._kernels._checks import check_float_input, check_rank
from dml_onnx._kernels._roi_grid import check_image_shape, check_regions, check_sampling
from dml_onnx._kernels.roi_align1 import OP
from dml_onnx.reference_ops._roi import (
    ComputeType,
    check_scaled,
    compute_type,
    read,
    region_grid,
    sample_reads,
)


def roi_align1(X: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray, *, node: str = "",
               output_size: Sequence[int], out_of_bounds_input_value: float,
               **shared: Any) -> np.ndarray:
    """``Y [R, C, OH, OW]``: each region of ``X [N, C, H, W]`` resampled to ``output_size``
    (the sampling attributes: :func:`~dml_onnx._kernels._roi_grid.check_sampling`)."""
    X, rois, batch_indices = np.asarray(X), np.asarray(rois), np.asarray(batch_indices)
    check_float_input(OP, node, "X", X)
    check_rank(OP, node, "X", X, (4,))
    check_image_shape(OP, node, "X", X.shape)
    boxes, batch = check_regions(OP, node, X.shape, X.dtype, rois, batch_indices)
    sampling = check_sampling(OP, node, **shared)
    _, channels, height, width = X.shape
    oh, ow = output_size
    Y = np.empty((len(batch), channels, oh, ow), np.float64)
    if Y.size == 0:
        return Y.astype(X.dtype)
    ct = compute_type(X.dtype)
    check_scaled(OP, node, boxes, sampling, ct)
    sample_reads(OP, node, boxes, (oh, ow), channels, sampling, ct)
    planes = X.tolist()  # Python floats
    out_of_bounds = float(out_of_bounds_input_value)
    start = float(np.finfo(X.dtype).min)  # lowest(T)
    for r, (box, b) in enumerate(zip(boxes.tolist(), batch.tolist())):
        grid = region_grid(box, (oh, ow), (height, width), sampling, ct)
        for oy, ox in itertools.product(range(oh), range(ow)):
            samples = grid.samples(oy, ox)
            for c in range(channels):
                values = [read(planes[b][c], y, x, out_of_bounds, ct) for y, x in samples]
                Y[r, c, oy, ox] = _reduce(values, sampling.reduction, start, ct)
    with np.errstate(over="ignore"):  # beyond the range of X's type: inf
        return Y.astype(X.dtype)


def _reduce(values: list[float], reduction_function: str, start: float,
            ct: ComputeType) -> float:
    """The mean of the sample values (summed and divided in ``ct``, in their order), or
    ``maxnum`` of ``start`` and them (NaN ignored)."""
    if reduction_function == "average":
        total = ct(-0.0)
        with np.errstate(over="ignore", invalid="ignore"):  # an overflowing sum is inf
            for v in values:
                total = total + ct(v)
            return float(total / ct(len(values)))
    return max([start, *(v for v in values if not math.isnan(v))])
