"""RoiAlignGrad: gradients of RoiAlign1 (DML_ROI_ALIGN_GRAD_OPERATOR_DESC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onnx import NodeProto, TensorProto, helper

from dml_onnx._kernels import roi_align_grad as kernel
from dml_onnx.definition import Attribute, OpDefinition, Parameter, Shape
from dml_onnx.form import StandardNode
from dml_onnx.ops._roi import (
    ROI_INPUTS,
    ROI_TYPES,
    lowest,
    roi_rows,
    same_dim,
    sampling_attributes,
    spatial_image,
)
from dml_onnx.ops._roi_cases import roi_align_grad_examples
from dml_onnx.ops._roi_sampling import Axis, RoiGrid, dims, image_rows, rows_to_image
from dml_onnx.reference_ops import roi_align_grad as reference


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


def _standard_form(node: StandardNode) -> None:
    """The adjoint of RoiAlign1's sample grid (:mod:`dml_onnx.ops._roi_sampling`); no
    native ONNX operator computes it. float16 is computed in float32.

    Every sample gets a weight ``w``: ``dY / (n_y n_x)`` for average, ``dY`` on the first
    maximising sample for max (out-of-bounds samples reading 0), and 0 out of bounds.
    ``dX``: ``ScatterND`` (``reduction="add"``) of ``w`` times each corner's bilinear weight
    (nearest: of ``w`` onto the pixel read) into image rows ``[N * H * W, C]``. ``drois``:
    see :func:`_roi_gradient`. An absent output is not computed.
    """
    a = node.attributes
    X, dY, rois, batch_indices = node.inputs
    dx_name, drois_name = [*node.outputs, ""][:2]
    sizes = dims(node, X) if X else [node.constant(v) for v in a["input_shape"]]
    grads = dims(node, dY)
    grid = RoiGrid(node, rois, batch_indices, (sizes[2], sizes[3]), (grads[2], grads[3]))
    g = node.unsqueeze(node.op("Transpose", node.to_compute(dY), perm=[0, 2, 3, 1]),
                       [2, 4])  # [R, OH, 1, OW, 1, C]
    average = a["reduction_function"] == "average"
    image = image_rows(node, X, sizes) if drois_name or not average else ""
    zero = node.constant(0.0, grid.ct)
    if average:
        take = node.op("And", grid.valid, grid.inside)
        weights = node.op("Where", take, node.op(
            "Div", g, node.unsqueeze(grid.count, [1, 2, 3, 4, 5])), zero)
    else:
        take = node.op("And", grid.first_maximum(grid.values(image, 0.0),
                                                      lowest(node.elem_type)), grid.inside)
        weights = node.op("Where", take, g, zero)
    if dx_name:
        _image_gradient(node, grid, weights, sizes, dx_name)
    if drois_name:  # the image gradient is bilinear in both interpolation modes
        bilinear = grid if grid.linear else RoiGrid(node, rois, batch_indices,
                                                    (sizes[2], sizes[3]), (grads[2], grads[3]),
                                                    linear=True)
        _roi_gradient(node, bilinear, image, weights, take, drois_name)


def _image_gradient(node: StandardNode, grid: RoiGrid, weights: str, sizes: list[str],
                    output: str) -> None:
    """``dX``: the per-sample ``weights [R, OH, MY, OW, MX, C]`` scattered onto the pixels
    the samples read, with their interpolation weights; zeros where ``R == 0`` whatever the
    scatters give, since onnxruntime's DirectML execution provider was measured to return
    memory it never wrote from a ``ScatterND`` with no updates."""
    n, c, h, w = sizes
    shape = node.op("Concat", node.unsqueeze(node.op("Mul", node.op("Mul", n, h), w), [0]),
                    node.unsqueeze(c, [0]), axis=0)
    total = node.op("ConstantOfShape", shape,
                    value=helper.make_tensor("zero", grid.ct, [1], [0]))
    y, x = grid.y, grid.x
    if grid.linear:
        pixels = [(ys, xs) for ys in (y.lo, y.hi) for xs in (x.lo, x.hi)]
        updates = [node.op("Mul", weights, corner) for corner in grid.corner_weights]
    else:
        pixels, updates = [(y.lo, x.lo)], [weights]
    for (ys, xs), update in zip(pixels, updates):
        total = node.op("ScatterND", total, node.unsqueeze(grid.rows(ys, xs), [5]), update,
                        reduction="add")
    none = node.op("Equal", grid.region_count, node.constant(0))
    rows_to_image(node, node.op("Where", none, node.constant(0.0, grid.ct), total), sizes,
                  output)


def _roi_gradient(node: StandardNode, grid: RoiGrid, image: str, weights: str, take: str,
                  output: str) -> None:
    """``drois``, DirectML's rule (spec section 3): every sample taken adds
    ``gX = w ((1-ly)(P[y0,x1] - P[y0,x0]) + ly (P[y1,x1] - P[y1,x0]))`` and ``gY`` alike
    (``grid``: bilinear corners; 0 along an axis whose coordinate was clamped); summed per
    output column ``ox``, ``gX`` times :func:`_factors` ``near(ox)`` goes to ``x1`` of the
    region and times ``far(ox)`` to ``x2`` (y alike). Written with ``rois``' shape."""
    p00, p01, p10, p11 = grid.corners(image)
    zero = node.constant(0.0, grid.ct)
    (wy, wx), (ly, lx) = grid.complements, (grid.y.frac, grid.x.frac)

    def ends(axis: Axis, near: tuple[str, str], far: tuple[str, str], summed: list[int],
             outputs: str, length: str) -> list[str]:
        """``[d/dfirst, d/dlast]`` ``[R]`` along ``axis``, from ``w (near + far)`` (each a
        weight and a corner difference); ``summed``: every axis but R and the outputs."""
        gradient = node.op("Mul", weights, node.op("Add", node.op("Mul", *near),
                                                   node.op("Mul", *far)))
        kept = node.op("Where", node.op("And", take, axis.unclamped), gradient, zero)
        per_output = node.reduce("ReduceSum", kept, summed, keepdims=0)  # [R, O]
        return [node.reduce("ReduceSum", node.op("Mul", per_output, factor), [1], keepdims=0)
                for factor in _factors(node, grid, axis, outputs, length)]

    x1, x2 = ends(grid.x, (wy, node.op("Sub", p01, p00)), (ly, node.op("Sub", p11, p10)),
                  [1, 2, 4, 5], grid.outputs[1], grid.width)
    y1, y2 = ends(grid.y, (wx, node.op("Sub", p10, p00)), (lx, node.op("Sub", p11, p01)),
                  [2, 3, 4, 5], grid.outputs[0], grid.height)
    stacked = node.op("Concat", *(node.unsqueeze(d, [1]) for d in (x1, y1, x2, y2)), axis=1)
    node.finish("Reshape", stacked, node.op("Shape", node.inputs[2]), output=output,
                allowzero=1)


