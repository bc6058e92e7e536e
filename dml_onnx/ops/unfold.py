"""Unfold: extract sliding blocks, N-dimensional im2col (DML_UNFOLD_OPERATOR_DESC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import NodeProto, helper

from custom_ops import unfold as kernel
from custom_ops._common import filled
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
from dml_onnx.ops._window import WINDOW_ATTRIBUTES, block_counts, spatial_input

WINDOW_SIZES = Attribute("window_sizes", "ints", "Window size along each spatial axis "
                                                 "(k values, k = 1..6).")


def _infer_shapes(shapes: list[Shape], attributes: dict[str, Any], node: str) -> list[Shape]:
    window = attributes["window_sizes"]
    n, c, *spatial = spatial_input(kernel.OP, node, shapes[0], len(window))
    blocks = block_counts(kernel.OP, node, spatial, window, attributes, what="block count")
    return [[n, product([c, *window]), product(blocks)]]


def _standard_form(node: StandardNode) -> None:
    """``Pad``, one ``Gather`` per spatial axis, ``Transpose`` and ``Reshape``.

    Gathering ``[window, blocks]`` indices along each axis turns ``[N, C, P1..Pk]`` into
    ``[N, C, w1, B1, ..., wk, Bk]``; the transpose groups the window axes before the block axes.
    Needs static spatial sizes (the indices are constants).
    """
    a = node.attributes
    window = a["window_sizes"]
    k = len(window)
    spatial = node.static_dims(0, "spatial sizes")[2:]
    strides, dilations = filled(a["strides"], k, 1), filled(a["dilations"], k, 1)
    start, end = filled(a["start_padding"], k, 0), filled(a["end_padding"], k, 0)
    blocks = block_counts(kernel.OP, node.label, spatial, window, a, what="block count")
    pads_name, pads = node.constant("pads", [0, 0, *start, 0, 0, *end])
    nodes = [pads, helper.make_node("Pad", [node.inputs[0], pads_name], [f"{node.prefix}_0"])]
    for axis in range(k):
        taps = np.arange(window[axis])[:, None] * dilations[axis]
        index_name, index = node.constant(
            f"index_{axis}", taps + np.arange(blocks[axis])[None, :] * strides[axis])
        nodes += [index, helper.make_node("Gather", [f"{node.prefix}_{axis}", index_name],
                                          [f"{node.prefix}_{axis + 1}"], axis=2 + 2 * axis)]
    perm = [0, 1, *range(2, 2 + 2 * k, 2), *range(3, 3 + 2 * k, 2)]
    shape_name, shape = node.constant("shape", [0, -1, product(blocks)])
    return [*nodes, shape,
            helper.make_node("Transpose", [f"{node.prefix}_{k}"], [f"{node.prefix}_t"],
                             perm=perm),
            helper.make_node("Reshape", [f"{node.prefix}_t", shape_name], node.outputs,
                             name=node.label)]


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
    )


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
