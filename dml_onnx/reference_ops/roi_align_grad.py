"""RoiAlignGrad (specification section 3), one output-gradient element and sample at a time.

Inputs: ``X [N, C, H, W]`` (optional: ``input_shape`` gives its shape when only ``dX`` is wanted
with average reduction), ``dY [R, C, OH, OW]``, ``rois`` and ``batch_indices`` as RoiAlign1.
Outputs ``(dX, drois)``, ``None`` for one not requested; ``dX`` is ``[N, C, H, W]`` and
``drois`` has the shape of ``rois``, both of ``dY``'s type.

Each ``g = dY[r, c, oy, ox]`` gives weight ``w = g / (n_y n_x)`` to every sample of output
``(oy, ox)`` (average), or ``w = g`` to its first maximising sample in row-major order (max).
A sample in bounds then adds, with the grid of :mod:`dml_onnx.reference_ops._roi`:

- to ``dX``: ``w`` times the interpolation weight of each pixel it reads (all four bilinear
  terms, as the forward formula; one pixel for nearest_neighbor);
- to ``drois[r]`` (linear only; nearest_neighbor gives 0), with ``y0, y1 = floor(Yc),
  ceil(Yc)`` and ``x0, x1`` alike on the clamped coordinates::

      gX = w ((1-ly) (P[y0,x1] - P[y0,x0]) + ly (P[y1,x1] - P[y1,x0]))      if x is unclamped
      gY = w ((1-lx) (P[y1,x0] - P[y0,x0]) + lx (P[y1,x1] - P[y0,x1]))      if y is unclamped
      drois[r] += [gX sx (1 - t(s_x)), gY sy (1 - t(s_y)), gX sx t(s_x), gY sy t(s_y)]

Sums are float64 and rounded once to ``dY``'s type.

Not stated by the spec, the kernel's reading: to find the maximum, a sample out of bounds reads
0 (RoiAlign1's default ``out_of_bounds_input_value``) and a NaN sample counts as the largest (the
first NaN wins, as ``np.argmax``); a NaN or infinite ``g`` reaches every tap of a sample in
bounds, also those of weight 0 (0 times inf is NaN), as the forward formula's four terms.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from custom_ops._roi_grid import Sampling, check_regions, check_sampling
from custom_ops.roi_align_grad import (
    OP,
    check_gradient_shape,
    check_images,
    check_signature,
)
from dml_onnx.reference_ops._roi import (
    AxisSample,
    ComputeType,
    Grid,
    check_scaled,
    compute_type,
    read,
    region_grid,
)


def roi_align_grad(X: np.ndarray | None, dY: np.ndarray, rois: np.ndarray,
                   batch_indices: np.ndarray, *, reduction_function: str,
                   interpolation_mode: str, spatial_scale_x: float, spatial_scale_y: float,
                   input_pixel_offset: float, output_pixel_offset: float,
                   minimum_samples_per_output: int, maximum_samples_per_output: int,
                   align_regions_to_corners: int, input_shape: Sequence[int] | None,
                   compute_dx: bool, compute_drois: bool,
                   node: str = "") -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(dX, drois)`` of RoiAlign1 for the output gradient ``dY``."""
    check_signature(node=node, x_given=X is not None, compute_dx=compute_dx,
                    compute_drois=compute_drois, reduction_function=reduction_function,
                    input_shape=input_shape)
    X = None if X is None else np.asarray(X)
    dY, rois, batch_indices = np.asarray(dY), np.asarray(rois), np.asarray(batch_indices)
    shape = check_images(node, X, dY, input_shape)
    boxes, batch = check_regions(OP, node, shape, dY.dtype, rois, batch_indices)
    check_gradient_shape(node, dY, len(batch), shape[1])
    sampling = check_sampling(
        OP, node, reduction_function=reduction_function,
        interpolation_mode=interpolation_mode, spatial_scale_x=spatial_scale_x,
        spatial_scale_y=spatial_scale_y, input_pixel_offset=input_pixel_offset,
        output_pixel_offset=output_pixel_offset,
        minimum_samples_per_output=minimum_samples_per_output,
        maximum_samples_per_output=maximum_samples_per_output,
        align_regions_to_corners=align_regions_to_corners)
    want_drois = compute_drois and sampling.linear  # nearest_neighbor: drois = 0
    dX = np.zeros(shape, np.float64) if compute_dx else None
    drois = np.zeros((len(batch), 4), np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and infinity are data here
        if len(batch) and shape[1] and (compute_dx or want_drois):
            ct = compute_type(dY.dtype)
            check_scaled(OP, node, boxes, sampling, ct)
            planes = None if X is None else X.tolist()  # Python floats
            for r, (box, b) in enumerate(zip(boxes.tolist(), batch.tolist())):
                grid = region_grid(box, dY.shape[2:], shape[2:], sampling, ct)
                _add_region(None if dX is None else dX[b], drois[r] if want_drois else None,
                            None if planes is None else planes[b], dY[r], grid,
                            reduction_function, sampling, ct)
        return (None if dX is None else dX.astype(dY.dtype),
                drois.astype(rois.dtype).reshape(rois.shape) if compute_drois else None)


def _add_region(dX: np.ndarray | None, drois: np.ndarray | None, image: list | None,
                grads: np.ndarray, grid: Grid, reduction_function: str,
                sampling: Sampling, ct: ComputeType) -> None:
    """Add the gradients of one region to its image's ``dX [C, H, W]`` and to its ``drois``
    row (``None``: not wanted), from its ``grads [C, OH, OW]`` and ``image [C][H][W]``."""
    for c, oy, ox in np.ndindex(*grads.shape):
        g = float(grads[c, oy, ox])
        samples = grid.samples(oy, ox)
        if reduction_function == "average":
            chosen = [(y, x, g / len(samples)) for y, x in samples]
        else:
            values = [read(image[c], y, x, 0.0, ct) for y, x in samples]
            chosen = [(*samples[_first_maximum(values)], g)]
        for y, x, w in chosen:
            if not (y.inside and x.inside):
                continue
            if dX is not None:
                for (py, wy), (px, wx) in itertools.product(y.taps, x.taps):
                    dX[c, py, px] += w * (wy * wx)
            if drois is not None:
                drois += _roi_gradient(image[c], y, x, w, sampling)


def _first_maximum(values: list[float]) -> int:
    """The index of the first largest value; a NaN counts as the largest (the first NaN)."""
    best = 0
    for k, v in enumerate(values):
        if math.isnan(v):
            return k
        if v > values[best]:
            best = k
    return best


def _roi_gradient(plane: list[list[float]], y: AxisSample, x: AxisSample, w: float,
                  sampling: Sampling) -> list[float]:
    """``[d/dx1, d/dy1, d/dx2, d/dy2]`` of one in-bounds sample read with weight ``w``."""
    y0, y1 = math.floor(y.coordinate), math.ceil(y.coordinate)
    x0, x1 = math.floor(x.coordinate), math.ceil(x.coordinate)
    ly, lx = y.coordinate - y0, x.coordinate - x0
    p00, p01, p10, p11 = plane[y0][x0], plane[y0][x1], plane[y1][x0], plane[y1][x1]
    d_x1 = d_y1 = d_x2 = d_y2 = 0.0
    if x.unclamped:
        g_x = w * ((1 - ly) * (p01 - p00) + ly * (p11 - p10))
        d_x1, d_x2 = g_x * sampling.scale_x * (1 - x.t), g_x * sampling.scale_x * x.t
    if y.unclamped:
        g_y = w * ((1 - lx) * (p10 - p00) + lx * (p11 - p01))
        d_y1, d_y2 = g_y * sampling.scale_y * (1 - y.t), g_y * sampling.scale_y * y.t
    return [d_x1, d_y1, d_x2, d_y2]
