"""RoiAlignGrad (specification section 3), one output-gradient element and sample at a time.

Inputs: ``X [N, C, H, W]`` (optional: ``input_shape`` gives its shape when only ``dX`` is wanted
with average reduction), ``dY [R, C, OH, OW]``, ``rois`` and ``batch_indices`` as RoiAlign1.
Outputs ``(dX, drois)``, ``None`` for one not requested; ``dX`` is ``[N, C, H, W]`` and
``drois`` has the shape of ``rois``, both of ``dY``'s type.

Each ``g = dY[r, c, oy, ox]`` gives weight ``w = g / (n_y n_x)`` to every sample of output
``(oy, ox)`` (average), or ``w = g`` to its first maximising sample in row-major order (max:
the first sample above the running maximum, which starts at ``lowest(T)``, so NaN never wins;
out-of-bounds samples take part reading 0). A sample in bounds then adds, with the grid of
:mod:`dml_onnx.reference_ops._roi`:

- to ``dX``: ``w`` times the interpolation weight of each pixel it reads (all four bilinear
  terms; one pixel for nearest_neighbor);
- to ``drois[r]``, in both interpolation modes, DirectML's rule (measured): with
  ``y0 = floor(Yc)``, ``y1 = min(y0 + 1, H - 1)`` and ``x0, x1`` alike on the clamped
  coordinates::

      gX = w ((1-ly) (P[y0,x1] - P[y0,x0]) + ly (P[y1,x1] - P[y1,x0]))      if x is unclamped
      gY = w ((1-lx) (P[y1,x0] - P[y0,x0]) + lx (P[y1,x1] - P[y0,x1]))      if y is unclamped
      drois[r] += [gX near_x(ox), gY near_y(oy), gX far_x(ox), gY far_y(oy)]

  ``near(o) = fma(-o, ratio, L)`` and ``far(o) = o * ratio`` with ``ratio = L * (1 / S)``
  (aligning corners: ``L - 1`` for ``L`` and ``S - 1`` for ``S``; both ``(L - 1) / 2`` when
  ``S == 1``), ``L`` the image width (height), ``S = OW * n_x`` (``OH * n_y``);
- or, with ``exact_roi_gradient``, the exact derivative (linear only; 0 for nearest), with
  ``y1 = ceil(Yc)``, ``x1 = ceil(Xc)``::

      drois[r] += [gX sx (1 - t(s_x)), gY sy (1 - t(s_y)), gX sx t(s_x), gY sy t(s_y)]

Sums are float64 and rounded once to ``dY``'s type. A NaN or infinite ``g`` reaches every tap
of a sample in bounds, also those of weight 0 (0 times inf is NaN).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from dml_onnx._kernels._roi_grid import Sampling, check_regions, check_sampling
from dml_onnx._kernels.roi_align_grad import (
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
    sample_reads,
)


def roi_align_grad(X: np.ndarray | None, dY: np.ndarray, rois: np.ndarray,
                   batch_indices: np.ndarray, *, node: str = "",
                   input_shape: Sequence[int] | None, compute_dx: bool, compute_drois: bool,
                   exact_roi_gradient: bool = False, **shared: Any
                   ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(dX, drois)`` of RoiAlign1 for the output gradient ``dY`` (the sampling attributes:
    :func:`~dml_onnx._kernels._roi_grid.check_sampling`)."""
    check_signature(node=node, x_given=X is not None, compute_dx=compute_dx,
                    compute_drois=compute_drois,
                    reduction_function=shared["reduction_function"], input_shape=input_shape)
    X = None if X is None else np.asarray(X)
    dY, rois, batch_indices = np.asarray(dY), np.asarray(rois), np.asarray(batch_indices)
    shape = check_images(node, X, dY, input_shape)
    boxes, batch = check_regions(OP, node, shape, dY.dtype, rois, batch_indices)
    check_gradient_shape(node, dY, len(batch), shape[1])
    sampling = check_sampling(OP, node, **shared)
    want_drois = compute_drois and (sampling.linear or not exact_roi_gradient)
    dX = np.zeros(shape, np.float64) if compute_dx else None
    drois = np.zeros((len(batch), 4), np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and infinity are data here
        if len(batch) and shape[1] and (compute_dx or want_drois):
            ct = compute_type(dY.dtype)
            check_scaled(OP, node, boxes, sampling, ct)
            sample_reads(OP, node, boxes, dY.shape[2:], shape[1], sampling, ct)
            planes = None if X is None else X.tolist()  # Python floats
            lowest = float(np.finfo(dY.dtype).min)
            for r, (box, b) in enumerate(zip(boxes.tolist(), batch.tolist())):
                grid = region_grid(box, dY.shape[2:], shape[2:], sampling, ct)
                roi_gradient = (_exact_roi_gradient(sampling) if exact_roi_gradient
                                else _directml_roi_gradient(grid, dY.shape[2:], shape[2:],
                                                            sampling, ct))
                _add_region(None if dX is None else dX[b], drois[r] if want_drois else None,
                            None if planes is None else planes[b], dY[r], grid,
                            sampling.reduction, lowest, roi_gradient, ct)
        return (None if dX is None else dX.astype(dY.dtype),
                drois.astype(rois.dtype).reshape(rois.shape) if compute_drois else None)


RoiGradient = Callable[[list[list[float]], AxisSample, AxisSample, float, int, int],
                       list[float]]
"""``(plane, y, x, w, oy, ox) -> [d x1, d y1, d x2, d y2]`` of one in-bounds sample of output
``(oy, ox)`` read with weight ``w``."""


def _add_region(dX: np.ndarray | None, drois: np.ndarray | None, image: list | None,
                grads: np.ndarray, grid: Grid, reduction_function: str, lowest: float,
                roi_gradient: RoiGradient, ct: ComputeType) -> None:
    """Add the gradients of one region to its image's ``dX [C, H, W]`` and to its ``drois``
    row (``None``: not wanted), from its ``grads [C, OH, OW]`` and ``image [C][H][W]``."""
    for c, oy, ox in np.ndindex(*grads.shape):
        g = float(grads[c, oy, ox])
        samples = grid.samples(oy, ox)
        if reduction_function == "average":
            chosen = [(y, x, g / len(samples)) for y, x in samples]
        else:
            assert image is not None, "max reads X"
            winner = _first_maximum([read(image[c], y, x, 0.0, ct) for y, x in samples],
                                    lowest)
            chosen = [] if winner is None else [(*samples[winner], g)]
        for y, x, w in chosen:
            if not (y.inside and x.inside):
                continue
            if dX is not None:
                for (py, wy), (px, wx) in itertools.product(y.taps, x.taps):
                    dX[c, py, px] += w * (wy * wx)
            if drois is not None:
                assert image is not None, "drois reads X"
                drois += np.asarray(roi_gradient(image[c], y, x, w, oy, ox))


def _first_maximum(values: list[float], lowest: float) -> int | None:
    """The index of the first value above the running maximum that starts at ``lowest``
    (NaN never is); ``None`` when no value is."""
    best, winner = lowest, None
    for k, v in enumerate(values):
        if v > best:
            best, winner = v, k
    return winner


def _image_gradient(plane: list[list[float]], y: AxisSample, x: AxisSample, w: float,
                    ceil_corners: bool) -> tuple[float, float]:
    """``(gX, gY)``: ``w`` times the bilinear image gradient at the sample's clamped
    coordinates, from the corners ``floor`` and ``ceil`` (``ceil_corners``) or ``floor`` and
    ``min(floor + 1, L - 1)``; 0 along an axis whose coordinate was clamped."""
    height, width = len(plane), len(plane[0])
    y0, x0 = math.floor(y.coordinate), math.floor(x.coordinate)
    if ceil_corners:
        y1, x1 = math.ceil(y.coordinate), math.ceil(x.coordinate)
    else:
        y1, x1 = min(y0 + 1, height - 1), min(x0 + 1, width - 1)
    ly, lx = y.coordinate - y0, x.coordinate - x0
    p00, p01, p10, p11 = plane[y0][x0], plane[y0][x1], plane[y1][x0], plane[y1][x1]
    g_x = w * ((1 - ly) * (p01 - p00) + ly * (p11 - p10)) if x.unclamped else 0.0
    g_y = w * ((1 - lx) * (p10 - p00) + lx * (p11 - p01)) if y.unclamped else 0.0
    return g_x, g_y


def _exact_roi_gradient(sampling: Sampling) -> RoiGradient:
    """The derivative of ``sum(dY * Y)`` by the corners, through ``X(s)``."""
    def gradient(plane: list[list[float]], y: AxisSample, x: AxisSample, w: float, oy: int,
                 ox: int) -> list[float]:
        g_x, g_y = _image_gradient(plane, y, x, w, ceil_corners=True)
        g_x, g_y = g_x * sampling.scale_x, g_y * sampling.scale_y
        return [g_x * (1 - x.t), g_y * (1 - y.t), g_x * x.t, g_y * y.t]
    return gradient


def _directml_roi_gradient(grid: Grid, output_size: Sequence[int], image_size: Sequence[int],
                           sampling: Sampling, ct: ComputeType) -> RoiGradient:
    """DirectML's rule, with its factors per output row and column."""
    near_y, far_y = _directml_factors(output_size[0] * grid.n_y, output_size[0], image_size[0],
                                      sampling.align_corners, ct)
    near_x, far_x = _directml_factors(output_size[1] * grid.n_x, output_size[1], image_size[1],
                                      sampling.align_corners, ct)

    def gradient(plane: list[list[float]], y: AxisSample, x: AxisSample, w: float, oy: int,
                 ox: int) -> list[float]:
        g_x, g_y = _image_gradient(plane, y, x, w, ceil_corners=False)
        return [g_x * near_x[ox], g_y * near_y[oy], g_x * far_x[ox], g_y * far_y[oy]]
    return gradient


def _directml_factors(samples: int, outputs: int, length: int, align: bool,
                      ct: ComputeType) -> tuple[list[float], list[float]]:
    """``(near(o), far(o))`` for every output ``o`` of an axis of ``length`` pixels sampled
    ``samples`` times, in ``ct``; ``near`` is one fused multiply-add."""
    extent = ct(length - 1) if align else ct(length)
    if align and samples == 1:
        return [float(ct(0.5) * extent)] * outputs, [float(ct(0.5) * extent)] * outputs
    ratio = extent * (ct(1) / ct(samples - 1 if align else samples))
    near = [float(ct(float(Fraction(float(extent)) - o * Fraction(float(ratio)))))
            for o in range(outputs)]
    return near, [float(ct(o) * ratio) for o in range(outputs)]
