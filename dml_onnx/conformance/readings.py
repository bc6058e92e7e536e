"""Plain readings of the native ops the probes run: small loops over outputs in float64, each
switched between the ways the op can be read on the points DirectML leaves open
(RoiAlign-16, MaxRoiPool-1, LpPool-11, Col2Im-18)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

FLOAT_LOWEST = float(np.finfo(np.float32).min)


def roi_align(X: np.ndarray, rois: np.ndarray, batch: np.ndarray, *, mode: str,
              output_height: int, output_width: int, sampling_ratio: int, spatial_scale: float,
              coordinate_transformation_mode: str, max_of: str = "samples",
              clamp_small: bool = False, bounds: str = "open",
              empty_count: str = "at_least_one") -> np.ndarray:
    """RoiAlign-16 ``[R, C, OH, OW]`` under one reading of each open point:

    - ``max_of``: ``"samples"`` (the max of the interpolated samples) or ``"weighted_corners"``
      (the max over samples of the largest weighted corner term ``w_i * v_i``);
    - ``clamp_small``: ROI width and height below 1 raised to 1 (ONNX ``output_half_pixel``);
    - ``bounds``: a sample reads 0 outside ``(-1, H)`` (``"open"``, DirectML's, measured),
      outside ``[-1, H]`` (``"closed"``, ONNX's) or outside ``[0, H - 1]`` (``"image"``);
      inside, it is clamped to the image;
    - ``empty_count``: with ``sampling_ratio = 0``, ``"at_least_one"`` sample per axis,
      ``ceil(|size| / out)`` at least 1 (DirectML's minimum of 1), or ``"ceil"``:
      ``ceil(size / out)``, no sample at all when that is 0 or negative (output 0).
    """
    _, channels, height, width = X.shape
    offset = 0.5 if coordinate_transformation_mode == "half_pixel" else 0.0
    Y = np.zeros((len(rois), channels, output_height, output_width))
    for r, (roi, b) in enumerate(zip(rois.astype(np.float64), batch)):
        x1, y1, x2, y2 = roi * spatial_scale - offset
        roi_w, roi_h = x2 - x1, y2 - y1
        if clamp_small:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / output_height, roi_w / output_width
        counts = []
        for size, out in ((roi_h, output_height), (roi_w, output_width)):
            if sampling_ratio > 0:
                counts.append(sampling_ratio)
            elif empty_count == "at_least_one":
                counts.append(max(math.ceil(abs(size) / out), 1))
            else:
                counts.append(math.ceil(size / out))
        gh, gw = counts
        for c, ph, pw in np.ndindex(channels, output_height, output_width):
            terms = []
            for iy, ix in np.ndindex(max(gh, 0), max(gw, 0)):
                y = y1 + ph * bin_h + (iy + 0.5) * bin_h / gh
                x = x1 + pw * bin_w + (ix + 0.5) * bin_w / gw
                terms.append(_bilinear_terms(X[b, c], y, x, bounds))
            if not terms:
                continue  # no sample: 0
            if mode == "avg":
                Y[r, c, ph, pw] = sum(map(sum, terms)) / max(gh * gw, 1)
            elif max_of == "samples":
                Y[r, c, ph, pw] = max(map(sum, terms))
            else:
                Y[r, c, ph, pw] = max(max(t) for t in terms)
    return Y.astype(X.dtype)


def _bilinear_terms(plane: np.ndarray, y: float, x: float, bounds: str) -> list[float]:
    """The four weighted corner terms of a sample (all 0 outside the bounds)."""
    height, width = plane.shape
    low = {"closed": -1.0, "open": -1.0, "image": 0.0}[bounds]
    outside = ((y < low or x < low or y > height - 1 or x > width - 1) if bounds == "image"
               else (y < low or x < low or y > height or x > width) if bounds == "closed"
               else (y <= low or x <= low or y >= height or x >= width))
    if outside:
        return [0.0] * 4
    corners = []
    for v, size in ((y, height), (x, width)):
        v = max(v, 0.0)
        lo = int(v)
        hi = lo + 1
        if lo >= size - 1:
            lo = hi = size - 1
            v = float(lo)
        corners.append((lo, hi, v - lo))
    (y0, y1, ly), (x0, x1, lx) = corners
    return [(1 - ly) * (1 - lx) * plane[y0, x0], (1 - ly) * lx * plane[y0, x1],
            ly * (1 - lx) * plane[y1, x0], ly * lx * plane[y1, x1]]


def max_roi_pool(X: np.ndarray, rois: np.ndarray, *, pooled_shape: Sequence[int],
                 spatial_scale: float, edges: str = "integer", rounding: str = "half_even",
                 empty: str = "zero", nan: str = "ignore") -> np.ndarray:
    """MaxRoiPool ``[R, C, PH, PW]`` under one reading of each open point:

    - ``edges``: bin ``p`` of ``P`` over ``size`` rows spans ``[floor(p * size / P),
      ceil((p + 1) * size / P))`` in exact integers (``"integer"``) or with
      ``bin = size / P`` and the products in float32 (``"float32"``);
    - ``rounding`` of the scaled corners: ``"half_even"`` (DirectML's, measured) or
      ``"half_away"`` from zero;
    - ``empty``: an empty bin gives ``"zero"`` or ``"lowest"`` (-FLT_MAX);
    - ``nan``: a NaN in a bin is ``"ignore"``\\ d (the maximum starts at -FLT_MAX: DirectML's,
      measured), ``"propagate"``\\ s, or survives only when scanned last (``"scan"``:
      ``acc = x if not x < acc``, rows then columns).
    """
    _, channels, height, width = X.shape
    ph_count, pw_count = pooled_shape
    Y = np.zeros((len(rois), channels, ph_count, pw_count))
    for r, roi in enumerate(rois):
        b = int(roi[0])
        corners = [_round(float(np.float32(v) * np.float32(spatial_scale)), rounding)
                   for v in roi[1:]]
        x1, y1, x2, y2 = corners
        rows = _bins(max(y2 - y1 + 1, 1), ph_count, y1, height, edges)
        columns = _bins(max(x2 - x1 + 1, 1), pw_count, x1, width, edges)
        for c, ph, pw in np.ndindex(channels, ph_count, pw_count):
            (h0, h1), (w0, w1) = rows[ph], columns[pw]
            values = [float(v) for v in X[b, c, h0:h1, w0:w1].ravel()]
            Y[r, c, ph, pw] = _bin_max(values, empty, nan)
    return Y.astype(X.dtype)


def _round(v: float, rounding: str) -> int:
    if rounding == "half_even":
        return round(v)
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def _bins(size: int, count: int, start: int, limit: int, edges: str) -> list[tuple[int, int]]:
    result = []
    for p in range(count):
        if edges == "integer":
            lo, hi = p * size // count, -(-(p + 1) * size // count)
        else:
            step = np.float32(size) / np.float32(count)
            lo, hi = math.floor(np.float32(p) * step), math.ceil(np.float32(p + 1) * step)
        result.append((min(max(lo + start, 0), limit), min(max(hi + start, 0), limit)))
    return result


def _bin_max(values: list[float], empty: str, nan: str) -> float:
    if not values:
        return 0.0 if empty == "zero" else FLOAT_LOWEST
    if nan == "propagate" and any(math.isnan(v) for v in values):
        return math.nan
    if nan == "ignore":
        return max([FLOAT_LOWEST, *(v for v in values if not math.isnan(v))])
    if nan == "scan":
        acc = FLOAT_LOWEST
        for v in values:
            acc = acc if v < acc else v  # std::max(v, acc)
        return acc
    return max(values)


def lp_pool(X: np.ndarray, *, kernel_shape: Sequence[int], strides: Sequence[int],
            pads: Sequence[int], p: int, signed: bool = False) -> np.ndarray:
    """LpPool-11 ``(sum over in-image taps of |x|^p)^(1/p)``; ``signed``: ``x^p`` instead of
    ``|x|^p`` (DirectML's documented formula), NaN for the root of a negative sum."""
    k = len(kernel_shape)
    spatial = X.shape[2:]
    begin, end = pads[:k], pads[k:]
    blocks = [(size + a + e - w) // s + 1 for size, a, e, w, s
              in zip(spatial, begin, end, kernel_shape, strides)]
    Y = np.zeros((*X.shape[:2], *blocks))
    for index in np.ndindex(Y.shape):
        n, c, *o = index
        total = 0.0
        for tap in np.ndindex(*kernel_shape):
            position = [b * s + i - a for b, s, i, a in zip(o, strides, tap, begin)]
            if all(0 <= q < size for q, size in zip(position, spatial)):
                v = float(X[(n, c, *position)])
                total += v ** p if signed else abs(v) ** p
        Y[index] = total if p == 1 else (total ** (1 / p) if total >= 0 else math.nan)
    return Y.astype(X.dtype)


def col2im(columns: np.ndarray, image_shape: Sequence[int], block_shape: Sequence[int], *,
           strides: Sequence[int], dilations: Sequence[int], pads: Sequence[int],
           end_pads: str = "as_written", kernel: str = "window") -> np.ndarray:
    """Col2Im-18 ``[N, C, *image_shape]`` under one reading of each open point:

    - ``end_pads``: ``"as_written"``, or ``"begin"``: the begin pads stand for the end pads
      too when the block grid is laid out (the columns are read with those block counts);
    - ``kernel``: ``"window"``, or ``"dilated_window"``: the taps are enumerated over the
      dilated window ``(k - 1) * d + 1`` while still stepping by the dilation, as onnxruntime's
      N-d CPU loop does (``Col2imNd`` given the dilated kernel shape).
    """
    k = len(block_shape)
    begin = list(pads[:k])
    end = begin if end_pads == "begin" else list(pads[k:])
    blocks = [(size + a + e - d * (w - 1) - 1) // s + 1 for size, a, e, d, w, s
              in zip(image_shape, begin, end, dilations, block_shape, strides)]
    window = ([(w - 1) * d + 1 for w, d in zip(block_shape, dilations)]
              if kernel == "dilated_window" else list(block_shape))
    n, rows, _ = columns.shape
    channels = rows // math.prod(block_shape)
    image = np.zeros((n, channels, *image_shape))
    for b_index, row in np.ndindex(n, rows):
        c, offset = divmod(row, math.prod(window))
        if c >= channels:
            continue
        tap = np.unravel_index(offset, window)
        for column, block in enumerate(np.ndindex(*blocks)):
            if column >= columns.shape[2]:
                break
            position = [bl * s - a + t * d for bl, s, a, t, d
                        in zip(block, strides, begin, tap, dilations)]
            if all(0 <= q < size for q, size in zip(position, image_shape)):
                image[(b_index, c, *position)] += columns[b_index, row, column]
    return image.astype(columns.dtype)
