"""The operator table as ``torch.library`` custom operators, with their gradients.

Each ``dml_onnx`` operator becomes ``torch.ops.dml_onnx.<Op>``: its inputs as tensors, then
every attribute (schema from :class:`dml_onnx.definition.OpDefinition`), computed by the
operator's kernel on the tensors' memory; its fake implementation gives the output shapes by
the operator's own shape inference. The public functions fill the specification's defaults.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dml_onnx import calls
from dml_onnx._kernels.roi_pooling import roi_pooling_argmax
from dml_onnx.definition import OpDefinition
from dml_onnx.ops import OPERATORS_BY_NAME

_SCHEMA_TYPES = {"int": "int", "float": "float", "string": "str", "ints": "int[]"}


def _optional_in_torch(definition: OpDefinition, index: int) -> bool:
    """Whether input ``index`` may be ``None``: the torch op returns every output, so an
    optional input that some output needs (RoiAlignGrad's X, for drois) is required."""
    if not definition.inputs[index].optional:
        return False
    try:
        definition.check_signature(
            node=_node(definition), outputs=[True] * len(definition.outputs),
            inputs=[i != index for i in range(len(definition.inputs))],
            attributes={a.name: a.kernel_default for a in definition.attributes})
    except ValueError:
        return False
    return True


def _schema(definition: OpDefinition) -> str:
    arguments = [f"Tensor{'?' if _optional_in_torch(definition, i) else ''} {p.name}"
                 for i, p in enumerate(definition.inputs)]
    arguments += [f"{_SCHEMA_TYPES[a.type]} {a.name}" for a in definition.attributes]
    outputs = ", ".join("Tensor" for _ in definition.outputs)
    if len(definition.outputs) > 1:
        outputs = f"({outputs})"
    return f"({', '.join(arguments)}) -> {outputs}"


def _split(definition: OpDefinition, args: Sequence[Any]) -> tuple[list[Any], dict[str, Any]]:
    count = len(definition.inputs)
    return list(args[:count]), dict(zip((a.name for a in definition.attributes), args[count:]))


def _node(definition: OpDefinition) -> str:
    return f"torch.ops.dml_onnx.{definition.name}"


def _register(definition: OpDefinition, name: str | None = None) -> Any:
    """``torch.ops.dml_onnx.<Op>`` (or ``<name>``): the kernel on CPU tensors, and shapes for
    fake tensors."""

    def compute(*args: Any) -> Tensor | tuple[Tensor, ...]:
        tensors, attributes = _split(definition, args)
        inputs = [None if t is None else t.detach().numpy() for t in tensors]
        outputs = calls.run_kernel(definition, inputs, attributes, _node(definition),
                                        [True] * len(definition.outputs))
        result = tuple(torch.from_numpy(np.ascontiguousarray(o)) for o in outputs)
        return result[0] if len(result) == 1 else result

    op = torch.library.custom_op(f"dml_onnx::{name or definition.name}", compute, mutates_args=(),
                                 device_types="cpu", schema=_schema(definition))

    @op.register_fake
    def _(*args: Any) -> Tensor | tuple[Tensor, ...]:
        tensors, attributes = _split(definition, args)
        shapes = definition.infer_shapes([None if t is None else list(t.shape) for t in tensors],
                                         attributes, _node(definition))
        result = []
        for parameter, shape in zip(definition.outputs, shapes):
            like = next(t for t, p in zip(tensors, definition.inputs)
                        if t is not None and p.type == parameter.type)
            result.append(like.new_empty(shape))
        return result[0] if len(result) == 1 else tuple(result)

    return op


OPS = {name: _register(definition) for name, definition in OPERATORS_BY_NAME.items()}
"""``torch.ops.dml_onnx.<Op>`` by operator name."""

_EXACT_ROI_GRADIENT = _register(dataclasses.replace(
    OPERATORS_BY_NAME["RoiAlignGrad"], kernel_options=lambda present: {
        **OPERATORS_BY_NAME["RoiAlignGrad"].kernel_options(present), "exact_roi_gradient": True}),
    "RoiAlignGradExact")
"""``torch.ops.dml_onnx.RoiAlignGradExact``: RoiAlignGrad with the exact derivative for
``drois`` (DirectML's ``drois`` is not one), what ``roi_align1``'s autograd uses."""


def arguments(name: str, tensors: Sequence[Tensor | None],
              attributes: dict[str, Any]) -> list[Any]:
    """The positional arguments of ``torch.ops.dml_onnx.<name>``: the tensors, then every
    attribute, the specification's default where one is not given."""
    definition = OPERATORS_BY_NAME[name]
    unknown = set(attributes) - set(definition.attribute_names)
    if unknown:
        raise TypeError(f"{name}: unknown attribute {sorted(unknown)[0]!r} (known: "
                        f"{', '.join(definition.attribute_names)})")
    values = []
    for attribute in definition.attributes:
        if attribute.name in attributes:
            value = attributes[attribute.name]
            values.append(list(value) if attribute.type == "ints" else value)
        elif attribute.required:
            raise TypeError(f"{name}: attribute {attribute.name!r} is required")
        else:
            values.append(attribute.kernel_default)
    return [*tensors, *values]


def _call(name: str, tensors: Sequence[Tensor | None], attributes: dict[str, Any]) -> Any:
    """Run operator ``name`` with the specification's defaults for the attributes not given."""
    return OPS[name](*arguments(name, tensors, attributes))


# ------------------------------------------------------------------------------ gradients
def _keep(ctx: Any, inputs: tuple[Any, ...], output: Any, definition: OpDefinition) -> None:
    tensors, ctx.attributes = _split(definition, inputs)
    ctx.save_for_backward(*tensors, *(output if isinstance(output, tuple) else (output,)))


def _no_grad_for_attributes(definition: OpDefinition, *grads: Tensor | None) -> tuple:
    return (*grads, *(None for _ in definition.attributes))


def _shared(attributes: dict[str, Any], name: str) -> dict[str, Any]:
    """The attributes of one ROI operator that operator ``name`` has too."""
    return {k: v for k, v in attributes.items() if k in OPERATORS_BY_NAME[name].attribute_names}


def _exact_roi_gradient(X: Tensor, dY: Tensor, rois: Tensor, batch_indices: Tensor,
                        attributes: dict[str, Any]) -> tuple[Tensor, Tensor]:
    """RoiAlignGrad's dX and the exact derivative in the ROI corners."""
    values = arguments("RoiAlignGrad", (), {**_shared(attributes, "RoiAlignGrad"),
                                            "input_shape": list(X.shape)})
    return _EXACT_ROI_GRADIENT(X, dY.contiguous(), rois, batch_indices, *values)


def _roi_align1_backward(ctx: Any, dY: Tensor) -> tuple:
    X, rois, batch_indices, _ = ctx.saved_tensors
    dX, drois = _exact_roi_gradient(X, dY, rois, batch_indices, ctx.attributes)
    return _no_grad_for_attributes(OPERATORS_BY_NAME["RoiAlign1"], dX, drois, None)


def _roi_align_grad_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]
                          ) -> None:
    tensors, ctx.attributes = _split(OPERATORS_BY_NAME["RoiAlignGrad"], inputs)
    ctx.save_for_backward(*tensors[1:])
    ctx.mark_non_differentiable(output[1])


