"""RoiPooling: max pooling over regions of interest (Fast R-CNN ROI pooling), in numpy.

Shapes (torchvision.ops / ONNX ``MaxRoiPool`` style):

* ``X``: ``[N, C, H, W]``, float16, float32 or float64.
* ``rois``: ``[R, 5]``, or that with leading 1s up to rank 4 (DirectML's ``[1, 1, R, 5]``), of
  X's type; each row is ``[batch_id, x1, y1, x2, y2]`` in input-image coordinates, corners
  inclusive.
* ``Y``: ``[R, C, PH, PW]`` of X's type, ``pooled_size = [PH, PW]``.

Conventions (spec section 1): the batch id is truncated toward zero and must lie in ``[0, N)``;
each corner is ``round_half_away(coordinate * spatial_scale)`` with the product in float32
(float64 for double input); the region is ``max(x2 - x1 + 1, 1)`` wide (likewise high); bin
``p`` of ``P`` spans ``[p * size // P, ceil((p + 1) * size / P))`` from the region start, in
exact integer arithmetic, clamped to the image; an empty bin gives 0 and a NaN in a bin gives
NaN. float16 is computed in float32 and rounded once at the end (max is exact, so this is
float16's own max; numpy's float16 maximum is slow).

Implementation: up to :data:`SMALL_ROIS` regions get their geometry in Python integers and one
gather of their bins' pixels (few numpy calls: small inputs); more regions get it vectorised
and are pooled by the compiled loop of :mod:`custom_ops._roi_pooling_loops` over a
channels-last copy of X (contiguous runs of ``C`` values), regions split over threads.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from custom_ops._common import (
    KernelError,
    channels_last,
    check_finite,
    check_float_input,
    check_ints,
    check_memory,
    check_rank,
    compute_dtype,
    interleaved,
    round_half_away,
    run_parallel,
)

OP = "RoiPooling"

_CORNERS = ("x1", "y1", "x2", "y2")
SMALL_ROIS = 4
"""Up to this many regions: geometry in Python integers (fewer numpy calls)."""
_SMALL_GATHER = 1 << 14  # ... and pooled by one gather when it reads at most this many pixels


def check_attributes(*, node: str, pooled_size: Sequence[int], spatial_scale: float) -> None:
    """Attribute-only rules: ``pooled_size`` two values >= 1, ``spatial_scale`` finite."""
    if pooled_size is None or isinstance(pooled_size, (str, bytes)):
        raise KernelError(OP, node, "pooled_size", pooled_size, "must be two integers [PH, PW]")
    check_ints(OP, node, "pooled_size", list(np.ravel(pooled_size)), minimum=1, length=2)
    if spatial_scale is None:
        raise KernelError(OP, node, "spatial_scale", spatial_scale, "must be a float")
    value = check_finite(OP, node, "spatial_scale", spatial_scale)
    with np.errstate(over="ignore"):
        if not np.isfinite(np.float32(value)):
            raise KernelError(OP, node, "spatial_scale", value,
                              "is not finite as a float32 (the attribute's type)")


@lru_cache(maxsize=256)
def _attributes(node: str, pooled_size: tuple, spatial_scale: float) -> tuple[int, int]:
    """Checked ``(PH, PW)`` (cached; invalid attributes raise every time)."""
    check_attributes(node=node, pooled_size=pooled_size, spatial_scale=spatial_scale)
    ph, pw = (int(v) for v in pooled_size)
    return ph, pw


def check_inputs(node: str, X: np.ndarray, rois: np.ndarray) -> np.ndarray:
    """Check the element types and shapes of ``X`` and ``rois``; return ``rois`` as its
    ``[R, 5]`` rows."""
    check_float_input(OP, node, "X", X)
    check_rank(OP, node, "X", X, (4,))
    check_float_input(OP, node, "rois", rois)
    if rois.dtype != X.dtype:
        raise KernelError(OP, node, "rois element type", rois.dtype.name,
                          f"does not match X element type {X.dtype.name}")
    if not (2 <= rois.ndim <= 4 and rois.shape[-1] == 5 and all(d == 1 for d in rois.shape[:-2])):
        raise KernelError(OP, node, "rois shape", list(rois.shape),
                          "is not [R, 5], [1, R, 5] or [1, 1, R, 5]")
    return rois.reshape(-1, 5)


def check_regions(node: str, rois: np.ndarray, n: int, spatial_scale: float) -> np.ndarray:
    """Check the ``[R, 5]`` rows against ``N`` images: every batch id truncates into
    ``[0, N)``, then every corner is finite, then finite times ``spatial_scale`` in the
    compute type (float32, or float64 for double); the first bad row raises.

    Returns the corners times ``spatial_scale``, ``[R, 4]`` in the compute type.
    """
    ctype = compute_dtype(rois.dtype)
    with np.errstate(over="ignore"):
        scaled = rois[:, 1:].astype(ctype) * ctype.type(spatial_scale)
    ids = rois[:, 0].astype(np.float64)
    # Valid rows pass in a few numpy calls: -1 < id < N is 0 <= trunc(id) < N, and a corner
    # that is not finite makes its product not finite.
    if not (np.isfinite(scaled).all() and ((ids > -1) & (ids < n)).all()):
        _raise_first_error(node, rois, ids, scaled, n, spatial_scale)
    return scaled


def _raise_first_error(node: str, rois: np.ndarray, ids: np.ndarray, scaled: np.ndarray,
                       n: int, spatial_scale: float) -> None:
    """The error of :func:`check_regions` for rows of which one is bad."""
    truncated = np.trunc(ids)
    bad = np.flatnonzero(~((truncated >= 0) & (truncated < n)))  # NaN fails both tests
    if bad.size:
        i = int(bad[0])
        rule = f"is outside [0, {n})" if not np.isnan(ids[i]) else f"is NaN, not in [0, {n})"
        raise KernelError(OP, node, f"rois[{i}] batch index", _number(ids[i]), rule)
    coords = rois[:, 1:]
    overflow = f"times spatial_scale {spatial_scale} overflows {scaled.dtype.name}"
    for values, rule in ((coords, "is not finite"), (scaled, overflow)):
        bad = np.argwhere(~np.isfinite(values))
        if bad.size:
            i, j = (int(k) for k in bad[0])
            raise KernelError(OP, node, f"rois[{i}] {_CORNERS[j]}", _number(coords[i, j]), rule)


def roi_pooling(X: np.ndarray, rois: np.ndarray, *, pooled_size: Sequence[int],
                spatial_scale: float = 1.0, node: str = "") -> np.ndarray:
    """Y ``[R, C, PH, PW]``: the maximum of each ROI bin of ``X`` (see the module docstring)."""
    if pooled_size is None or isinstance(pooled_size, (str, bytes)) or spatial_scale is None:
        check_attributes(node=node, pooled_size=pooled_size, spatial_scale=spatial_scale)
    if type(pooled_size) is not tuple:
        pooled_size = tuple(np.ravel(pooled_size).tolist())
    ph_count, pw_count = _attributes(node, pooled_size, float(spatial_scale))
    X = np.asarray(X)
    rois = check_inputs(node, X, np.asarray(rois))
    n, c, h, w = X.shape
    r = rois.shape[0]
    ctype = compute_dtype(X.dtype)
    check_memory(OP, node, "temporary bin edges", (max(r, 1), max(ph_count, pw_count)),
                 np.int64)
    check_memory(OP, node, "output Y", (r, c, ph_count, pw_count), X.dtype)
    scaled = check_regions(node, rois, n, spatial_scale)
    if r <= SMALL_ROIS:
        regions = _python_regions(rois, scaled, h, w, ph_count, pw_count)
        if min(c, h, w) and sum(_gathered(region) for region in regions) <= _SMALL_GATHER:
            return _pool_by_gather(X, regions, ph_count, pw_count)
        batch, *edges = zip(*regions)
        geometry = (np.array(batch, np.int64), *(np.array(e, np.int64) for e in edges))
    else:
        batch = np.trunc(rois[:, 0].astype(np.float64)).astype(np.int64)
        x1, y1, x2, y2 = _rounded_corners(scaled)
        geometry = (batch, *_bins(y1, y2, ph_count, h), *_bins(x1, x2, pw_count, w))
    if min(r, c, h, w) == 0:
        return np.zeros((r, c, ph_count, pw_count), X.dtype)
    return _pool(X, ctype, *geometry).astype(X.dtype, copy=False)


# ------------------------------------------------------------------ few regions: Python integers
Region = tuple[int, list[int], list[int], list[int], list[int]]
"""Batch index, then bin starts and ends over rows (PH each), then over columns (PW each)."""


def _python_regions(rois: np.ndarray, scaled: np.ndarray, h: int, w: int, ph: int,
                    pw: int) -> list[Region]:
    """The geometry of a few checked regions in exact Python integers, from their rows and
    their corners times ``spatial_scale`` (:func:`check_regions`)."""
    regions = []
    for batch_id, corners in zip(rois[:, 0].tolist(), scaled.tolist()):
        x1, y1, x2, y2 = (_round_half_away(v) for v in corners)
        regions.append((math.trunc(batch_id), *_python_bins(y1, y2, ph, h),
                        *_python_bins(x1, x2, pw, w)))
    return regions


def _round_half_away(v: float) -> int:
    magnitude = abs(v)
    whole = math.floor(magnitude)
    whole += magnitude - whole >= 0.5  # exact in floating point
    return int(whole) if v >= 0 else -int(whole)


def _python_bins(lo: int, hi: int, pooled: int, limit: int) -> tuple[list[int], list[int]]:
    """:func:`_bins` of one region in Python integers."""
    size = max(hi - lo + 1, 1)
    starts = [min(max(p * size // pooled + lo, 0), limit) for p in range(pooled)]
    ends = [min(max(((p + 1) * size + pooled - 1) // pooled + lo, 0), limit)
            for p in range(pooled)]
    return starts, ends


def _gathered(region: Region) -> int:
    """Pixels one gather reads for a region: bins times the largest bin."""
    _, hs, he, ws, we = region
    height = max(max(e - s for s, e in zip(hs, he)), 1)
    width = max(max(e - s for s, e in zip(ws, we)), 1)
    return len(hs) * len(ws) * height * width


def _pool_by_gather(X: np.ndarray, regions: list[Region], ph: int, pw: int) -> np.ndarray:
    """Each region's bins read by one gather (shorter bins repeat their last pixel)."""
    n, c, h, w = X.shape
    Y = np.empty((len(regions), c, ph, pw), X.dtype)
    planes = X.reshape(n, c, h * w)
    for i, (b, hs, he, ws, we) in enumerate(regions):
        bins = [[y * w + x for y in range(ys, ye) for x in range(xs, xe)]
                for ys, ye in zip(hs, he) for xs, xe in zip(ws, we)]
        size = max(1, *(len(pixels) for pixels in bins))
        empty = [not pixels for pixels in bins]
        index = [pixels + pixels[-1:] * (size - len(pixels)) if pixels else [0] * size
                 for pixels in bins]
        values = planes[b][:, index].max(axis=2)  # [C, PH * PW]
        if any(empty):
            values[:, empty] = 0
        Y[i] = values.reshape(c, ph, pw)
    return Y