def _factors(node: StandardNode, grid: RoiGrid, axis: Axis, outputs: str,
             length: str) -> tuple[str, str]:
    """DirectML's factors ``[R, O]`` of output ``o``: ``near = fma(-o, ratio, extent)`` (in
    double) and ``far = o * ratio``, ``extent = L`` and ``ratio = L * (1 / S)``, ``S = O * n``
    (aligning corners: ``L - 1`` and ``S - 1``; both ``(L - 1) / 2`` when ``S == 1``)."""
    ct, double = grid.ct, TensorProto.DOUBLE
    align = node.attributes["align_regions_to_corners"]
    one = node.constant(1)
    extent = node.cast(node.op("Sub", length, one) if align else length, ct)
    total = node.unsqueeze(node.op("Mul", axis.n, outputs), [1])  # [R, 1]
    divisor = node.cast(node.maximum(node.op("Sub", total, one), one) if align else total, ct)
    ratio = node.op("Mul", extent, node.op("Div", node.constant(1.0, ct), divisor))
    o = node.unsqueeze(node.cast(node.op("Range", node.constant(0), outputs, one), ct), [0])
    near = node.cast(node.op("Sub", node.cast(extent, double), node.op(
        "Mul", node.cast(o, double), node.cast(ratio, double))), ct)
    far = node.op("Mul", o, ratio)
    if align:
        single = node.op("Equal", total, one)
        half = node.op("Mul", node.constant(0.5, ct), extent)
        near, far = (node.op("Where", single, half, v) for v in (near, far))
    return near, far


DEFINITION = OpDefinition(
    name="RoiAlignGrad",
    summary="Backward of RoiAlign1: the gradient with respect to the image and/or the ROI "
            "corners. dX is the adjoint of RoiAlign1; drois is what DirectML computes "
            "(TensorFlow's CropAndResizeGradBoxes), not the exact derivative: see Fidelity to "
            "DirectML.",
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
        Parameter("drois", "T", "Shape of rois, DirectML's gradient of the ROI corners.",
                  optional=True),
    ),
    type_constraints=ROI_TYPES,
    attributes=(
        *sampling_attributes("out_of_bounds_input_value"),
        Attribute("input_shape", "ints", "[N, C, H, W]; required when X is omitted.", None,
                  "X's shape"),
    ),
    kernel=kernel,
    reference=reference,
    infer_shapes=_infer_shapes,
    kernel_options=lambda present: {"compute_dx": present[0], "compute_drois": present[1]},
    check_signature=_check_signature,
    standard_form=_standard_form,
    examples=roi_align_grad_examples,
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
    """A ``RoiAlignGrad`` node (the full docstring, written from ``DEFINITION``: see
    :func:`~dml_onnx.builder_docs.builder_doc`)."""
    return DEFINITION.build(locals())