def _roi_align_grad_backward(ctx: Any, grad_dX: Tensor, _: Tensor) -> tuple:
    """Double backward. ``dX = A(rois)^T dY``, where ``Y = A(rois) X`` is RoiAlign1 with the
    same attributes (average; out-of-bounds value 0), so in the direction ``v = grad_dX``:
    ``dY`` gets ``A v`` (RoiAlign1 of v), the ROI corners the exact ROI gradient of that
    RoiAlign1 (RoiAlignGrad's drois with v as the image), and X nothing (dX does not depend
    on X; with max it is piecewise constant in X, and the other two are not implemented).
    ``drois`` is not differentiable (DirectML's is not a derivative; the exact one would need
    the forward's derivative in the corners)."""
    dY, rois, batch_indices = ctx.saved_tensors
    a = ctx.attributes
    wanted = ctx.needs_input_grad[1:3]
    if a["reduction_function"] == "max" and any(wanted):
        raise NotImplementedError("RoiAlignGrad: no second derivative in dY or rois for "
                                  "reduction_function 'max'")
    v = grad_dX.contiguous()
    d_dY = _call("RoiAlign1", (v, rois, batch_indices), {
        **_shared(a, "RoiAlign1"), "output_size": list(dY.shape[2:])}) if wanted[0] else None
    d_rois = _exact_roi_gradient(v, dY, rois, batch_indices, a)[1] if wanted[1] else None
    return _no_grad_for_attributes(OPERATORS_BY_NAME["RoiAlignGrad"], None, d_dY, d_rois, None)


