"""The operator definition: one object per operator drives every layer.

An :class:`OpDefinition` names the inputs, outputs, type constraints and attributes (with
defaults and docs) of one operator, points at its numpy kernel and attribute check in
``custom_ops``, and carries its shape function. From it come the onnx schema (with type and
shape inference), the node builder, the onnxruntime binding, the reference-evaluator op and the
README's operator reference.

Shapes inside this package are lists of dims, each an ``int`` (known), a ``str`` (symbolic) or
``None`` (unknown); a whole shape is ``None`` when even the rank is unknown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import AttributeProto, NodeProto, TensorProto, TypeProto, helper
from onnx.defs import OpSchema

from dml_onnx.form import StandardNode

DOMAIN = "dml_onnx"
OPSET_VERSION = 1

Dim = int | str | None
Shape = list[Dim] | None

FLOAT_TYPES = ("tensor(float16)", "tensor(float)", "tensor(double)")
INDEX_TYPES = ("tensor(int64)", "tensor(int32)", "tensor(uint32)", "tensor(uint64)")
NUMERIC_TYPES = (
    "tensor(uint8)", "tensor(uint16)", "tensor(uint32)", "tensor(uint64)",
    "tensor(int8)", "tensor(int16)", "tensor(int32)", "tensor(int64)",
    "tensor(float16)", "tensor(float)", "tensor(double)",
)
"""ONNX's numeric element types that numpy represents (bfloat16 and the float8/int4 types
have no numpy dtype, so no kernel here can take them)."""
ANY_TYPES = (*NUMERIC_TYPES, "tensor(bool)")


def element_type(type_string: str) -> int:
    """The ONNX element type of a type-constraint string: ``"tensor(float)"`` -> FLOAT."""
    return TensorProto.DataType.Value(type_string[len("tensor("):-1].upper())

_ATTR_TYPES = {
    "int": (AttributeProto.INT, OpSchema.AttrType.INT),
    "float": (AttributeProto.FLOAT, OpSchema.AttrType.FLOAT),
    "string": (AttributeProto.STRING, OpSchema.AttrType.STRING),
    "ints": (AttributeProto.INTS, OpSchema.AttrType.INTS),
}


class _Required:
    def __repr__(self) -> str:
        return "required"


REQUIRED: Any = _Required()
"""Default of an attribute that every node must carry."""


@dataclass(frozen=True)
class Attribute:
    """One attribute. ``default`` is a value, :data:`REQUIRED`, or ``None`` for an optional
    attribute whose default depends on the node (documented by ``default_doc``)."""

    name: str
    type: str  # "int" | "float" | "string" | "ints"
    doc: str
    default: Any = REQUIRED
    default_doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def kernel_default(self) -> Any:
        """What the kernel receives when the node omits the attribute."""
        return [] if self.default is None and self.type == "ints" else self.default

    def describe_default(self) -> str:
        if self.required:
            return "required"
        return self.default_doc or repr(self.default)

    def to_schema(self) -> OpSchema.Attribute:
        if self.required:
            return OpSchema.Attribute(self.name, _ATTR_TYPES[self.type][1], self.doc, required=True)
        if self.default is None:
            return OpSchema.Attribute(self.name, _ATTR_TYPES[self.type][1], self.doc,
                                      required=False)
        return OpSchema.Attribute(self.name, helper.make_attribute(self.name, self.default),
                                  self.doc)


@dataclass(frozen=True)
class Parameter:
    """One input or output: name, type-constraint name, doc, optional or not."""

    name: str
    type: str
    doc: str
    optional: bool = False

    def to_schema(self) -> OpSchema.FormalParameter:
        option = (OpSchema.FormalParameterOption.Optional if self.optional
                  else OpSchema.FormalParameterOption.Single)
        return OpSchema.FormalParameter(self.name, self.type, self.doc, param_option=option)


ShapeFunction = Callable[[list[Shape], dict[str, Any], str], list[Shape]]
StandardForm = Callable[[StandardNode], None]


@dataclass(frozen=True)
class Example:
    """A small named use of an operator: the conformance suite and the layer tests run it.

    ``inputs`` has one entry per declared input (``None`` where omitted); ``outputs`` names
    which outputs the node requests; ``expected`` holds independently known outputs (a seed
    example), or is empty. An example with ``error`` set shows invalid input: running it
    must raise an error whose message contains ``error`` (it is not a conformance case).
    """

    name: str
    inputs: tuple[np.ndarray | None, ...]
    attributes: dict[str, Any]
    outputs: tuple[bool, ...] = (True,)
    expected: tuple[np.ndarray, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class OpDefinition:
    """Everything about one operator of the ``dml_onnx`` domain.

    ``kernel(*inputs, node=..., **attributes)`` computes the outputs (a tuple for several);
    ``check_attributes(node=..., **attributes)`` raises ``ValueError`` for bad attribute values;
    ``infer_shapes(input_shapes, attributes, node)`` gives the output shapes (``None`` for an
    absent input) and may raise ``ValueError`` for inconsistent shapes.
    """

    name: str
    summary: str
    dml_name: str
    spec_section: str
    inputs: tuple[Parameter, ...]
    outputs: tuple[Parameter, ...]
    type_constraints: dict[str, tuple[str, ...]]
    attributes: tuple[Attribute, ...]
    kernel: Callable[..., Any]
    check_attributes: Callable[..., None]
    infer_shapes: ShapeFunction
    standard_form: StandardForm | None = None
    """Emits standard ONNX nodes computing the same outputs (see :mod:`dml_onnx.form`)."""
    examples: Callable[[], tuple[Example, ...]] = field(default=lambda: ())
    """Named small cases: the conformance models and the layer tests."""
    kernel_options: Callable[[list[bool]], dict[str, Any]] = field(default=lambda present: {})
    """Extra keyword arguments of the kernel derived from which outputs a node requests."""
    check_signature: Callable[..., None] = field(default=lambda **_: None)
    """``check_signature(node=, inputs=, outputs=, attributes=)``: rules on which optional
    inputs and outputs a node has (lists of booleans); raises ``ValueError``."""

    # ----------------------------------------------------------------- attributes
    def attribute(self, name: str) -> Attribute:
        for attribute in self.attributes:
            if attribute.name == name:
                return attribute
        raise KeyError(name)

    def node_attributes(self, node: NodeProto) -> dict[str, Any]:
        """The node's attributes as kernel arguments, defaults filled in, values checked."""
        label = node_label(node)
        given = {a.name: a for a in node.attribute}
        values = {}
        for attribute in self.attributes:
            proto = given.pop(attribute.name, None)
            if proto is None:
                if attribute.required:
                    raise ValueError(f"{self.name} '{label}': attribute {attribute.name} "
                                     "is required but missing")
                values[attribute.name] = attribute.kernel_default
                continue
            values[attribute.name] = self._typed_value(attribute, proto, label)
        if given:
            raise ValueError(f"{self.name} '{label}': unknown attribute "
                             f"{sorted(given)[0]} (known: {', '.join(self.attribute_names)})")
        self.check_attributes(node=label, **values)
        return values

    def _typed_value(self, attribute: Attribute, proto: AttributeProto, label: str) -> Any:
        expected = _ATTR_TYPES[attribute.type][0]
        if proto.type != expected:
            raise ValueError(
                f"{self.name} '{label}': attribute {attribute.name} has type "
                f"{AttributeProto.AttributeType.Name(proto.type)}, expected "
                f"{AttributeProto.AttributeType.Name(expected)}")
        return attribute_value(proto)

    @property
    def attribute_names(self) -> list[str]:
        return [a.name for a in self.attributes]

    # ----------------------------------------------------------------- builder
    def make_node(self, inputs: Sequence[str], outputs: Sequence[str], *, name: str | None = None,
                  **attributes: Any) -> NodeProto:
        """A node of this operator; attributes left ``None`` are omitted (their default)."""
        unknown = set(attributes) - set(self.attribute_names)
        if unknown:
            raise TypeError(f"{self.name}: unknown attribute {sorted(unknown)[0]}")
        if len(inputs) > len(self.inputs) or len(outputs) > len(self.outputs):
            raise ValueError(f"{self.name}: takes at most {len(self.inputs)} inputs and "
                             f"{len(self.outputs)} outputs")
        kept = {k: v for k, v in attributes.items() if v is not None}
        node = helper.make_node(self.name, list(inputs), list(outputs), name=name or None,
                                domain=DOMAIN)
        for attribute in self.attributes:
            if attribute.name in kept:
                node.attribute.append(_make_attribute(attribute, kept[attribute.name]))
        self.check_node(node)
        return node

    def check_node(self, node: NodeProto) -> dict[str, Any]:
        """Validate a node's attributes and which inputs and outputs it has; its attributes."""
        attributes = self.node_attributes(node)
        self.check_signature(node=node_label(node), attributes=attributes,
                             inputs=[i < len(node.input) and bool(node.input[i])
                                     for i in range(len(self.inputs))],
                             outputs=[i < len(node.output) and bool(node.output[i])
                                      for i in range(len(self.outputs))])
        return attributes

    # ----------------------------------------------------------------- onnx schema
    def to_schema(self) -> OpSchema:
        schema = OpSchema(
            self.name, DOMAIN, OPSET_VERSION,
            doc=f"{self.summary} DirectML {self.dml_name}; specification section "
                f"{self.spec_section}.",
            inputs=[p.to_schema() for p in self.inputs],
            outputs=[p.to_schema() for p in self.outputs],
            type_constraints=[(name, list(types), f"{name}: element types")
                              for name, types in self.type_constraints.items()],
            attributes=[a.to_schema() for a in self.attributes],
        )
        schema.set_type_and_shape_inference_function(self._onnx_inference)
        return schema

    def _onnx_inference(self, ctx: Any) -> None:
        # onnx names the node "node <op>[<domain>] (<name>)"
        label = ctx.get_display_name().rpartition("(")[2].rstrip(")") or "<unnamed>"
        values = {}
        for attribute in self.attributes:
            proto = ctx.get_attribute(attribute.name)
            if proto is None and attribute.required:
                raise ValueError(f"{self.name} '{label}': attribute {attribute.name} is "
                                 "required but missing")
            values[attribute.name] = (attribute.kernel_default if proto is None
                                      else self._typed_value(attribute, proto, label))
        self.check_attributes(node=label, **values)
        shapes, elem_types = [], {}
        for i, parameter in enumerate(self.inputs):
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
        self.check_signature(node=label, attributes=values,
                             inputs=[i < ctx.get_num_inputs() and ctx.has_input(i)
                                     for i in range(len(self.inputs))],
                             outputs=[k < ctx.get_num_outputs() and ctx.has_output(k)
                                      for k in range(len(self.outputs))])
        out_shapes = self.infer_shapes(shapes, values, label)
        for k, parameter in enumerate(self.outputs):
            if k >= ctx.get_num_outputs() or not ctx.has_output(k):
                continue
            elem = elem_types.get(parameter.type)
            if elem is None:
                continue
            ctx.set_output_type(k, _type_proto(elem, out_shapes[k]))

    # ----------------------------------------------------------------- kernel call
    def run_kernel(self, inputs: Sequence[np.ndarray | None], attributes: dict[str, Any],
                   node: str, outputs_present: Sequence[bool]) -> tuple[np.ndarray | None, ...]:
        """Run the kernel; always returns one entry per declared output."""
        result = self.kernel(*inputs, node=node, **attributes,
                             **self.kernel_options(list(outputs_present)))
        return result if isinstance(result, tuple) else (result,)


