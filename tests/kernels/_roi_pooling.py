"""What the RoiPooling kernel tests share: the package reference (Python scalars and ints
straight from the spec formulas), onnxruntime's float32 bin edges and native ``MaxRoiPool``,
random regions, and an exact comparison (NaN equal to NaN)."""

from __future__ import annotations

import math

import numpy as np

from dml_onnx.reference_ops.roi_pooling import bin_edges, region_corners
from dml_onnx.reference_ops.roi_pooling import roi_pooling as reference_roi_pooling
from tests._support.native import run_native

# ---------------------------------------------------------------------------------------------
# The package reference, and onnxruntime's bin edges


def reference(X, rois, pooled_size, spatial_scale=1.0) -> np.ndarray:
    """Y of :mod:`dml_onnx.reference_ops.roi_pooling`."""
    return reference_roi_pooling(X, rois, pooled_size=list(pooled_size),
                                 spatial_scale=spatial_scale)


def ort_edges(lo: int, hi: int, pooled: int, limit: int) -> list[tuple[int, int]]:
    """onnxruntime's MaxRoiPool bin edges: float32 bin size, floor/ceil of ``p * bin``."""
    size = max(hi - lo + 1, 1)
    bin_size = np.float32(size) / np.float32(pooled)
    edges = []
    for p in range(pooled):
        start = math.floor(float(np.float32(p) * bin_size)) + lo
        end = math.ceil(float(np.float32(p + 1) * bin_size)) + lo
        edges.append((min(max(start, 0), limit), min(max(end, 0), limit)))
    return edges


def spec_agrees_with_ort(rois, pooled_size, spatial_scale, h, w) -> np.ndarray:
    """Per ROI: do the spec's integer bin edges equal onnxruntime's float32 ones?"""
    ph_count, pw_count = pooled_size
    keep = []
    for row in np.asarray(rois).reshape(-1, 5):
        x1, y1, x2, y2 = region_corners(row, spatial_scale, np.float32)
        keep.append(bin_edges(y1, y2, ph_count, h) == ort_edges(y1, y2, ph_count, h)
                    and bin_edges(x1, x2, pw_count, w) == ort_edges(x1, x2, pw_count, w))
    return np.array(keep, dtype=bool)


def native(X, rois, pooled_size, spatial_scale=1.0) -> np.ndarray:
    """onnxruntime's MaxRoiPool on the corners scaled in float32 and rounded half to even, as
    DirectML rounds them (MaxRoiPool itself rounds half away from zero, which keeps the
    integers given here), with spatial_scale 1."""
    rows = np.asarray(rois, np.float32).reshape(-1, 5).copy()
    rows[:, 1:] = np.rint(rows[:, 1:] * np.float32(spatial_scale))
    (y,) = run_native("MaxRoiPool", [X, rows], opset=16, pooled_shape=list(pooled_size),
                      spatial_scale=1.0)
    return y


def f32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def random_rois(rng, count: int, n: int, extent: float, *, outside: float = 0.25,
                halves: bool = True) -> np.ndarray:
    """ROIs in an ``extent`` x ``extent`` image, some beyond it, some with x2 < x1."""
    lo, hi = -outside * extent, (1 + outside) * extent
    xy = rng.uniform(lo, hi, size=(count, 4))
    if halves:  # many exact .5 products
        xy = np.round(xy * 2) / 2
    batch = rng.integers(0, n, size=(count, 1)) + rng.uniform(0, 0.99, size=(count, 1))
    return np.concatenate([batch, xy], axis=1).astype(np.float32)


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(actual, expected)  # NaN == NaN here
