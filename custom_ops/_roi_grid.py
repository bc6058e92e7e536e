"""What RoiAlign1 and RoiAlignGrad share (specification sections 2, 3): the validated sampling
attributes, the checks of regions and batch indices, and the sample counts of every region.

Along x (y alike, with ``y1, y2, spatial_scale_y, H, OH``) region ``[x1, y1, x2, y2]`` is
sampled at ``S = OW * n`` points, ``n = clamp(ceil(|size| / OW), minimum, maximum)``::

    sx1 = x1 * spatial_scale_x ; size = x2 * spatial_scale_x - sx1      (may be <= 0)

computed in the compute type (float32 for float16 and float32, float64 for double). Where the
samples lie and how they are read is :mod:`dml_onnx._kernels._roi_loops`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ._checks import (
    UINT32_MAX,
    KernelError,
    check_choice,
    check_finite,
    check_int,
    check_rank,
    compute_dtype,
    lowest,
)
from ._threads import compiled
from .limits import check_work

REDUCTIONS = ("average", "max")
INTERPOLATIONS = ("linear", "nearest_neighbor")
INDEX_TYPES = tuple(np.dtype(t) for t in (np.int64, np.int32, np.uint32, np.uint64))
SAMPLE_LIMIT = 1 << 22
"""Samples per region and axis (``n * O``): each kernel thread holds one region's samples."""


@dataclass(frozen=True)
class Sampling:
    """The validated attributes that RoiAlign1 and RoiAlignGrad share."""

    reduction: str
    linear: bool
    scale_x: float
    scale_y: float
    input_pixel_offset: float
    output_pixel_offset: float
    minimum: int
    maximum: int
    align_corners: bool

    @property
    def average(self) -> bool:
        return self.reduction == "average"

    @property
    def taps(self) -> int:
        """Values a sample reads (RoiAlign1) or adds to (RoiAlignGrad): its two nested linear
        interpolations' four, or the nearest pixel's one; a call's work for its threads
        (:func:`~dml_onnx._kernels._threads.workers`) is its sample reads times this."""
        return 4 if self.linear else 1

    @functools.cached_property
    def scales(self) -> np.ndarray:
        """``[spatial_scale_y, spatial_scale_x]`` (float64; the loops round them to the
        compute type)."""
        return np.array([self.scale_y, self.scale_x])


@functools.lru_cache(maxsize=256)
def check_sampling(op: str, node: str, *, reduction_function: str, interpolation_mode: str,
                   spatial_scale_x: float, spatial_scale_y: float, input_pixel_offset: float,
                   output_pixel_offset: float, minimum_samples_per_output: int,
                   maximum_samples_per_output: int, align_regions_to_corners: int) -> Sampling:
    """Check the attributes common to both operators and return them in one record
    (cached: invalid attributes raise every time)."""
    check_choice(op, node, "reduction_function", reduction_function, REDUCTIONS)
    check_choice(op, node, "interpolation_mode", interpolation_mode, INTERPOLATIONS)
    scale_x = check_finite(op, node, "spatial_scale_x", spatial_scale_x)
    scale_y = check_finite(op, node, "spatial_scale_y", spatial_scale_y)
    in_offset = check_finite(op, node, "input_pixel_offset", input_pixel_offset)
    out_offset = check_finite(op, node, "output_pixel_offset", output_pixel_offset)
    minimum = check_int(op, node, "minimum_samples_per_output", minimum_samples_per_output,
                        minimum=1, maximum=UINT32_MAX)
    maximum = check_int(op, node, "maximum_samples_per_output", maximum_samples_per_output,
                        minimum=0, maximum=UINT32_MAX)
    if maximum < minimum:
        raise KernelError(op, node, "maximum_samples_per_output", maximum,
                          f"is below minimum_samples_per_output {minimum}")
    align = check_int(op, node, "align_regions_to_corners", align_regions_to_corners,
                      minimum=0, maximum=1)
    return Sampling(reduction_function, interpolation_mode == "linear", scale_x, scale_y,
                    in_offset, out_offset, minimum, maximum, bool(align))


def check_image_shape(op: str, node: str, name: str, shape: Sequence[int]) -> None:
    if shape[2] < 1 or shape[3] < 1:
        raise KernelError(op, node, f"{name} shape", list(shape),
                          "has no pixels along the height or width")


