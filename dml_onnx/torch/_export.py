"""Export of PyTorch models into ONNX graphs with ``dml_onnx`` nodes.

torch's TorchScript exporter writes each ``dml_onnx.torch`` operator as its ``dml_onnx`` node
(symbolic functions built from the operator table), and torchvision's ``roi_align`` and
``roi_pool`` and ``F.fold`` as the standard ``RoiAlign``, ``MaxRoiPool`` and ``Col2Im``;
:func:`dml_onnx.raising.raise_model` then rewrites those into ``RoiAlign1`` (with the standard
nodes that reproduce ``aligned=False``'s ROI clamp and ``sampling_ratio=0``'s empty ROIs),
``RoiPooling`` and ``Fold``.
"""

from __future__ import annotations

import functools
import io
import os
import warnings
from collections.abc import Sequence
from typing import Any

import onnx
import torch
from torch.onnx import symbolic_helper

from dml_onnx.definition import DOMAIN, OpDefinition
from dml_onnx.ops import OPERATORS_BY_NAME
from dml_onnx.raising import raise_model

_CONSTANT_CODES = {"int": "i", "float": "f", "string": "s", "ints": "is"}
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
        return g.op(f"{DOMAIN}::{definition.name}", *tensors, **attributes,
                    outputs=len(definition.outputs))

    return symbolic


@functools.cache
def _register_symbolics() -> None:
    # registered from opset 1: the exporter also looks the emitted dml_onnx nodes up under
    # the domain's version (1) and takes a registered function as handled
    for name, definition in OPERATORS_BY_NAME.items():
        torch.onnx.register_custom_op_symbolic(f"{DOMAIN}::{name}", _symbolic(definition), 1)


def export(model: torch.nn.Module, args: Any, f: str | os.PathLike | None = None, *,
           kwargs: dict[str, Any] | None = None, opset: int = 18,
           input_names: Sequence[str] | None = None, output_names: Sequence[str] | None = None,
           dynamic_axes: dict[str, Any] | None = None,
           positive_rois: bool = False) -> onnx.ModelProto:
    """``model`` on ``args`` as an ONNX model with ``dml_onnx`` nodes (saved to ``f`` when
    given), by torch's TorchScript exporter (``torch.onnx.export(dynamo=False)``, which takes
    whole torchvision detectors) and :func:`dml_onnx.raising.raise_model`.

    Every standard node that could not be raised stays, with a warning naming the reason.
    ``positive_rois`` is :func:`raise_model`'s. ``input_names``, ``output_names`` and
    ``dynamic_axes`` are ``torch.onnx.export``'s.
    """
    _register_symbolics()
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's deprecation and tracer warnings
        torch.onnx.export(model, args if isinstance(args, tuple) else (args,), buffer,
                          kwargs=kwargs, opset_version=opset, dynamo=False,
                          input_names=input_names, output_names=output_names,
                          dynamic_axes=dynamic_axes)
    result = raise_model(onnx.load_from_string(buffer.getvalue()),
                         positive_rois=positive_rois)
    for name, reason in result.kept.items():
        warnings.warn(f"dml_onnx.torch.export: kept the standard node {name}: {reason}",
                      stacklevel=2)
    if f is not None:
        onnx.save(result.model, f)
    return result.model
