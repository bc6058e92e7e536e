"""RoiPooling (specification section 1), one output element at a time.

``X [N, C, H, W]`` and ``rois [R, 5]`` (or that with leading 1s up to rank 4), rows
``[batch_id, x1, y1, x2, y2]``, give ``Y [R, C, PH, PW]`` of ``X``'s type::

    b  = trunc(batch_id)
    x1 = round_half_away(x1 * spatial_scale)       (y1, x2, y2 alike; the product in float32,
                                                    or float64 for double)
    RH = max(y2 - y1 + 1, 1)
    rows of bin ph: [ph * RH / PH + y1, ceil_div((ph + 1) * RH, PH) + y1), clamped to [0, H]
    Y[r, c, ph, pw] = max of X[b, c] over the rows of bin ph and the columns of bin pw

(columns alike, with x1, x2, PW and W). An empty bin gives 0, a bin holding a NaN gives NaN.
Bin edges are exact Python integers; a maximum is one of the input values, so ``Y`` is exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from custom_ops.roi_pooling import check_inputs, check_regions


def roi_pooling(X: np.ndarray, rois: np.ndarray, *, pooled_size: Sequence[int],
                spatial_scale: float = 1.0, node: str = "") -> np.ndarray:
    """``Y [R, C, PH, PW]``: the maximum of each bin of each region of ``X [N, C, H, W]``."""
    X = np.asarray(X)
    rows = check_inputs(node, X, np.asarray(rois))
    images, channels, height, width = X.shape
    check_regions(node, rows, images, spatial_scale)
    ph_count, pw_count = pooled_size
    Y = np.empty((len(rows), channels, ph_count, pw_count), X.dtype)
    if Y.size == 0:
        return Y
    planes = X.tolist()  # Python floats
    for r, row in enumerate(rows.tolist()):
        b = math.trunc(row[0])
        x1, y1, x2, y2 = region_corners(row, spatial_scale, X.dtype)
        row_bins = bin_edges(y1, y2, ph_count, height)
        column_bins = bin_edges(x1, x2, pw_count, width)
        for c in range(channels):
            for ph, (hstart, hend) in enumerate(row_bins):
                for pw, (wstart, wend) in enumerate(column_bins):
                    Y[r, c, ph, pw] = _bin_maximum(planes[b][c], range(hstart, hend),
                                                   range(wstart, wend))
    return Y


def round_half_away(v: float) -> int:
    """``v`` rounded to an integer, .5 away from zero (C ``round``), exactly."""
    magnitude = abs(v)
    whole = math.floor(magnitude)
    if magnitude - whole >= 0.5:  # exact in floating point
        whole += 1
    return whole if v >= 0 else -whole


def region_corners(row: Sequence[float], spatial_scale: float, dtype: np.dtype) -> list[int]:
    """``[x1, y1, x2, y2]`` of one rois row ``[batch_id, x1, y1, x2, y2]`` of ``dtype``:
    ``round_half_away(coordinate * spatial_scale)``, the product in float32 (float64 for
    double)."""
    ftype = np.float64 if np.dtype(dtype) == np.float64 else np.float32
    return [round_half_away(float(ftype(v) * ftype(spatial_scale))) for v in row[1:]]


def bin_edges(lo: int, hi: int, pooled: int, limit: int) -> list[tuple[int, int]]:
    """``[start, end)`` of each of the ``pooled`` bins of the region ``lo..hi`` (inclusive) of
    one axis, clamped to ``[0, limit]``."""
    size = max(hi - lo + 1, 1)
    edges = []
    for p in range(pooled):
        start = p * size // pooled + lo
        end = ((p + 1) * size + pooled - 1) // pooled + lo  # ceil_div((p + 1) * size, pooled)
        edges.append((min(max(start, 0), limit), min(max(end, 0), limit)))
    return edges


def _bin_maximum(plane: list[list[float]], rows: range, columns: range) -> float:
    """The largest value of ``plane`` over a bin: 0 when the bin is empty, NaN when it holds
    a NaN."""
    values = [plane[y][x] for y in rows for x in columns]
    if not values:
        return 0.0
    if any(math.isnan(v) for v in values):
        return math.nan
    return max(values)