def check_region_layout(op: str, node: str, dtype: np.dtype, rois: np.ndarray,
                        batch_indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Check the types and shapes of ``rois`` and ``batch_indices`` (not their values).

    Returns the regions as ``[R, 4]`` (input dtype) and the batch indices as ``[R]``.
    """
    if rois.dtype != dtype:
        raise KernelError(op, node, "rois element type", rois.dtype.name,
                          f"is not {np.dtype(dtype).name}, the element type of X")
    check_rank(op, node, "rois", rois, (2, 3, 4))
    if rois.shape[-1] != 4 or any(d != 1 for d in rois.shape[:-2]):
        raise KernelError(op, node, "rois shape", list(rois.shape),
                          "is not [R, 4], [1, R, 4] or [1, 1, R, 4]")
    if batch_indices.dtype not in INDEX_TYPES:
        raise KernelError(op, node, "batch_indices element type", batch_indices.dtype.name,
                          "is not int64, int32, uint32 or uint64")
    check_rank(op, node, "batch_indices", batch_indices, (1, 2, 3, 4))
    if any(d != 1 for d in batch_indices.shape[:-1]):
        raise KernelError(op, node, "batch_indices shape", list(batch_indices.shape),
                          "is not [R] or [R] with leading 1s up to rank 4")
    boxes, indices = region_arrays(rois, batch_indices)
    if indices.size != boxes.shape[0]:
        raise KernelError(op, node, "batch_indices length", indices.size,
                          f"differs from the {boxes.shape[0]} regions of rois")
    return boxes, indices


def region_arrays(rois: np.ndarray, batch_indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``rois`` as ``[R, 4]`` and ``batch_indices`` as ``[R]`` (their layout checked)."""
    return (rois if rois.ndim == 2 else rois.reshape(-1, 4),
            batch_indices if batch_indices.ndim == 1 else batch_indices.reshape(-1))


def batch_index_error(op: str, node: str, r: int, index: np.integer,
                      images: int) -> KernelError:
    return KernelError(op, node, f"batch_indices[{r}]", index, f"is outside [0, {images})")


def region_not_finite(op: str, node: str, r: int, box: np.ndarray) -> KernelError:
    return KernelError(op, node, f"rois[{r}]", box, "is not finite")


def check_regions(op: str, node: str, image_shape: Sequence[int], dtype: np.dtype,
                  rois: np.ndarray, batch_indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`check_region_layout`, then the values: batch indices inside ``[0, N)`` of an
    image batch ``[N, C, H, W]``, finite corners. Returns ``[R, 4]`` and ``[R]`` intp."""
    boxes, indices = check_region_layout(op, node, dtype, rois, batch_indices)
    count = int(image_shape[0])
    bad = (indices < 0) | (indices >= count)
    if bad.any():
        r = int(bad.argmax())
        raise batch_index_error(op, node, r, indices[r], count)
    finite = np.isfinite(boxes).all(axis=1)
    if not finite.all():
        r = int(finite.argmin())
        raise region_not_finite(op, node, r, boxes[r])
    return boxes, indices.astype(np.intp)


def scaled_region_overflow(op: str, node: str, r: int, box: np.ndarray, sampling: Sampling,
                           dtype: np.dtype | type) -> KernelError:
    """The error for region ``r`` whose size along y or x, scaled in ``dtype``, is not finite."""
    return KernelError(op, node, f"rois[{r}]", box,
                       f"overflows {np.dtype(dtype).name} when scaled by spatial_scale_x "
                       f"{sampling.scale_x} and spatial_scale_y {sampling.scale_y}")


class Plan:
    """The regions checked (batch indices, finite corners, scaled sizes, the sample limit and
    the work limit) and their sample grid's extent, computed in the compute type ``dtype``:
    ``first``, ``size``: ``[2, R]`` (y, then x) scaled first coordinates and sizes; ``n``:
    ``[2, R]`` int64 samples per output along each axis; ``batch``: ``[R]`` int64."""

    def __init__(self, op: str, node: str, image_shape: Sequence[int], boxes: np.ndarray,
                 indices: np.ndarray, sampling: Sampling, output_size: tuple[int, int],
                 dtype: np.dtype):
        loops = compiled("_roi_loops")

        self.sampling, self.dtype, self.output_size = sampling, dtype, output_size
        regions = len(indices)
        self.first = np.empty((2, regions), dtype)
        self.size = np.empty((2, regions), dtype)
        self.n = np.empty((2, regions), np.int64)
        # a uint64 index beyond int64 wraps below 0, which the plan refuses
        self.batch = np.ascontiguousarray(indices, np.int64)
        problem, r, axis, amount = loops.plan_regions(
            np.ascontiguousarray(boxes, dtype), self.batch, int(image_shape[0]),
            sampling.scales, output_size, sampling.minimum, sampling.maximum, SAMPLE_LIMIT,
            self.first, self.size, self.n)
        if problem == 1:
            raise batch_index_error(op, node, r, indices[r], int(image_shape[0]))
        if problem == 2:
            raise region_not_finite(op, node, r, boxes[r])
        if problem == 3:
            raise scaled_region_overflow(op, node, r, boxes[r], sampling, dtype)
        if problem == 4:
            raise KernelError(op, node, f"rois[{r}] samples along {'yx'[axis]}", int(amount),
                              f"are above the implementation limit {SAMPLE_LIMIT}; lower "
                              "maximum_samples_per_output")
        self.work = amount * int(image_shape[1])  # sample reads
        check_work(op, node, "sample reads", self.work)



def loop_settings(sampling: Sampling, dtype: np.dtype, out_of_bounds: float = 0.0
                  ) -> np.ndarray:
    """``[output_pixel_offset, input_pixel_offset, out_of_bounds, lowest(T)]`` in the compute
    type of element type ``dtype``, as the compiled loops take them."""
    return np.array([sampling.output_pixel_offset, sampling.input_pixel_offset, out_of_bounds,
                     lowest(dtype)], compute_dtype(dtype))