_WINDOW = ("strides", "dilations", "start_padding", "end_padding")


def _unfold_backward(ctx: Any, dY: Tensor) -> tuple:
    """Unfold's adjoint: a Fold of ``dY``. Along an axis of dilation 0 every tap reads one
    position, so the taps of that axis are summed first and folded as a window of 1 (DirectML's
    Fold gives zeros with a dilation of 0: it is not the adjoint there)."""
    X, _ = ctx.saved_tensors
    a = ctx.attributes
    window = list(a["window_sizes"])
    dilations = list(a["dilations"]) or [1] * len(window)
    flat = [d for d, dilation in enumerate(dilations) if dilation == 0]
    if flat:
        taps = dY.reshape(dY.shape[0], -1, *window, dY.shape[-1])
        dY = taps.sum(dim=[2 + d for d in flat], keepdim=True).reshape(dY.shape[0], -1,
                                                                       dY.shape[-1])
        window = [1 if d in flat else w for d, w in enumerate(window)]
        dilations = [1 if d in flat else v for d, v in enumerate(dilations)]
    dX = _call("Fold", (dY.contiguous(),), {
        **{k: a[k] for k in _WINDOW}, "window_sizes": window, "dilations": dilations,
        "output_size": list(X.shape[2:])})
    return _no_grad_for_attributes(OPERATORS_BY_NAME["Unfold"], dX)


def _fold_backward(ctx: Any, dY: Tensor) -> tuple:
    """Fold's adjoint: an Unfold of ``dY``; zeros with a dilation of 0 (Fold is then the
    constant 0)."""
    X, _ = ctx.saved_tensors
    a = ctx.attributes
    if 0 in a["dilations"]:
        dX = torch.zeros_like(X)
    else:
        dX = _call("Unfold", (dY.contiguous(),), {"window_sizes": a["window_sizes"],
                                                   **{k: a[k] for k in _WINDOW}})
    return _no_grad_for_attributes(OPERATORS_BY_NAME["Fold"], dX)


def _lp_pooling_backward(ctx: Any, dY: Tensor) -> tuple:
    """``dX_i = sign(x_i) |x_i|^(p-1) * sum over the windows o holding i of dY_o / Y_o^(p-1)``
    (0 where ``Y_o`` is 0); the sum over windows is a Fold of the per-window factor."""
    X, Y = ctx.saved_tensors
    a = ctx.attributes
    p = a["p"]
    factor = torch.where(Y == 0, torch.zeros_like(Y), dY / Y ** (p - 1))
    n, c = X.shape[:2]
    taps = math.prod(a["window_size"])
    columns = factor.reshape(n, c, 1, -1).expand(n, c, taps, factor[0, 0].numel())
    summed = _call("Fold", (columns.reshape(n, c * taps, -1).contiguous(),),
                   {"window_sizes": a["window_size"], "output_size": list(X.shape[2:]),
                    **{k: a[k] for k in _WINDOW}})
    dX = torch.sign(X) * X.abs() ** (p - 1) * summed if p > 1 else torch.sign(X) * summed
    return _no_grad_for_attributes(OPERATORS_BY_NAME["LpPooling"], dX)


