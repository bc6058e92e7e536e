"""Export of PyTorch models into ONNX graphs with ``dml_onnx`` nodes.

torch's TorchScript exporter writes each ``dml_onnx.torch`` operator as its ``dml_onnx`` node
(symbolic functions built from the operator table); during an export ``F.unfold`` becomes
``Unfold`` (a symbolic function for ``aten::im2col``) and ``F.lp_pool*d`` / ``nn.LPPool*d``
with an even integer p ``LpPooling``. torchvision's ``roi_align`` and ``roi_pool`` and
``F.fold`` export as the standard ``RoiAlign``, ``MaxRoiPool`` and ``Col2Im``;
:func:`dml_onnx.raising.raise_model` then rewrites those into ``RoiAlign1`` (with the standard
nodes that reproduce ``aligned=False``'s ROI clamp and ``sampling_ratio=0``'s empty ROIs),
``RoiPooling`` and ``Fold``. The ``dynamo=True`` exporter takes the same path, with
translations of the ``dml_onnx.torch`` operators, ``aten.im2col`` and ``torchvision::roi_pool``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import onnx
import torch
from torch.onnx import symbolic_helper

from dml_onnx._renamed import warn_renamed
from dml_onnx.definition import DOMAIN, DOMAIN_VERSION, OpDefinition
from dml_onnx.ops import OPERATORS_BY_NAME
from dml_onnx.raising import raise_model
from dml_onnx.schemas import register_schemas
from dml_onnx.torch._ops import lp_pooling

_CONSTANT_CODES: dict[str, Literal["i", "f", "s", "is"]] = {
    "int": "i", "float": "f", "string": "s", "ints": "is"}
_ATTRIBUTE_SUFFIXES = {"int": "i", "float": "f", "string": "s", "ints": "i"}


def _symbolic(definition: OpDefinition) -> Any:
    """The TorchScript exporter's symbolic function of ``torch.ops.dml_onnx.<Op>``."""
    count = len(definition.inputs)

    def symbolic(g: Any, *args: Any) -> Any:
        tensors = args[:count]
        for value, parameter in zip(tensors, definition.inputs):
            if symbolic_helper._is_none(value):
                raise torch.onnx.errors.SymbolicValueError(
                    f"{definition.name}: exporting without input {parameter.name} is not "
                    "supported", value)
        attributes = {}
        for attribute, value in zip(definition.attributes, args[count:]):
            constant = symbolic_helper._maybe_get_const(value, _CONSTANT_CODES[attribute.type])
            if attribute.type == "ints":
                constant = [int(v) for v in constant]
                if not constant:
                    continue  # an empty list is the attribute's default
            attributes[f"{attribute.name}_{_ATTRIBUTE_SUFFIXES[attribute.type]}"] = constant
        return _dml_node(g, definition, tensors, attributes)

    return symbolic


def _dml_node(g: Any, definition: OpDefinition, tensors: Sequence[Any],
              attributes: dict[str, Any]) -> Any:
    """The TorchScript exporter's ``dml_onnx`` node with its outputs' types and shapes (from
    the operator's shape function; the exporter warns about a node without them)."""
    outputs = g.op(f"{DOMAIN}::{definition.name}", *tensors, **attributes,
                   outputs=len(definition.outputs))
    try:
        values = definition.node_attributes(definition.make_node(
            [f"in{i}" for i in range(len(tensors))], ["out"],
            **{name.rsplit("_", 1)[0]: value for name, value in attributes.items()}))
        shapes = definition.infer_shapes([symbolic_helper._get_tensor_sizes(t)
                                          for t in tensors], values, definition.name)
    except ValueError:
        return outputs  # the exported model's check names the problem
    typed = {p.type: t.type() for p, t in zip(definition.inputs, tensors)}
    for output, parameter, shape in zip(outputs if isinstance(outputs, tuple) else (outputs,),
                                        definition.outputs, shapes):
        if shape is not None and parameter.type in typed:
            output.setType(typed[parameter.type].with_sizes(shape))
    return outputs


@functools.cache
def _register_symbolics() -> None:
    # registered from opset 1: the exporter also looks the emitted dml_onnx nodes up under
    # the domain's version (1) and takes a registered function as handled
    for name, definition in OPERATORS_BY_NAME.items():
        torch.onnx.register_custom_op_symbolic(f"{DOMAIN}::{name}", _symbolic(definition), 1)


def _translation(definition: OpDefinition) -> Callable[..., Any]:
    """The ``dynamo=True`` exporter's translation of ``torch.ops.dml_onnx.<Op>`` (onnxscript
    builds the node from the domain's registered schema)."""
    import onnxscript

    node = getattr(onnxscript.values.Opset(DOMAIN, DOMAIN_VERSION), definition.name)
    count = len(definition.inputs)

    def translate(*args: Any) -> Any:
        attributes = {a.name: value for a, value in zip(definition.attributes, args[count:])
                      if not (a.type == "ints" and not value)}  # empty: the default
        return node(*args[:count], **attributes)

    return translate