# ----------------------------------------------------------------------- many regions: vectorised
def _number(value: float) -> int | float:
    """A float as the error message shows it: integral values without a trailing ``.0``."""
    value = float(value)
    return int(value) if value.is_integer() and abs(value) < 2.0 ** 53 else value


def _rounded_corners(scaled: np.ndarray) -> tuple[np.ndarray, ...]:
    """``round_half_away`` of the scaled corners ``[R, 4]``, as exact integers per corner.

    The result is int64 when every later bin computation fits in int64, else an object array
    of Python ints.
    """
    rounded = _exact_ints(round_half_away(scaled))
    return tuple(rounded[:, j] for j in range(4))


def _exact_ints(values: np.ndarray) -> np.ndarray:
    # 2**40 leaves int64 room for (p + 1) * size + p + start with any p up to 2**20; beyond
    # that (coordinates far outside any image) Python ints keep the arithmetic exact.
    if values.size == 0 or np.abs(values).max() <= 2.0 ** 40:
        return values.astype(np.int64)
    return np.array([[int(v) for v in row] for row in values.astype(np.float64)], dtype=object)


def _bins(lo: np.ndarray, hi: np.ndarray, pooled: int, limit: int) -> tuple[np.ndarray, ...]:
    """Bin ``[start, end)`` per ROI and bin, ``[R, pooled]`` int64, clamped to ``[0, limit]``."""
    size = np.maximum(hi - lo + 1, 1)[:, None]
    big = lo.dtype == object or pooled > (1 << 20)
    p = np.arange(pooled).astype(object if big else np.int64)
    if big and size.dtype != object:
        size, lo = size.astype(object), lo.astype(object)
    start = (p * size) // pooled + lo[:, None]
    end = ((p + 1) * size + (pooled - 1)) // pooled + lo[:, None]
    return (np.minimum(np.maximum(start, 0), limit).astype(np.int64, copy=False),
            np.minimum(np.maximum(end, 0), limit).astype(np.int64, copy=False))


def _pool(X: np.ndarray, ctype: np.dtype, batch: np.ndarray, hs: np.ndarray, he: np.ndarray,
          ws: np.ndarray, we: np.ndarray) -> np.ndarray:
    """The bin maxima ``[R, C, PH, PW]`` in ``ctype``, by the compiled loop over a
    channels-last copy of X (each pixel's ``C`` values contiguous), regions split over
    threads."""
    from custom_ops import _roi_pooling_loops as loops  # compiled on first use

    r, ph_count = hs.shape
    Y = np.empty((r, X.shape[1], ph_count, ws.shape[1]), ctype)
    work = float((np.maximum(he - hs, 0).sum(axis=1) * np.maximum(we - ws, 0).sum(axis=1)).sum()
                 ) * X.shape[1]
    source = channels_last(X, ctype)
    run_parallel([functools.partial(loops.pool_regions, source, batch, hs, he, ws, we, part, Y)
                  for part in interleaved(r, work)])
    return Y
