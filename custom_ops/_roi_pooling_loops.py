"""The compiled loops of RoiPooling (specification section 1), by
:data:`dml_onnx._kernels._jit.jit`."""

from __future__ import annotations

import numpy as np

from ._half_float_loops import narrowed
from ._jit import jit

EXACT = 2.0 ** 40
"""Rounded corners up to this size, and pooled sizes up to :data:`EXACT_BINS`, keep every bin
edge computation inside int64; larger ones take the exact Python-integer path."""
EXACT_BINS = 1 << 20
GEOMETRY_OK, GEOMETRY_OTHER = 0, 1


@jit
def region_geometry(rois, scale, images, height, width, batch, hs, he, ws, we):
    """Every region's batch index ``batch [R]`` and bin edges ``hs, he [R, PH]``,
    ``ws, we [R, PW]`` from ``rois [R, 5]`` (the compute type; ``scale`` of that type), as
    specification section 1 says; returns ``(GEOMETRY_OK, pixels read)``, or
    ``(GEOMETRY_OTHER, 0)`` when a row is invalid or beyond :data:`EXACT` (the caller's exact
    path then raises or computes it)."""
    ph, pw = hs.shape[1], ws.shape[1]
    if ph > EXACT_BINS or pw > EXACT_BINS:
        return GEOMETRY_OTHER, 0.0
    pixels = 0.0
    for r in range(rois.shape[0]):
        index = np.float64(rois[r, 0])
        if not (index > -1 and index < images):  # trunc(index) in [0, images); NaN fails
            return GEOMETRY_OTHER, 0.0
        batch[r] = np.int64(index)
        x1, y1, x2, y2 = (rois[r, 1] * scale, rois[r, 2] * scale, rois[r, 3] * scale,
                          rois[r, 4] * scale)
        if not (abs(x1) <= EXACT and abs(y1) <= EXACT and abs(x2) <= EXACT
                and abs(y2) <= EXACT):  # also inf and NaN
            return GEOMETRY_OTHER, 0.0
        rows = _bins(_round_half_even(y1), _round_half_even(y2), height, hs[r], he[r])
        columns = _bins(_round_half_even(x1), _round_half_even(x2), width, ws[r], we[r])
        pixels += rows * columns
    return GEOMETRY_OK, pixels


@jit
def _round_half_even(value):
    """``value`` rounded to the nearest integer, .5 to the even one, as int64
    (``|value| <= EXACT``)."""
    return np.int64(np.rint(value))


@jit
def _bins(lo, hi, limit, starts, ends):
    """Bin ``p`` of ``P`` spans ``[p * size // P, ceil((p + 1) * size / P))`` from ``lo``,
    ``size = max(hi - lo + 1, 1)``, clamped to ``[0, limit]``; returns the summed bin sizes."""
    pooled = starts.size
    size = max(hi - lo + 1, 1)
    total = 0
    for p in range(pooled):
        starts[p] = min(max(p * size // pooled + lo, 0), limit)
        ends[p] = min(max(((p + 1) * size + pooled - 1) // pooled + lo, 0), limit)
        total += max(ends[p] - starts[p], 0)
    return total


@jit
def pool_regions(Xt, batch, hs, he, ws, we, regions, lowest, Y):
    """``Y[r] [C, PH, PW]`` for every region ``r`` in ``regions``: per bin, the maximum over
    rows ``hs[r, i]:he[r, i]`` and columns ``ws[r, j]:we[r, j]`` of the channels-last image
    ``Xt[batch[r]] [H, W, C]``, starting at ``lowest`` (the output type's lowest finite value)
    and ignoring NaN; 0 for an empty bin. ``Y`` is in ``Xt``'s type, or float16 bits (uint16)
    for a float32 ``Xt`` of float16 values (each maximum, a float16 value, written exactly by
    :func:`~dml_onnx._kernels._half_float_loops.narrowed`)."""
    channels = Xt.shape[3]
    _, _, ph, pw = Y.shape
    acc = np.empty(channels, Xt.dtype)
    for r in regions:
        b = batch[r]
        for i in range(ph):
            for j in range(pw):
                if he[r, i] <= hs[r, i] or we[r, j] <= ws[r, j]:
                    for c in range(channels):
                        Y[r, c, i, j] = 0
                    continue
                acc[:] = lowest
                for y in range(hs[r, i], he[r, i]):
                    for x in range(ws[r, j], we[r, j]):
                        for c in range(channels):
                            v = Xt[b, y, x, c]
                            if v > acc[c]:  # False for NaN
                                acc[c] = v
                for c in range(channels):
                    Y[r, c, i, j] = narrowed(Y, acc[c])


@jit
def small_pool(Xt, rois, scale, serial_work, lowest, Y):
    """:func:`pool_regions` on every region in one call with its geometry (a small call's one
    compiled call), where :func:`region_geometry` finds every row fine and the pixels read
    times the channels are at most ``serial_work``. Returns whether ``Y`` is done; when not,
    the caller computes the geometry (and raises a row's error)."""
    regions = rois.shape[0]
    _, _, ph, pw = Y.shape
    batch = np.empty(regions, np.int64)
    hs, he = np.empty((regions, ph), np.int64), np.empty((regions, ph), np.int64)
    ws, we = np.empty((regions, pw), np.int64), np.empty((regions, pw), np.int64)
    status, pixels = region_geometry(rois, scale, Xt.shape[0], Xt.shape[1], Xt.shape[2], batch,
                                     hs, he, ws, we)
    if status != GEOMETRY_OK or pixels * Xt.shape[3] > serial_work:
        return False
    pool_regions(Xt, batch, hs, he, ws, we, np.arange(regions), lowest, Y)
    return True


@jit
def argmax_regions(Xt, batch, hs, he, ws, we, lowest, Y):
    """Like :func:`pool_regions`, but ``Y[r, c, i, j]`` is the flat position in
    ``X [N, C, H, W]`` of the value the bin's maximum took (the first maximum in row-major
    order), -1 for an empty bin or one whose maximum is ``lowest`` because it holds no value
    of at least ``lowest`` (only NaN or -inf)."""
    _, height, width, channels = Xt.shape
    _, _, ph, pw = Y.shape
    best = np.empty(channels, Xt.dtype)
    for r in range(batch.size):
        b = batch[r]
        for i in range(ph):
            for j in range(pw):
                for c in range(channels):
                    Y[r, c, i, j] = -1
                    best[c] = lowest
                for y in range(hs[r, i], he[r, i]):
                    for x in range(ws[r, j], we[r, j]):
                        for c in range(channels):
                            v = Xt[b, y, x, c]
                            if v > best[c] or (v == best[c] and Y[r, c, i, j] < 0):
                                best[c] = v
                                Y[r, c, i, j] = ((b * channels + c) * height + y) * width + x
