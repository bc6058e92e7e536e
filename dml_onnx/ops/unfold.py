"""Unfold: extract sliding blocks, N-dimensional im2col (DML_UNFOLD_OPERATOR_DESC)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import NodeProto

from custom_ops import unfold as kernel
from dml_onnx.definition import (
    ANY_TYPES,
    Attribute,
    Example,
    OpDefinition,
    Parameter,
    Shape,
    product,
)
from dml_onnx.form import StandardNode
from dml_onnx.ops._window import (
    WINDOW_ATTRIBUTES,
    Window,
    block_counts,
    case_shape,
    case_table,
    gather_windows,
    sample,
    spatial_input,
)
from dml_onnx.reference_ops import unfold as reference

WINDOW_SIZES = Attribute("window_sizes", "ints", "Window size along each spatial axis "
                                                 "(k values, k = 1..6).")


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


# The two worked examples of the DirectML UNFOLD page: X = arange(25) as [1, 1, 5, 5], 3x3
# window, then the same with StartPadding = EndPadding = {1, 0}. Rows as printed there.
SEED_1 = [
    [0, 1, 2, 5, 6, 7, 10, 11, 12], [1, 2, 3, 6, 7, 8, 11, 12, 13],
    [2, 3, 4, 7, 8, 9, 12, 13, 14], [5, 6, 7, 10, 11, 12, 15, 16, 17],
    [6, 7, 8, 11, 12, 13, 16, 17, 18], [7, 8, 9, 12, 13, 14, 17, 18, 19],
    [10, 11, 12, 15, 16, 17, 20, 21, 22], [11, 12, 13, 16, 17, 18, 21, 22, 23],
    [12, 13, 14, 17, 18, 19, 22, 23, 24],
]
SEED_2 = [
    [0, 0, 0, 0, 1, 2, 5, 6, 7, 10, 11, 12, 15, 16, 17],
    [0, 0, 0, 1, 2, 3, 6, 7, 8, 11, 12, 13, 16, 17, 18],
    [0, 0, 0, 2, 3, 4, 7, 8, 9, 12, 13, 14, 17, 18, 19],
    [0, 1, 2, 5, 6, 7, 10, 11, 12, 15, 16, 17, 20, 21, 22],
    [1, 2, 3, 6, 7, 8, 11, 12, 13, 16, 17, 18, 21, 22, 23],
    [2, 3, 4, 7, 8, 9, 12, 13, 14, 17, 18, 19, 22, 23, 24],
    [5, 6, 7, 10, 11, 12, 15, 16, 17, 20, 21, 22, 0, 0, 0],
    [6, 7, 8, 11, 12, 13, 16, 17, 18, 21, 22, 23, 0, 0, 0],
    [7, 8, 9, 12, 13, 14, 17, 18, 19, 22, 23, 24, 0, 0, 0],
]


def _examples() -> tuple[Example, ...]:
    rng = np.random.default_rng(5)
    seed_x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    x3 = rng.integers(-50, 50, (2, 2, 4, 5, 3)).astype(np.int32)
    return (
        Example("seed_1", (seed_x,), {"window_sizes": [3, 3]},
                expected=(np.array([SEED_1], np.float32),)),
        Example("seed_2_padded", (seed_x,), {"window_sizes": [3, 3], "start_padding": [1, 0],
                                             "end_padding": [1, 0]},
                expected=(np.array([SEED_2], np.float32),)),
        Example("1d_int8_strided", (rng.integers(-100, 100, (2, 3, 9)).astype(np.int8),),
                {"window_sizes": [2], "strides": [3], "start_padding": [2]}),
        Example("3d_int32_dilated", (x3,), {"window_sizes": [2, 2, 2], "dilations": [2, 1, 1],
                                            "strides": [1, 2, 1], "end_padding": [0, 1, 1]}),
        Example("2d_bool", (rng.random((1, 2, 4, 4)) > 0.5,),
                {"window_sizes": [2, 3], "start_padding": [1, 1], "end_padding": [0, 1]}),
        Example("2d_float16", (rng.standard_normal((1, 3, 5, 4)).astype(np.float16),),
                {"window_sizes": [3, 2], "strides": [2, 2], "start_padding": [1, 0]}),
        Example("6d_uint16", (rng.integers(0, 1000, (1, 1, 2, 3, 2, 2, 3, 2)).astype(np.uint16),),
                {"window_sizes": [1, 2, 2, 1, 2, 2]}),
        Example("window_larger_than_input", (x3[:, :, :1],),
                {"window_sizes": [2, 2, 2], "dilations": [2, 1, 1], "strides": [1, 2, 1],
                 "end_padding": [0, 1, 1]},
                error="spatial axis 0 block count 0 is below 1"),
        *_table(np.random.default_rng(50)),
    )


def _table(rng: np.random.Generator) -> tuple[Example, ...]:
    """The shared case table (:func:`~dml_onnx.ops._window.case_table`)."""
    return tuple(Example(name, (sample(rng, case_shape(case), dtype),),
                         case.for_op("window_sizes"))
                 for name, case, dtype in case_table(6, ANY_TYPES))


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
    reference=reference.unfold,
    infer_shapes=_infer_shapes,
    standard_form=_standard_form,
    examples=_examples,
)


def unfold(X: str, Y: str, *, window_sizes: Sequence[int], strides: Sequence[int] | None = None,
           dilations: Sequence[int] | None = None, start_padding: Sequence[int] | None = None,
           end_padding: Sequence[int] | None = None, name: str | None = None) -> NodeProto:
    """An ``Unfold`` node; attributes left ``None`` take the spec default."""
    return DEFINITION.make_node([X], [Y], name=name, window_sizes=window_sizes, strides=strides,
                                dilations=dilations, start_padding=start_padding,
                                end_padding=end_padding)
