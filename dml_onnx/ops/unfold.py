"""Unfold: extract sliding blocks, N-dimensional im2col (DML_UNFOLD_OPERATOR_DESC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onnx import NodeProto

from custom_ops import unfold as kernel
from dml_onnx.definition import (
    ANY_TYPES,
    Attribute,
    OpDefinition,
    Parameter,
    Shape,
    product,
)
from dml_onnx.ops._window import WINDOW_ATTRIBUTES, block_counts, spatial_input

WINDOW_SIZES = Attribute("window_sizes", "ints", "Window size along each spatial axis "
                                                 "(k values, k = 1..6).")


def _infer_shapes(shapes: list[Shape], attributes: dict[str, Any], node: str) -> list[Shape]:
    window = attributes["window_sizes"]
    n, c, *spatial = spatial_input(kernel.OP, node, shapes[0], len(window))
    blocks = block_counts(kernel.OP, node, spatial, window, attributes, what="block count")
    return [[n, product([c, *window]), product(blocks)]]


DEFINITION = OpDefinition(
    name="Unfold",
    summary="Extracts sliding blocks (im2col) of an N-dimensional input.",
    dml_name="DML_UNFOLD_OPERATOR_DESC",
    spec_section="5",
    inputs=(Parameter("X", "T", "[N, C, D1, ..., Dk], k = 1..6."),),
    outputs=(Parameter("Y", "T", "[N, C * prod(window_sizes), L], L = number of blocks."),),
    type_constraints={"T": ANY_TYPES},
    attributes=(WINDOW_SIZES, *WINDOW_ATTRIBUTES),
    kernel=kernel.unfold,
    check_attributes=kernel.check_attributes,
    infer_shapes=_infer_shapes,
)


def unfold(X: str, Y: str, *, window_sizes: Sequence[int], strides: Sequence[int] | None = None,
           dilations: Sequence[int] | None = None, start_padding: Sequence[int] | None = None,
           end_padding: Sequence[int] | None = None, name: str | None = None) -> NodeProto:
    """An ``Unfold`` node; attributes left ``None`` take the spec default."""
    return DEFINITION.make_node([X], [Y], name=name, window_sizes=window_sizes, strides=strides,
                                dilations=dilations, start_padding=start_padding,
                                end_padding=end_padding)
