"""RoiAlignGrad: gradients of RoiAlign1 (DML_ROI_ALIGN_GRAD_OPERATOR_DESC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import NodeProto, TensorProto, helper

from custom_ops import roi_align_grad as kernel
from dml_onnx.definition import Attribute, Example, OpDefinition, Parameter, Shape
from dml_onnx.form import StandardNode
from dml_onnx.ops._roi import lowest, same_dim, spatial_image
from dml_onnx.ops._roi_sampling import (
    Axis,
    RoiGrid,
    dims,
    finish,
    image_rows,
    rows_to_image,
    to_compute,
)
from dml_onnx.ops.roi_align1 import (
    CASE_BATCH,
    CASE_IMAGE,
    CASE_ROIS,
    HALF_IMAGE,
    HALF_ROIS,
    NON_FINITE_IMAGE,
    ROI_INPUTS,
    ROI_TYPES,
    SAMPLING_ATTRIBUTES,
    SAMPLING_VARIATIONS,
    SEED_ATTRIBUTES,
    SEED_BATCH,
    SEED_ROIS,
    roi_rows,
)
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
    g = node.unsqueeze(node.op("Transpose", to_compute(node, dY), perm=[0, 2, 3, 1]),
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
    the samples read, with their interpolation weights."""
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
    rows_to_image(node, total, sizes, output)


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
    finish(node, output, "Reshape", stacked, node.op("Shape", node.inputs[2]), allowzero=1)


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
    both, dx, drois = (True, True), (True, False), (False, True)
    dy = rng.standard_normal((5, 2, 2, 3)).astype(np.float32)  # for CASE_ROIS, output [2, 3]
    cases = (CASE_IMAGE, dy, CASE_ROIS, CASE_BATCH)
    image_shape = {"input_shape": list(CASE_IMAGE.shape)}
    half = (HALF_IMAGE, rng.standard_normal((4, 1, 2, 2)).astype(np.float32), HALF_ROIS,
            np.zeros(4, np.int64))
    edges = {  # name: (inputs, attributes, outputs)
        "dx_only": (cases, {}, dx),
        "drois_only": (cases, {}, drois),
        "max_dx_only": (cases, SAMPLING_VARIATIONS["max"], dx),
        "x_omitted": ((None, *cases[1:]), image_shape, dx),
        "x_omitted_nearest_corners": ((None, *cases[1:]), {
            **image_shape, "interpolation_mode": "nearest_neighbor",
            "align_regions_to_corners": 1}, dx),
        "corners_single_sample": ((CASE_IMAGE, dy[:, :, :1, :1], CASE_ROIS, CASE_BATCH),
                                  {"align_regions_to_corners": 1,
                                   "maximum_samples_per_output": 1}, both),
        "one_pixel_image": ((CASE_IMAGE[:, :, 2:3, 4:5], *cases[1:]), {}, both),
        "one_image": ((CASE_IMAGE[:1], dy, CASE_ROIS, np.zeros(5, np.int64)),
                      SAMPLING_VARIATIONS["max"], both),
        "zero_rois": ((CASE_IMAGE, dy[:0], CASE_ROIS[:0], CASE_BATCH[:0]), {}, both),
        "half_boundaries": (half, {}, both),
        "half_boundaries_max_nearest": (half, SAMPLING_VARIATIONS["max_nearest"], dx),
        "non_finite_max": ((NON_FINITE_IMAGE, *cases[1:]), SAMPLING_VARIATIONS["max"], both),
        "non_finite_average": ((NON_FINITE_IMAGE, *cases[1:]), {}, both),
    }
    types = {  # name: (T, TI, rois shape, batch_indices shape, attributes, outputs)
        "float16_int64_both": (np.float16, np.int64, (5, 4), (5,), {}, both),
        "float16_uint32_max_dx": (np.float16, np.uint32, (5, 4), (1, 5),
                                  SAMPLING_VARIATIONS["max"], dx),
        "float32_int32_rank3_drois": (np.float32, np.int32, (1, 5, 4), (1, 1, 5), {}, drois),
        "float64_uint64_rank4_max": (np.float64, np.uint64, (1, 1, 5, 4), (1, 1, 1, 5),
                                     SAMPLING_VARIATIONS["max"], both),
        "float64_int32_scales_differ": (np.float64, np.int32, (5, 4), (5,),
                                        SAMPLING_VARIATIONS["scales_differ"], both),
    }
    return (
        Example("seed_dx_without_x", (None, seed_dy, SEED_ROIS, SEED_BATCH),
                {**seed_attributes, "input_shape": [1, 1, 4, 4]}, outputs=dx,
                expected=(np.array([[[[3, 3, 9, 6], [0, 0, 0, 0], [15, 9, 21, 12],
                                      [0, 0, 0, 0]]]], np.float32),)),
        Example("both_gradients_float64", (image, grad, rois, batch), linear, outputs=both),
        Example("drois_max_float32_uint64",
                (image.astype(np.float32), grad.astype(np.float32), rois.astype(np.float32),
                 batch.astype(np.uint64)),
                {"reduction_function": "max", "align_regions_to_corners": 1}, outputs=drois),
        Example("dx_float16", (image.astype(np.float16), grad.astype(np.float16),
                               rois.astype(np.float16), batch), {}, outputs=dx),
        *(Example(name, cases, attributes, outputs=both)
          for name, attributes in SAMPLING_VARIATIONS.items()),
        *(Example(name, inputs, attributes, outputs=outputs)
          for name, (inputs, attributes, outputs) in edges.items()),
        *(Example(name, (CASE_IMAGE.astype(t), dy.astype(t),
                         CASE_ROIS.astype(t).reshape(rois_shape),
                         CASE_BATCH.astype(ti).reshape(batch_shape)), attributes,
                  outputs=outputs)
          for name, (t, ti, rois_shape, batch_shape, attributes, outputs) in types.items()),
        Example("dy_rows_disagree_with_rois", (image, grad[:2], rois, batch), linear,
                outputs=both, error="dY shape [2, 3, 2, 3] does not start with"),
    )


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
        *SAMPLING_ATTRIBUTES,
        Attribute("input_shape", "ints", "[N, C, H, W]; required when X is omitted.", None,
                  "X's shape"),
    ),
    kernel=kernel.roi_align_grad,
    check_attributes=kernel.check_attributes,
    reference=reference.roi_align_grad,
    infer_shapes=_infer_shapes,
    kernel_options=lambda present: {"compute_dx": present[0], "compute_drois": present[1]},
    check_signature=_check_signature,
    standard_form=_standard_form,
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