@torch.library.custom_op("dml_onnx::RoiPoolingArgmax", mutates_args=(), device_types="cpu")
def _roi_pooling_argmax(X: Tensor, rois: Tensor, pooled_size: list[int],
                        spatial_scale: float) -> Tensor:
    """Where RoiPooling's bin maxima came from: int64 flat positions in X, -1 for an empty bin
    (:func:`dml_onnx._kernels.roi_pooling.roi_pooling_argmax`)."""
    return torch.from_numpy(roi_pooling_argmax(
        X.detach().numpy(), rois.detach().numpy(), pooled_size=pooled_size,
        spatial_scale=spatial_scale, node=_node(OPERATORS_BY_NAME["RoiPooling"])))


@_roi_pooling_argmax.register_fake
def _(X: Tensor, rois: Tensor, pooled_size: list[int], spatial_scale: float) -> Tensor:
    return X.new_empty((rois.shape[-2], X.shape[1], *pooled_size), dtype=torch.int64)


def _roi_pooling_backward(ctx: Any, dY: Tensor) -> tuple:
    """All of a bin's gradient goes to the position its maximum came from."""
    X, rois, _ = ctx.saved_tensors
    a = ctx.attributes
    positions = _roi_pooling_argmax(X, rois, a["pooled_size"], a["spatial_scale"])
    read = positions >= 0
    dX = dY.new_zeros(X.numel()).index_add_(0, positions[read], dY[read])
    return _no_grad_for_attributes(OPERATORS_BY_NAME["RoiPooling"], dX.view(X.shape), None)


_BACKWARD: dict[str, Callable[..., tuple]] = {
    "RoiPooling": _roi_pooling_backward, "RoiAlign1": _roi_align1_backward,
    "Unfold": _unfold_backward, "Fold": _fold_backward, "LpPooling": _lp_pooling_backward}

for _name, _backward in _BACKWARD.items():
    OPS[_name].register_autograd(
        _backward, setup_context=lambda ctx, inputs, output, d=OPERATORS_BY_NAME[_name]:
        _keep(ctx, inputs, output, d))
for _op in (OPS["RoiAlignGrad"], _EXACT_ROI_GRADIENT):
    _op.register_autograd(_roi_align_grad_backward, setup_context=_roi_align_grad_setup)


# ------------------------------------------------------------------------------ public faces
def roi_pooling(X: Tensor, rois: Tensor, pooled_size: Sequence[int],
                spatial_scale: float = 1.0) -> Tensor:
    """RoiPooling (specification section 1): ``X [N, C, H, W]``, ``rois [R, 5]`` rows
    ``[batch, x1, y1, x2, y2]`` -> ``[R, C, PH, PW]``."""
    return _call("RoiPooling", (X, rois), {"pooled_size": pooled_size,
                                           "spatial_scale": spatial_scale})


def roi_align1(X: Tensor, rois: Tensor, batch_indices: Tensor, output_size: Sequence[int],
               **attributes: Any) -> Tensor:
    """RoiAlign1 (specification section 2): ``X [N, C, H, W]``, ``rois [R, 4]``,
    ``batch_indices [R]`` -> ``[R, C, OH, OW]``; attributes by their specification names."""
    return _call("RoiAlign1", (X, rois, batch_indices), {"output_size": output_size,
                                                         **attributes})


def lp_pooling(X: Tensor, window_size: Sequence[int], **attributes: Any) -> Tensor:
    """LpPooling (specification section 4): ``X [N, C, D1..Dk]`` -> ``[N, C, O1..Ok]``."""
    return _call("LpPooling", (X,), {"window_size": window_size, **attributes})


def unfold(X: Tensor, window_sizes: Sequence[int], **attributes: Any) -> Tensor:
    """Unfold (specification section 5): ``X [N, C, D1..Dk]`` -> ``[N, C * prod(window), L]``."""
    return _call("Unfold", (X,), {"window_sizes": window_sizes, **attributes})


def fold(X: Tensor, window_sizes: Sequence[int], output_size: Sequence[int],
         **attributes: Any) -> Tensor:
    """Fold (specification section 6): ``X [N, C * prod(window), L]`` -> ``[N, C, *output]``."""
    return _call("Fold", (X,), {"window_sizes": window_sizes, "output_size": output_size,
                                **attributes})
