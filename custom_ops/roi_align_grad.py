"""RoiAlignGrad: DML_ROI_ALIGN_GRAD_OPERATOR_DESC as a numpy kernel (specification section 3).

The backward of :mod:`custom_ops.roi_align1`, torchvision.ops style. Inputs: ``X [N, C, H, W]``
(optional: ``input_shape`` stands in for its shape when only ``dX`` is wanted with average
reduction), ``dY [R, C, OH, OW]``, ``rois`` and ``batch_indices`` as RoiAlign1. Outputs:

- ``dX [N, C, H, W]``, the exact adjoint of RoiAlign1's map ``X -> Y``: every ``dY`` value is
  scattered onto the pixels its samples read, with the forward weights (``1 / (n_y n_x)``
  times the bilinear or nearest weights for average; everything to the first maximising
  sample for max). Out-of-bounds samples receive nothing; overlapping regions add up. To
  find the maximising sample, out-of-bounds samples read 0, RoiAlign1's default
  ``out_of_bounds_input_value`` (this operator has no such attribute).
- ``drois``, the shape of ``rois``: ``d sum(dY * Y) / d [x1, y1, x2, y2]`` with the sample
  counts held fixed. A sample read at a clamped coordinate contributes nothing on that axis,
  one out of bounds nothing at all; ``nearest_neighbor`` gives 0.

Same sample grid and attributes as RoiAlign1, less ``output_size`` (dY's last two sizes) and
``out_of_bounds_input_value``. float16 is computed in float32 and rounded once.
Implementation: the matrices of RoiAlign1 transposed (see its docstring); ``dY`` or an image
holding NaN or infinity takes the literal scatter/gather path.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from custom_ops._common import (
    KernelError,
    channels_last,
    check_float_input,
    check_ints,
    check_rank,
    compute_dtype,
)
from custom_ops.roi_align1 import (
    Grid,
    Plan,
    Sampling,
    all_finite,
    argmax_bins,
    back_project,
    check_image_shape,
    check_regions,
    check_sampling,
    chunks,
    expand_bins,
    gather_gradient,
    region_gradient,
    sample_values,
    scatter_samples,
    to_winners,
    window_index,
    winner_mask,
)

OP = "RoiAlignGrad"
OUT_OF_BOUNDS = 0.0  # what out-of-bounds samples read when looking for the maximum


def _check_all(node: str, input_shape: Sequence[int] | None,
               **sampling) -> tuple[Sampling, tuple[int, ...]]:
    params = check_sampling(OP, node, **sampling)
    shape = tuple(input_shape or ())  # absent: [] (or None)
    if shape:
        shape = check_ints(OP, node, "input_shape", shape, minimum=0, length=4)
    return params, shape


def check_attributes(*, node: str, reduction_function: str, interpolation_mode: str,
                     spatial_scale_x: float, spatial_scale_y: float, input_pixel_offset: float,
                     output_pixel_offset: float, minimum_samples_per_output: int,
                     maximum_samples_per_output: int, align_regions_to_corners: int,
                     input_shape: Sequence[int] | None) -> None:
    _check_all(node, input_shape, reduction_function=reduction_function,
               interpolation_mode=interpolation_mode, spatial_scale_x=spatial_scale_x,
               spatial_scale_y=spatial_scale_y, input_pixel_offset=input_pixel_offset,
               output_pixel_offset=output_pixel_offset,
               minimum_samples_per_output=minimum_samples_per_output,
               maximum_samples_per_output=maximum_samples_per_output,
               align_regions_to_corners=align_regions_to_corners)


def check_signature(*, node: str, x_given: bool, compute_dx: bool, compute_drois: bool,
                    reduction_function: str, input_shape: Sequence[int] | None) -> None:
    """The rules on which inputs and outputs a node has: at least one output; X when drois
    is requested or the reduction is max; input_shape when X is omitted."""
    if not (compute_dx or compute_drois):
        raise KernelError(OP, node, "requested outputs", [], "must include dX or drois")
    if not x_given:
        if compute_drois or reduction_function == "max":
            raise KernelError(OP, node, "X", None, "is required when drois is requested or "
                              "reduction_function is 'max'")
        if not input_shape:
            raise KernelError(OP, node, "input_shape", [], "is required when X is omitted")


def check_images(node: str, X: np.ndarray | None, dY: np.ndarray,
                 input_shape: Sequence[int] | None) -> tuple[int, ...]:
    """The image shape ``[N, C, H, W]`` (X's, or ``input_shape`` when X is omitted), after
    checking ``dY`` and ``X``: float tensors of rank 4 and one element type, X's shape equal
    to a given ``input_shape``."""
    check_float_input(OP, node, "dY", dY)
    check_rank(OP, node, "dY", dY, (4,))
    shape = tuple(int(v) for v in input_shape or ())
    if X is not None:
        check_float_input(OP, node, "X", X)
        check_rank(OP, node, "X", X, (4,))
        if shape and shape != X.shape:
            raise KernelError(OP, node, "input_shape", list(shape),
                              f"disagrees with the shape {list(X.shape)} of X")
        if dY.dtype != X.dtype:
            raise KernelError(OP, node, "dY element type", dY.dtype.name,
                              f"is not {X.dtype.name}, the element type of X")
        shape = X.shape
    check_image_shape(OP, node, "X" if X is not None else "input", shape)
    return shape


def check_gradient_shape(node: str, dY: np.ndarray, regions: int, channels: int) -> None:
    """``dY`` is ``[R, C, OH, OW]`` with R and C those of rois and X, OH and OW at least 1."""
    if dY.shape[0] != regions or dY.shape[1] != channels:
        raise KernelError(OP, node, "dY shape", list(dY.shape),
                          f"does not start with [R, C] = [{regions}, {channels}] of rois "
                          "and X")
    if dY.shape[2] < 1 or dY.shape[3] < 1:
        raise KernelError(OP, node, "dY shape", list(dY.shape),
                          "has no output height or width")


def roi_align_grad(X: np.ndarray | None, dY: np.ndarray, rois: np.ndarray,
                   batch_indices: np.ndarray, *, reduction_function: str,
                   interpolation_mode: str, spatial_scale_x: float, spatial_scale_y: float,
                   input_pixel_offset: float, output_pixel_offset: float,
                   minimum_samples_per_output: int, maximum_samples_per_output: int,
                   align_regions_to_corners: int, input_shape: Sequence[int] | None,
                   compute_dx: bool, compute_drois: bool,
                   node: str = "") -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(dX, drois)`` of RoiAlign1 for the output gradient ``dY``; ``None`` for the output
    that is not requested."""
    sampling, given_shape = _check_all(
        node, input_shape, reduction_function=reduction_function,
        interpolation_mode=interpolation_mode, spatial_scale_x=spatial_scale_x,
        spatial_scale_y=spatial_scale_y, input_pixel_offset=input_pixel_offset,
        output_pixel_offset=output_pixel_offset,
        minimum_samples_per_output=minimum_samples_per_output,
        maximum_samples_per_output=maximum_samples_per_output,
        align_regions_to_corners=align_regions_to_corners)
    check_signature(node=node, x_given=X is not None, compute_dx=compute_dx,
                    compute_drois=compute_drois, reduction_function=reduction_function,
                    input_shape=input_shape)
    uses_x = compute_drois or sampling.reduction != "average"
    dY, rois, batch_indices = np.asarray(dY), np.asarray(rois), np.asarray(batch_indices)
    X = None if X is None else np.asarray(X)
    shape = check_images(node, X, dY, given_shape)
    boxes, batch = check_regions(OP, node, shape, dY.dtype, rois, batch_indices)
    n_images, channels, height, width = shape
    check_gradient_shape(node, dY, len(batch), channels)
    oh, ow = dY.shape[2:]
    dtype = compute_dtype(dY.dtype)
    want_drois = compute_drois and sampling.linear  # nearest_neighbor: drois = 0
    dXt = np.zeros((n_images, height, width, channels), dtype) if compute_dx else None
    drois = np.zeros((len(batch), 4), np.float64)

    if len(batch) and channels and (compute_dx or want_drois):
        with np.errstate(invalid="ignore", over="ignore"):  # NaN and infinity are data here
            plan = Plan(OP, node, boxes, sampling, (oh, ow), (height, width), dtype)
            grads = dY.astype(dtype, copy=False)
            Xt = channels_last(X, dtype) if uses_x else None
            _backward_blocks(plan, Xt, grads, batch, dXt, drois, want_drois)

    dX = None
    if compute_dx:
        dX = np.ascontiguousarray(dXt.transpose(0, 3, 1, 2)).astype(dY.dtype, copy=False)
    return dX, drois.astype(rois.dtype).reshape(rois.shape) if compute_drois else None


def _backward_blocks(plan: Plan, Xt: np.ndarray | None, grads: np.ndarray, batch: np.ndarray,
                     dXt: np.ndarray | None, drois: np.ndarray, want_drois: bool) -> None:
    """Accumulate ``dX`` (channels-last) and fill ``drois``, region by region."""
    sampling = plan.sampling
    average = sampling.reduction == "average"
    g_finite = all_finite(grads)
    x_finite = all_finite(Xt) if Xt is not None else None
    gv = grads.transpose(0, 2, 3, 1)  # [R, OH, OW, C]
    images_finite = np.ones(len(batch), bool) if x_finite is None else x_finite[batch]
    plan.check_work(~(average & g_finite & (images_finite | (not want_drois))),
                    grads.shape[1])
    for block in plan.blocks(bins=average, rows=not average, derivatives=want_drois):
        grid = plan.grid(block, bins=average, rows=not average, derivatives=want_drois)
        for j, r in enumerate(range(block.start, block.stop)):
            b = batch[r]
            image_finite = x_finite is None or bool(x_finite[b])
            if average and g_finite[r] and (image_finite or not want_drois):
                My, Mx = grid.bins(j)
                if not (My.shape[1] and Mx.shape[1]):
                    continue  # every sample out of bounds
                index = window_index(*grid.windows(j))
                if dXt is not None:
                    dXt[b][index] += back_project(gv[r], My, Mx)
                if want_drois:
                    drois[r] = region_gradient(Xt[b][index], gv[r], My, Mx,
                                               *grid.bin_derivatives(j))
                continue
            plan.check_row_limit(r)
            drois[r] = _by_samples(
                grid, j, plan.n_y[r], plan.n_x[r], gv[r], None if Xt is None else Xt[b],
                None if dXt is None else dXt[b], average=average, g_finite=bool(g_finite[r]),
                x_finite=image_finite, want_drois=want_drois, sampling=sampling)


def _by_samples(grid: Grid, j: int, ny: int, nx: int, g: np.ndarray, image: np.ndarray | None,
                target: np.ndarray | None, *, average: bool, g_finite: bool, x_finite: bool,
                want_drois: bool, sampling: Sampling) -> np.ndarray:
    """One region, sample by sample: max reduction, or data holding NaN or infinity.

    Each chunk of output rows gets a per-sample weight (``g / (n_y n_x)`` on the in-bounds
    samples for average, ``g`` on the maximising one for max), which is back-projected or
    scattered onto ``target [H, W, C]``; returns the region's ``drois`` row.
    """
    ny, nx = int(ny), int(nx)
    oh, ow, channels = g.shape
    drois = np.zeros(4, np.float64)
    for o0, o1, cs in chunks(oh, ny * nx * ow, channels):
        qy, qx = grid.y.samples(j, o0, o1), grid.x.samples(j)
        if average:
            weights = expand_bins(g[o0:o1, :, cs] / g.dtype.type(ny * nx), ny, nx)
        else:
            values = sample_values(image, grid, j, o0, o1, cs, exact=not x_finite,
                                   linear=sampling.linear, out_of_bounds=OUT_OF_BOUNDS)
            index = argmax_bins(values, ny, nx, nan_aware=not x_finite)
            weights = to_winners(np.ascontiguousarray(g[o0:o1, :, cs]), index, ny, nx)
        weights[~qy.inside] = 0
        weights[:, ~qx.inside] = 0
        fast = g_finite and x_finite
        if target is not None:
            if g_finite:
                My, Mx = grid.y.sample_matrices(j, o0, o1)[0], grid.x.sample_matrices(j)[0]
                target[window_index(*grid.windows(j), cs)] += back_project(weights, My, Mx)
            else:
                scatter_samples(target, weights, qy, qx, cs, sampling.linear)
        if not want_drois:
            continue
        if fast:
            My, dy1, dy2 = grid.y.sample_matrices(j, o0, o1, derivatives=True)
            Mx, dx1, dx2 = grid.x.sample_matrices(j, derivatives=True)
            window = image[window_index(*grid.windows(j), cs)]
            drois += region_gradient(window, weights, My, Mx, dy1, dy2, dx1, dx2)
        else:
            take = qy.inside[:, None, None] & qx.inside[None, :, None]
            if not average:
                take = take & winner_mask(index, ny, nx)
            drois += gather_gradient(image, weights, take, qy, qx, cs, sampling.scale_x,
                                     sampling.scale_y)
    return drois
