"""LpPooling: Lp-norm pooling over sliding windows (DML_LP_POOLING1_OPERATOR_DESC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import NodeProto

from custom_ops import lp_pooling as kernel
from custom_ops._common import filled
from dml_onnx.definition import (
    FLOAT_TYPES,
    Attribute,
    Example,
    OpDefinition,
    Parameter,
    Shape,
)
from dml_onnx.form import StandardNode
from dml_onnx.ops._window import WINDOW_ATTRIBUTES, block_counts, spatial_input


def _infer_shapes(shapes: list[Shape], attributes: dict[str, Any], node: str) -> list[Shape]:
    window = attributes["window_size"]
    n, c, *spatial = spatial_input(kernel.OP, node, shapes[0], len(window))
    return [[n, c, *block_counts(kernel.OP, node, spatial, window, attributes)]]


def _standard_form(node: StandardNode) -> None:
    """``LpPool`` (opset 18: dilations) with the same window, strides, pads and p."""
    a = node.attributes
    k = len(a["window_size"])
    node.op("LpPool", *node.inputs, outputs=node.outputs, kernel_shape=a["window_size"],
            strides=filled(a["strides"], k, 1), dilations=filled(a["dilations"], k, 1),
            pads=[*filled(a["start_padding"], k, 0), *filled(a["end_padding"], k, 0)], p=a["p"])


def _examples() -> tuple[Example, ...]:
    rng = np.random.default_rng(4)
    x2 = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    return (
        Example("2d_p2_padded", (x2,), {"window_size": [3, 3], "start_padding": [1, 1],
                                        "end_padding": [1, 1]}),
        Example("2d_p1_strided_asymmetric", (x2,), {"window_size": [2, 3], "strides": [2, 1],
                                                    "start_padding": [0, 2],
                                                    "end_padding": [1, 0], "p": 1}),
        Example("1d_p3_dilated", (rng.standard_normal((1, 2, 11)).astype(np.float64),),
                {"window_size": [3], "dilations": [2], "strides": [2], "p": 3}),
        Example("3d_p4", (rng.standard_normal((1, 2, 4, 5, 3)).astype(np.float32),),
                {"window_size": [2, 2, 2], "dilations": [1, 2, 1], "end_padding": [1, 0, 1],
                 "p": 4}),
        Example("2d_float16", (x2.astype(np.float16),), {"window_size": [2, 2]}),
        Example("window_larger_than_input", (x2[:, :, :1].astype(np.float16),),
                {"window_size": [2, 2]},
                error="spatial axis 0 output size 0 is below 1"),
    )


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
    standard_form=_standard_form,
    examples=_examples,
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
