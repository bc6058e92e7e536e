"""Conformance probes: which reading an execution provider follows on each point that DirectML
leaves open.

Each point is probed through the native op that the DirectML execution provider maps onto the
DirectML operator (at the opset it registers: RoiAlign-16 -> ROI_ALIGN1, MaxRoiPool-1 ->
ROI_POOLING, LpPool-11 -> LP_POOLING, Col2Im-18 -> FOLD), with inputs for which every candidate
reading gives a different output. A reading is a small plain implementation of one way to read
the op (loops over outputs, float64); ``spec`` is the reading of ``OPERATORS.md`` under the
provider's attribute mapping, the others are the named alternatives that onnxruntime, the ONNX
reference or the DirectML documentation follow. The provider being probed never computes an
expected output.

Layout, next to the suite (``dml-onnx conformance export`` writes it)::

    models/probes/test_probe_<point>_<case>/model.onnx
    models/probes/test_probe_<point>_<case>/test_data_set_0/input_<i>.pb, output_0.pb  (spec)
    models/probes/test_probe_<point>_<case>/readings/<reading>/output_0.pb
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from dml_onnx.builders import IR_VERSION
from dml_onnx.graphs import load_model, read_regular

SPEC = "spec"
NO_READING = "none of the known readings"
ERROR = "error"
TOLERANCE = 1e-5
"""A provider's output matches a reading when it is within this share of the reading's largest
magnitude (NaN where the reading has NaN); the readings of a case differ by far more."""
OPSETS = {"RoiAlign": 16, "MaxRoiPool": 16, "LpPool": 16, "Col2Im": 18}
"""The default-domain opset of each probe: one whose version of the op the DirectML execution
provider registers (:data:`dml_onnx.form.DIRECTML_VERSIONS`)."""
FLOAT_LOWEST = float(np.finfo(np.float32).min)


# ------------------------------------------------------------------------------ readings
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


# ------------------------------------------------------------------------------ points
@dataclass(frozen=True)
class ProbeCase:
    """One probe model: ``op`` (a native op) with ``attributes`` over ``inputs``;
    ``constant`` names the inputs that are initializers (Col2Im's shapes)."""

    name: str
    op: str
    inputs: dict[str, np.ndarray]
    attributes: dict[str, Any]
    constant: tuple[str, ...] = ()

    def model(self) -> onnx.ModelProto:
        inputs = [helper.make_tensor_value_info(
            n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
            for n, a in self.inputs.items() if n not in self.constant]
        initializers = [numpy_helper.from_array(self.inputs[n], n) for n in self.constant]
        node = helper.make_node(self.op, list(self.inputs), ["Y"], name=self.name,
                                **self.attributes)
        graph = helper.make_graph([node], self.name, inputs,
                                  [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                                  initializer=initializers)
        return helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[
            helper.make_opsetid("", OPSETS[self.op])])

    def feeds(self) -> dict[str, np.ndarray]:
        return {n: a for n, a in self.inputs.items() if n not in self.constant}


@dataclass(frozen=True)
class Point:
    """An open point: what it asks, its cases, and each reading's plain implementation
    (``readings[name](case) -> output``); ``onnxruntime`` is the reading onnxruntime's CPU
    provider is known to follow."""

    name: str
    question: str
    cases: tuple[ProbeCase, ...]
    readings: dict[str, Callable[[ProbeCase], np.ndarray]]
    onnxruntime: str


def _roi_align_reading(**choices: Any) -> Callable[[ProbeCase], np.ndarray]:
    return lambda case: roi_align(*case.inputs.values(), **case.attributes, **choices)


def _max_roi_pool_reading(**choices: Any) -> Callable[[ProbeCase], np.ndarray]:
    return lambda case: max_roi_pool(*case.inputs.values(), **case.attributes, **choices)


def _lp_pool_reading(**choices: Any) -> Callable[[ProbeCase], np.ndarray]:
    return lambda case: lp_pool(*case.inputs.values(), **case.attributes, **choices)


def _col2im_reading(**choices: Any) -> Callable[[ProbeCase], np.ndarray]:
    return lambda case: col2im(*case.inputs.values(), **case.attributes, **choices)


def _image(*shape: int, negative: bool = False) -> np.ndarray:
    """Distinct values (a ramp with a twist), some negative if asked: every pixel counts."""
    values = np.arange(math.prod(shape), dtype=np.float32)
    values = values + 0.25 * (values % 3)
    if negative:
        values = values * np.where(values.astype(int) % 2 == 0, -1, 1)
    return values.reshape(shape).astype(np.float32)


def _roi_align_case(name: str, rois: list[list[float]], size: tuple[int, int], *,
                    negative: bool = False, **attributes: Any) -> ProbeCase:
    rois_array = np.array(rois, np.float32)
    return ProbeCase(name, "RoiAlign", {
        "X": _image(1, 1, 4, 4, negative=negative), "rois": rois_array,
        "batch_indices": np.zeros(len(rois), np.int64)},
        {"mode": "avg", "output_height": size[0], "output_width": size[1], "sampling_ratio": 1,
         "spatial_scale": 1.0, "coordinate_transformation_mode": "half_pixel", **attributes})


def _edges(t: float) -> list[list[float]]:
    """ROIs whose one half-pixel sample (sampling_ratio 1, 1x1 output) lies at y = t (x
    inside), then at x = t (y inside)."""
    return [[1.0, t - 0.5, 3.0, t + 1.5], [t - 0.5, 1.0, t + 1.5, 3.0]]


def _max_roi_pool_case(name: str, X: np.ndarray, rois: list[list[float]],
                       pooled: list[int]) -> ProbeCase:
    return ProbeCase(name, "MaxRoiPool", {"X": X, "rois": np.array(rois, np.float32)},
                     {"pooled_shape": pooled, "spatial_scale": 1.0})


def _nan_image() -> np.ndarray:
    X = _image(1, 1, 4, 4)
    X[0, 0, 0, 0] = X[0, 0, 3, 3] = np.nan  # the first pixel scanned in one ROI, the last in one
    return X


def _col2im_case(name: str, image: list[int], block: list[int], columns: int,
                 **attributes: Any) -> ProbeCase:
    rows = 2 * math.prod(block)
    data = _image(1, rows, columns, negative=True) / 8
    return ProbeCase(name, "Col2Im", {"input": data, "image_shape": np.array(image, np.int64),
                                      "block_shape": np.array(block, np.int64)},
                     attributes, constant=("image_shape", "block_shape"))


POINTS: tuple[Point, ...] = (
    Point("roi_align_max",
          "RoiAlign mode='max': the max of the interpolated samples, or of the weighted corner "
          "terms (the ONNX reference, onnxruntime CPU)?",
          (_roi_align_case("max", [[0.3, 0.7, 3.1, 2.9], [0.0, 0.2, 2.6, 3.4]], (2, 2),
                           negative=True, mode="max", sampling_ratio=2),),
          {SPEC: _roi_align_reading(),
           "weighted_corner_max": _roi_align_reading(max_of="weighted_corners")},
          "weighted_corner_max"),
    Point("roi_align_small_roi",
          "RoiAlign output_half_pixel with ROIs under one pixel: as they are, or widened to one "
          "pixel (ONNX)?",
          (_roi_align_case("under_one_pixel", [[1.2, 1.1, 1.6, 1.5], [2.0, 0.5, 2.3, 1.4]],
                           (2, 2), sampling_ratio=2,
                           coordinate_transformation_mode="output_half_pixel"),),
          {SPEC: _roi_align_reading(), "clamp_to_one_pixel": _roi_align_reading(
              clamp_small=True)},
          "clamp_to_one_pixel"),
    Point("roi_align_boundary",
          "RoiAlign samples exactly on -1, 0, H-1 and H: which read the image (clamped) and "
          "which read 0?",
          (_roi_align_case("edges", [r for t in (-1.0, -0.5, 0.0, 3.0, 3.5, 4.0)
                                     for r in _edges(t)], (1, 1)),),
          {SPEC: _roi_align_reading(), "closed_bounds": _roi_align_reading(bounds="closed"),
           "image_bounds": _roi_align_reading(bounds="image")},
          "closed_bounds"),
    Point("roi_align_adaptive_empty",
          "RoiAlign sampling_ratio=0 with empty and inverted ROIs: at least one sample per "
          "axis, or none (output 0)?",
          (_roi_align_case("empty_and_inverted", [[1.5, 1.5, 1.5, 1.5], [3.0, 3.0, 1.0, 1.0],
                                                  [1.0, 0.5, 3.0, 0.5]], (2, 2),
                           sampling_ratio=0),),
          {SPEC: _roi_align_reading(), "no_samples": _roi_align_reading(empty_count="ceil")},
          "no_samples"),
    Point("max_roi_pool_bin_edges",
          "MaxRoiPool bin edges: exact integers, or floor/ceil of float32 products?",
          tuple(_max_roi_pool_case(f"{rows}_rows_in_{bins}_bins", _image(1, 1, 64, 3),
                                   [[0, 0, 0, 2, rows - 1]], [bins, 1])
                for rows, bins in ((57, 7), (29, 11), (7, 13))),
          {SPEC: _max_roi_pool_reading(), "float32_edges": _max_roi_pool_reading(
              edges="float32")},
          "float32_edges"),
    Point("max_roi_pool_rounding",
          "MaxRoiPool ROI corners on .5: rounded half away from zero, or half to even?",
          (_max_roi_pool_case("halves", _image(1, 1, 5, 5),
                              [[0, 0.5, 1.5, 2.5, 2.5], [0, -0.5, 2.5, 3.5, 4.5]], [1, 2]),),
          {SPEC: _max_roi_pool_reading(), "half_away": _max_roi_pool_reading(
              rounding="half_away")},
          "half_away"),
    Point("max_roi_pool_empty_bin",
          "MaxRoiPool bins wholly outside the image: 0, or the lowest float?",
          (_max_roi_pool_case("outside", -_image(1, 1, 4, 4), [[0, 2, 2, 7, 7]], [2, 2]),),
          {SPEC: _max_roi_pool_reading(), "lowest": _max_roi_pool_reading(empty="lowest")},
          SPEC),
    Point("max_roi_pool_nan",
          "MaxRoiPool NaN in a bin: ignored, propagated, or kept only when scanned last "
          "(onnxruntime CPU's std::max scan)?",
          (_max_roi_pool_case("nan_first_and_last", _nan_image(),
                              [[0, 0, 0, 1, 1], [0, 2, 2, 3, 3]], [1, 1]),),
          {SPEC: _max_roi_pool_reading(), "propagated": _max_roi_pool_reading(
              nan="propagate"), "last_scanned": _max_roi_pool_reading(nan="scan")},
          "last_scanned"),
    Point("lp_pool_odd_p",
          "LpPool with odd p and negative inputs: |x|^p (ONNX), or x^p (the DirectML "
          "documentation's formula)?",
          tuple(ProbeCase(f"p{p}", "LpPool", {"X": _image(1, 1, 3, 4, negative=True)},
                          {"kernel_shape": [2, 2], "strides": [1, 1], "pads": [0, 0, 0, 0],
                           "p": p}) for p in (1, 3)),
          {SPEC: _lp_pool_reading(), "signed_power": _lp_pool_reading(signed=True)},
          SPEC),
    Point("col2im_asymmetric_pads",
          "Col2Im with asymmetric pads: as written, or the begin pads standing for the end "
          "pads too (the block grid laid out with them)?",
          (_col2im_case("begin_1_0_end_0_1", [3, 4], [2, 2], 12, pads=[1, 0, 0, 1],
                        strides=[1, 1], dilations=[1, 1]),),
          {SPEC: _col2im_reading(), "begin_pads_at_end": _col2im_reading(end_pads="begin")},
          SPEC),
    Point("col2im_3d_dilation",
          "Col2Im 3-D with dilation: the dilated taps, or taps enumerated over the dilated "
          "window (onnxruntime CPU's N-d loop)?",
          (_col2im_case("dilations_2_1_1", [5, 4, 4], [2, 2, 2], 27, strides=[1, 1, 1],
                        dilations=[2, 1, 1], pads=[0] * 6),),
          {SPEC: _col2im_reading(), "dilated_window": _col2im_reading(kernel="dilated_window")},
          "dilated_window"),
)
"""Every probed point, by stable name (the README lists them)."""


# ------------------------------------------------------------------------------ files
PROBE_FILE_BYTES = 1 << 16
"""The largest ``probe.json`` read."""


def names_a_point(path: Path) -> bool:
    """Whether ``path`` is a ``probe.json`` as :func:`export_probes` writes it (a small file
    naming one of :data:`POINTS`)."""
    try:
        data = json.loads(read_regular(path, PROBE_FILE_BYTES))
    except (ValueError, OSError):
        return False
    return isinstance(data, dict) and data.get("point") in {p.name for p in POINTS}


def check_replaceable(directory: str | Path) -> None:
    """Raise ``ValueError`` unless ``directory`` is absent or holds only probes that
    :func:`export_probes` wrote, which it may replace."""
    from dml_onnx.conformance import written_by_suite

    root = Path(directory)
    if not (root.exists() or root.is_symlink()):
        return
    if root.is_symlink() or not root.is_dir() or not all(
            entry.name.startswith("test_probe_") and written_by_suite(entry)
            for entry in root.iterdir()):
        raise ValueError(f"{root} holds what dml-onnx conformance export did not write: not "
                         "replaced (move it away, or export to another folder)")


def export_probes(directory: str | Path) -> list[Path]:
    """Write every probe case under ``directory`` (replacing the probes written there before;
    anything else there is refused, see :func:`check_replaceable`): the model, its inputs,
    the spec reading as the expected output, and every reading under ``readings/``."""
    root = Path(directory)
    check_replaceable(root)
    if root.exists():
        shutil.rmtree(root)
    written = []
    for point in POINTS:
        for case in point.cases:
            folder = root / f"test_probe_{point.name}_{case.name}"
            data = folder / "test_data_set_0"
            data.mkdir(parents=True)
            _write(folder / "model.onnx", case.model())
            for i, (name, array) in enumerate(case.feeds().items()):
                _write(data / f"input_{i}.pb", numpy_helper.from_array(array, name))
            for reading, compute in point.readings.items():
                tensor = numpy_helper.from_array(compute(case), "Y")
                if reading == SPEC:
                    _write(data / "output_0.pb", tensor)
                (folder / "readings" / reading).mkdir(parents=True)
                _write(folder / "readings" / reading / "output_0.pb", tensor)
            (folder / "probe.json").write_text(json.dumps(
                {"point": point.name, "question": point.question}, indent=1) + "\n")
            written.append(folder)
    return written


def _write(path: Path, proto: Any) -> None:
    path.write_bytes(proto.SerializeToString(deterministic=True))


@dataclass(frozen=True)
class Finding:
    """What one provider does on one point: the reading it follows (:data:`SPEC`, a named
    alternative, :data:`NO_READING` or :data:`ERROR`), over how many cases, how many of them
    matched that reading, and the worst difference from it (relative to its largest value)."""

    point: str
    provider: str
    reading: str
    cases: int
    matched: int
    max_diff: float
    message: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"reading": self.reading, "cases": self.cases, "matched": self.matched,
                "max_diff": self.max_diff}


def run_probes(directory: str | Path, provider: str = "CPUExecutionProvider") -> list[Finding]:
    """Run every probe case under ``directory`` on ``provider``; one finding per point."""
    by_point: dict[str, list[dict[str, float] | str]] = {p.name: [] for p in POINTS}
    for folder in sorted(Path(directory).glob("test_probe_*")):
        try:
            point = json.loads(read_regular(folder / "probe.json", PROBE_FILE_BYTES))["point"]
            if not isinstance(point, str):
                raise ValueError(f"its point {point!r} is not a name")
        except (OSError, ValueError, KeyError, TypeError) as error:  # that probe alone fails
            by_point.setdefault(folder.name, []).append(
                f"{folder / 'probe.json'} is not a probe description ({error!r})")
            continue
        by_point.setdefault(point, []).append(_probe(folder, provider))
    return [_finding(point, provider, outcomes) for point, outcomes in by_point.items()
            if outcomes]


def _probe(folder: Path, provider: str) -> dict[str, float] | str:
    """The difference of the provider's output from each reading, or why it has none (the
    case cannot be read, the session or the run fails)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3  # onnxruntime's own warning on RoiAlign max is measured here
    try:
        model = load_model(folder / "model.onnx")
        feeds = {}
        for path in sorted((folder / "test_data_set_0").glob("input_*.pb")):
            tensor = _tensor(path)
            feeds[tensor.name] = numpy_helper.to_array(tensor)
        wanted = {reading.name: numpy_helper.to_array(_tensor(reading / "output_0.pb"))
                  for reading in sorted((folder / "readings").iterdir())}
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=[provider])
        (got,) = session.run(None, feeds)
    except Exception as error:  # noqa: BLE001 - a provider that fails is measured too
        return f"{type(error).__name__}: {error}"
    return {name: difference(got, want) for name, want in wanted.items()}


def _tensor(path: Path) -> onnx.TensorProto:
    """The tensor of a probe's ``.pb`` file (a regular file, never a FIFO or a device)."""
    return onnx.load_tensor_from_string(read_regular(path, 1 << 31))


def difference(got: np.ndarray, want: np.ndarray) -> float:
    """``max |got - want|`` relative to ``max(1, max |want|)``; NaN must meet NaN, and a
    shape or NaN mismatch is ``inf``."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape or not np.array_equal(np.isnan(got), np.isnan(want)):
        return math.inf
    finite = ~np.isnan(want)
    scale = max(1.0, float(np.max(np.abs(want[finite]), initial=0.0)))
    with np.errstate(invalid="ignore"):
        diff = np.where(got[finite] == want[finite], 0.0, np.abs(got[finite] - want[finite]))
    return float(np.max(diff, initial=0.0)) / scale


def _finding(point: str, provider: str, outcomes: list[dict[str, float] | str]) -> Finding:
    errors = [o for o in outcomes if isinstance(o, str)]
    if errors:
        return Finding(point, provider, ERROR, len(outcomes), len(errors), math.inf, errors[0])
    readings = list(outcomes[0])
    matched = {r: sum(o[r] <= TOLERANCE for o in outcomes) for r in readings}
    worst = {r: max(o[r] for o in outcomes) for r in readings}
    full = [r for r in readings if matched[r] == len(outcomes)]
    if full:
        reading = SPEC if SPEC in full else full[0]
        return Finding(point, provider, reading, len(outcomes), matched[reading], worst[reading])
    closest = min(readings, key=lambda r: worst[r])
    return Finding(point, provider, NO_READING, len(outcomes), matched[closest], worst[closest],
                   f"closest: {closest}")


def report(findings: Sequence[Finding]) -> str:
    """A Markdown table: point, provider, reading, cases matched, worst difference."""
    rows = ["| point | provider | reading | matched | max diff |", "|---|---|---|---:|---:|"]
    for f in findings:
        note = f" ({f.message})" if f.message else ""
        rows.append(f"| {f.point} | {f.provider} | {f.reading}{note} | {f.matched}/{f.cases} | "
                    f"{f.max_diff:.3g} |")
    return "\n".join(rows)
