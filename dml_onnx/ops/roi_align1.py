"""RoiAlign1: crop and resample regions of interest (DML_ROI_ALIGN1_OPERATOR_DESC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import NodeProto, TensorProto

from custom_ops import roi_align1 as kernel
from custom_ops._common import UINT32_MAX
from dml_onnx.definition import (
    FLOAT_TYPES,
    INDEX_TYPES,
    Attribute,
    Example,
    OpDefinition,
    Parameter,
    Shape,
)
from dml_onnx.form import NotEquivalent, StandardNode
from dml_onnx.ops._roi import roi_count, same_dim, spatial_image

SAMPLING_ATTRIBUTES = (
    Attribute("reduction_function", "string", "How the samples of one output combine: "
              "'average' or 'max'.", "average"),
    Attribute("interpolation_mode", "string", "How one sample reads the image: 'linear' or "
              "'nearest_neighbor'.", "linear"),
    Attribute("spatial_scale_x", "float", "Multiplier of the ROI x coordinates.", 1.0),
    Attribute("spatial_scale_y", "float", "Multiplier of the ROI y coordinates.", 1.0),
    Attribute("input_pixel_offset", "float", "Offset from (0,0) of the input coordinates to "
              "the top-left pixel centre.", 0.5),
    Attribute("output_pixel_offset", "float", "Offset from the top-left pixel centre to (0,0) "
              "of the output coordinates.", -0.5),
    Attribute("minimum_samples_per_output", "int", "Least samples per output and axis, >= 1.",
              1),
    Attribute("maximum_samples_per_output", "int", "Most samples per output and axis, "
              ">= minimum.", UINT32_MAX),
    Attribute("align_regions_to_corners", "int", "1: stretch the sample points to the "
              "region's corners.", 0),
)
"""The sampling attributes RoiAlign1 shares with RoiAlignGrad."""

ROI_INPUTS = (
    Parameter("rois", "T", "[R, 4], [1, R, 4] or [1, 1, R, 4]; rows [x1, y1, x2, y2]."),
    Parameter("batch_indices", "TI", "[R], or with leading 1s up to rank 4; values in [0, N)."),
)
ROI_TYPES = {"T": FLOAT_TYPES, "TI": INDEX_TYPES}


# The worked example of the DirectML ROI_ALIGN_GRAD page (spec sections 2 and 3).
SEED_X = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
SEED_ROIS = np.array([[0, 0, 2, 2], [2, 0, 4, 2], [0, 2, 2, 4], [2, 2, 4, 4]], np.float32)
SEED_BATCH = np.zeros(4, np.int64)
SEED_ATTRIBUTES = {"output_size": [1, 3], "interpolation_mode": "nearest_neighbor",
                   "minimum_samples_per_output": 1, "maximum_samples_per_output": 1,
                   "input_pixel_offset": 0.5, "output_pixel_offset": 0.0}


def roi_rows(op: str, node: str, shapes: list[Shape]) -> Any:
    """R from ``rois`` and ``batch_indices`` (the last two inputs), which must agree."""
    r = roi_count(op, node, "rois", shapes[-2], row=4)
    return same_dim(op, node, "R of rois and batch_indices",
                    r, roi_count(op, node, "batch_indices", shapes[-1], row=None))


def _infer_shapes(shapes: list[Shape], attributes: dict[str, Any], node: str) -> list[Shape]:
    _, c, _, _ = spatial_image(kernel.OP, node, shapes[0])
    return [[roi_rows(kernel.OP, node, shapes), c, *attributes["output_size"]]]


def _standard_form(node: StandardNode) -> None:
    """``RoiAlign`` (opset 16, ``half_pixel``) for the attribute values it can express.

    With adaptive sampling (minimum 1, maximum 4294967295) the two agree on regions of
    positive width and height only: RoiAlign gives 0 for an empty or inverted region, where
    this operator samples it (``ceil(|size| / OW)`` samples, at least one).
    """
    a = node.attributes
    minimum, maximum = a["minimum_samples_per_output"], a["maximum_samples_per_output"]
    required = {
        "interpolation_mode": (a["interpolation_mode"], "linear"),
        "reduction_function": (a["reduction_function"], "average"),
        "spatial_scale_y": (a["spatial_scale_y"], a["spatial_scale_x"]),
        "input_pixel_offset": (a["input_pixel_offset"], 0.5),
        "output_pixel_offset": (a["output_pixel_offset"], -0.5),
        "out_of_bounds_input_value": (a["out_of_bounds_input_value"], 0.0),
        "align_regions_to_corners": (a["align_regions_to_corners"], 0),
    }
    for name, (value, wanted) in required.items():
        if value != wanted:
            raise NotEquivalent(f"'{node.label}': RoiAlign has no {name} {value!r} "
                                f"(it needs {wanted!r})")
    if minimum == maximum:
        sampling_ratio = minimum
    elif (minimum, maximum) == (1, UINT32_MAX):
        sampling_ratio = 0
    else:
        raise NotEquivalent(f"'{node.label}': RoiAlign has no sample count clamped to "
                            f"[{minimum}, {maximum}]")
    rows = node.op("Reshape", node.inputs[1], node.constant([-1, 4]))
    index = node.cast(node.op("Reshape", node.inputs[2], node.constant([-1])), TensorProto.INT64)
    node.op("RoiAlign", node.inputs[0], rows, index, outputs=node.outputs, mode="avg",
            coordinate_transformation_mode="half_pixel", output_height=a["output_size"][0],
            output_width=a["output_size"][1], sampling_ratio=sampling_ratio,
            spatial_scale=a["spatial_scale_x"])


def _examples() -> tuple[Example, ...]:
    rng = np.random.default_rng(2)
    image = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    rois = np.array([[0.7, 1.3, 6.1, 5.4], [2.2, -1.4, 9.9, 7.6], [5.6, 6.3, 1.2, 2.7],
                     [3, 3, 3, 3], [-4, -4, -2, -1]], np.float32)
    batch = np.array([1, 0, 1, 0, 1], np.int64)
    odd = {"output_size": [3, 2], "reduction_function": "max",
           "interpolation_mode": "nearest_neighbor", "spatial_scale_x": 0.75,
           "spatial_scale_y": 1.25, "input_pixel_offset": 0.0, "output_pixel_offset": 0.25,
           "out_of_bounds_input_value": -1.5, "minimum_samples_per_output": 2,
           "maximum_samples_per_output": 3, "align_regions_to_corners": 1}
    return (
        Example("seed_nearest", (SEED_X, SEED_ROIS, SEED_BATCH), SEED_ATTRIBUTES,
                expected=(np.array([[[[1, 1, 2]]], [[[3, 3, 4]]], [[[9, 9, 10]]],
                                    [[[11, 11, 12]]]], np.float32),)),
        Example("average_half_pixel_adaptive", (image, rois, batch), {"output_size": [4, 3]}),
        Example("average_sampling_2_scaled", (image, rois * 2, batch),
                {"output_size": [2, 2], "spatial_scale_x": 0.5, "spatial_scale_y": 0.5,
                 "minimum_samples_per_output": 2, "maximum_samples_per_output": 2}),
        Example("max_nearest_corners_float64_int32",
                (image.astype(np.float64), rois.astype(np.float64), batch.astype(np.int32)),
                odd),
        Example("float16_rank4_uint32", (image.astype(np.float16),
                                         rois.astype(np.float16)[None, None],
                                         batch.astype(np.uint32)[None]),
                {"output_size": [2, 3], "interpolation_mode": "nearest_neighbor"}),
        Example("zero_rois", (image, np.zeros((0, 4), np.float32), np.zeros(0, np.int64)),
                {"output_size": [4, 3]}),
        Example("batch_index_outside", (image, rois[:1], np.array([2])),
                {"output_size": [4, 3]}, error="batch_indices[0] 2 is outside [0, 2)"),
    )


DEFINITION = OpDefinition(
    name="RoiAlign1",
    summary="Crops each region of interest and resamples it to a fixed size "
            "(Mask R-CNN ROI align).",
    dml_name="DML_ROI_ALIGN1_OPERATOR_DESC",
    spec_section="2",
    inputs=(Parameter("X", "T", "[N, C, H, W]."), *ROI_INPUTS),
    outputs=(Parameter("Y", "T", "[R, C, OH, OW]."),),
    type_constraints=ROI_TYPES,
    attributes=(
        Attribute("output_size", "ints", "Output [OH, OW]."),
        *SAMPLING_ATTRIBUTES[:6],
        Attribute("out_of_bounds_input_value", "float", "The value a sample outside the "
                  "image reads.", 0.0),
        *SAMPLING_ATTRIBUTES[6:],
    ),
    kernel=kernel.roi_align1,
    check_attributes=kernel.check_attributes,
    infer_shapes=_infer_shapes,
    standard_form=_standard_form,
    examples=_examples,
)


def roi_align1(X: str, rois: str, batch_indices: str, Y: str, *, output_size: Sequence[int],
               reduction_function: str | None = None, interpolation_mode: str | None = None,
               spatial_scale_x: float | None = None, spatial_scale_y: float | None = None,
               input_pixel_offset: float | None = None, output_pixel_offset: float | None = None,
               out_of_bounds_input_value: float | None = None,
               minimum_samples_per_output: int | None = None,
               maximum_samples_per_output: int | None = None,
               align_regions_to_corners: int | None = None,
               name: str | None = None) -> NodeProto:
    """A ``RoiAlign1`` node; attributes left ``None`` take the spec default."""
    return DEFINITION.make_node(
        [X, rois, batch_indices], [Y], name=name, output_size=output_size,
        reduction_function=reduction_function, interpolation_mode=interpolation_mode,
        spatial_scale_x=spatial_scale_x, spatial_scale_y=spatial_scale_y,
        input_pixel_offset=input_pixel_offset, output_pixel_offset=output_pixel_offset,
        out_of_bounds_input_value=out_of_bounds_input_value,
        minimum_samples_per_output=minimum_samples_per_output,
        maximum_samples_per_output=maximum_samples_per_output,
        align_regions_to_corners=align_regions_to_corners)
