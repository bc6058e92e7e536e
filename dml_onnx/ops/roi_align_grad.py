"""RoiAlignGrad: gradients of RoiAlign1 (DML_ROI_ALIGN_GRAD_OPERATOR_DESC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onnx import NodeProto

from custom_ops import roi_align_grad as kernel
from dml_onnx.definition import Attribute, OpDefinition, Parameter, Shape
from dml_onnx.ops._roi import same_dim, spatial_image
from dml_onnx.ops.roi_align1 import ROI_INPUTS, ROI_TYPES, SAMPLING_ATTRIBUTES, roi_rows


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
