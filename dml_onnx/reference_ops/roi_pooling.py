"""RoiPooling (specification section 1), one output element at a time.

``X [N, C, H, W]`` and ``rois [R, 5]`` (or that with leading 1s up to rank 4), rows
``[batch_id, x1, y1, x2, y2]``, give ``Y [R, C, PH, PW]`` of ``X``'s type::

    b  = trunc(batch_id)
    x1 = round_half_even(x1 * spatial_scale)       (y1, x2, y2 alike; the product in float32,
                                                    or float64 for double)
    RH = max(y2 - y1 + 1, 1)
    rows of bin ph: [ph * RH / PH + y1, ceil_div((ph + 1) * RH, PH) + y1), clamped to [0, H]
    Y[r, c, ph, pw] = maxnum(lowest(T), X[b, c] over the rows of bin ph and columns of bin pw)

(columns alike, with x1, x2, PW and W): NaN is ignored and a bin of only NaN or -inf gives
``lowest(T)``, the type's lowest finite value. An empty bin gives 0.
Bin edges are exact Python integers; a maximum is one of the input values, so ``Y`` is exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dml_onnx._kernels.roi_pooling import check_inputs, check_regions


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
        start = float(np.finfo(X.dtype).min)
        row_bins = bin_edges(y1, y2, ph_count, height)
        column_bins = bin_edges(x1, x2, pw_count, width)
        for c in range(channels):
            for ph, (hstart, hend) in enumerate(row_bins):
                for pw, (wstart, wend) in enumerate(column_bins):
                    Y[r, c, ph, pw] = _bin_maximum(planes[b][c], range(hstart, hend),
                                                   range(wstart, wend), start)
    return Y


def round_half_even(v: float) -> int:
    """``v`` rounded to an integer, .5 to the even one (IEEE, HLSL ``round``), exactly."""
    whole = math.floor(v)
    rest = v - whole  # exact in floating point
    return whole + (rest > 0.5 or (rest == 0.5 and whole % 2 == 1))


def region_corners(row: Sequence[float], spatial_scale: float, dtype: np.dtype) -> list[int]:
    """``[x1, y1, x2, y2]`` of one rois row ``[batch_id, x1, y1, x2, y2]`` of ``dtype``:
    ``round_half_even(coordinate * spatial_scale)``, the product in float32 (float64 for
    double)."""
    ftype = np.float64 if np.dtype(dtype) == np.float64 else np.float32
    return [round_half_even(float(ftype(v) * ftype(spatial_scale))) for v in row[1:]]


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


def _bin_maximum(plane: list[list[float]], rows: range, columns: range,
                 start: float) -> float:
    """``maxnum`` of ``start`` and the values of ``plane`` over a bin (NaN ignored); 0 when
    the bin is empty."""
    values = [plane[y][x] for y in rows for x in columns]
    if not values:
        return 0.0
    return max([start, *(v for v in values if not math.isnan(v))])
