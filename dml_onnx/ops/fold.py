"""Fold: the adjoint of Unfold, N-dimensional col2im (DML_FOLD_OPERATOR_DESC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onnx import NodeProto

from custom_ops import fold as kernel
from dml_onnx.definition import (
    NUMERIC_TYPES,
    Attribute,
    OpDefinition,
    Parameter,
    Shape,
    product,
)
from dml_onnx.ops._roi import same_dim
from dml_onnx.ops._window import WINDOW_ATTRIBUTES, block_counts
from dml_onnx.ops.unfold import WINDOW_SIZES


def _infer_shapes(shapes: list[Shape], attributes: dict[str, Any], node: str) -> list[Shape]:
    op, window, output_size = kernel.OP, attributes["window_sizes"], attributes["output_size"]
    n, rows, length = shapes[0] if shapes[0] is not None else [None] * 3
    if shapes[0] is not None and len(shapes[0]) != 3:
        raise ValueError(f"{op} '{node}': X rank {len(shapes[0])} is not 3")
    blocks = block_counts(op, node, output_size, window, attributes, what="block count")
    same_dim(op, node, "X dim 2 and the block count of output_size", length, product(blocks))
    taps = product(window)
    channels = None
    if isinstance(rows, int):
        if rows % taps:
            raise ValueError(f"{op} '{node}': X dim 1 {rows} is not a multiple of "
                             f"prod(window_sizes) {taps}")
        channels = rows // taps
    return [[n, channels, *output_size]]


DEFINITION = OpDefinition(
    name="Fold",
    summary="Sums sliding blocks back into an N-dimensional tensor (col2im), the adjoint of "
            "Unfold.",
    dml_name="DML_FOLD_OPERATOR_DESC",
    spec_section="6",
    inputs=(Parameter("X", "T", "[N, C * prod(window_sizes), L]."),),
    outputs=(Parameter("Y", "T", "[N, C, O1, ..., Ok], Ok from output_size."),),
    type_constraints={"T": NUMERIC_TYPES},
    attributes=(WINDOW_SIZES, *WINDOW_ATTRIBUTES,
                Attribute("output_size", "ints", "Spatial sizes [O1, ..., Ok] of Y.")),
    kernel=kernel.fold,
    check_attributes=kernel.check_attributes,
    infer_shapes=_infer_shapes,
)


def fold(X: str, Y: str, *, window_sizes: Sequence[int], output_size: Sequence[int],
         strides: Sequence[int] | None = None, dilations: Sequence[int] | None = None,
         start_padding: Sequence[int] | None = None, end_padding: Sequence[int] | None = None,
         name: str | None = None) -> NodeProto:
    """A ``Fold`` node; attributes left ``None`` take the spec default."""
    return DEFINITION.make_node([X], [Y], name=name, window_sizes=window_sizes, strides=strides,
                                dilations=dilations, start_padding=start_padding,
                                end_padding=end_padding, output_size=output_size)
