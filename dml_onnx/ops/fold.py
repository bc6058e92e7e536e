"""Fold: the adjoint of Unfold, N-dimensional col2im (DML_FOLD_OPERATOR_DESC)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import NodeProto, TensorProto, helper

from dml_onnx._kernels import fold as kernel
from dml_onnx._kernels._checks import KernelError
from dml_onnx._kernels._window import sliding_block_counts
from dml_onnx.definition import (
    NUMERIC_TYPES,
    Attribute,
    OpDefinition,
    Parameter,
    Shape,
    known,
    product,
)
from dml_onnx.form import StandardNode
from dml_onnx.ops._window import BLOCK_ATTRIBUTES, WINDOW_SIZES, Window, block_counts
from dml_onnx.ops._window_cases import fold_examples
from dml_onnx.reference_ops import fold as reference


def _infer_shapes(shapes: list[Shape], attributes: dict[str, Any], node: str) -> list[Shape]:
    op, window, output_size = kernel.OP, attributes["window_sizes"], attributes["output_size"]
    if shapes[0] is not None and len(shapes[0]) != 3:
        raise KernelError(op, node, "X rank", len(shapes[0]), "is not 3")
    n, rows, length = shapes[0] if shapes[0] is not None else [None] * 3
    blocks = block_counts(op, node, output_size, window, attributes, what="block count")
    count = product(blocks)
    if isinstance(length, int) and isinstance(count, int) and length != count:
        raise KernelError(op, node, "X dim 2", length,
                          f"is not the block count {count} of output_size {list(output_size)}")
    taps = math.prod(window)
    if isinstance(rows, int) and rows % taps:
        raise KernelError(op, node, "X dim 1", rows,
                          f"is not a multiple of prod(window_sizes) {taps}")
    channels = rows // taps if known(rows) else None
    return [[n, channels, *output_size]]


NATIVE_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16)
"""Element types onnxruntime's CPU ``Col2Im`` computes (float32; float16 through a cast, since
the kernel accumulates float16 in float32)."""


def _standard_form(node: StandardNode) -> None:
    """``Col2Im``, an exact scatter-add, or zeros; float16 runs in float32 and is rounded once.

    ``Col2Im`` (opset 18 and later) for float32 and float16 when the node prefers native ops,
    k >= 2 (Col2Im's minimum), every output size is at least 1 (onnxruntime refuses 0), every
    dilation at least 1, and k == 2 or every dilation is 1: onnxruntime's N-d path (k >= 3) is
    wrong with dilations (it passes the dilated window and the dilations), so those nodes use
    the decomposition. onnxruntime's ``Col2Im`` refuses an empty channel axis: an error, never
    a wrong value. ``Col2Im`` sums in its own order (taps first), not DirectML's.

    A dilation of 0: zeros of the output's shape (``ConstantOfShape``), as DirectML's Fold.

    Otherwise, and for the other types: ``ScatterElements`` with ``reduction="add"`` of ``X``
    as ``[N, C, L * W]``, block-major, into zeros ``[N, C, prod(P)]`` (``P`` the padded output
    sizes) at each value's flat position in the padded output, ``Reshape`` to
    ``[N, C, P1..Pk]`` and ``Slice`` off the padding. onnxruntime's CPU kernel adds the updates
    one after another in their order, so each output element is DirectML's sum: sequential,
    in ascending block order. Integers add in their own type and wrap around, like the kernel.
    """
    a = node.attributes
    window, output = Window.of(a["window_sizes"], a), tuple(a["output_size"])
    compute = node.compute_type
    if 0 in window.dilations:
        node.op("ConstantOfShape", _shapes_of(node, node.inputs[0], window)(*output),
                value=_zero(node.elem_type), outputs=node.outputs)
        return
    x = node.to_compute(node.inputs[0])
    if (node.elem_type in NATIVE_TYPES and window.k >= 2 and min(output) >= 1
            and (window.k == 2 or all(d == 1 for d in window.dilations))
            and node.uses_native("Col2Im")):
        y = node.op("Col2Im", x, node.constant(output), node.constant(window.sizes),
                    strides=list(window.strides), dilations=list(window.dilations),
                    pads=[*window.start, *window.end])
    else:
        y = _scatter_add(node, x, compute, window, output)
    node.finish("Cast", y)


def _zero(elem_type: int) -> onnx.TensorProto:
    """A one-element zero of ``elem_type``, the ``value`` of a ``ConstantOfShape``."""
    return onnx.numpy_helper.from_array(np.zeros(1, helper.tensor_dtype_to_np_dtype(elem_type)))


def _shapes_of(node: StandardNode, x: str, window: Window) -> Callable[..., str]:
    """``sized(*sizes)``: the shape ``[N, C, *sizes]`` built in the graph for
    ``x [N, C * prod(window), L]`` (``N`` and ``C`` read once)."""
    taps = math.prod(window.sizes)
    planes = node.op("Concat", node.op("Shape", x, end=1),
                     node.op("Div", node.op("Shape", x, start=1, end=2), node.constant([taps])),
                     axis=0)
    return lambda *sizes: node.op("Concat", planes, node.constant(list(sizes)), axis=0)


def _raveled(positions: Sequence[np.ndarray], sizes: Sequence[int]) -> np.ndarray:
    """The flat offsets, row-major, of every combination of ``positions`` (one vector per
    axis) in a grid of ``sizes``."""
    return np.ravel_multi_index(np.meshgrid(*positions, indexing="ij"), sizes).ravel()


def _scatter_add(node: StandardNode, x: str, elem_type: int, window: Window,
                 output: tuple[int, ...]) -> str:
    """Fold of ``x`` (``elem_type``) as a scatter-add into the padded output, block-major (the
    order of DirectML's sums), then a slice. The index is the sum of two small constants, the
    block offsets ``[L, 1]`` and the tap offsets ``[W]``, of rank 2: no tensor of the form has
    more dimensions than DirectML holds (:data:`~dml_onnx.form.DIRECTML_MAX_RANK`)."""
    k, taps = window.k, math.prod(window.sizes)
    blocks = sliding_block_counts(kernel.OP, node.label, output, *window)
    padded = [o + s + e for o, s, e in zip(output, window.start, window.end)]
    # flat position in the padded output of block b and tap i: the block's offset [L, 1]
    # plus the tap's [W], both raveled over the padded sizes, block-major [L, W]
    starts = [np.arange(b) * s for b, s in zip(blocks, window.strides)]
    reads = [np.arange(w) * dilation for w, dilation in zip(window.sizes, window.dilations)]
    index = node.op("Add", node.constant(_raveled(starts, padded)[:, None]),
                    node.constant(_raveled(reads, padded)))
    positions = taps * math.prod(blocks)
    sized = _shapes_of(node, x, window)
    block_major = node.op("Transpose", node.op("Reshape", x, sized(taps, math.prod(blocks))),
                          perm=[0, 1, 3, 2])
    summed = node.op("ScatterElements",
                     node.op("ConstantOfShape", sized(math.prod(padded)), value=_zero(elem_type)),
                     node.op("Expand", node.op("Reshape", index, node.constant([positions])),
                             sized(positions)),
                     node.op("Reshape", block_major, sized(positions)), axis=2, reduction="add")
    grid = node.op("Reshape", summed, sized(*padded))
    if not window.padded:
        return grid
    return node.op("Slice", grid, node.constant(window.start),
                   node.constant([s + o for s, o in zip(window.start, output)]),
                   node.constant(list(range(2, 2 + k))))


DEFINITION = OpDefinition(
    name="Fold",
    summary="Sums sliding blocks back into an N-dimensional tensor (col2im), the adjoint of "
            "Unfold. As DirectML measures: each output element a sequential sum from 0 of its "
            "values in ascending block order (float16 in float32, rounded once); all zeros "
            "with a dilation of 0.",
    dml_name="DML_FOLD_OPERATOR_DESC",
    spec_section="6",
    inputs=(Parameter("X", "T", "[N, C * prod(window_sizes), L]."),),
    outputs=(Parameter("Y", "T", "[N, C, O1, ..., Ok], Ok from output_size."),),
    type_constraints={"T": NUMERIC_TYPES},
    attributes=(WINDOW_SIZES, *BLOCK_ATTRIBUTES,
                Attribute("output_size", "ints", "Spatial sizes [O1, ..., Ok] of Y.")),
    kernel=kernel,
    reference=reference,
    infer_shapes=_infer_shapes,
    standard_form=_standard_form,
    examples=fold_examples,
)


def fold(X: str, Y: str, *, window_sizes: Sequence[int], output_size: Sequence[int],
         strides: Sequence[int] | None = None, dilations: Sequence[int] | None = None,
         start_padding: Sequence[int] | None = None, end_padding: Sequence[int] | None = None,
         name: str | None = None) -> NodeProto:
    """A ``Fold`` node (the full docstring, written from ``DEFINITION``: see
    :func:`~dml_onnx.builder_docs.builder_doc`)."""
    return DEFINITION.build(locals())
