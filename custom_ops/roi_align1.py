"""RoiAlign1: DML_ROI_ALIGN1_OPERATOR_DESC as a kernel (specification section 2).

Shapes, torchvision.ops style: ``X [N, C, H, W]``; ``rois [R, 4]`` (also ``[1, R, 4]`` or
``[1, 1, R, 4]``), rows ``[x1, y1, x2, y2]`` in input coordinates before scaling;
``batch_indices [R]`` (or with leading 1s up to rank 4); ``Y [R, C, OH, OW]``.

Along x (y alike, with ``y1, y2, spatial_scale_y, H, OH``) region r is sampled at
``S = OW * n`` points, ``n = clamp(ceil(|size| / OW), minimum, maximum)``:

    sx1 = x1 * spatial_scale_x ; size = x2 * spatial_scale_x - sx1      (may be <= 0)
    t(s) = (s - output_pixel_offset) / S        (/ (S - 1) when aligning corners; 1/2 if S == 1)
    X(s) = sx1 + t(s) * size - input_pixel_offset                      (pixel centres at integers)

(``n`` from the size computed as DirectML does, ``fma(x2, scale, -sx1)``). Output ``(oy, ox)``
reduces its ``n_y * n_x`` samples: their mean, or their maximum from ``lowest(T)`` ignoring
NaN. A sample outside ``(-1, H) x (-1, W)`` (``[0, H - 1] x [0, W - 1]`` when aligning corners)
reads ``out_of_bounds_input_value``; the others are clamped into the image and read at
``floor(v + 0.5)`` or by two nested linear interpolations, x first. float16 is computed in
float32 and rounded once.

Implementation: the compiled loops of :mod:`dml_onnx._kernels._roi_loops`, regions split over
threads, over a channels-last copy of X where the samples read at least as many values as X
holds (float16: :data:`PLANAR_SHARE` of them; of a large image of many channels, only the
pixels the regions read: :data:`RUN_CHANNELS`), else over X where it lies (float16 as its
bits, each value read as float32 through a table), every channel at a plane's stride (a
detector's finest FPN level with few regions: no copy of the map); a float16 Y is written
as its bits, each value rounded as it is stored (no float32 Y, nor a pass to convert it); a
call on a small image plans and runs in one compiled call. :func:`prepare` checks a node's
attributes once; :func:`roi_align1` is the one-shot call. Limits: ``SAMPLE_LIMIT`` samples
per region and axis, and the work limit on ``samples x channels``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._buffers import empty
from ._checks import (
    check_float_input,
    check_ints,
    check_rank,
    compute_dtype,
    takes_attributes,
)
from ._roi_grid import (
    SAMPLE_LIMIT,
    Plan,
    Sampling,
    check_image_shape,
    check_region_layout,
    check_regions,
    check_sampling,
    loop_settings,
    region_arrays,
)
from ._threads import (
    LayoutMemo,
    channels_last,
    compiled,
    converted,
    run_interleaved,
    serial_work,
)

OP = "RoiAlign1"
SMALL_IMAGE = 1 << 16
"""Images up to this many values go channels-last at once, for the one-compiled-call path of
small calls; larger ones choose their layout by the work (:func:`_run`)."""
PLANAR_SHARE = {np.dtype(np.float16): 0.4}
"""The plane-by-plane loop reads X where it lies when the samples read fewer values than this
share of X holds (1 for a type not named): float16 reads each value through a table, about
twice float32's cost there, while its channels-last copy converts in 8 x 8 vector blocks
(the benchmark's FPN P2 row, X [1,256,200,272] with 156 regions whose samples read 0.56 of
it, on the 2-core machine: 15.4 ms read where it lies, 12.0 ms copied; float32 8.1 and 9.5
ms)."""
RUN_CHANNELS = 16
"""Larger images of at least this many channels are copied channels-last only where the
regions read them (:func:`~dml_onnx._kernels._roi_loops.read_runs`, which costs about what a copy
of a few channels does): a detector's finest FPN level is read in part (Faster R-CNN's P2 in
the benchmark, 133 regions: 0.72 of its pixels)."""
RUN_GAP = 2
"""Runs of pixels read fewer than this many blocks of 8 pixels apart are copied as one."""
FLOAT_TYPES = tuple(np.dtype(t) for t in (np.float16, np.float32, np.float64))


@takes_attributes(OP, check_sampling)
def prepare(*, node: str = "", output_size: Sequence[int], out_of_bounds_input_value: float,
            **shared: Any) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """:func:`roi_align1` for one node, its attributes checked once: ``run(X, rois,
    batch_indices) -> Y``. The sampling attributes are those of
    :func:`~dml_onnx._kernels._roi_grid.check_sampling`."""
    oh, ow = check_ints(OP, node, "output_size", output_size, minimum=1, length=2)
    sampling = check_sampling(OP, node, **shared)
    # Any float is allowed, infinities and NaN included (-inf keeps such samples out of a max).
    out_of_bounds = float(out_of_bounds_input_value)
    settings = {t: loop_settings(sampling, t, out_of_bounds) for t in FLOAT_TYPES}
    return functools.partial(_run, node, (oh, ow), sampling, settings, LayoutMemo())


def roi_align1(X: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray, *, node: str = "",
               **attributes: Any) -> np.ndarray:
    """Crop ``R`` regions of ``X [N, C, H, W]`` and resample each to ``[C, OH, OW]``
    (attributes: :func:`prepare`)."""
    return prepare(node=node, **attributes)(X, rois, batch_indices)


def _check_inputs(node: str, X: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray
                  ) -> None:
    check_float_input(OP, node, "X", X)
    check_rank(OP, node, "X", X, (4,))
    check_image_shape(OP, node, "X", X.shape)
    check_region_layout(OP, node, X.dtype, rois, batch_indices)


def _run(node: str, size: tuple[int, int], sampling: Sampling,
         settings: dict[np.dtype, np.ndarray], layout: LayoutMemo, X: np.ndarray,
         rois: np.ndarray, batch_indices: np.ndarray) -> np.ndarray:
    X, rois, batch_indices = np.asarray(X), np.asarray(rois), np.asarray(batch_indices)
    layout.check((X.shape, X.dtype, rois.shape, rois.dtype, batch_indices.shape,
                  batch_indices.dtype), lambda: _check_inputs(node, X, rois, batch_indices))
    boxes, indices = region_arrays(rois, batch_indices)
    dtype = compute_dtype(X.dtype)
    Y = empty((len(indices), X.shape[1], *size), X.dtype)
    if Y.size == 0:
        check_regions(OP, node, X.shape, X.dtype, rois, batch_indices)
        return Y
    loops = compiled("_roi_loops")
    out = Y.view(np.uint16) if X.dtype == np.float16 else Y  # float16: rounded as written

    flags = sampling.align_corners, sampling.linear, sampling.average
    if X.size <= SMALL_IMAGE:  # plan and run in one compiled call where the work is small
        Xt = channels_last(X, dtype)
        if loops.small_forward(Xt, np.ascontiguousarray(boxes, dtype),
                               np.ascontiguousarray(indices, np.int64), sampling.scales,
                               sampling.minimum, sampling.maximum, SAMPLE_LIMIT,
                               serial_work() // sampling.taps, settings[X.dtype], *flags, out):
            return Y
    plan = Plan(OP, node, X.shape, boxes, indices, sampling, size, dtype)
    # few samples against a large image: read it where it lies (no copy of it in memory)
    planar = plan.work < X.size * PLANAR_SHARE.get(X.dtype, 1.0)
    if planar:  # (float16 as its bits)
        image, loop = _planes(X, dtype), loops.forward_planar
    elif X.size <= SMALL_IMAGE:
        image, loop = Xt, loops.forward
    else:  # the channels-last copy pays for itself: of the pixels the regions read
        image, loop = channels_last(X, dtype, _read_runs(loops, X, plan, size, sampling,
                                                         settings[X.dtype])), loops.forward
    arguments = plan.batch, plan.first, plan.size, plan.n
    run_interleaved(len(indices), plan.work * sampling.taps,
                    lambda regions: loop(image, *arguments, regions, settings[X.dtype], *flags,
                                         out),
                    lambda groups: loops.forward_groups(planar, groups, image, *arguments,
                                                        settings[X.dtype], *flags, out),
                    pool_work=plan.work)
    return Y


def _read_runs(loops: Any, X: np.ndarray, plan: Plan, size: tuple[int, int], sampling: Sampling,
               settings: np.ndarray) -> np.ndarray | None:
    """The runs of pixels of ``X`` that the regions read (see
    :func:`~dml_onnx._kernels._roi_loops.read_runs`), for a copy of those alone; None (copy every
    pixel) for fewer than :data:`RUN_CHANNELS` channels, or where the runs hold them all."""
    if X.shape[1] < RUN_CHANNELS:
        return None
    runs, pixels = loops.read_runs(X.shape[0], X.shape[2], X.shape[3], plan.batch, plan.first,
                                   plan.size, plan.n, size, settings, sampling.align_corners,
                                   RUN_GAP)
    return None if pixels == X.shape[0] * X.shape[2] * X.shape[3] else runs


def _planes(X: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``X`` as the plane-by-plane loop reads it: contiguous, float16 as its uint16 bits (read
    value by value through a table: no float32 copy of a map whose samples read little of it),
    other types in ``dtype``."""
    if X.dtype == np.float16:
        return np.ascontiguousarray(X).view(np.uint16)
    return converted(X, dtype)
