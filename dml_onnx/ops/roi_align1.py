"""RoiAlign1: crop and resample regions of interest (DML_ROI_ALIGN1_OPERATOR_DESC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onnx import NodeProto

from dml_onnx._kernels import roi_align1 as kernel
from dml_onnx.definition import Attribute, OpDefinition, Parameter, Shape
from dml_onnx.form import StandardNode
from dml_onnx.ops._roi import (
    ROI_INPUTS,
    ROI_TYPES,
    SAMPLING_ATTRIBUTES,
    lowest,
    roi_rows,
    spatial_image,
)
from dml_onnx.ops._roi_cases import roi_align1_examples
from dml_onnx.ops._roi_edges import edge_regions, replace_regions
from dml_onnx.ops._roi_sampling import RoiGrid, dims, image_rows, regions
from dml_onnx.reference_ops import roi_align1 as reference


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
        node.finish("Identity", _decomposed(node, X, rois, batch_indices))
        return
    boxes, index = regions(node, rois, batch_indices)
    pooled = node.op("RoiAlign", node.to_compute(X), boxes, index, mode="avg",
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
    node.finish("Identity", exact)


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
        pooled = grid.maximum(values, lowest(node.elem_type))
    return node.op("Transpose", pooled, perm=[0, 3, 1, 2])  # [R, C, OH, OW]


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
        *SAMPLING_ATTRIBUTES,
    ),
    kernel=kernel,
    reference=reference,
    infer_shapes=_infer_shapes,
    standard_form=_standard_form,
    examples=roi_align1_examples,
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
    """A ``RoiAlign1`` node (the full docstring, written from ``DEFINITION``: see
    :func:`~dml_onnx.builder_docs.builder_doc`)."""
    return DEFINITION.build(locals())
