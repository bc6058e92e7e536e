"""RoiPooling: max pooling over regions of interest (DML_ROI_POOLING_OPERATOR_DESC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import NodeProto

from custom_ops import roi_pooling as kernel
from dml_onnx.definition import (
    FLOAT_TYPES,
    Attribute,
    Example,
    OpDefinition,
    Parameter,
    Shape,
)
from dml_onnx.form import StandardNode
from dml_onnx.ops._roi import roi_count, spatial_image


def _infer_shapes(shapes: list[Shape], attributes: dict[str, Any], node: str) -> list[Shape]:
    n, c, _, _ = spatial_image(kernel.OP, node, shapes[0])
    r = roi_count(kernel.OP, node, "rois", shapes[1], row=5)
    return [[r, c, *attributes["pooled_size"]]]


def _standard_form(node: StandardNode) -> None:
    """``MaxRoiPool`` over rois reshaped to ``[R, 5]``."""
    rows = node.op("Reshape", node.inputs[1], node.constant([-1, 5]))
    node.op("MaxRoiPool", node.inputs[0], rows, outputs=node.outputs,
            pooled_shape=node.attributes["pooled_size"],
            spatial_scale=node.attributes["spatial_scale"])


def _examples() -> tuple[Example, ...]:
    rng = np.random.default_rng(1)
    ramp = np.arange(72, dtype=np.float32).reshape(1, 2, 6, 6)
    halves = np.array([[0, 5, 5, 9, 11], [0, -1, 3, 4.9, 7], [0, 3, 1, 5, 3]], np.float32)
    image = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    rois = np.array([[[[1, 2, 1, 6, 7], [0, -3, -3, 3, 3], [1, 9, 9, 12, 12],
                       [0.9, 6, 5, 2, 1], [1.5, 0, 0, 7, 7]]]], np.float32)
    return (
        Example("half_coordinates_scale_half", (ramp, halves),
                {"pooled_size": [2, 2], "spatial_scale": 0.5}),
        Example("rank4_rois_outside_inverted", (image, rois), {"pooled_size": [3, 2]}),
        Example("float64_3x5", (image.astype(np.float64), rois[0, 0].astype(np.float64)),
                {"pooled_size": [3, 5], "spatial_scale": 1.25}),
        Example("float16", (image.astype(np.float16), rois[0].astype(np.float16)),
                {"pooled_size": [2, 2]}),
        Example("zero_rois", (image, np.zeros((0, 5), np.float32)), {"pooled_size": [2, 2]}),
        Example("batch_index_outside", (image, np.array([[2, 0, 0, 1, 1]], np.float32)),
                {"pooled_size": [2, 2]}, error="rois[0] batch index 2 is outside [0, 2)"),
    )


DEFINITION = OpDefinition(
    name="RoiPooling",
    summary="Max pooling over regions of interest (Fast R-CNN ROI pooling).",
    dml_name="DML_ROI_POOLING_OPERATOR_DESC",
    spec_section="1",
    inputs=(
        Parameter("X", "T", "[N, C, H, W]."),
        Parameter("rois", "T", "[R, 5], or with leading 1s up to rank 4; rows "
                               "[batch_id, x1, y1, x2, y2]."),
    ),
    outputs=(Parameter("Y", "T", "[R, C, PH, PW]."),),
    type_constraints={"T": FLOAT_TYPES},
    attributes=(
        Attribute("pooled_size", "ints", "Output [PH, PW]."),
        Attribute("spatial_scale", "float", "Multiplier of the ROI coordinates.", 1.0),
    ),
    kernel=kernel.roi_pooling,
    check_attributes=kernel.check_attributes,
    infer_shapes=_infer_shapes,
    standard_form=_standard_form,
    examples=_examples,
)


def roi_pooling(X: str, rois: str, Y: str, *, pooled_size: Sequence[int],
                spatial_scale: float | None = None, name: str | None = None) -> NodeProto:
    """A ``RoiPooling`` node; attributes left ``None`` take the spec default."""
    return DEFINITION.make_node([X, rois], [Y], name=name, pooled_size=pooled_size,
                                spatial_scale=spatial_scale)
