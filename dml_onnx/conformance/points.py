"""The probed points: each point DirectML leaves open, its cases (one native node each, with
inputs on which every candidate reading differs), the readings it tells apart and the readings
onnxruntime's CPU provider and its DirectML execution provider were measured to follow."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dml_onnx.builders import IR_VERSION
from dml_onnx.conformance.readings import col2im, lp_pool, max_roi_pool, roi_align

SPEC = "spec"
ERROR = "error"
"""What a provider follows on a point where a case fails (no session, no run)."""
OPSETS = {"RoiAlign": 16, "MaxRoiPool": 16, "LpPool": 16, "Col2Im": 18}
"""The default-domain opset of each probe: one whose version of the op the DirectML execution
provider registers (:data:`dml_onnx.form.DIRECTML_VERSIONS`)."""


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
    provider is known to follow, ``directml_ep`` the one onnxruntime-directml 1.24.4's
    DirectML execution provider (``DirectML.dll`` 1.15.4) was measured to follow on every case
    of the point, or :data:`ERROR` where it refused to create a session for them."""

    name: str
    question: str
    cases: tuple[ProbeCase, ...]
    readings: dict[str, Callable[[ProbeCase], np.ndarray]]
    onnxruntime: str
    directml_ep: str


def _reading(read: Callable[..., np.ndarray], **choices: Any
             ) -> Callable[[ProbeCase], np.ndarray]:
    """The reading ``read`` (a function of :mod:`~dml_onnx.conformance.readings`) with
    ``choices`` on its open points, as a function of a case."""
    return lambda case: read(*case.inputs.values(), **case.attributes, **choices)


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
          {SPEC: _reading(roi_align),
           "weighted_corner_max": _reading(roi_align, max_of="weighted_corners")},
          "weighted_corner_max", SPEC),
    Point("roi_align_small_roi",
          "RoiAlign output_half_pixel with ROIs under one pixel: as they are, or widened to one "
          "pixel (ONNX)?",
          (_roi_align_case("under_one_pixel", [[1.2, 1.1, 1.6, 1.5], [2.0, 0.5, 2.3, 1.4]],
                           (2, 2), sampling_ratio=2,
                           coordinate_transformation_mode="output_half_pixel"),),
          {SPEC: _reading(roi_align),
           "clamp_to_one_pixel": _reading(roi_align, clamp_small=True)},
          "clamp_to_one_pixel", SPEC),
    Point("roi_align_boundary",
          "RoiAlign samples exactly on -1, 0, H-1 and H: which read the image (clamped) and "
          "which read 0?",
          (_roi_align_case("edges", [r for t in (-1.0, -0.5, 0.0, 3.0, 3.5, 4.0)
                                     for r in _edges(t)], (1, 1)),),
          {SPEC: _reading(roi_align),
           "closed_bounds": _reading(roi_align, bounds="closed"),
           "image_bounds": _reading(roi_align, bounds="image")},
          "closed_bounds", SPEC),
    Point("roi_align_adaptive_empty",
          "RoiAlign sampling_ratio=0 with empty and inverted ROIs: at least one sample per "
          "axis, or none (output 0)?",
          (_roi_align_case("empty_and_inverted", [[1.5, 1.5, 1.5, 1.5], [3.0, 3.0, 1.0, 1.0],
                                                  [1.0, 0.5, 3.0, 0.5]], (2, 2),
                           sampling_ratio=0),),
          {SPEC: _reading(roi_align), "no_samples": _reading(roi_align, empty_count="ceil")},
          "no_samples", SPEC),
    Point("max_roi_pool_bin_edges",
          "MaxRoiPool bin edges: exact integers, or floor/ceil of float32 products?",
          tuple(_max_roi_pool_case(f"{rows}_rows_in_{bins}_bins", _image(1, 1, 64, 3),
                                   [[0, 0, 0, 2, rows - 1]], [bins, 1])
                for rows, bins in ((57, 7), (29, 11), (7, 13))),
          {SPEC: _reading(max_roi_pool),
           "float32_edges": _reading(max_roi_pool, edges="float32")},
          "float32_edges", ERROR),
    Point("max_roi_pool_rounding",
          "MaxRoiPool ROI corners on .5: rounded half away from zero, or half to even?",
          (_max_roi_pool_case("halves", _image(1, 1, 5, 5),
                              [[0, 0.5, 1.5, 2.5, 2.5], [0, -0.5, 2.5, 3.5, 4.5]], [1, 2]),),
          {SPEC: _reading(max_roi_pool),
           "half_away": _reading(max_roi_pool, rounding="half_away")},
          "half_away", ERROR),
    Point("max_roi_pool_empty_bin",
          "MaxRoiPool bins wholly outside the image: 0, or the lowest float?",
          (_max_roi_pool_case("outside", -_image(1, 1, 4, 4), [[0, 2, 2, 7, 7]], [2, 2]),),
          {SPEC: _reading(max_roi_pool), "lowest": _reading(max_roi_pool, empty="lowest")},
          SPEC, SPEC),
    Point("max_roi_pool_nan",
          "MaxRoiPool NaN in a bin: ignored, propagated, or kept only when scanned last "
          "(onnxruntime CPU's std::max scan)?",
          (_max_roi_pool_case("nan_first_and_last", _nan_image(),
                              [[0, 0, 0, 1, 1], [0, 2, 2, 3, 3]], [1, 1]),),
          {SPEC: _reading(max_roi_pool), "propagated": _reading(max_roi_pool, nan="propagate"),
           "last_scanned": _reading(max_roi_pool, nan="scan")},
          "last_scanned", SPEC),
    Point("lp_pool_odd_p",
          "LpPool with odd p and negative inputs: |x|^p (ONNX), or x^p (the DirectML "
          "documentation's formula)?",
          tuple(ProbeCase(f"p{p}", "LpPool", {"X": _image(1, 1, 3, 4, negative=True)},
                          {"kernel_shape": [2, 2], "strides": [1, 1], "pads": [0, 0, 0, 0],
                           "p": p}) for p in (1, 3)),
          {SPEC: _reading(lp_pool), "signed_power": _reading(lp_pool, signed=True)},
          SPEC, SPEC),
    Point("col2im_asymmetric_pads",
          "Col2Im with asymmetric pads: as written, or the begin pads standing for the end "
          "pads too (the block grid laid out with them)?",
          (_col2im_case("begin_1_0_end_0_1", [3, 4], [2, 2], 12, pads=[1, 0, 0, 1],
                        strides=[1, 1], dilations=[1, 1]),),
          {SPEC: _reading(col2im), "begin_pads_at_end": _reading(col2im, end_pads="begin")},
          SPEC, "begin_pads_at_end"),
    Point("col2im_3d_dilation",
          "Col2Im 3-D with dilation: the dilated taps, or taps enumerated over the dilated "
          "window (onnxruntime CPU's N-d loop)?",
          (_col2im_case("dilations_2_1_1", [5, 4, 4], [2, 2, 2], 27, strides=[1, 1, 1],
                        dilations=[2, 1, 1], pads=[0] * 6),),
          {SPEC: _reading(col2im),
           "dilated_window": _reading(col2im, kernel="dilated_window")},
          "dilated_window", SPEC),
)
"""Every probed point, by stable name (``docs/conformance.md`` lists them)."""
