"""RoiPooling: max pooling over regions of interest (DML_ROI_POOLING_OPERATOR_DESC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onnx import NodeProto

from custom_ops import roi_pooling as kernel
from dml_onnx.definition import FLOAT_TYPES, Attribute, OpDefinition, Parameter, Shape
from dml_onnx.ops._roi import roi_count, spatial_image


def _infer_shapes(shapes: list[Shape], attributes: dict[str, Any], node: str) -> list[Shape]:
    n, c, _, _ = spatial_image(kernel.OP, node, shapes[0])
    r = roi_count(kernel.OP, node, "rois", shapes[1], row=5)
    return [[r, c, *attributes["pooled_size"]]]


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
)


def roi_pooling(X: str, rois: str, Y: str, *, pooled_size: Sequence[int],
                spatial_scale: float | None = None, name: str | None = None) -> NodeProto:
    """A ``RoiPooling`` node; attributes left ``None`` take the spec default."""
    return DEFINITION.make_node([X, rois], [Y], name=name, pooled_size=pooled_size,
                                spatial_scale=spatial_scale)
