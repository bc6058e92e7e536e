"""The onnx schemas of the domain, the one place that touches ``onnx.defs``: each operator's
schema with type and shape inference (through its shape function), and their explicit,
idempotent, process-wide registration.

Shapes follow :mod:`dml_onnx.definition`: lists of dims, each an ``int``, a ``str``
(``dim_param``) or ``None``; ``None`` for a shape of unknown rank.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any

from onnx import TypeProto, defs, helper
from onnx.defs import OpSchema

from dml_onnx.definition import (
    DOMAIN,
    DOMAIN_VERSION,
    Attribute,
    Dim,
    OpDefinition,
    Parameter,
    Shape,
)
from dml_onnx.ops import OPERATORS

_lock = threading.Lock()

_ATTRIBUTE_TYPES = {
    "int": OpSchema.AttrType.INT,
    "float": OpSchema.AttrType.FLOAT,
    "string": OpSchema.AttrType.STRING,
    "ints": OpSchema.AttrType.INTS,
}


def register_schemas() -> None:
    """Register every operator's schema (with shape inference) with ``onnx.defs``.

    After it, ``onnx.checker.check_model(m, full_check=True)`` and
    ``onnx.shape_inference.infer_shapes(m, strict_mode=True)`` know the ``dml_onnx`` domain.
    Calling it again does nothing.
    """
    with _lock:
        for definition in OPERATORS:
            if not defs.has(definition.name, DOMAIN_VERSION, DOMAIN):
                defs.register_schema(op_schema(definition))


def deregister_schemas() -> None:
    """Remove the domain's schemas again (mostly for tests)."""
    with _lock:
        for definition in OPERATORS:
            if defs.has(definition.name, DOMAIN_VERSION, DOMAIN):
                defs.deregister_schema(definition.name, DOMAIN_VERSION, DOMAIN)


# --------------------------------------------------------------------- one schema
def op_schema(definition: OpDefinition) -> OpSchema:
    """The onnx schema of one operator, its type and shape inference included."""
    schema = OpSchema(
        definition.name, DOMAIN, DOMAIN_VERSION,
        doc=f"{definition.summary} DirectML {definition.dml_name}; specification section "
            f"{definition.spec_section}.",
        inputs=[_parameter_schema(p) for p in definition.inputs],
        outputs=[_parameter_schema(p) for p in definition.outputs],
        type_constraints=[(name, list(types), f"{name}: element types")
                          for name, types in definition.type_constraints.items()],
        attributes=[_attribute_schema(a) for a in definition.attributes],
    )
    schema.set_type_and_shape_inference_function(functools.partial(_onnx_inference,
                                                                    definition))
    return schema


def _attribute_schema(attribute: Attribute) -> OpSchema.Attribute:
    if attribute.required:
        return OpSchema.Attribute(attribute.name, _ATTRIBUTE_TYPES[attribute.type],
                                  attribute.doc, required=True)
    if attribute.default is None:
        return OpSchema.Attribute(attribute.name, _ATTRIBUTE_TYPES[attribute.type],
                                  attribute.doc, required=False)
    return OpSchema.Attribute(attribute.name,
                              helper.make_attribute(attribute.name, attribute.default),
                              attribute.doc)


def _parameter_schema(parameter: Parameter) -> OpSchema.FormalParameter:
    option = (OpSchema.FormalParameterOption.Optional if parameter.optional
              else OpSchema.FormalParameterOption.Single)
    return OpSchema.FormalParameter(parameter.name, parameter.type, parameter.doc,
                                    param_option=option)


# --------------------------------------------------------------------- shape inference
_inference = threading.local()


@contextlib.contextmanager
def lenient_inference() -> Iterator[None]:
    """Within this context (this thread), onnx shape inference leaves the outputs of a
    ``dml_onnx`` node with a problem unknown instead of raising, so that it goes on through
    the rest of the graph: for tools that report each node's problems themselves."""
    previous = getattr(_inference, "lenient", False)
    _inference.lenient = True
    try:
        yield
    finally:
        _inference.lenient = previous


def _onnx_inference(definition: OpDefinition, ctx: Any) -> None:
    # onnx names the node "node <op>[<domain>] (<name>)"; its context offers no other way
    label = ctx.get_display_name().rpartition("(")[2].rstrip(")") or "<unnamed>"
    try:
        _infer(definition, ctx, label)
    except ValueError:
        if not getattr(_inference, "lenient", False):
            raise


def _infer(definition: OpDefinition, ctx: Any, label: str) -> None:
    values = {a.name: definition.typed_value(a, ctx.get_attribute(a.name), label)
              for a in definition.attributes}
    definition.check_attributes(node=label, **values)
    shapes: list[Shape] = []
    elem_types: dict[str, int] = {}
    for i, parameter in enumerate(definition.inputs):
        if i >= ctx.get_num_inputs() or not ctx.has_input(i):
            shapes.append(None)
            continue
        type_proto = ctx.get_input_type(i)
        if type_proto is None or not type_proto.HasField("tensor_type"):
            shapes.append(None)
            continue
        tensor = type_proto.tensor_type
        elem_types.setdefault(parameter.type, tensor.elem_type)
        shapes.append(_shape_from_proto(tensor) if tensor.HasField("shape") else None)
    definition.check_signature(node=label, attributes=values,
                               inputs=[i < ctx.get_num_inputs() and ctx.has_input(i)
                                       for i in range(len(definition.inputs))],
                               outputs=[k < ctx.get_num_outputs() and ctx.has_output(k)
                                        for k in range(len(definition.outputs))])
    out_shapes = definition.infer_shapes(shapes, values, label)
    for k, parameter in enumerate(definition.outputs):
        if k >= ctx.get_num_outputs() or not ctx.has_output(k):
            continue
        elem = elem_types.get(parameter.type)
        if elem is None:
            continue
        ctx.set_output_type(k, _type_proto(elem, out_shapes[k]))


def _shape_from_proto(tensor: Any) -> list[Dim]:
    dims: list[Dim] = []
    for dim in tensor.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        elif dim.HasField("dim_param"):
            dims.append(dim.dim_param)
        else:
            dims.append(None)
    return dims


def _type_proto(elem_type: int, shape: Shape) -> TypeProto:
    proto = TypeProto()
    proto.tensor_type.elem_type = elem_type
    if shape is not None:
        proto.tensor_type.shape.SetInParent()
        for dim in shape:
            entry = proto.tensor_type.shape.dim.add()
            if isinstance(dim, int):
                entry.dim_value = dim
            elif isinstance(dim, str):
                entry.dim_param = dim
    return proto
