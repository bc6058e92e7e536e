"""RoiAlign1: DML_ROI_ALIGN1_OPERATOR_DESC as a numpy kernel (specification section 2).

Shapes, torchvision.ops style: ``X [N, C, H, W]``; ``rois [R, 4]`` (also ``[1, R, 4]`` or
``[1, 1, R, 4]``), rows ``[x1, y1, x2, y2]`` in input coordinates before scaling;
``batch_indices [R]`` (or with leading 1s up to rank 4); ``Y [R, C, OH, OW]``.

Along x (y alike, with ``y1, y2, spatial_scale_y, H, OH``) region r is sampled at
``S = OW * n`` points, ``n = clamp(ceil(|size| / OW), minimum, maximum)``:

    sx1 = x1 * spatial_scale_x ; size = x2 * spatial_scale_x - sx1      (may be <= 0)
    t(s) = (s - output_pixel_offset) / S        (/ (S - 1) when aligning corners; 1/2 if S == 1)
    X(s) = sx1 + t(s) * size - input_pixel_offset                      (pixel centres at integers)

Output ``(oy, ox)`` reduces (average or max) its ``n_y * n_x`` samples. A sample outside
``[-1, H] x [-1, W]`` reads ``out_of_bounds_input_value``; the others are clamped into the image
and read bilinearly or at ``floor(v + 0.5)``. float16 is computed in float32 and rounded once.

Implementation: the image is read channels-last. With average reduction the sample weights of
one region factor into an ``[OH, h]`` matrix for y and an ``[OW, w]`` matrix for x over the
region's window, so a region costs two small matrix products; max keeps one matrix row per
sample and reduces the sampled values. Regions of an image holding NaN or infinity take a
literal gather path so that a non-finite pixel reaches only the outputs that read it.
Implementation limit: at most ``SAMPLE_LIMIT`` samples per region and axis, and per output
row on the per-sample paths (max reduction, non-finite data); larger regions raise an error
that names ``maximum_samples_per_output``.
The helpers here are shared with ``roi_align_grad``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from custom_ops._common import (
    UINT32_MAX,
    KernelError,
    channels_last,
    check_choice,
    check_finite,
    check_float_input,
    check_int,
    check_ints,
    check_memory,
    check_rank,
    check_work,
    compute_dtype,
    run_parallel,
    serial_matmul,
)

OP = "RoiAlign1"
REDUCTIONS = ("average", "max")
INTERPOLATIONS = ("linear", "nearest_neighbor")
INDEX_TYPES = tuple(np.dtype(t) for t in (np.int64, np.int32, np.uint32, np.uint64))
SAMPLE_LIMIT = 1 << 22  # samples per region and axis, and per output row of a max reduction
_BLOCK_BUDGET = 1 << 22  # scratch elements of the per-block weight matrices
_CHUNK_BUDGET = 1 << 20  # scratch elements of one chunk of per-sample values
_DENSE = 0.5  # a window whose touched rows (columns) are fewer than this share is gathered

Index = slice | np.ndarray


# ----------------------------------------------------------------------------------------------
# attributes and inputs


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


def _check_all(node: str, output_size: Sequence[int], out_of_bounds_input_value: float,
               **sampling) -> tuple[tuple[int, int], Sampling, float]:
    size = check_ints(OP, node, "output_size", output_size, minimum=1, length=2)
    params = check_sampling(OP, node, **sampling)
    # Any float is allowed, infinities and NaN included (-inf keeps such samples out of a max).
    return (size[0], size[1]), params, float(out_of_bounds_input_value)


def check_attributes(*, node: str, output_size: Sequence[int], reduction_function: str,
                     interpolation_mode: str, spatial_scale_x: float, spatial_scale_y: float,
                     input_pixel_offset: float, output_pixel_offset: float,
                     out_of_bounds_input_value: float, minimum_samples_per_output: int,
                     maximum_samples_per_output: int, align_regions_to_corners: int) -> None:
    _check_all(node, output_size, out_of_bounds_input_value,
               reduction_function=reduction_function, interpolation_mode=interpolation_mode,
               spatial_scale_x=spatial_scale_x, spatial_scale_y=spatial_scale_y,
               input_pixel_offset=input_pixel_offset, output_pixel_offset=output_pixel_offset,
               minimum_samples_per_output=minimum_samples_per_output,
               maximum_samples_per_output=maximum_samples_per_output,
               align_regions_to_corners=align_regions_to_corners)


def check_image_shape(op: str, node: str, name: str, shape: Sequence[int]) -> None:
    if shape[2] < 1 or shape[3] < 1:
        raise KernelError(op, node, f"{name} shape", list(shape),
                          "has no pixels along the height or width")


def check_regions(op: str, node: str, image_shape: Sequence[int], dtype: np.dtype,
                  rois: np.ndarray, batch_indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Check ``rois`` and ``batch_indices`` against an image batch ``[N, C, H, W]``.

    Returns the regions as ``[R, 4]`` (input dtype) and the batch indices as ``[R]`` intp.
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
    boxes = rois.reshape(-1, 4)
    indices = batch_indices.reshape(-1)
    if indices.size != boxes.shape[0]:
        raise KernelError(op, node, "batch_indices length", indices.size,
                          f"differs from the {boxes.shape[0]} regions of rois")
    count = int(image_shape[0])
    bad = (indices < 0) | (indices >= count)
    if bad.any():
        r = int(bad.argmax())
        raise KernelError(op, node, f"batch_indices[{r}]", indices[r],
                          f"is outside [0, {count})")
    finite = np.isfinite(boxes).all(axis=1)
    if not finite.all():
        r = int(finite.argmin())
        raise KernelError(op, node, f"rois[{r}]", boxes[r], "is not finite")
    return boxes, indices.astype(np.intp)


def scaled_region_overflow(op: str, node: str, r: int, box: np.ndarray, sampling: Sampling,
                           dtype: np.dtype) -> KernelError:
    """The error for region ``r`` whose size along y or x, scaled in ``dtype``, is not finite."""
    return KernelError(op, node, f"rois[{r}]", box,
                       f"overflows {np.dtype(dtype).name} when scaled by spatial_scale_x "
                       f"{sampling.scale_x} and spatial_scale_y {sampling.scale_y}")


# ----------------------------------------------------------------------------------------------
# the sample grid


class Plan:
    """Sample counts of every region, the block partition, and the implementation limits
    (built under ``np.errstate(over="ignore", invalid="ignore")``)."""

    def __init__(self, op: str, node: str, boxes: np.ndarray, sampling: Sampling,
                 output_size: tuple[int, int], image_size: tuple[int, int], dtype: np.dtype):
        self.op, self.node, self.sampling, self.dtype = op, node, sampling, np.dtype(dtype)
        self.output_size, self.image_size = output_size, image_size
        scale = np.array([sampling.scale_x, sampling.scale_y] * 2, self.dtype)
        scaled = (boxes.astype(self.dtype) * scale).T  # [4, R]: x1, y1, x2, y2 times the scale
        self.first = scaled[1::-1]  # [2, R]: y, then x
        self.size = scaled[3:1:-1] - self.first
        # A product that overflows makes its axis's size infinite or NaN too.
        finite = np.isfinite(self.size).all(axis=0)
        if not finite.all():
            r = int(finite.argmin())
            raise scaled_region_overflow(op, node, r, boxes[r], sampling, self.dtype)
        outputs = np.array(output_size)[:, None]
        quotient = np.ceil(np.abs(self.size) / outputs.astype(self.dtype)).astype(np.float64)
        n = np.minimum(np.maximum(quotient, sampling.minimum), sampling.maximum)
        total = n * outputs
        over = total > SAMPLE_LIMIT
        if over.any():
            k, r = (int(i) for i in np.argwhere(over)[0])
            raise KernelError(op, node, f"rois[{r}] samples along {'yx'[k]}", int(total[k, r]),
                              f"are above the implementation limit {SAMPLE_LIMIT}; lower "
                              "maximum_samples_per_output")
        self.n = n.astype(np.int64)  # [2, R]: y, then x
        self.n_y, self.n_x = self.n[0], self.n[1]

    def check_work(self, by_samples: np.ndarray, channels: int) -> None:
        """The work limit, for the regions (a mask) reduced sample by sample: each of their
        samples is read in every channel."""
        (oh, ow) = self.output_size
        samples = (self.n_y * oh).astype(np.float64) * (self.n_x * ow)
        check_work(self.op, self.node, "sample reads",
                   float(samples[by_samples].sum()) * channels)

    def check_row_limit(self, r: int) -> None:
        """Per-sample paths hold one output row of samples: ``n_y * S_x`` of them."""
        row = int(self.n_y[r]) * int(self.n_x[r]) * self.output_size[1]
        if row > SAMPLE_LIMIT:
            raise KernelError(self.op, self.node, f"rois[{r}] samples per output row", row,
                              f"are above the implementation limit {SAMPLE_LIMIT}; lower "
                              "maximum_samples_per_output")

    def blocks(self, *, bins: bool, rows: bool, derivatives: bool) -> Iterator[slice]:
        """Consecutive regions whose weight matrices fit the scratch budget together."""
        (oh, ow), (h, w) = self.output_size, self.image_size
        copies = 3 if derivatives else 1
        cost = self.n_y * oh + self.n_x * ow
        if bins:
            cost = cost + copies * (oh * h + ow * w)
        if rows:
            cost = cost + copies * (self.n_y * oh * h + self.n_x * ow * w)
        check_memory(self.op, self.node, "temporary weight matrices of one region",
                     (int(cost.max(initial=0)),), np.float64)
        ends = cost.cumsum()
        start, total = 0, len(cost)
        if ends[-1] <= _BLOCK_BUDGET:  # the common case, without searching
            yield slice(0, total)
            return
        while start < total:
            base = ends[start - 1] if start else 0
            stop = int(np.searchsorted(ends, base + _BLOCK_BUDGET, side="right"))
            stop = max(stop, start + 1)
            yield slice(start, stop)
            start = stop

    def grid(self, block: slice, *, bins: bool, rows: bool, derivatives: bool) -> Grid:
        """The sample grid of a block of regions. ``bins``: the averaged weight matrices;
        ``rows``: the per-sample ones (when they fit the budget); ``derivatives``: the
        matching ``d/d(corner)`` matrices too."""
        s = self.sampling
        return Grid(*axes(self.first[:, block], self.size[:, block], self.n[:, block],
                          self.output_size, self.image_size, s, self.dtype, bins=bins,
                          rows=rows, derivatives=derivatives and s.linear))


class Samples(NamedTuple):
    """Per-sample arrays along one axis for some samples of one region."""

    lo: np.ndarray  # first corner (the only one for nearest_neighbor)
    hi: np.ndarray  # second corner, min(lo + 1, size - 1); equals lo for nearest_neighbor
    w_lo: np.ndarray  # interpolation weight of lo (1 - frac; 1 for nearest_neighbor), 0 outside
    w_hi: np.ndarray  # interpolation weight of hi (frac; 0 for nearest_neighbor), 0 outside
    inside: np.ndarray  # the sample is not out of bounds along this axis
    unclamped: np.ndarray  # inside, and the coordinate needed no clamping
    t: np.ndarray  # t(s), the sample's relative position in the region


def _derivatives(unclamped: np.ndarray, w_hi: np.ndarray, t: np.ndarray,
                 scale: np.generic, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """``d(value)/d(first)`` and ``d(value)/d(last)`` per sample: the difference of the two
    corners where the coordinate is unclamped and not an integer, times
    ``d(coordinate)/d(first) = scale * (1 - t)`` and ``d(coordinate)/d(last) = scale * t``."""
    slope = np.where(unclamped & (w_hi != 0), scale, 0).astype(dtype)
    return slope * (1 - t), slope * t


def axes(first: np.ndarray, size: np.ndarray, n: np.ndarray, output_size: tuple[int, int],
         image_size: tuple[int, int], sampling: Sampling, dtype: np.dtype, *, bins: bool,
         rows: bool, derivatives: bool) -> tuple[Axis, Axis]:
    """The y and x :class:`Axis` of a block of regions from :class:`Plan`'s ``[2, R]`` arrays
    (y, then x) of scaled first coordinates, sizes and sample counts, computed in one
    vectorised pass over ``2R`` segments, y's then x's. Callers ignore overflow and invalid
    floating-point operations (``np.errstate``)."""
    ct, count_r = dtype.type, n.shape[1]
    n_y, n_x = n
    n = n.ravel()
    outputs = np.array(output_size, np.int64).repeat(count_r)
    length = np.array(image_size, np.int64).repeat(count_r)
    count = outputs * n
    start = np.zeros(2 * count_r + 1, np.int64)
    count.cumsum(out=start[1:])
    owner = np.arange(2 * count_r).repeat(count)
    s = np.arange(start[-1], dtype=np.int64) - start[owner]
    total = count[owner]
    offset = ct(sampling.output_pixel_offset)
    if sampling.align_corners:
        t = (s.astype(dtype) - offset) / np.maximum(total - 1, 1).astype(dtype)
        t[total == 1] = ct(0.5)
    else:
        t = (s.astype(dtype) - offset) / total.astype(dtype)
    coord = first.ravel()[owner] + t * size.ravel()[owner] - ct(sampling.input_pixel_offset)
    last_pixel = (length - 1)[owner]
    top = last_pixel.astype(dtype)  # length - 1 converted as the scalar Python int would be
    inside = (coord >= -1) & (coord <= length.astype(dtype)[owner])
    clamped = np.minimum(np.maximum(coord, 0), top)
    unclamped = inside & (coord == clamped)
    if sampling.linear:
        lo = np.floor(clamped).astype(np.intp)
        frac = clamped - lo
        hi = np.minimum(lo + 1, last_pixel)
        w_lo = np.where(inside, 1 - frac, 0).astype(dtype, copy=False)
        w_hi = np.where(inside, frac, 0).astype(dtype, copy=False)
    else:
        lo = np.minimum(np.floor(clamped + ct(0.5)), top).astype(np.intp)
        hi = lo
        w_lo = inside.astype(dtype)
        w_hi = np.zeros_like(w_lo)

    pixel_start = np.zeros(2 * count_r + 1, np.int64)  # segment j owns pixels from here
    length.cumsum(out=pixel_start[1:])
    touched = np.zeros(int(pixel_start[-1]), bool)
    touched[(pixel_start[owner] + lo)[w_lo != 0]] = True
    touched[(pixel_start[owner] + hi)[w_hi != 0]] = True
    windows = _windows(touched, pixel_start)
    flat = Samples(lo, hi, w_lo, w_hi, inside, unclamped, t)
    middle = int(start[count_r])
    result = (Axis(n_y, output_size[0], image_size[0], sampling.scale_y, dtype,
                   start[:count_r + 1], Samples(*(a[:middle] for a in flat)),
                   windows[:count_r]),
              Axis(n_x, output_size[1], image_size[1], sampling.scale_x, dtype,
                   start[count_r:] - middle, Samples(*(a[middle:] for a in flat)),
                   windows[count_r:]))
    if bins:
        _add_bins(result, owner, s, n, outputs, dtype, derivatives)
    if rows:
        for axis in result:
            axis.add_rows(derivatives)
    return result[0], result[1]


def _add_bins(pair: tuple[Axis, ...], owner: np.ndarray, s: np.ndarray, n: np.ndarray,
              outputs: np.ndarray, dtype: np.dtype, derivatives: bool) -> None:
    """The averaged weight matrices of both axes (see :class:`Axis`), one axis at a time,
    which keeps the scratch memory low. Output ``o`` of segment ``j`` is bin ``j * O + o``
    of its axis (segments ``R..2R-1`` are x's regions ``0..R-1``)."""
    bin_of = owner % (len(n) // 2) * outputs[owner] + s // n[owner]
    middle = len(pair[0].lo)
    for axis, part in zip(pair, (bin_of[:middle], bin_of[middle:])):
        shape = (len(axis.n), axis.outputs, axis.length)
        share = np.bincount(part, axis.inside, shape[0] * shape[1]).reshape(shape[:2])
        axis.inside_share = (share / axis.n[:, None]).astype(dtype)
        divisor = axis.n[:, None, None]
        axis.bins = axis.scatter(part, axis.w_lo, axis.w_hi, shape, divisor)
        if derivatives:
            d_first, d_last = _derivatives(axis.unclamped, axis.w_hi, axis.t,
                                           dtype.type(axis.scale), dtype)
            axis.d_first = axis.scatter(part, -d_first, d_first, shape, divisor)
            axis.d_last = axis.scatter(part, -d_last, d_last, shape, divisor)


class Axis:
    """The sample points of a block of regions along one axis, flattened region after region.

    Region ``j`` of the block owns the flat samples ``start[j]:start[j + 1]``; ``window[j]``
    indexes the pixels it touches (a slice, or an index array when they are sparse). Weight
    matrices have one column per pixel of the axis and are read over the window:

    - ``bins`` (with ``bins``): ``[R, O, L]``, row ``o`` averages the interpolation weights of
      output ``o``'s samples (out-of-bounds samples weigh 0); ``inside_share[j, o]`` is the
      share of those samples in bounds;
    - ``rows`` (with ``rows``, when it fits the budget): ``[S, L]``, one row per sample;
    - with ``derivatives``, the same for ``d(value)/d(first)`` and ``d(value)/d(last)`` of the
      region's two coordinates along this axis (``d_first``, ``d_last``; ``rows_d_*``).
    """

    def __init__(self, n: np.ndarray, outputs: int, length: int, scale: float,
                 dtype: np.dtype, start: np.ndarray, flat: Samples, window: list[Index]):
        self.n, self.outputs, self.length, self.dtype = n, outputs, length, dtype
        self.scale, self.start, self.window = scale, start, window
        self.lo, self.hi, self.w_lo, self.w_hi, self.inside, self.unclamped, self.t = flat
        self.rows: np.ndarray | None = None
        self.inside_share = self.bins = self.d_first = self.d_last = None
        self.rows_d_first = self.rows_d_last = None

    def add_rows(self, derivatives: bool) -> None:
        """The per-sample weight matrices (and derivatives), when they fit the budget."""
        total = int(self.start[-1])
        if total * self.length * (3 if derivatives else 1) > _BLOCK_BUDGET:
            return
        every = np.arange(total)
        shape = (total, self.length)
        self.rows = self.scatter(every, self.w_lo, self.w_hi, shape, 1)
        if derivatives:
            d_first, d_last = _derivatives(self.unclamped, self.w_hi, self.t,
                                           self.dtype.type(self.scale), self.dtype)
            self.rows_d_first = self.scatter(every, -d_first, d_first, shape, 1)
            self.rows_d_last = self.scatter(every, -d_last, d_last, shape, 1)

    def scatter(self, row_of: np.ndarray, w_lo: np.ndarray, w_hi: np.ndarray,
                shape: tuple[int, ...], divisor: np.ndarray | int) -> np.ndarray:
        """A matrix of ``shape`` (rows, then ``length`` columns) with each sample's two
        weights added at ``(row_of[sample], lo)`` and ``(row_of[sample], hi)``."""
        base = row_of * self.length
        matrix = np.bincount(np.concatenate([base + self.lo, base + self.hi]),
                             np.concatenate([w_lo, w_hi]), math.prod(shape))
        return (matrix.reshape(shape) / divisor).astype(self.dtype)

    def _part(self, j: int, first_output: int, stop_output: int | None) -> np.ndarray:
        """Flat indices of the samples of outputs ``first_output:stop_output`` of region
        ``j``, phase-major: the first sample of every output, then the second, and so on."""
        n = int(self.n[j])
        stop_output = self.outputs if stop_output is None else stop_output
        outputs = np.arange(stop_output - first_output) * n
        return self.start[j] + first_output * n + np.add.outer(np.arange(n), outputs).ravel()

    def samples(self, j: int, first_output: int = 0, stop_output: int | None = None) -> Samples:
        """The samples of outputs ``first_output:stop_output`` of region ``j``, phase-major
        (sample ``k`` of output ``o`` at ``k * outputs + o``)."""
        part = self._part(j, first_output, stop_output)
        return Samples(self.lo[part], self.hi[part], self.w_lo[part], self.w_hi[part],
                       self.inside[part], self.unclamped[part], self.t[part])

    def sample_matrices(self, j: int, first_output: int = 0, stop_output: int | None = None,
                        *, derivatives: bool = False) -> list[np.ndarray]:
        """One row per sample of outputs ``first_output:stop_output`` (phase-major) over the
        window: the weights, then (with ``derivatives``) ``d/d(first)`` and ``d/d(last)``."""
        window = self.window[j]
        part = self._part(j, first_output, stop_output)
        if self.rows is not None:
            found = [self.rows]
            if derivatives:
                found += [self.rows_d_first, self.rows_d_last]
            return [m[part][:, window] for m in found]
        # Too large for the block: build this part over the window only.
        q = self.samples(j, first_output, stop_output)
        rows = np.arange(q.lo.size)
        width = _length(window)

        def matrix(w_lo: np.ndarray, w_hi: np.ndarray) -> np.ndarray:
            out = np.zeros((rows.size, width), self.dtype)
            for index, weight in ((q.lo, w_lo), (q.hi, w_hi)):
                keep = weight != 0
                out[rows[keep], _position(window, index[keep])] += weight[keep]
            return out

        result = [matrix(q.w_lo, q.w_hi)]
        if derivatives:
            d_first, d_last = _derivatives(q.unclamped, q.w_hi, q.t,
                                           self.dtype.type(self.scale), self.dtype)
            result.append(matrix(-d_first, d_first))
            result.append(matrix(-d_last, d_last))
        return result


def _windows(touched: np.ndarray, starts: np.ndarray) -> list[Index]:
    """Per segment ``touched[starts[j]:starts[j + 1]]`` (none empty): its touched pixels as
    a slice, or as an index array when sparse."""
    first, positions = starts[:-1], np.arange(touched.size)
    count = np.add.reduceat(touched, first, dtype=np.intp).tolist()
    low = np.minimum.reduceat(np.where(touched, positions, touched.size), first).tolist()
    high = (np.maximum.reduceat(np.where(touched, positions, -1), first) + 1).tolist()
    windows: list[Index] = []
    for c, a, b, base in zip(count, low, high, first.tolist()):
        if c == 0:
            windows.append(slice(0, 0))
        elif c >= _DENSE * (b - a):
            windows.append(slice(a - base, b - base))
        else:
            windows.append(np.flatnonzero(touched[a:b]) + (a - base))
    return windows


def _length(index: Index) -> int:
    return index.stop - index.start if isinstance(index, slice) else index.size


def _position(window: Index, index: np.ndarray) -> np.ndarray:
    if isinstance(window, slice):
        return index - window.start
    return np.searchsorted(window, index)


def window_index(ys: Index, xs: Index, channels: slice = slice(None)) -> tuple:
    """An index of ``image[H, W, C]`` that selects ``[len(ys), len(xs), channels]``."""
    if isinstance(ys, np.ndarray) and isinstance(xs, np.ndarray):
        return ys[:, None], xs[None, :], channels
    return ys, xs, channels


@dataclass
class Grid:
    """The sample grid of a block of regions: its y and x axes."""

    y: Axis
    x: Axis

    def windows(self, j: int) -> tuple[Index, Index]:
        return self.y.window[j], self.x.window[j]

    def bins(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        return self.y.bins[j][:, self.y.window[j]], self.x.bins[j][:, self.x.window[j]]

    def bin_derivatives(self, j: int) -> tuple[np.ndarray, ...]:
        """``d/dy1, d/dy2`` (per output row) and ``d/dx1, d/dx2`` over the window."""
        ys, xs = self.windows(j)
        return (self.y.d_first[j][:, ys], self.y.d_last[j][:, ys],
                self.x.d_first[j][:, xs], self.x.d_last[j][:, xs])


def all_finite(values: np.ndarray) -> np.ndarray:
    """Per leading index: no NaN or infinity."""
    return np.isfinite(values).reshape(values.shape[0], -1).all(axis=1)


def chunks(outputs: int, per_output: int, channels: int) -> Iterator[tuple[int, int, slice]]:
    """Output rows and channels of the per-sample paths, within the scratch budget."""
    width = max(1, min(channels, _CHUNK_BUDGET // max(per_output, 1)))
    rows = max(1, _CHUNK_BUDGET // max(per_output * width, 1))
    for c0 in range(0, channels, width):
        for o0 in range(0, outputs, rows):
            yield o0, min(outputs, o0 + rows), slice(c0, min(channels, c0 + width))


# ----------------------------------------------------------------------------------------------
# per-region algebra: weight matrices over the region's window. ``g`` and per-sample arrays are
# ``[Ky, Kx, C]``; sample axes are phase-major (``[ny, OH]`` by ``[nx, OW]``), so that the k-th
# samples of all bins form one block with the channels innermost.


def contract(Xw: np.ndarray, My: np.ndarray, Mx: np.ndarray, out: np.ndarray, *,
             channels_middle: bool = False) -> None:
    """``out[ky, kx, c] = sum_ij My[ky, i] Xw[i, j, c] Mx[kx, j]``, or ``out[ky, c, kx]``
    with ``channels_middle`` (a ``[OH, C, OW]`` view of Y is written directly)."""
    h, w, c = Xw.shape
    rows = serial_matmul(My, Xw.reshape(h, w * c)).reshape(My.shape[0], w, c)
    if channels_middle:
        np.matmul(rows.transpose(0, 2, 1), Mx.T, out=out)
    else:
        np.matmul(Mx, rows, out=out)


def back_project(g: np.ndarray, My: np.ndarray, Mx: np.ndarray) -> np.ndarray:
    """The adjoint of :func:`contract`: ``[h, w, C]`` from ``g [Ky, Kx, C]``."""
    cols = np.matmul(Mx.T, g)  # [Ky, w, C]
    ky, w, c = cols.shape
    return serial_matmul(My.T, cols.reshape(ky, w * c)).reshape(My.shape[1], w, c)


def region_gradient(Xw: np.ndarray, g: np.ndarray, My: np.ndarray, Mx: np.ndarray,
                    dy1: np.ndarray, dy2: np.ndarray, dx1: np.ndarray,
                    dx2: np.ndarray) -> np.ndarray:
    """``[d/dx1, d/dy1, d/dx2, d/dy2]`` of ``sum(g * contract(Xw, My, Mx))``, given the
    derivative matrices of the rows (``dy*``) and columns (``dx*``)."""
    h, w, c = Xw.shape
    ky = My.shape[0]
    rows = serial_matmul(np.vstack([My, dy1, dy2]), Xw.reshape(h, w * c))  # [3 Ky, w C]
    plain = np.matmul(Mx.T, g).reshape(ky, w * c)
    return np.array([np.vdot(rows[:ky], np.matmul(dx1.T, g).reshape(ky, w * c)),
                     np.vdot(rows[ky:2 * ky], plain),
                     np.vdot(rows[:ky], np.matmul(dx2.T, g).reshape(ky, w * c)),
                     np.vdot(rows[2 * ky:], plain)], np.float64)


# ----------------------------------------------------------------------------------------------
# per-sample values and their reductions


def sample_values(image: np.ndarray, grid: Grid, j: int, o0: int, o1: int, channels: slice,
                  *, exact: bool, linear: bool, out_of_bounds: float) -> np.ndarray:
    """The samples of output rows ``o0:o1`` of region ``j`` of ``image [H, W, C]``, as
    ``[Sy, Sx, C]`` (phase-major) with out-of-bounds samples set: by matrix products, or
    (``exact``, for images holding NaN or infinity) reading the four corners as the spec
    writes it."""
    qy, qx = grid.y.samples(j, o0, o1), grid.x.samples(j)
    if exact:
        values = gather_values(image, qy, qx, channels, linear)
    else:
        (wy,), (wx,) = grid.y.sample_matrices(j, o0, o1), grid.x.sample_matrices(j)
        window = image[window_index(*grid.windows(j), channels)]
        values = np.empty((wy.shape[0], wx.shape[0], window.shape[2]), image.dtype)
        contract(window, wy, wx, values)
    values[~qy.inside] = out_of_bounds
    values[:, ~qx.inside] = out_of_bounds
    return values


def _read(image: np.ndarray, ys: np.ndarray, xs: np.ndarray, channels: slice) -> np.ndarray:
    return image[ys[:, None], xs[None, :], channels]


def gather_values(image: np.ndarray, qy: Samples, qx: Samples, channels: slice,
                  linear: bool) -> np.ndarray:
    """``[Sy, Sx, C]``: ``(1-ly)(1-lx) P[y0,x0] + (1-ly) lx P[y0,x1] + ...`` literally."""
    if not linear:
        return _read(image, qy.lo, qx.lo, channels)
    one = image.dtype.type(1)
    ly, lx = qy.w_hi[:, None, None], qx.w_hi[None, :, None]
    return ((one - ly) * (one - lx) * _read(image, qy.lo, qx.lo, channels)
            + (one - ly) * lx * _read(image, qy.lo, qx.hi, channels)
            + ly * (one - lx) * _read(image, qy.hi, qx.lo, channels)
            + ly * lx * _read(image, qy.hi, qx.hi, channels))


def _parts(values: np.ndarray, ny: int, nx: int) -> list[np.ndarray]:
    """Each bin's k-th sample (row-major over ``ny x nx``) of ``[Sy, Sx, C]`` values, as
    ``[OHk, OW, C]`` views."""
    sy, sx, c = values.shape
    v = values.reshape(ny, sy // ny, nx, sx // nx, c)
    return [v[k // nx, :, k % nx] for k in range(ny * nx)]


def _by_sample(values: np.ndarray, ny: int, nx: int) -> np.ndarray:
    """``[Sy, Sx, C]`` samples as ``[ny * nx, OHk, OW, C]``: each bin's k-th sample (row-major
    over ``ny x nx``) in row k (a copy)."""
    sy, sx, c = values.shape
    v = values.reshape(ny, sy // ny, nx, sx // nx, c)  # the layout of _parts
    return np.ascontiguousarray(v.transpose(0, 2, 1, 3, 4)).reshape(ny * nx, sy // ny,
                                                                       sx // nx, c)


_MANY_SAMPLES = 64
"""Samples per bin above which a bin reduction is one numpy call over a copy, not a Python
loop over the samples (the loop's cost follows the sample count, not the data size)."""


def reduce_bins(values: np.ndarray, ny: int, nx: int, average: bool) -> np.ndarray:
    """``[Sy, Sx, C]`` samples to ``[OHk, OW, C]``: the mean or the max (NaN wins) per bin;
    a sum adds the samples in row-major order either way."""
    ufunc = np.add if average else np.maximum
    if ny * nx > _MANY_SAMPLES:
        result = ufunc.reduce(_by_sample(values, ny, nx), axis=0)  # row after row, in order
    else:
        parts = _parts(values, ny, nx)
        result = parts[0].copy()
        for part in parts[1:]:
            ufunc(result, part, out=result)
    if average:
        result /= values.dtype.type(ny * nx)
    return result


def argmax_bins(values: np.ndarray, ny: int, nx: int, *, nan_aware: bool) -> np.ndarray:
    """Per bin, the index (row-major over ``ny x nx``) of the first maximum; with
    ``nan_aware`` a NaN sample counts as the maximum, as in ``np.argmax``."""
    dtype = np.int16 if ny * nx < 1 << 15 else np.intp
    if ny * nx > _MANY_SAMPLES:  # np.argmax: the first maximum, or the first NaN
        return np.argmax(_by_sample(values, ny, nx), axis=0).astype(dtype)
    parts = _parts(values, ny, nx)
    best = parts[0].copy()
    index = np.zeros(best.shape, dtype)
    better = np.empty(best.shape, bool)
    for k, part in enumerate(parts[1:], 1):
        np.greater(part, best, out=better)
        if nan_aware:
            better |= np.isnan(part) & ~np.isnan(best)
        np.maximum(best, part, out=best)
        np.putmask(index, better, k)
    return index


def expand_bins(per_bin: np.ndarray, ny: int, nx: int) -> np.ndarray:
    """``[OHk, OW, C]`` to a new ``[Sy, Sx, C]``, each bin's value on its samples."""
    ko, ow, c = per_bin.shape
    spread = np.broadcast_to(per_bin[None, :, None], (ny, ko, nx, ow, c))
    return spread.reshape(ny * ko, nx * ow, c).copy()


def _from_sample(by_sample: np.ndarray, ny: int, nx: int) -> np.ndarray:
    """The inverse of :func:`_by_sample`: ``[ny * nx, OHk, OW, C]`` to ``[Sy, Sx, C]``."""
    _, ko, ow, c = by_sample.shape
    v = by_sample.reshape(ny, nx, ko, ow, c).transpose(0, 2, 1, 3, 4)
    return np.ascontiguousarray(v).reshape(ny * ko, nx * ow, c)


def _one_hot(index: np.ndarray, ny: int, nx: int) -> np.ndarray:
    """``[ny * nx, OHk, OW, C]``: whether each sample is its bin's chosen one."""
    return np.arange(ny * nx).reshape(-1, 1, 1, 1) == index[None]


def to_winners(per_bin: np.ndarray, index: np.ndarray, ny: int, nx: int) -> np.ndarray:
    """``[Sy, Sx, C]``: ``per_bin`` on the sample :func:`argmax_bins` chose, 0 elsewhere."""
    if ny * nx > _MANY_SAMPLES:
        return _from_sample(np.where(_one_hot(index, ny, nx), per_bin[None],
                                     per_bin.dtype.type(0)), ny, nx)
    ko, ow, c = per_bin.shape
    out = np.empty((ny * ko, nx * ow, c), per_bin.dtype)
    finite = np.isfinite(per_bin).all()
    hit = np.empty(index.shape, bool)
    for k, part in enumerate(_parts(out, ny, nx)):
        np.equal(index, k, out=hit)
        if finite:
            np.multiply(per_bin, hit, out=part)
        else:  # 0 * inf would be NaN
            np.copyto(part, np.where(hit, per_bin, per_bin.dtype.type(0)))
    return out


def winner_mask(index: np.ndarray, ny: int, nx: int) -> np.ndarray:
    """The one-hot ``[Sy, Sx, C]`` mask of the samples that :func:`argmax_bins` chose."""
    if ny * nx > _MANY_SAMPLES:
        return _from_sample(_one_hot(index, ny, nx), ny, nx)
    ko, ow, c = index.shape
    mask = np.empty((ny * ko, nx * ow, c), bool)
    for k, part in enumerate(_parts(mask, ny, nx)):
        np.equal(index, k, out=part)
    return mask


def scatter_samples(target: np.ndarray, weights: np.ndarray, qy: Samples, qx: Samples,
                    channels: slice, linear: bool) -> None:
    """Add ``weights [Sy, Sx, C]`` times each corner's interpolation weight onto the corners
    of ``target [H, W, C]`` (the literal adjoint of :func:`gather_values`)."""
    g = weights
    cs = np.arange(target.shape[2])[channels][None, None, :]
    if not linear:
        np.add.at(target, (qy.lo[:, None, None], qx.lo[None, :, None], cs), g)
        return
    one = target.dtype.type(1)
    ly, lx = qy.w_hi[:, None, None], qx.w_hi[None, :, None]
    for ys, wy in ((qy.lo, one - ly), (qy.hi, ly)):
        for xs, wx in ((qx.lo, one - lx), (qx.hi, lx)):
            np.add.at(target, (ys[:, None, None], xs[None, :, None], cs), g * (wy * wx))


def gather_gradient(image: np.ndarray, weights: np.ndarray, take: np.ndarray, qy: Samples,
                    qx: Samples, channels: slice, scale_x: float,
                    scale_y: float) -> np.ndarray:
    """``[d/dx1, d/dy1, d/dx2, d/dy2]`` as the spec writes it: every sample in ``take``
    (``[Sy, Sx, C]``) with weight ``weights`` adds its ``gX``, ``gY`` (corners ``floor`` and
    ``ceil`` of the clamped coordinate) on each axis where it is unclamped."""
    ly, lx = qy.w_hi[:, None, None], qx.w_hi[None, :, None]
    y0, y1 = qy.lo, qy.lo + (qy.w_hi > 0)
    x0, x1 = qx.lo, qx.lo + (qx.w_hi > 0)
    p00, p01 = _read(image, y0, x0, channels), _read(image, y0, x1, channels)
    p10, p11 = _read(image, y1, x0, channels), _read(image, y1, x1, channels)
    one = image.dtype.type(1)
    g = weights
    g_x = g * ((one - ly) * (p01 - p00) + ly * (p11 - p10))
    g_y = g * ((one - lx) * (p10 - p00) + lx * (p11 - p01))
    g_x = np.where(take & qx.unclamped[None, :, None], g_x, 0).sum(axis=(0, 2), dtype=np.float64)
    g_y = np.where(take & qy.unclamped[:, None, None], g_y, 0).sum(axis=(1, 2), dtype=np.float64)
    tx, ty = qx.t.astype(np.float64), qy.t.astype(np.float64)
    return np.array([scale_x * np.dot(g_x, 1 - tx), scale_y * np.dot(g_y, 1 - ty),
                     scale_x * np.dot(g_x, tx), scale_y * np.dot(g_y, ty)])


# ----------------------------------------------------------------------------------------------
# the operator


def roi_align1(X: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray, *,
               output_size: Sequence[int], reduction_function: str, interpolation_mode: str,
               spatial_scale_x: float, spatial_scale_y: float, input_pixel_offset: float,
               output_pixel_offset: float, out_of_bounds_input_value: float,
               minimum_samples_per_output: int, maximum_samples_per_output: int,
               align_regions_to_corners: int, node: str = "") -> np.ndarray:
    """Crop ``R`` regions of ``X [N, C, H, W]`` and resample each to ``[C, OH, OW]``."""
    (oh, ow), sampling, out_of_bounds = _check_all(
        node, output_size, out_of_bounds_input_value, reduction_function=reduction_function,
        interpolation_mode=interpolation_mode, spatial_scale_x=spatial_scale_x,
        spatial_scale_y=spatial_scale_y, input_pixel_offset=input_pixel_offset,
        output_pixel_offset=output_pixel_offset,
        minimum_samples_per_output=minimum_samples_per_output,
        maximum_samples_per_output=maximum_samples_per_output,
        align_regions_to_corners=align_regions_to_corners)
    X, rois, batch_indices = np.asarray(X), np.asarray(rois), np.asarray(batch_indices)
    check_float_input(OP, node, "X", X)
    check_rank(OP, node, "X", X, (4,))
    check_image_shape(OP, node, "X", X.shape)
    boxes, batch = check_regions(OP, node, X.shape, X.dtype, rois, batch_indices)
    dtype = compute_dtype(X.dtype)
    channels, height, width = X.shape[1:]
    Y = np.zeros((len(batch), channels, oh, ow), dtype)
    if Y.size == 0:
        return Y.astype(X.dtype)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and infinity are data here
        plan = Plan(OP, node, boxes, sampling, (oh, ow), (height, width), dtype)
        Xt = channels_last(X, dtype)
        finite = all_finite(Xt)
        plan.check_work(~((sampling.reduction == "average") & finite[batch]), channels)
        Yv = Y.transpose(0, 2, 1, 3)  # [R, OH, C, OW]
        _forward_blocks(plan, Xt, finite, batch, Y, Yv, out_of_bounds)
    return Y.astype(X.dtype, copy=False)


def _forward_blocks(plan: Plan, Xt: np.ndarray, finite: np.ndarray, batch: np.ndarray,
                    Y: np.ndarray, Yv: np.ndarray, out_of_bounds: float) -> None:
    sampling, dtype = plan.sampling, plan.dtype
    average = sampling.reduction == "average"
    for block in plan.blocks(bins=average, rows=not average, derivatives=False):
        grid = plan.grid(block, bins=average, rows=not average, derivatives=False)
        by_bins = average & finite[batch[block]]
        run_parallel([functools.partial(_forward_region, plan, grid, j, r, Xt, finite, batch,
                                        Yv, bool(by_bins[j]), out_of_bounds)
                      for j, r in enumerate(range(block.start, block.stop))])
        if by_bins.any() and out_of_bounds != 0:
            # The bins' matrices leave out-of-bounds samples out; they read out_of_bounds.
            share = grid.y.inside_share[:, :, None] * grid.x.inside_share[:, None, :]
            term = np.where(share == 1, 0, out_of_bounds * (1 - share)).astype(dtype)
            Y[block][by_bins] += term[by_bins][:, None]


def _forward_region(plan: Plan, grid: Grid, j: int, r: int, Xt: np.ndarray, finite: np.ndarray,
                    batch: np.ndarray, Yv: np.ndarray, by_bins: bool,
                    out_of_bounds: float) -> None:
    """Region ``r`` (``j`` in its block's grid) into ``Yv[r]`` only: regions run in parallel."""
    image = Xt[batch[r]]
    if by_bins:
        My, Mx = grid.bins(j)
        if My.shape[1] and Mx.shape[1]:
            contract(image[window_index(*grid.windows(j))], My, Mx, Yv[r], channels_middle=True)
        return
    plan.check_row_limit(r)
    ny, nx = int(plan.n_y[r]), int(plan.n_x[r])
    oh, ow = plan.output_size
    for o0, o1, cs in chunks(oh, ny * nx * ow, Xt.shape[3]):
        values = sample_values(image, grid, j, o0, o1, cs, exact=not finite[batch[r]],
                               linear=plan.sampling.linear, out_of_bounds=out_of_bounds)
        Yv[r, o0:o1, cs] = reduce_bins(values, ny, nx, plan.sampling.reduction == "average"
                                       ).transpose(0, 2, 1)
