"""LpPooling: Lp-norm pooling over sliding windows (DML_LP_POOLING1_OPERATOR_DESC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onnx import NodeProto, TensorProto

from dml_onnx._kernels import lp_pooling as kernel
from dml_onnx.definition import FLOAT_TYPES, Attribute, OpDefinition, Parameter, Shape
from dml_onnx.form import StandardNode, op_version
from dml_onnx.ops._window import (
    WINDOW_ATTRIBUTES,
    Window,
    block_counts,
    gather_windows,
    spatial_input,
)
from dml_onnx.ops._window_cases import lp_pooling_examples
from dml_onnx.reference_ops import lp_pooling as reference


def _infer_shapes(shapes: list[Shape], attributes: dict[str, Any], node: str) -> list[Shape]:
    window = attributes["window_size"]
    n, c, *spatial = spatial_input(kernel.OP, node, shapes[0], len(window))
    return [[n, c, *block_counts(kernel.OP, node, spatial, window, attributes)]]


NATIVE_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16)
"""Element types onnxruntime's CPU ``LpPool`` computes exactly (float32; float16 through a
cast, since the spec computes it in float32)."""


def _standard_form(node: StandardNode) -> None:
    """``LpPool``, or an exact decomposition; float16 runs in float32 and is rounded once.

    ``LpPool`` for float32 and float16 when the node prefers native ops, the opset resolves
    ``LpPool`` to version 11 (no dilations: only when every dilation is 1) or 18/22, and
    every pad is below its window size (onnxruntime refuses larger ones). onnxruntime's
    ``LpPool`` refuses empty inputs other than an empty batch (an empty channel axis, or a
    spatial axis read only as padding): an error, never a wrong value.

    Otherwise, and for double: ``Abs``, ``Mul`` (p = 2) or ``Pow``, the window sum of
    :func:`~dml_onnx.ops._window.gather_windows` (axis after axis, taps in order), then
    ``Sqrt`` (p = 2) or ``Pow`` by ``1/p``: the kernel's arithmetic in its order
    (onnxruntime's ``Pow`` by 3 multiplies out, within an ulp of ``pow``).
    """
    a, p = node.attributes, node.attributes["p"]
    window = Window.of(a["window_size"], a)
    compute = node.compute_type
    x = node.to_compute(node.inputs[0])
    dilated = any(d > 1 for d in window.dilations)
    if (node.elem_type in NATIVE_TYPES
            and all(max(before, after) < w for w, before, after
                    in zip(window.sizes, window.start, window.end))
            and node.uses_native("LpPool", minimum_version=18 if dilated else 1)):
        with_dilations = op_version("LpPool", node.opset) >= 18
        y = node.op("LpPool", x, kernel_shape=list(window.sizes), strides=list(window.strides),
                    dilations=list(window.dilations) if with_dilations else None,
                    pads=[*window.start, *window.end], p=p)
    else:
        magnitude = node.op("Abs", x)
        powered = (magnitude if p == 1 else node.op("Mul", magnitude, magnitude) if p == 2
                   else node.op("Pow", magnitude, node.constant(p, compute)))
        total = gather_windows(node, powered, compute, window, sum_taps=True)
        y = (total if p == 1 else node.op("Sqrt", total) if p == 2
             else node.op("Pow", total, node.constant(1.0 / p, compute)))
    node.finish("Cast", y)


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
    kernel=kernel,
    reference=reference,
    infer_shapes=_infer_shapes,
    standard_form=_standard_form,
    examples=lp_pooling_examples,
)


def lp_pooling(X: str, Y: str, *, window_size: Sequence[int],
               strides: Sequence[int] | None = None, dilations: Sequence[int] | None = None,
               start_padding: Sequence[int] | None = None,
               end_padding: Sequence[int] | None = None, p: int | None = None,
               name: str | None = None) -> NodeProto:
    """An ``LpPooling`` node (the full docstring, written from ``DEFINITION``: see
    :func:`~dml_onnx.builder_docs.builder_doc`)."""
    return DEFINITION.build(locals())
