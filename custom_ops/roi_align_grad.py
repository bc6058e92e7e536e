"""RoiAlignGrad: DML_ROI_ALIGN_GRAD_OPERATOR_DESC as a kernel (specification section 3).

The backward of :mod:`dml_onnx._kernels.roi_align1`, torchvision.ops style. Inputs:
``X [N, C, H, W]`` (optional: ``input_shape`` stands in for its shape when only ``dX`` is
wanted with average reduction), ``dY [R, C, OH, OW]``, ``rois`` and ``batch_indices`` as
RoiAlign1. Outputs:

- ``dX [N, C, H, W]``, the exact adjoint of RoiAlign1's map ``X -> Y``: every ``dY`` value is
  scattered onto the pixels its samples read, with the forward weights (``1 / (n_y n_x)``
  times the bilinear or nearest weights for average; everything to the first maximising
  sample for max). Out-of-bounds samples receive nothing; overlapping regions add up. The
  maximising sample is the first above the running maximum, which starts at ``lowest(T)``
  (NaN never wins); out-of-bounds samples take part reading 0 (measured), and where one
  wins, or none does, nothing is scattered.
- ``drois``, the shape of ``rois``: DirectML's ROI gradient (measured; TensorFlow's
  CropAndResizeGradBoxes). Each in-bounds sample taken with weight ``w`` (as for dX) adds
  its bilinear image gradient at the sample, ``gX = w ((1-ly) (P[y0,x1] - P[y0,x0]) + ly
  (P[y1,x1] - P[y1,x0]))`` (``gY`` alike; corners ``floor`` and ``min(floor + 1, L - 1)``, 0
  along an axis whose coordinate was clamped), times ``fma(-ox, W / S_x, W)`` to ``x1`` and
  ``ox * W / S_x`` to ``x2`` (``ox``: the output column; y alike with ``H``, ``oy``; with
  corner alignment ``W - 1`` over ``S_x - 1``), for both interpolation modes. With
  ``exact_roi_gradient`` instead ``d sum(dY * Y) / d [x1, y1, x2, y2]`` with the sample counts
  held fixed (0 for ``nearest_neighbor``).

Same sample grid and attributes as RoiAlign1, less ``output_size`` (dY's last two sizes) and
``out_of_bounds_input_value``. float16 is computed in float32 and rounded once.
Implementation: the compiled loops of :mod:`dml_onnx._kernels._roi_loops`. Winners (max) and
``drois`` are found region by region on the threads; ``dX`` is scattered by bands of image rows,
one per thread, each visiting every region in order (the result does not depend on the thread
count) and copying its rows to ``dX`` channels-first at the end.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._buffers import empty
from ._checks import (
    KernelError,
    check_float_input,
    check_ints,
    check_rank,
    compute_dtype,
    takes_attributes,
)
from ._roi_grid import (
    Plan,
    Sampling,
    check_image_shape,
    check_region_layout,
    check_regions,
    check_sampling,
    loop_settings,
)
from ._threads import (
    bands,
    channels_last,
    compiled,
    converted,
    interleaved,
    run_bands,
    run_parallel,
)
from .limits import check_memory

OP = "RoiAlignGrad"
OUT_OF_BOUNDS = 0.0  # what out-of-bounds samples read when looking for the maximum


@takes_attributes(OP, check_sampling)
def prepare(*, node: str = "", input_shape: Sequence[int] | None, compute_dx: bool,
            compute_drois: bool, exact_roi_gradient: bool = False, **shared: Any
            ) -> Callable[[np.ndarray | None, np.ndarray, np.ndarray, np.ndarray],
                          tuple[np.ndarray | None, np.ndarray | None]]:
    """:func:`roi_align_grad` for one node, its attributes checked once: ``run(X, dY, rois,
    batch_indices) -> (dX, drois)``. The sampling attributes are those of
    :func:`~dml_onnx._kernels._roi_grid.check_sampling`; ``compute_dx`` and ``compute_drois`` name
    the requested outputs; ``exact_roi_gradient`` asks for the exact derivative as ``drois``
    (what training needs; ``dml_onnx.torch`` autograd) instead of DirectML's."""
    sampling = check_sampling(OP, node, **shared)
    shape = tuple(input_shape or ())  # absent: [] (or None)
    if shape:
        shape = check_ints(OP, node, "input_shape", shape, minimum=0, length=4)
    return functools.partial(_run, node, sampling, shape, compute_dx, compute_drois,
                             exact_roi_gradient)


