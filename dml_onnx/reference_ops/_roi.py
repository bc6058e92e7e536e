"""What the RoiAlign1 and RoiAlignGrad references share (specification section 2): the sample
grid of one region and the reading of one sample.

Along x (y alike, with ``y1, y2, spatial_scale_y, H, OH``) region ``[x1, y1, x2, y2]`` is
sampled at ``S = OW * n`` points::

    sx1  = x1 * spatial_scale_x ; size = x2 * spatial_scale_x - sx1   (rounded once, a fma)
    n    = clamp(ceil(|size| / OW), minimum_samples_per_output, maximum_samples_per_output)
    t(s) = (s - output_pixel_offset) / S     (/ (S - 1) when aligning corners; 1/2 if S == 1)
    X(s) = sx1 + t(s) * size - input_pixel_offset

and output ``ox`` takes the samples ``ox * n .. ox * n + n - 1``. This geometry is computed in
the compute type ``ct`` (``np.float32`` for float16 and float32, ``np.float64`` for double), one
operation at a time in this order, because the out-of-bounds test (``X(s) <= -1`` or
``X(s) >= W``; outside ``[0, W - 1]`` when aligning corners), the clamping to ``[0, W - 1]``
and the floors depend on it bit for bit. A sample's value is two nested linear interpolations
in ``ct``, x first (so a weight 0 on an infinite pixel gives NaN); the interpolation weights
kept for the gradients are exact float64 values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from dml_onnx._kernels._roi_grid import Sampling, scaled_region_overflow
from dml_onnx._kernels.limits import check_work

ComputeType = type[np.float32] | type[np.float64]


class AxisSample(NamedTuple):
    """One sample position along one axis of a region."""

    t: float  # t(s): 0 at the region's first corner, 1 at its last
    inside: bool  # -1 < X(s) < L (the axis length; 0 <= X(s) <= L - 1 when aligning)
    unclamped: bool  # 0 <= X(s) <= L - 1: read where it lies
    coordinate: float  # X(s) clamped to [0, L - 1], a value of the compute type
    taps: tuple[tuple[int, float], ...]  # (pixel, interpolation weight) read along this axis


class Grid(NamedTuple):
    """The samples of one region: ``n_y`` and ``n_x`` per output, ``OH * n_y`` rows and
    ``OW * n_x`` columns."""

    n_y: int
    n_x: int
    rows: list[AxisSample]
    columns: list[AxisSample]

    def samples(self, oy: int, ox: int) -> list[tuple[AxisSample, AxisSample]]:
        """The ``n_y * n_x`` samples ``(y, x)`` of output ``(oy, ox)``, in row-major order."""
        return [(y, x) for y in self.rows[oy * self.n_y:(oy + 1) * self.n_y]
                for x in self.columns[ox * self.n_x:(ox + 1) * self.n_x]]


def compute_type(dtype: np.dtype) -> ComputeType:
    """``np.float32`` for float16 and float32 elements, ``np.float64`` for double."""
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


def check_scaled(op: str, node: str, boxes: np.ndarray, sampling: Sampling,
                 ct: ComputeType) -> None:
    """Raise the kernel's error for the first region ``[x1, y1, x2, y2]`` whose scaled size
    along y or x is not finite in ``ct`` (a product or the difference overflows)."""
    with np.errstate(over="ignore", invalid="ignore"):
        for r, box in enumerate(boxes):
            x1, y1, x2, y2 = box.tolist()
            for first, last, scale in ((y1, y2, sampling.scale_y), (x1, x2, sampling.scale_x)):
                if not math.isfinite(ct(last) * ct(scale) - ct(first) * ct(scale)):
                    raise scaled_region_overflow(op, node, r, box, sampling, ct)


def region_grid(box: Sequence[float], output_size: Sequence[int], image_size: Sequence[int],
                sampling: Sampling, ct: ComputeType) -> Grid:
    """The sample grid of region ``box = [x1, y1, x2, y2]`` (checked by :func:`check_scaled`)
    for ``output_size [OH, OW]`` over an image of ``image_size [H, W]``."""
    x1, y1, x2, y2 = box
    (oh, ow), (height, width) = output_size, image_size
    with np.errstate(over="ignore", invalid="ignore"):  # t(s) * size may overflow: outside
        n_y, rows = _axis(y1, y2, sampling.scale_y, oh, height, sampling, ct)
        n_x, columns = _axis(x1, x2, sampling.scale_x, ow, width, sampling, ct)
    return Grid(n_y, n_x, rows, columns)


def sample_reads(op: str, node: str, boxes: np.ndarray, output_size: Sequence[int],
                 channels: int, sampling: Sampling, ct: ComputeType) -> None:
    """Raise the kernels' error when the samples of every region ``[x1, y1, x2, y2]`` (checked
    by :func:`check_scaled`) times ``channels`` are above the work limit: checked before any
    sample is made, so that a call the kernel refuses never starts its loops."""
    total = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        for x1, y1, x2, y2 in boxes.tolist():
            total += math.prod(
                outputs * _extent(first, last, scale, outputs, sampling, ct)[2]
                for first, last, scale, outputs in (
                    (y1, y2, sampling.scale_y, output_size[0]),
                    (x1, x2, sampling.scale_x, output_size[1])))
    check_work(op, node, "sample reads", total * channels)


def _extent(first: float, last: float, scale: float, outputs: int, sampling: Sampling,
            ct: ComputeType) -> tuple[np.floating, np.floating, int]:
    """``(start, size, n)`` of one axis of a region, in ``ct``."""
    start = ct(first) * ct(scale)
    size = ct(float(Fraction(float(ct(last))) * Fraction(float(ct(scale)))
                    - Fraction(float(start))))  # rounded once, as a fused multiply-add
    n = min(max(math.ceil(np.abs(size) / ct(outputs)), sampling.minimum), sampling.maximum)
    return start, size, n


def _axis(first: float, last: float, scale: float, outputs: int, length: int,
          sampling: Sampling, ct: ComputeType) -> tuple[int, list[AxisSample]]:
    """``n`` and the ``outputs * n`` samples along one axis, in ``ct``."""
    start, size, n = _extent(first, last, scale, outputs, sampling, ct)
    total = outputs * n
    samples = []
    for s in range(total):
        if not sampling.align_corners:
            t = (ct(s) - ct(sampling.output_pixel_offset)) / ct(total)
        elif total > 1:
            t = (ct(s) - ct(sampling.output_pixel_offset)) / ct(total - 1)
        else:
            t = ct(0.5)
        position = start + t * size - ct(sampling.input_pixel_offset)
        samples.append(_axis_sample(float(t), position, length, sampling, ct))
    return n, samples


def _axis_sample(t: float, position: np.floating, length: int, sampling: Sampling,
                 ct: ComputeType) -> AxisSample:
    """The sample at ``position`` (``X(s)`` in ``ct``) of an axis of ``length`` pixels."""
    if sampling.align_corners:
        inside = ct(0) <= position <= ct(length - 1)
    else:
        inside = ct(-1) < position < ct(length)
    coordinate = min(max(position, ct(0)), ct(length - 1))
    taps: tuple[tuple[int, float], ...]
    if sampling.linear:
        lo = math.floor(coordinate)
        frac = float(coordinate) - lo  # exact
        taps = ((lo, 1 - frac), (min(lo + 1, length - 1), frac))
    else:
        taps = ((min(math.floor(coordinate + ct(0.5)), length - 1), 1.0),)
    return AxisSample(t, bool(inside), bool(inside and position == coordinate),
                      float(coordinate), taps)


def read(plane: list[list[float]], y: AxisSample, x: AxisSample, out_of_bounds: float,
         ct: ComputeType) -> float:
    """The value of sample ``(y, x)`` of one image plane ``[H][W]``: ``out_of_bounds`` when it
    lies outside, the pixel it reads (nearest), or in ``ct`` (linear)::

        top = P[y0, x0] + (P[y0, x1] - P[y0, x0]) * lx
        bottom = P[y1, x0] + (P[y1, x1] - P[y1, x0]) * lx
        value = top + (bottom - top) * ly
    """
    if not (y.inside and x.inside):
        return out_of_bounds
    if len(x.taps) == 1:
        return plane[y.taps[0][0]][x.taps[0][0]]
    (y0, _), (y1, ly) = y.taps
    (x0, _), (x1, lx) = x.taps
    with np.errstate(invalid="ignore", over="ignore"):
        top = ct(plane[y0][x0]) + (ct(plane[y0][x1]) - ct(plane[y0][x0])) * ct(lx)
        bottom = ct(plane[y1][x0]) + (ct(plane[y1][x1]) - ct(plane[y1][x0])) * ct(lx)
        return float(top + (bottom - top) * ct(ly))