def node_label(node: NodeProto) -> str:
    """The name errors use for a node: its name, else its first output's name."""
    if node.name:
        return node.name
    first = next((o for o in node.output if o), "")
    return f"<producing {first}>" if first else "<unnamed>"


def attribute_value(proto: AttributeProto) -> Any:
    """An attribute as a kernel argument: float attributes keep their exact float32 value."""
    if proto.type == AttributeProto.INTS:
        return [int(v) for v in proto.ints]
    if proto.type == AttributeProto.FLOAT:
        return float(proto.f)
    if proto.type == AttributeProto.INT:
        return int(proto.i)
    if proto.type == AttributeProto.STRING:
        return proto.s.decode("utf-8")
    return helper.get_attribute_value(proto)


def _make_attribute(attribute: Attribute, value: Any) -> AttributeProto:
    if attribute.type == "ints":
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence | np.ndarray):
            raise TypeError(f"attribute {attribute.name} takes a list of ints, not {value!r}")
        return helper.make_attribute(attribute.name, [int(v) for v in value],
                                     attr_type=AttributeProto.INTS)
    if attribute.type == "float":
        return helper.make_attribute(attribute.name, float(value))
    if attribute.type == "int":
        if isinstance(value, float) and not value.is_integer():
            raise TypeError(f"attribute {attribute.name} takes an int, not {value!r}")
        return helper.make_attribute(attribute.name, int(value))
    return helper.make_attribute(attribute.name, str(value))


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


# --------------------------------------------------------------------- shape helpers
def known(dim: Dim) -> bool:
    return isinstance(dim, int)


def product(dims: Sequence[Dim]) -> Dim:
    """The product of dims, or None when one is not known."""
    return math.prod(dims) if all(known(d) for d in dims) else None
