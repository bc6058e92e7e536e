"""Unfold: extract sliding blocks, N-dimensional im2col (DML_UNFOLD_OPERATOR_DESC)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import NodeProto

from dml_onnx._kernels import unfold as kernel
from dml_onnx.definition import ANY_TYPES, OpDefinition, Parameter, Shape, product
from dml_onnx.form import DIRECTML_MAX_RANK, StandardNode
from dml_onnx.ops._window import (
    BLOCK_ATTRIBUTES,
    WINDOW_SIZES,
    Window,
    block_counts,
    block_starts,
    gather_windows,
    pad_spatial,
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
    """Never a native op (ONNX has none): ``Pad``, ``Gather`` with indices built in the graph
    (shape-generic), ``Reshape``; exact for every element type (int16/uint16 pad as int32).

    Two constructions, because DirectML tensors have at most
    :data:`~dml_onnx.form.DIRECTML_MAX_RANK` dimensions. While 2 + 2k fits (k <= 3), one
    ``Gather`` per spatial axis (:func:`~dml_onnx.ops._window.gather_windows`) gives
    ``[N, C, w1, B1, ..., wk, Bk]`` and a ``Transpose`` groups the window axes before the block
    axes: the form the DirectML execution provider was measured to run. Beyond, the windows
    are gathered from the flattened padded input (:func:`_gather_flat`), every tensor of rank
    at most k + 2. Either gives ``[N, C, <window axes>, <block axes>]``, and a ``Reshape`` to
    ``[N, C * prod(window_sizes), prod(B)]`` with sizes read from the graph.
    """
    window = Window.of(node.attributes["window_sizes"], node.attributes)
    k = window.k
    if 2 + 2 * k <= DIRECTML_MAX_RANK:
        taps = gather_windows(node, node.inputs[0], node.elem_type, window)
        grouped = node.op("Transpose", taps, perm=[0, 1, *range(2, 2 + 2 * k, 2),
                                                   *range(3, 3 + 2 * k, 2)])
        window_axes = k
    else:
        grouped, window_axes = _gather_flat(node, window), 1
    rows = node.op("Mul", node.op("Shape", grouped, start=1, end=2),
                   node.constant([math.prod(window.sizes)]))
    blocks = node.reduce("ReduceProd", node.op("Shape", grouped, start=2 + window_axes), [0])
    shape = node.op("Concat", node.op("Shape", grouped, end=1), rows, blocks, axis=0)
    node.op("Reshape", grouped, shape, outputs=node.outputs)


def _gather_flat(node: StandardNode, window: Window) -> str:
    """``[N, C, W, L]`` (``W`` taps, ``L`` blocks, each in row-major order): ``Pad``,
    ``Reshape`` to ``[N, C, prod(P)]`` and one ``Gather`` of the flat positions ``[W, L]``,
    the tap offsets ``[W]`` plus the block offsets ``[L]``, raveled in the graph over the
    padded sizes ``P``."""
    padded = pad_spatial(node, node.inputs[0], node.elem_type, window)
    sizes = node.op("Shape", padded, start=2)
    flat = node.op("Reshape", padded, node.op(
        "Concat", node.op("Shape", padded, end=2), node.reduce("ReduceProd", sizes, [0]),
        axis=0))
    extents = [node.op("Gather", sizes, node.constant(d)) for d in range(1, window.k)]
    taps = _raveled(node, [node.constant(np.arange(w) * dilation)
                           for w, dilation in zip(window.sizes, window.dilations)], extents)
    blocks = _raveled(node, list(block_starts(node, padded, window)), extents)
    index = node.op("Add", node.op("Reshape", taps, node.constant([-1, 1])), blocks)
    return node.op("Gather", flat, index, axis=2)


def _raveled(node: StandardNode, positions: Sequence[str], extents: Sequence[str]) -> str:
    """The flat offsets, row-major, of every combination of ``positions`` (one vector per
    spatial axis) in a grid whose axes after the first have sizes ``extents`` (scalars):
    Horner's rule, ``offset * P_d + position_d`` as an outer sum, flattened axis by axis so
    that no tensor has rank above 2."""
    offsets = positions[0]
    for position, extent in zip(positions[1:], extents):
        column = node.op("Reshape", node.op("Mul", offsets, extent), node.constant([-1, 1]))
        offsets = node.op("Reshape", node.op("Add", column, position), node.constant([-1]))
    return offsets


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
    """An ``Unfold`` node (the full docstring, written from ``DEFINITION``: see
    :func:`~dml_onnx.builder_docs.builder_doc`)."""
    return DEFINITION.build(locals())