def roi_align_grad(X: np.ndarray | None, dY: np.ndarray, rois: np.ndarray,
                   batch_indices: np.ndarray, *, node: str = "", **attributes: Any
                   ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(dX, drois)`` of RoiAlign1 for the output gradient ``dY``; ``None`` for the output
    that is not requested (attributes and options: :func:`prepare`)."""
    return prepare(node=node, **attributes)(X, dY, rois, batch_indices)


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


def _run(node: str, sampling: Sampling, given_shape: tuple[int, ...], compute_dx: bool,
         compute_drois: bool, exact_roi_gradient: bool, X: np.ndarray | None, dY: np.ndarray,
         rois: np.ndarray, batch_indices: np.ndarray
         ) -> tuple[np.ndarray | None, np.ndarray | None]:
    check_signature(node=node, x_given=X is not None, compute_dx=compute_dx,
                    compute_drois=compute_drois, reduction_function=sampling.reduction,
                    input_shape=given_shape)
    uses_x = compute_drois or sampling.reduction != "average"
    dY, rois, batch_indices = np.asarray(dY), np.asarray(rois), np.asarray(batch_indices)
    X = None if X is None else np.asarray(X)
    shape = check_images(node, X, dY, given_shape)
    boxes, indices = check_region_layout(OP, node, dY.dtype, rois, batch_indices)
    n_images, channels, height, width = shape
    check_gradient_shape(node, dY, len(indices), channels)
    oh, ow = dY.shape[2:]
    dtype = compute_dtype(dY.dtype)
    # the exact derivative of nearest_neighbor sampling is 0; DirectML's is not
    want_drois = compute_drois and (sampling.linear or not exact_roi_gradient)
    drois = np.zeros((len(indices), 4), np.float64)
    work = len(indices) and channels and (compute_dx or want_drois)
    # float16 dY and dX as their bits where the scatter alone reads dY (no copies in float32)
    half_bits = dY.dtype == np.float16 and sampling.average and not want_drois
    dX = None
    if compute_dx:
        dX = (empty if work else np.zeros)((n_images, channels, height, width),
                                              np.uint16 if half_bits else dtype)

    if work:
        plan = Plan(OP, node, shape, boxes, indices, sampling, (oh, ow), dtype)
        Xt = None
        if uses_x:
            assert X is not None, "check_signature requires X for drois and the max reduction"
            Xt = channels_last(X, dtype)
        _backward(plan, node, Xt, dY.view(np.uint16) if half_bits else converted(dY, dtype), dX,
                  drois if want_drois else drois[:0],
                  loop_settings(sampling, dY.dtype, OUT_OF_BOUNDS), exact_roi_gradient)
    else:
        check_regions(OP, node, shape, dY.dtype, rois, batch_indices)

    if dX is not None:  # computed exactly when compute_dx
        dX = dX.view(np.float16) if half_bits else converted(dX, dY.dtype)
    return dX, drois.astype(rois.dtype).reshape(rois.shape) if compute_drois else None


def _backward(plan: Plan, node: str, Xt: np.ndarray | None, grads: np.ndarray,
              dX: np.ndarray | None, drois: np.ndarray, settings: np.ndarray,
              exact: bool) -> None:
    """Fill ``drois`` (when it has rows) and ``dX`` (when given); ``settings`` as
    :func:`~dml_onnx._kernels._roi_grid.loop_settings`."""
    loops = compiled("_roi_loops")

    sampling = plan.sampling
    regions, channels, oh, ow = grads.shape
    flags = sampling.align_corners, sampling.linear, sampling.average
    keep_winners = dX is not None and not sampling.average
    winner_type = np.int32 if int((plan.n[0] * plan.n[1]).max()) < 1 << 31 else np.int64
    shape = (regions if keep_winners else 0, oh, ow, channels)
    check_memory(OP, node, "temporary winning samples", shape, winner_type)
    winners = empty(shape, winner_type)
    if drois.shape[0] or keep_winners:
        scales = np.array([sampling.scale_y, sampling.scale_x])
        run_parallel([functools.partial(loops.region_gradients, Xt, grads, plan.batch, plan.first,
                                        plan.size, plan.n, part, settings, *flags, scales,
                                        exact, winners, drois)
                      for part in interleaved(regions, plan.work)])
    if dX is None:
        return
    n_images, channels, height, width = dX.shape
    dXt = empty((n_images, height, width, channels), settings.dtype)  # channels-last sums
    run_bands(bands(n_images * height, plan.work * sampling.taps),
              lambda start, stop: loops.scatter_rows(grads, plan.batch, plan.first, plan.size,
                                                     plan.n, settings, *flags, winners, start,
                                                     stop, dXt, dX),
              lambda cuts: loops.scatter_bands(cuts, grads, plan.batch, plan.first, plan.size,
                                               plan.n, settings, *flags, winners, dXt, dX))
