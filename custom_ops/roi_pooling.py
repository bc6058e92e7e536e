"""RoiPooling: max pooling over regions of interest (Fast R-CNN ROI pooling), in numpy.

Shapes (torchvision.ops / ONNX ``MaxRoiPool`` style):

* ``X``: ``[N, C, H, W]``, float16, float32 or float64.
* ``rois``: ``[R, 5]``, or that with leading 1s up to rank 4 (DirectML's ``[1, 1, R, 5]``), of
  X's type; each row is ``[batch_id, x1, y1, x2, y2]`` in input-image coordinates, corners
  inclusive.
* ``Y``: ``[R, C, PH, PW]`` of X's type, ``pooled_size = [PH, PW]``.

Conventions (spec section 1): the batch id is truncated toward zero and must lie in ``[0, N)``;
each corner is ``round_half_even(coordinate * spatial_scale)`` with the product in float32
(float64 for double input); the region is ``max(x2 - x1 + 1, 1)`` wide (likewise high); bin
``p`` of ``P`` spans ``[p * size // P, ceil((p + 1) * size / P))`` from the region start, in
exact integer arithmetic, clamped to the image; an empty bin gives 0. The maximum starts at
``lowest(T)`` (-3.4028235e38 for float32, -65504 for float16) and ignores NaN, as DirectML
measures: a bin of only NaN or -inf gives ``lowest(T)``. float16 is computed in float32 and
rounded once at the end (max is exact, so this is float16's own max; numpy's float16 maximum
is slow).

Implementation: the compiled loops of :mod:`dml_onnx._kernels._roi_pooling_loops` check the rows and
compute every bin edge in int64, then pool over a channels-last copy of X (contiguous runs of
``C`` values), regions split over threads (a call small enough for one thread: both in one
compiled call). Rows that are invalid or lie beyond
:data:`~dml_onnx._kernels._roi_pooling_loops.EXACT` take a vectorised numpy path instead, which
raises the first row's error or computes the edges exactly in Python integers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from ._buffers import empty
from ._checks import (
    KernelError,
    check_finite,
    check_float_input,
    check_ints,
    check_rank,
    compute_dtype,
    lowest,
    takes_attributes,
)
from ._threads import (
    LayoutMemo,
    channels_last,
    compiled,
    interleaved,
    run_parallel,
    serial_work,
)
from .limits import check_memory, memory_limit

OP = "RoiPooling"

_CORNERS = ("x1", "y1", "x2", "y2")


def _check_attributes(node: str, pooled_size: Sequence[int], spatial_scale: float) -> None:
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
    _check_attributes(node, pooled_size, spatial_scale)
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
        bad_at = np.argwhere(~np.isfinite(values))
        if bad_at.size:
            i, j = (int(k) for k in bad_at[0])
            raise KernelError(OP, node, f"rois[{i}] {_CORNERS[j]}", _number(coords[i, j]), rule)


@takes_attributes(OP)
def prepare(*, node: str = "", pooled_size: Sequence[int], spatial_scale: float = 1.0
            ) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """:func:`roi_pooling` for one node, its attributes checked once: ``run(X, rois) -> Y``."""
    if pooled_size is None or isinstance(pooled_size, (str, bytes)) or spatial_scale is None:
        _check_attributes(node, pooled_size, spatial_scale)
    pooled = _attributes(node, tuple(np.ravel(pooled_size).tolist()), float(spatial_scale))
    return functools.partial(_run, node, pooled, float(spatial_scale), LayoutMemo())


def roi_pooling(X: np.ndarray, rois: np.ndarray, *, node: str = "", **attributes: Any
                ) -> np.ndarray:
    """Y ``[R, C, PH, PW]``: the maximum of each ROI bin of ``X`` (see the module docstring;
    attributes: :func:`prepare`)."""
    return prepare(node=node, **attributes)(X, rois)


def _check_layout(node: str, X: np.ndarray, rois: np.ndarray, pooled: tuple[int, int]) -> None:
    """:func:`check_inputs`, and the memory of the bin edges and of ``Y``."""
    regions = check_inputs(node, X, rois).shape[0]
    check_memory(OP, node, "temporary bin edges", (max(regions, 1), max(pooled)), np.int64)
    check_memory(OP, node, "output Y", (regions, X.shape[1], *pooled), X.dtype)


def _run(node: str, pooled: tuple[int, int], spatial_scale: float, layout: LayoutMemo,
         X: np.ndarray, rois: np.ndarray) -> np.ndarray:
    X, rois = np.asarray(X), np.asarray(rois)
    layout.check((memory_limit(), X.shape, X.dtype, rois.shape, rois.dtype),
                 lambda: _check_layout(node, X, rois, pooled))
    rows = rois if rois.ndim == 2 else rois.reshape(-1, 5)
    n, c, h, w = X.shape
    ctype = compute_dtype(X.dtype)
    Y = empty((rows.shape[0], c, *pooled), X.dtype)
    out = Y.view(np.uint16) if X.dtype == np.float16 else Y  # float16: written as its bits
    if Y.size and h and w:
        loops = compiled("_roi_pooling_loops")
        Xt = channels_last(X, ctype)
        if loops.small_pool(Xt, np.ascontiguousarray(rows, ctype), ctype.type(spatial_scale),
                            serial_work(), lowest(X.dtype), out):
            return Y
    geometry, pixels = _geometry(node, rows, n, h, w, *pooled, spatial_scale)
    if Y.size == 0 or h == 0 or w == 0:
        return np.zeros(Y.shape, X.dtype)
    _pool(Xt, geometry, pixels * c, lowest(X.dtype), out)
    return Y


def roi_pooling_argmax(X: np.ndarray, rois: np.ndarray, *, pooled_size: Sequence[int],
                       spatial_scale: float = 1.0, node: str = "") -> np.ndarray:
    """Where each bin's maximum came from: ``[R, C, PH, PW]`` int64 flat positions in ``X``
    (-1 for an empty bin or one of only NaN and -inf), the same bins and tie rule as
    :func:`roi_pooling` (its gradient goes to these positions)."""
    ph_count, pw_count = _attributes(node, tuple(np.ravel(pooled_size).tolist()),
                                     float(spatial_scale))
    X = np.asarray(X)
    rois = check_inputs(node, X, np.asarray(rois))
    n, c, h, w = X.shape
    check_memory(OP, node, "output positions", (rois.shape[0], c, ph_count, pw_count),
                 np.int64)
    geometry, _ = _geometry(node, rois, n, h, w, ph_count, pw_count, spatial_scale)
    positions = np.full((rois.shape[0], c, ph_count, pw_count), -1, np.int64)
    if positions.size and h and w:
        compiled("_roi_pooling_loops").argmax_regions(
            channels_last(X, compute_dtype(X.dtype)), *geometry, lowest(X.dtype), positions)
    return positions


def _geometry(node: str, rois: np.ndarray, n: int, h: int, w: int, ph: int, pw: int,
              spatial_scale: float) -> tuple[tuple[np.ndarray, ...], float]:
    """Checked ``[R, 5]`` rows as ``(batch [R], hs, he [R, PH], ws, we [R, PW])`` int64 bin
    edges, and the pixels their bins read."""
    loops = compiled("_roi_pooling_loops")

    r, ctype = rois.shape[0], compute_dtype(rois.dtype)
    geometry = (np.empty(r, np.int64), *(np.empty((r, p), np.int64) for p in (ph, ph, pw, pw)))
    status, pixels = loops.region_geometry(np.ascontiguousarray(rois, ctype),
                                           ctype.type(spatial_scale), n, h, w, *geometry)
    if status == loops.GEOMETRY_OK:
        return geometry, pixels
    # an invalid row (check_regions raises its error) or corners beyond int64's exact range
    scaled = check_regions(node, rois, n, spatial_scale)
    x1, y1, x2, y2 = _rounded_corners(scaled)
    hs, he = _bins(y1, y2, ph, h)
    ws, we = _bins(x1, x2, pw, w)
    pixels = float((np.maximum(he - hs, 0).sum(axis=1) * np.maximum(we - ws, 0).sum(axis=1)).sum())
    return (np.trunc(rois[:, 0].astype(np.float64)).astype(np.int64), hs, he, ws, we), pixels


# ------------------------------------------------------------------- the exact geometry path
def _number(value: float) -> int | float:
    """A float as the error message shows it: integral values without a trailing ``.0``."""
    value = float(value)
    return int(value) if value.is_integer() and abs(value) < 2.0 ** 53 else value


def _rounded_corners(scaled: np.ndarray) -> tuple[np.ndarray, ...]:
    """``round_half_even`` of the scaled corners ``[R, 4]``, as exact integers per corner.

    The result is int64 when every later bin computation fits in int64, else an object array
    of Python ints.
    """
    rounded = _exact_ints(np.rint(scaled))
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


def _pool(Xt: np.ndarray, geometry: tuple[np.ndarray, ...], work: float, start: np.floating,
          Y: np.ndarray) -> None:
    """The bin maxima into ``Y [R, C, PH, PW]`` (``Xt``'s type, or float16 bits) by the
    compiled loop over the channels-last ``Xt`` (each pixel's ``C`` values contiguous), regions
    split over threads; ``work``: the values the bins read; ``start``: ``lowest(T)``."""
    loops = compiled("_roi_pooling_loops")

    run_parallel([functools.partial(loops.pool_regions, Xt, *geometry, part, start, Y)
                  for part in interleaved(Y.shape[0], work)])