def _unfold_translation(x: Any, kernel_size: Sequence[int], dilation: Sequence[int],
                        padding: Sequence[int], stride: Sequence[int]) -> Any:
    """``aten.im2col`` as ``Unfold`` for the ``dynamo=True`` exporter (see :func:`_im2col`)."""
    import onnxscript

    return onnxscript.values.Opset(DOMAIN, DOMAIN_VERSION).Unfold(
        x, window_sizes=list(kernel_size), dilations=list(dilation), strides=list(stride),
        start_padding=list(padding), end_padding=list(padding))


_ARGMAX = ("RoiPoolArgmax", 1, "dml_onnx.unexported")  # a placeholder that never stays


def _roi_pool_translation(input: Any, rois: Any, spatial_scale: float, pooled_height: int,
                          pooled_width: int) -> tuple[Any, Any]:
    """``torchvision::roi_pool`` as ``MaxRoiPool`` for the ``dynamo=True`` exporter, taking
    the operator's own arguments (onnxscript's translation takes ``ops.roi_pool``'s and fails).
    Its second output, the bin maxima's positions for torchvision's backward, has no standard
    form: a placeholder node (:func:`_argmax_placeholder`) that the exporter drops when nothing
    reads it, and that :func:`export` refuses otherwise."""
    import onnxscript

    name, version, domain = _ARGMAX
    pooled = onnxscript.opset18.MaxRoiPool(input, rois, pooled_shape=[pooled_height,
                                                                      pooled_width],
                                           spatial_scale=spatial_scale)
    return pooled, onnxscript.values.Op(onnxscript.values.Opset(domain, version), name)(pooled)


@contextlib.contextmanager
def _argmax_placeholder() -> Iterator[None]:
    """The placeholder's schema, registered with ``onnx.defs`` for one export."""
    name, version, domain = _ARGMAX
    parameter = onnx.defs.OpSchema.FormalParameter
    onnx.defs.register_schema(onnx.defs.OpSchema(
        name, domain, version, inputs=[parameter("pooled", "T")],
        outputs=[parameter("argmax", "tensor(int64)")],
        type_constraints=[("T", ["tensor(float)", "tensor(double)", "tensor(float16)"], "")]))
    try:
        yield
    finally:
        onnx.defs.deregister_schema(name, version, domain)


def _refuse_placeholders(model: onnx.ModelProto) -> None:
    name, _, domain = _ARGMAX
    if any(node.domain == domain for node in model.graph.node):
        raise ValueError("dml_onnx.torch.export: the model reads the second output of "
                         "torch.ops.torchvision.roi_pool (the positions of the bin maxima, "
                         "for its backward), which has no ONNX form; use "
                         "torchvision.ops.roi_pool, which returns the pooled values only")
    kept = [o for o in model.opset_import if o.domain != domain]
    del model.opset_import[:]
    model.opset_import.extend(kept)


def _im2col(g: Any, x: Any, kernel_size: Any, dilation: Any, padding: Any,
            stride: Any) -> Any:
    """``F.unfold`` (``aten::im2col``) as ``Unfold``: the same ``[N, C * kh * kw, L]`` layout,
    torch's symmetric padding as start and end padding."""
    pads = symbolic_helper._maybe_get_const(padding, "is")
    return _dml_node(g, OPERATORS_BY_NAME["Unfold"], [x], {
        "window_sizes_i": symbolic_helper._maybe_get_const(kernel_size, "is"),
        "dilations_i": symbolic_helper._maybe_get_const(dilation, "is"),
        "strides_i": symbolic_helper._maybe_get_const(stride, "is"),
        "start_padding_i": pads, "end_padding_i": pads})


def _as_tuple(value: int | Sequence[int], k: int) -> list[int]:
    return [int(value)] * k if isinstance(value, int) else [int(v) for v in value]


