"""RoiAlignGrad: gradients of RoiAlign1 (DML_ROI_ALIGN_GRAD_OPERATOR_DESC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import NodeProto

from custom_ops import roi_align_grad as kernel
from dml_onnx.definition import Attribute, Example, OpDefinition, Parameter, Shape
from dml_onnx.ops._roi import same_dim, spatial_image
from dml_onnx.ops.roi_align1 import (
    ROI_INPUTS,
    ROI_TYPES,
    SAMPLING_ATTRIBUTES,
    SEED_ATTRIBUTES,
    SEED_BATCH,
    SEED_ROIS,
    roi_rows,
)


def _infer_shapes(shapes: list[Shape], attributes: dict[str, Any], node: str) -> list[Shape]:
    op = kernel.OP
    image = spatial_image(op, node, shapes[0])
    given = attributes["input_shape"]
    if given:
        for axis, (a, b) in enumerate(zip(image, given)):
            same_dim(op, node, f"X dim {axis} and input_shape[{axis}]", a, b)
        image = list(given)
    r = roi_rows(op, node, shapes)
    grad = spatial_image(op, node, shapes[1], "dY")
    same_dim(op, node, "R of dY and rois", grad[0], r)
    same_dim(op, node, "C of dY and X", grad[1], image[1])
    return [image, shapes[2]]


def _check_signature(*, node: str, attributes: dict[str, Any], inputs: list[bool],
                     outputs: list[bool]) -> None:
    kernel.check_signature(node=node, x_given=inputs[0], compute_dx=outputs[0],
                           compute_drois=outputs[1],
                           reduction_function=attributes["reduction_function"],
                           input_shape=attributes["input_shape"])


def _examples() -> tuple[Example, ...]:
    rng = np.random.default_rng(3)
    seed_attributes = {k: v for k, v in SEED_ATTRIBUTES.items() if k != "output_size"}
    seed_dy = np.arange(1, 13, dtype=np.float32).reshape(4, 1, 1, 3)
    image = rng.standard_normal((2, 3, 9, 8))
    rois = np.array([[0.7, 1.3, 6.1, 5.4], [2.2, 0.4, 3.9, 7.6], [5.6, 6.3, 1.2, 2.7]])
    batch = np.array([1, 0, 1], np.int32)
    grad = rng.standard_normal((3, 3, 2, 3))
    linear = {"spatial_scale_x": 0.9, "spatial_scale_y": 1.1, "minimum_samples_per_output": 2,
              "maximum_samples_per_output": 2}
    return (
        Example("seed_dx_without_x", (None, seed_dy, SEED_ROIS, SEED_BATCH),
                {**seed_attributes, "input_shape": [1, 1, 4, 4]}, outputs=(True, False),
                expected=(np.array([[[[3, 3, 9, 6], [0, 0, 0, 0], [15, 9, 21, 12],
                                      [0, 0, 0, 0]]]], np.float32),)),
        Example("both_gradients_float64", (image, grad, rois, batch), linear,
                outputs=(True, True)),
        Example("drois_max_float32_uint64",
                (image.astype(np.float32), grad.astype(np.float32), rois.astype(np.float32),
                 batch.astype(np.uint64)),
                {"reduction_function": "max", "align_regions_to_corners": 1},
                outputs=(False, True)),
        Example("dx_float16", (image.astype(np.float16), grad.astype(np.float16),
                               rois.astype(np.float16), batch), {}, outputs=(True, False)),
        Example("dy_rows_disagree_with_rois", (image, grad[:2], rois, batch), linear,
                outputs=(True, True), error="dY shape [2, 3, 2, 3] does not start with"),
    )


DEFINITION = OpDefinition(
    name="RoiAlignGrad",
    summary="Backward of RoiAlign1: the gradient with respect to the image and/or the ROI "
            "corners.",
    dml_name="DML_ROI_ALIGN_GRAD_OPERATOR_DESC",
    spec_section="3",
    inputs=(
        Parameter("X", "T", "[N, C, H, W], the forward input (required for drois and for "
                            "max).", optional=True),
        Parameter("dY", "T", "[R, C, OH, OW], gradient of the forward output."),
        *ROI_INPUTS,
    ),
    outputs=(
        Parameter("dX", "T", "[N, C, H, W], gradient of X.", optional=True),
        Parameter("drois", "T", "Shape of rois, gradient of the ROI corners.", optional=True),
    ),
    type_constraints=ROI_TYPES,
    attributes=(
        *SAMPLING_ATTRIBUTES,
        Attribute("input_shape", "ints", "[N, C, H, W]; required when X is omitted.", None,
                  "X's shape"),
    ),
    kernel=kernel.roi_align_grad,
    check_attributes=kernel.check_attributes,
    infer_shapes=_infer_shapes,
    kernel_options=lambda present: {"compute_dx": present[0], "compute_drois": present[1]},
    check_signature=_check_signature,
    examples=_examples,
)


def roi_align_grad(X: str | None, dY: str, rois: str, batch_indices: str, dX: str | None,
                   drois: str | None = None, *, reduction_function: str | None = None,
                   interpolation_mode: str | None = None, spatial_scale_x: float | None = None,
                   spatial_scale_y: float | None = None, input_pixel_offset: float | None = None,
                   output_pixel_offset: float | None = None,
                   minimum_samples_per_output: int | None = None,
                   maximum_samples_per_output: int | None = None,
                   align_regions_to_corners: int | None = None,
                   input_shape: Sequence[int] | None = None,
                   name: str | None = None) -> NodeProto:
    """A ``RoiAlignGrad`` node; ``X``, ``dX`` or ``drois`` may be ``None`` (omitted)."""
    outputs = [dX or "", drois or ""]
    while outputs and not outputs[-1]:
        outputs.pop()
    return DEFINITION.make_node(
        [X or "", dY, rois, batch_indices], outputs, name=name,
        reduction_function=reduction_function, interpolation_mode=interpolation_mode,
        spatial_scale_x=spatial_scale_x, spatial_scale_y=spatial_scale_y,
        input_pixel_offset=input_pixel_offset, output_pixel_offset=output_pixel_offset,
        minimum_samples_per_output=minimum_samples_per_output,
        maximum_samples_per_output=maximum_samples_per_output,
        align_regions_to_corners=align_regions_to_corners, input_shape=input_shape)
