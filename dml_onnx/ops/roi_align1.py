"""RoiAlign1: crop and resample regions of interest (DML_ROI_ALIGN1_OPERATOR_DESC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import NodeProto

from custom_ops import roi_align1 as kernel
from custom_ops._checks import UINT32_MAX
from dml_onnx.definition import (
    FLOAT_TYPES,
    INDEX_TYPES,
    Attribute,
    Example,
    OpDefinition,
    Parameter,
    Shape,
)
from dml_onnx.form import StandardNode
from dml_onnx.ops._roi import lowest, roi_count, same_dim, spatial_image
from dml_onnx.ops._roi_sampling import (
    RoiGrid,
    dims,
    edge_regions,
    finish,
    image_rows,
    regions,
    replace_regions,
    to_compute,
)
from dml_onnx.reference_ops import roi_align1 as reference

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


def native_sampling_ratio(attributes: dict[str, Any]) -> int | None:
    """The ``sampling_ratio`` of a ``RoiAlign`` (opset 16, ``half_pixel``, ``avg``) that
    computes what a RoiAlign1 node with these attributes computes; ``None`` where there is
    none.

    That needs linear interpolation, average, one spatial scale, the offsets 0.5 and -0.5, no
    corner alignment, out-of-bounds value 0 and a fixed sample count (minimum == maximum).
    Not the adaptive count (``sampling_ratio`` 0 gives 0 for empty and inverted regions,
    which this operator samples) nor ``output_half_pixel`` (it clamps the region size to at
    least 1): those take the decomposition. Inverted regions and samples out of the image
    agree. Three differences remain, for which no attribute test exists: RoiAlign's bounds
    are closed (a sample exactly on -1 or H reads the edge pixel; DirectML's are open, as
    measured); it rounds the sample positions in another operation order (``x1 + pw * bin +
    (ix + 0.5) * bin / k``, and bilinear weights where DirectML nests two lerps), so a sample
    within rounding of the out-of-bounds edges may fall on the other side; and it weighs an
    out-of-bounds sample's pixel (0, 0) by 0, so a NaN or infinity there makes the output
    NaN.
    """
    a = attributes
    exact = (a["interpolation_mode"] == "linear" and a["reduction_function"] == "average"
             and a["spatial_scale_x"] == a["spatial_scale_y"]
             and a["input_pixel_offset"] == 0.5 and a["output_pixel_offset"] == -0.5
             and not a["align_regions_to_corners"] and a["out_of_bounds_input_value"] == 0
             and a["minimum_samples_per_output"] == a["maximum_samples_per_output"])
    return a["minimum_samples_per_output"] if exact else None


def _standard_form(node: StandardNode) -> None:
    """Native ``RoiAlign`` (opset 16) where :func:`native_sampling_ratio` finds one, else the
    sample grid of :mod:`dml_onnx.ops._roi_sampling` reduced per output (:func:`_decomposed`).

    ``RoiAlign``'s bounds are closed where DirectML's are open: the regions with a sample on
    (or within rounding of) an out-of-bounds edge (``edge_regions``) take their outputs from
    the decomposition, run on those regions alone. float16 is computed in float32 (``Cast``
    in and out), as the spec asks.
    """
    a = node.attributes
    X, rois, batch_indices = node.inputs
    ratio = native_sampling_ratio(a)
    if ratio is None or not node.uses_native("RoiAlign"):
        finish(node, node.outputs[0], "Identity", _decomposed(node, X, rois, batch_indices))
        return
    boxes, index = regions(node, rois, batch_indices)
    pooled = node.op("RoiAlign", to_compute(node, X), boxes, index, mode="avg",
                     coordinate_transformation_mode="half_pixel",
                     output_height=a["output_size"][0], output_width=a["output_size"][1],
                     sampling_ratio=ratio, spatial_scale=a["spatial_scale_x"])
    sizes = dims(node, X)
    edges = edge_regions(node, boxes, (sizes[2], sizes[3]), tuple(a["output_size"]),
                         scale=a["spatial_scale_x"], offset=0.5, clamp_small=False,
                         ratio=ratio)
    exact = node.fresh("exact")
    replace_regions(node, pooled, edges, lambda rois_k, batch_k: _decomposed(
        node, X, rois_k, batch_k), boxes, index, exact)
    finish(node, node.outputs[0], "Identity", exact)


def _decomposed(node: StandardNode, X: str, rois: str, batch_indices: str) -> str:
    """``[R, C, OH, OW]`` in the compute type: the sample grid of the regions ``rois`` (and
    ``batch_indices``) of image ``X``, reduced per output."""
    a = node.attributes
    sizes = dims(node, X)
    grid = RoiGrid(node, rois, batch_indices, (sizes[2], sizes[3]),
                   (node.constant(a["output_size"][0]), node.constant(a["output_size"][1])))
    values = grid.values(image_rows(node, X, sizes), a["out_of_bounds_input_value"])
    if a["reduction_function"] == "average":
        pooled = grid.average(values)
    else:
        pooled = node.squeeze(grid.maximum(values, lowest(node.elem_type)), [2, 4])
    return node.op("Transpose", pooled, perm=[0, 3, 1, 2])  # [R, C, OH, OW]


# Shared by the case tables of RoiAlign1 and RoiAlignGrad: a small image batch, regions that
# are plain, inverted, empty, partly and wholly outside it, and one attribute set per variation.
CASE_IMAGE = np.random.default_rng(5).standard_normal((2, 2, 5, 6)).astype(np.float32)
CASE_ROIS = np.array([[0.6, 0.9, 4.2, 3.7], [4.8, 3.9, 1.1, 0.4], [2.5, 2, 2.5, 2],
                      [-3.2, -2.6, 8.1, 1.4], [7, 6, 9.5, 8.5]], np.float32)
CASE_BATCH = np.array([0, 1, 1, 0, 1], np.int64)
# On a 4x4 image with output [2, 2], samples fall on integers, on .5 (nearest ties) and exactly
# on the out-of-bounds edges -1 and 4.
HALF_IMAGE = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
HALF_ROIS = np.array([[-1, 1.5, 3, 5.5], [1, -1.5, 5, 2.5], [1.5, -1, 5.5, 3],
                      [-1.5, 1, 2.5, 5]], np.float32)
SAMPLING_VARIATIONS = {
    "defaults": {},
    "max": {"reduction_function": "max"},
    "nearest": {"interpolation_mode": "nearest_neighbor"},
    "max_nearest": {"reduction_function": "max", "interpolation_mode": "nearest_neighbor"},
    "scales_differ": {"spatial_scale_x": 0.5, "spatial_scale_y": 1.25},
    "fixed_samples_3_one_scale": {"spatial_scale_x": 0.75, "spatial_scale_y": 0.75,
                                  "minimum_samples_per_output": 3,
                                  "maximum_samples_per_output": 3},
    "input_pixel_offset_0": {"input_pixel_offset": 0.0},
    "output_pixel_offset_0_25": {"output_pixel_offset": 0.25},
    "samples_1": {"minimum_samples_per_output": 1, "maximum_samples_per_output": 1},
    "samples_2_to_3": {"minimum_samples_per_output": 2, "maximum_samples_per_output": 3},
    "samples_at_most_2": {"maximum_samples_per_output": 2},
    "corners": {"align_regions_to_corners": 1},
    "corners_max_2_samples": {"align_regions_to_corners": 1, "reduction_function": "max",
                              "minimum_samples_per_output": 2, "maximum_samples_per_output": 2},
}
"""Sampling attributes varied one (or two) at a time over ``CASE_*``."""
NON_FINITE_IMAGE = CASE_IMAGE.copy()
NON_FINITE_IMAGE[0, 0, 1, 2], NON_FINITE_IMAGE[1, 1, 2, 2] = np.nan, np.inf
NON_FINITE_IMAGE[0, 1, 3, 1] = -np.inf


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
    cases = (CASE_IMAGE, CASE_ROIS, CASE_BATCH)
    size = {"output_size": [2, 3]}
    max_nearest = SAMPLING_VARIATIONS["max_nearest"]
    edges = {  # name: (inputs, attributes)
        "out_of_bounds_value": (cases, {**size, "out_of_bounds_input_value": -2.5}),
        "max_out_of_bounds_value": (cases, {**size, "reduction_function": "max",
                                            "out_of_bounds_input_value": 3.5}),
        "corners_single_sample": (cases, {"output_size": [1, 1], "align_regions_to_corners": 1,
                                          "maximum_samples_per_output": 1}),
        "one_pixel_image": ((CASE_IMAGE[:, :, 2:3, 4:5], CASE_ROIS, CASE_BATCH),
                            {"output_size": [2, 2]}),
        "one_image": ((CASE_IMAGE[:1], CASE_ROIS, np.zeros(5, np.int64)),
                      {"output_size": [3, 2], "reduction_function": "max"}),
        "half_boundaries_nearest": ((HALF_IMAGE, HALF_ROIS, np.zeros(4, np.int64)),
                                    {"output_size": [2, 2], "out_of_bounds_input_value": 50.0,
                                     "interpolation_mode": "nearest_neighbor"}),
        "half_boundaries_linear_max": ((HALF_IMAGE, HALF_ROIS, np.zeros(4, np.int64)),
                                       {"output_size": [2, 2], "out_of_bounds_input_value": -9.0,
                                        "reduction_function": "max"}),
        "non_finite_average": ((NON_FINITE_IMAGE, CASE_ROIS, CASE_BATCH), size),
        "non_finite_max_infinite_out_of_bounds": ((NON_FINITE_IMAGE, CASE_ROIS, CASE_BATCH),
                                             {**size, "reduction_function": "max",
                                              "out_of_bounds_input_value": -np.inf}),
    }
    types = {  # name: (T, TI, rois shape, batch_indices shape, attributes)
        "float16_int32_max": (np.float16, np.int32, (5, 4), (5,),
                              SAMPLING_VARIATIONS["max"]),
        "float16_uint64_rank3": (np.float16, np.uint64, (1, 5, 4), (1, 1, 5), {}),
        "float32_uint64_rank4_nearest": (np.float32, np.uint64, (1, 1, 5, 4), (1, 1, 1, 5),
                                         SAMPLING_VARIATIONS["nearest"]),
        "float64_int64_fixed_samples": (np.float64, np.int64, (5, 4), (5,),
                                        SAMPLING_VARIATIONS["fixed_samples_3_one_scale"]),
        "float64_uint32_rank3_max_nearest": (np.float64, np.uint32, (1, 5, 4), (1, 5),
                                             max_nearest),
    }
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
        *(Example(name, cases, {**size, **attributes})
          for name, attributes in SAMPLING_VARIATIONS.items()),
        *(Example(name, inputs, attributes) for name, (inputs, attributes) in edges.items()),
        *(Example(name, (CASE_IMAGE.astype(t), CASE_ROIS.astype(t).reshape(rois_shape),
                         CASE_BATCH.astype(ti).reshape(batch_shape)), {**size, **attributes})
          for name, (t, ti, rois_shape, batch_shape, attributes) in types.items()),
        Example("batch_index_outside", (image, rois[:1], np.array([2])),
                {"output_size": [4, 3]}, error="batch_indices[0] 2 is outside [0, 2)"),
    )


DEFINITION = OpDefinition(
    name="RoiAlign1",
    summary="Crops each region of interest and resamples it to a fixed size "
            "(Mask R-CNN ROI align). As DirectML measures: samples inside (-1, H) x (-1, W) "
            "([0, H-1] x [0, W-1] with corner alignment) read two nested linear "
            "interpolations (x first) or the nearest pixel, the others the out-of-bounds "
            "value; max starts at lowest(T) and ignores NaN.",
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
    prepare=kernel.prepare,
    check_attributes=kernel.check_attributes,
    reference=reference.roi_align1,
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
