"""LpPooling: Lp-norm pooling over sliding windows (DML_LP_POOLING1_OPERATOR_DESC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onnx import NodeProto

from custom_ops import lp_pooling as kernel
from dml_onnx.definition import FLOAT_TYPES, Attribute, OpDefinition, Parameter, Shape
from dml_onnx.ops._window import WINDOW_ATTRIBUTES, block_counts, spatial_input


def _infer_shapes(shapes: list[Shape], attributes: dict[str, Any], node: str) -> list[Shape]:
    window = attributes["window_size"]
    n, c, *spatial = spatial_input(kernel.OP, node, shapes[0], len(window))
    return [[n, c, *block_counts(kernel.OP, node, spatial, window, attributes)]]


DEFINITION = OpDefinition(
    name="LpPooling",
    summary="Lp-norm pooling: (sum of |x|^p over each window)^(1/p), zero padding.",
    dml_name="DML_LP_POOLING1_OPERATOR_DESC",
    spec_section="4",
    inputs=(Parameter("X", "T", "[N, C, D1, ..., Dk], k = 1, 2 or 3."),),
    outputs=(Parameter("Y", "T", "[N, C, O1, ..., Ok]."),),
    type_constraints={"T": FLOAT_TYPES},
    attributes=(
        Attribute("window_size", "ints", "Window size along each spatial axis (k values)."),
        *WINDOW_ATTRIBUTES,
        Attribute("p", "int", "The norm's exponent, >= 1.", 2),
    ),
    kernel=kernel.lp_pooling,
    check_attributes=kernel.check_attributes,
    infer_shapes=_infer_shapes,
)


def lp_pooling(X: str, Y: str, *, window_size: Sequence[int],
               strides: Sequence[int] | None = None, dilations: Sequence[int] | None = None,
               start_padding: Sequence[int] | None = None,
               end_padding: Sequence[int] | None = None, p: int | None = None,
               name: str | None = None) -> NodeProto:
    """An ``LpPooling`` node; attributes left ``None`` take the spec default."""
    return DEFINITION.make_node([X], [Y], name=name, window_size=window_size, strides=strides,
                                dilations=dilations, start_padding=start_padding,
                                end_padding=end_padding, p=p)
