"""Fold: the adjoint of Unfold, N-dimensional col2im (DML_FOLD_OPERATOR_DESC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import NodeProto

from custom_ops import fold as kernel
from custom_ops._common import filled
from dml_onnx.definition import (
    NUMERIC_TYPES,
    Attribute,
    Example,
    OpDefinition,
    Parameter,
    Shape,
    product,
)
from dml_onnx.form import NotEquivalent, StandardNode
from dml_onnx.ops._window import WINDOW_ATTRIBUTES, block_counts
from dml_onnx.ops.unfold import WINDOW_SIZES


def _infer_shapes(shapes: list[Shape], attributes: dict[str, Any], node: str) -> list[Shape]:
    op, window, output_size = kernel.OP, attributes["window_sizes"], attributes["output_size"]
    n, rows, length = shapes[0] if shapes[0] is not None else [None] * 3
    if shapes[0] is not None and len(shapes[0]) != 3:
        raise ValueError(f"{op} '{node}': X rank {len(shapes[0])} is not 3")
    blocks = block_counts(op, node, output_size, window, attributes, what="block count")
    count = product(blocks)
    if isinstance(length, int) and isinstance(count, int) and length != count:
        raise ValueError(f"{op} '{node}': X dim 2 {length} is not the block count {count} of "
                         f"output_size {list(output_size)}")
    taps = product(window)
    channels = None
    if isinstance(rows, int):
        if rows % taps:
            raise ValueError(f"{op} '{node}': X dim 1 {rows} is not a multiple of "
                             f"prod(window_sizes) {taps}")
        channels = rows // taps
    return [[n, channels, *output_size]]


def _standard_form(node: StandardNode) -> None:
    """``Col2Im`` (opset 18), which has two or more spatial axes."""
    a = node.attributes
    k = len(a["window_sizes"])
    if k < 2:
        raise NotEquivalent(f"'{node.label}': Col2Im needs 2 or more spatial axes, not {k}")
    node.op("Col2Im", node.inputs[0], node.constant(a["output_size"]),
            node.constant(a["window_sizes"]), outputs=node.outputs,
            strides=filled(a["strides"], k, 1), dilations=filled(a["dilations"], k, 1),
            pads=[*filled(a["start_padding"], k, 0), *filled(a["end_padding"], k, 0)])


def _examples() -> tuple[Example, ...]:
    rng = np.random.default_rng(6)
    padded = {"window_sizes": [3, 3], "start_padding": [1, 1], "end_padding": [1, 1],
              "output_size": [5, 4]}
    dilated = {"window_sizes": [2, 2, 2], "dilations": [1, 2, 1], "strides": [2, 1, 1],
               "output_size": [4, 5, 3], "end_padding": [1, 0, 0]}
    x_padded = rng.standard_normal((2, 18, 20)).astype(np.float32)
    return (
        Example("2d_padded", (x_padded,), padded),
        Example("2d_float16", (x_padded.astype(np.float16),), padded),
        Example("3d_int32_dilated", (rng.integers(-9, 9, (1, 16, 12)).astype(np.int32),),
                dilated),
        Example("1d_float64_strided", (rng.standard_normal((1, 6, 4)),),
                {"window_sizes": [3], "strides": [2], "start_padding": [2],
                 "output_size": [7]}),
        Example("4d_uint8", (rng.integers(0, 9, (1, 16, 2)).astype(np.uint8),),
                {"window_sizes": [2, 2, 2, 2], "output_size": [2, 2, 2, 3]}),
        Example("block_count_disagrees", (x_padded[:, :, :19],), padded,
                error="X dim 2 19 is not the block count 20"),
    )


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
    standard_form=_standard_form,
    examples=_examples,
)


def fold(X: str, Y: str, *, window_sizes: Sequence[int], output_size: Sequence[int],
         strides: Sequence[int] | None = None, dilations: Sequence[int] | None = None,
         start_padding: Sequence[int] | None = None, end_padding: Sequence[int] | None = None,
         name: str | None = None) -> NodeProto:
    """A ``Fold`` node; attributes left ``None`` take the spec default."""
    return DEFINITION.make_node([X], [Y], name=name, window_sizes=window_sizes, strides=strides,
                                dilations=dilations, start_padding=start_padding,
                                end_padding=end_padding, output_size=output_size)
