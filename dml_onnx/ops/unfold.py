"""Unfold: extract sliding blocks, N-dimensional im2col (DML_UNFOLD_OPERATOR_DESC)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from onnx import NodeProto

from custom_ops import unfold as kernel
from dml_onnx.definition import ANY_TYPES, OpDefinition, Parameter, Shape, product
from dml_onnx.form import StandardNode
from dml_onnx.ops._window import (
    BLOCK_ATTRIBUTES,
    WINDOW_SIZES,
    Window,
    block_counts,
    gather_windows,
    spatial_input,
)
from dml_onnx.ops._window_cases import unfold_examples
from dml_onnx.reference_ops import unfold as reference


def _infer_shapes(shapes: list[Shape], attributes: dict[str, Any], node: str) -> list[Shape]:
    window = attributes["window_sizes"]
    n, c, *spatial = spatial_input(kernel.OP, node, shapes[0], len(window))
    blocks = block_counts(kernel.OP, node, spatial, window, attributes, what="block count")
    return [[n, product([c, *window]), product(blocks)]]


def _standard_form(node: StandardNode) -> None:
    """Never a native op (ONNX has none): ``Pad``, one ``Gather`` per spatial axis (indices
    built in the graph), ``Transpose`` and ``Reshape``; exact for every element type.

    The gathers turn ``[N, C, D1..Dk]`` into ``[N, C, w1, B1, ..., wk, Bk]``
    (:func:`~dml_onnx.ops._window.gather_windows`: int16/uint16 pad as int32); the transpose
    groups the window axes before the block axes, and the reshape gives
    ``[N, C * prod(window_sizes), prod(B)]`` with sizes read from the graph.
    """
    window = Window.of(node.attributes["window_sizes"], node.attributes)
    k = window.k
    taps = gather_windows(node, node.inputs[0], node.elem_type, window)
    grouped = node.op("Transpose", taps, perm=[0, 1, *range(2, 2 + 2 * k, 2),
                                               *range(3, 3 + 2 * k, 2)])
    rows = node.op("Mul", node.op("Shape", grouped, start=1, end=2),
                   node.constant([math.prod(window.sizes)]))
    blocks = node.reduce("ReduceProd", node.op("Shape", grouped, start=2 + k), [0])
    shape = node.op("Concat", node.op("Shape", grouped, end=1), rows, blocks, axis=0)
    node.op("Reshape", grouped, shape, outputs=node.outputs)


DEFINITION = OpDefinition(
    name="Unfold",
    summary="Extracts sliding blocks (im2col) of an N-dimensional input. A dilation of 0 is "
            "the formula read literally, as DirectML measures: every tap of that axis reads "
            "one position.",
    dml_name="DML_UNFOLD_OPERATOR_DESC",
    spec_section="5",
    inputs=(Parameter("X", "T", "[N, C, D1, ..., Dk], k = 1..6."),),
    outputs=(Parameter("Y", "T", "[N, C * prod(window_sizes), L], L = number of blocks."),),
    type_constraints={"T": ANY_TYPES},
    attributes=(WINDOW_SIZES, *BLOCK_ATTRIBUTES),
    kernel=kernel,
    reference=reference,
    infer_shapes=_infer_shapes,
    standard_form=_standard_form,
    examples=unfold_examples,
)


def unfold(X: str, Y: str, *, window_sizes: Sequence[int], strides: Sequence[int] | None = None,
           dilations: Sequence[int] | None = None, start_padding: Sequence[int] | None = None,
           end_padding: Sequence[int] | None = None, name: str | None = None) -> NodeProto:
    """An ``Unfold`` node; attributes left ``None`` take the spec default."""
    return DEFINITION.build(locals())