def _lp_pool(k: int, original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``F.lp_pool<k>d`` as ``LpPooling`` where torch computes the same: an even integer p
    (torch sums ``x^p``, LpPooling ``|x|^p``) and no ``ceil_mode``; otherwise torch's own,
    with a warning."""

    def lp_pool(input: torch.Tensor, norm_type: float, kernel_size: int | Sequence[int],
                stride: int | Sequence[int] | None = None,
                ceil_mode: bool = False) -> torch.Tensor:
        p = float(norm_type)
        if p.is_integer() and p >= 2 and int(p) % 2 == 0 and not ceil_mode:
            window = _as_tuple(kernel_size, k)
            strides = window if stride is None else _as_tuple(stride, k)
            batched = input if input.dim() == k + 2 else input.unsqueeze(0)
            pooled = lp_pooling(batched, window, strides=strides, p=int(p))
            return pooled if input.dim() == k + 2 else pooled.squeeze(0)
        why = "ceil_mode rounds output sizes up" if ceil_mode else (
            f"norm_type {norm_type}: torch sums x^p, LpPooling |x|^p (equal for even p only)")
        warnings.warn(f"dml_onnx.torch.export: lp_pool{k}d stays as torch writes it: {why}",
                      stacklevel=3)
        return original(input, norm_type, kernel_size, stride, ceil_mode)

    return lp_pool


@contextlib.contextmanager
def _torch_forms(opset: int) -> Iterator[None]:
    """For one export: ``F.unfold`` and ``F.lp_pool*d`` written as ``dml_onnx`` nodes."""
    functional = torch.nn.functional
    originals = {f"lp_pool{k}d": getattr(functional, f"lp_pool{k}d") for k in (1, 2, 3)}
    torch.onnx.register_custom_op_symbolic("aten::im2col", _im2col, opset)
    try:
        for k in (1, 2, 3):
            setattr(functional, f"lp_pool{k}d", _lp_pool(k, originals[f"lp_pool{k}d"]))
        yield
    finally:
        for name, original in originals.items():
            setattr(functional, name, original)
        torch.onnx.unregister_custom_op_symbolic("aten::im2col", opset)


def _dynamic_axes(model: torch.nn.Module, input_names: Sequence[str] | None,
                  dynamic_shapes: Any) -> tuple[list[str] | None, dict | None]:
    """``torch.export``-style ``dynamic_shapes`` (a dict by ``forward``'s parameter names of
    ``{axis: Dim}``) as the TorchScript exporter's input names and ``dynamic_axes``."""
    if dynamic_shapes is None:
        return (list(input_names) if input_names else None), None
    if not isinstance(dynamic_shapes, dict):
        raise ValueError("dml_onnx.torch.export: with dynamo=False, dynamic_shapes must be a "
                         "dict by forward's parameter names")
    names = list(input_names or inspect.signature(model.forward).parameters)
    axes = {}
    for name, shape in dynamic_shapes.items():
        if name not in names:
            raise ValueError(f"dml_onnx.torch.export: dynamic_shapes names {name!r}, not an "
                             f"input of {names}")
        if shape:
            axes[name] = {int(axis): getattr(dim, "__name__", f"{name}_{axis}")
                          for axis, dim in shape.items()}
    return names, axes


def export(model: torch.nn.Module, args: Any, f: str | os.PathLike | None = None, *,
           kwargs: dict[str, Any] | None = None, dynamic_shapes: Any = None,
           opset_version: int = 18, dynamo: bool = False,
           input_names: Sequence[str] | None = None, output_names: Sequence[str] | None = None,
           positive_rois: bool = False, opset: int | None = None) -> onnx.ModelProto:
    """``model`` on ``args`` as an ONNX model with ``dml_onnx`` nodes (saved to ``f`` when
    given), by torch's exporter and :func:`dml_onnx.raising.raise_model`.

    ``dynamo=False`` (the default) takes torch's TorchScript exporter, which exports whole
    torchvision detectors; ``dynamo=True`` takes ``torch.export`` and onnxscript, which
    exports data-independent models (heads, backbones). ``dynamic_shapes`` are
    ``torch.export``'s (with ``dynamo=False``: a dict by ``forward``'s parameter names, which
    become the exporter's ``dynamic_axes``).
    Every standard node that could not be raised, and every ``lp_pool`` that is not
    ``LpPooling``, stays as torch writes it, with a warning naming the reason.
    ``positive_rois`` is :func:`raise_model`'s; ``opset_version``, ``input_names`` and
    ``output_names`` are torch's (``opset``: the earlier name of ``opset_version``, which
    warns with ``DeprecationWarning``).
    """
    if opset is not None:
        warn_renamed("dml_onnx.torch.export(opset=...)", "opset_version=...")
        opset_version = opset
    arguments = args if isinstance(args, tuple) else (args,)
    buffer = io.BytesIO()
    with _torch_forms(opset_version), warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        if dynamo:
            register_schemas()  # onnxscript writes dml_onnx nodes from their schemas
            table = {getattr(torch.ops.dml_onnx, name).default: _translation(d)
                     for name, d in OPERATORS_BY_NAME.items()}
            table[torch.ops.aten.im2col.default] = _unfold_translation
            if hasattr(torch.ops.torchvision, "roi_pool"):
                table[torch.ops.torchvision.roi_pool.default] = _roi_pool_translation
            with _argmax_placeholder():
                program = torch.onnx.export(model, arguments, kwargs=kwargs, dynamo=True,
                                            dynamic_shapes=dynamic_shapes,
                                            opset_version=opset_version, input_names=input_names,
                                            output_names=output_names,
                                            custom_translation_table=table, verbose=False)
            assert program is not None  # dynamo=True returns the program
            exported = program.model_proto
            _refuse_placeholders(exported)
        else:
            _register_symbolics()
            names, axes = _dynamic_axes(model, input_names, dynamic_shapes)
            # torch declares f a path, yet the TorchScript exporter writes to a file object
            torch.onnx.export(model, arguments, buffer,  # type: ignore[arg-type]
                              kwargs=kwargs, opset_version=opset_version,
                              dynamo=False, input_names=names, output_names=output_names,
                              dynamic_axes=axes)
            exported = onnx.load_from_string(buffer.getvalue())
    result = raise_model(exported, positive_rois=positive_rois)
    for name, reason in result.kept.items():
        warnings.warn(f"dml_onnx.torch.export: kept the standard node {name}: {reason}",
                      stacklevel=2)
    if f is not None:
        onnx.save(result.model, f)
    return result.model
