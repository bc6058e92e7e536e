"""The operator definition: one object per operator drives every layer.

An :class:`OpDefinition` names the inputs, outputs, type constraints and attributes (with
defaults and docs) of one operator, points at its kernel module in ``dml_onnx._kernels`` and its
reference module in ``dml_onnx.reference_ops``, and carries its shape function. From it come
the onnx schema (with type and shape inference: :mod:`dml_onnx.schemas`), the node builder,
the onnxruntime binding and the reference-evaluator op (calling it through
:mod:`dml_onnx.calls`) and the operator reference (``docs/operators.md``).

Shapes inside this package are lists of dims, each an ``int`` (known), a ``str`` (onnx's
symbolic ``dim_param``) or ``None`` (unknown); a whole shape is ``None`` when even the rank is
unknown. The shape functions also take torch's symbolic sizes (``SymInt``, from
``dml_onnx.torch``'s fake implementations) and compute with them, checking only plain ints.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeGuard, cast

import numpy as np
from onnx import AttributeProto, NodeProto, TensorProto, helper

from dml_onnx._domain import DOMAIN as DOMAIN
from dml_onnx._domain import DOMAIN_VERSION as DOMAIN_VERSION
from dml_onnx._kernels._checks import KernelError
from dml_onnx._renamed import renamed_attribute
from dml_onnx.form import StandardNode

RUNTIME_DOMAIN = "dml_onnx.runtime"
"""The onnxruntime binding's private domain (:func:`dml_onnx.to_runtime_model`)."""

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

_ATTR_TYPES = {"int": AttributeProto.INT, "float": AttributeProto.FLOAT,
               "string": AttributeProto.STRING, "ints": AttributeProto.INTS}


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


@dataclass(frozen=True)
class Parameter:
    """One input or output: name, type-constraint name, doc, optional or not."""

    name: str
    type: str
    doc: str
    optional: bool = False


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

    ``kernel`` is the operator's module ``dml_onnx._kernels.<op>`` and ``reference`` its module
    ``dml_onnx.reference_ops.<op>``; by the naming rule the definition takes from them
    :attr:`prepare`, :attr:`compute` and :attr:`compute_reference`.
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
    kernel: ModuleType
    """``dml_onnx._kernels.<op>``: ``prepare(node=..., **attributes)``, the kernel with a node's
    attributes checked once (:class:`KernelError` for a bad value or an unknown name), a
    callable of the inputs alone; ``<op>(*inputs, node=..., **attributes)``, the one-shot
    call, which computes the outputs (a tuple for several)."""
    infer_shapes: ShapeFunction
    reference: ModuleType
    """``dml_onnx.reference_ops.<op>``: ``<op>(*inputs, node=..., **attributes)``, the plain
    implementation, the kernel's call and outputs, computed one output element at a time
    straight from the specification."""
    standard_form: StandardForm | None = None
    """Emits standard ONNX nodes computing the same outputs (see :mod:`dml_onnx.form`)."""
    examples: Callable[[], tuple[Example, ...]] = field(default=lambda: ())
    """Named small cases: the conformance models and the layer tests."""
    kernel_options: Callable[[list[bool]], dict[str, Any]] = field(default=lambda present: {})
    """Extra keyword arguments of the kernel derived from which outputs a node requests."""
    check_signature: Callable[..., None] = field(default=lambda **_: None)
    """``check_signature(node=, inputs=, outputs=, attributes=)``: rules on which optional
    inputs and outputs a node has (lists of booleans); raises ``ValueError``."""
    prepare: Callable[..., Callable[..., Any]] = field(init=False, repr=False, compare=False)
    """``kernel.prepare``: ``prepare(node=..., **attributes, **options)`` gives ``run(*inputs)``
    (``options``: :attr:`kernel_options`)."""
    compute: Callable[..., Any] = field(init=False, repr=False, compare=False)
    """``kernel.<op>``: ``compute(*inputs, node=..., **attributes, **options)``."""
    compute_reference: Callable[..., Any] = field(init=False, repr=False, compare=False)
    """``reference.<op>``: :attr:`compute` one output element at a time."""

    def __post_init__(self) -> None:
        for name, module in (("compute", self.kernel), ("compute_reference", self.reference)):
            object.__setattr__(self, name, getattr(module, module.__name__.rpartition(".")[2]))
        object.__setattr__(self, "prepare", self.kernel.prepare)

    def check_attributes(self, *, node: str, **attributes: Any) -> None:
        """Raise :class:`KernelError` for a bad attribute value (:attr:`prepare`, with every
        output requested)."""
        self.prepare(node=node, **self.kernel_options([True] * len(self.outputs)), **attributes)

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
        if len(given) < len(node.attribute):
            names = [a.name for a in node.attribute]
            raise KernelError(self.name, label, "attribute",
                              next(n for n in names if names.count(n) > 1),
                              "is given more than once")
        values = {}
        for attribute in self.attributes:
            proto = given.pop(attribute.name, None)
            values[attribute.name] = self.typed_value(attribute, proto, label)
        if given:
            raise KernelError(self.name, label, "attribute", sorted(given)[0],
                              f"is unknown (known: {', '.join(self.attribute_names)})")
        self.check_attributes(node=label, **values)
        return values

    def typed_value(self, attribute: Attribute, proto: AttributeProto | None,
                    label: str) -> Any:
        """The kernel argument of one attribute of node ``label`` (``proto`` ``None``: absent
        from the node), its type checked; :class:`KernelError` else."""
        if proto is None:
            if attribute.required:
                raise KernelError(self.name, label, "attribute", attribute.name,
                                  "is required but missing")
            return attribute.kernel_default
        expected = _ATTR_TYPES[attribute.type]
        if proto.type != expected:
            raise KernelError(self.name, label, f"attribute {attribute.name} type",
                              AttributeProto.AttributeType.Name(proto.type),
                              f"is not {AttributeProto.AttributeType.Name(expected)}")
        try:
            return attribute_value(proto)
        except UnicodeDecodeError:
            raise KernelError(self.name, label, f"attribute {attribute.name}", proto.s,
                              "is not valid UTF-8") from None

    @property
    def attribute_names(self) -> list[str]:
        return [a.name for a in self.attributes]

    # ----------------------------------------------------------------- builder
    def make_node(self, inputs: Sequence[str], outputs: Sequence[str], *, name: str | None = None,
                  **attributes: Any) -> NodeProto:
        """A node of this operator; attributes left ``None`` are omitted (their default)."""
        node = helper.make_node(self.name, list(inputs), list(outputs), name=name or None,
                                domain=DOMAIN)
        where = f"{self.name} '{node_label(node)}'"
        unknown = set(attributes) - set(self.attribute_names)
        if unknown:
            raise TypeError(f"{where}: unknown attribute {sorted(unknown)[0]} "
                            f"(known: {', '.join(self.attribute_names)})")
        kept = {k: v for k, v in attributes.items() if v is not None}
        for attribute in self.attributes:
            if attribute.name in kept:
                node.attribute.append(_make_attribute(attribute, kept[attribute.name], where))
        self.check_node(node)
        return node

    def build(self, arguments: Mapping[str, Any]) -> NodeProto:
        """:meth:`make_node` from the arguments of a builder (its ``locals()``), which names the
        inputs, the outputs and the attributes as the definition does, and ``name``. An
        optional input or output given as ``None`` (or ``""``) is omitted, trailing omitted
        outputs left off."""
        def names(parameters: tuple[Parameter, ...]) -> list[Any]:
            given = [(arguments[p.name] or "") if p.optional else arguments[p.name]
                     for p in parameters]
            while given and parameters[len(given) - 1].optional and not given[-1]:
                given.pop()
            return given
        return self.make_node(names(self.inputs), names(self.outputs), name=arguments["name"],
                              **{a.name: arguments[a.name] for a in self.attributes})

    def check_node(self, node: NodeProto) -> dict[str, Any]:
        """Validate a node's attributes and which inputs and outputs it has; its attributes."""
        label = node_label(node)
        for what, given, declared in (("input", node.input, self.inputs),
                                      ("output", node.output, self.outputs)):
            if len(given) > len(declared):
                raise KernelError(self.name, label, f"{what} count", len(given),
                                  f"is above the {len(declared)} {what}s of the operator "
                                  f"({', '.join(p.name for p in declared)})")
        for i, parameter in enumerate(self.inputs):
            if not parameter.optional and not (i < len(node.input) and node.input[i]):
                raise KernelError(self.name, label, "input", parameter.name,
                                  "is required but missing")
        attributes = self.node_attributes(node)
        self.check_signature(node=node_label(node), attributes=attributes,
                             inputs=[i < len(node.input) and bool(node.input[i])
                                     for i in range(len(self.inputs))],
                             outputs=[i < len(node.output) and bool(node.output[i])
                                      for i in range(len(self.outputs))])
        return attributes

    def input_element_types(self, node: NodeProto, elem_types: Mapping[str, int]
                            ) -> dict[str, int]:
        """The ONNX element type of each type constraint, from the node's present inputs
        (``elem_types``: element types by value name). Raises :class:`KernelError` for an
        input whose type is unknown, not allowed, or differs from another of its constraint."""
        label = node_label(node)
        types: dict[str, int] = {}
        for parameter, name in zip(self.inputs, node.input):
            if not name:
                continue
            if name not in elem_types:
                raise KernelError(self.name, label, f"{parameter.name} element type", None,
                                  f"is not known (value '{name}'); declare it in the graph's "
                                  "inputs or value_info")
            elem = elem_types[name]
            allowed = self.type_constraints[parameter.type]
            if f"tensor({_type_name(elem)})" not in allowed:
                raise KernelError(self.name, label, f"{parameter.name} element type",
                                  _type_name(elem), f"is not one of {parameter.type}: "
                                  f"{', '.join(t[len('tensor('):-1] for t in allowed)}")
            first = types.setdefault(parameter.type, elem)
            if first != elem:
                raise KernelError(self.name, label, f"{parameter.name} element type",
                                  _type_name(elem), f"differs from the {_type_name(first)} of "
                                  f"the other {parameter.type} inputs")
        return types


def _type_name(elem_type: int) -> str:
    """``"float"``, ``"int32"``...: an ONNX element type as type constraints spell it."""
    return TensorProto.DataType.Name(elem_type).lower()


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


_BUILDER_TYPES = {"ints": "a list of int64 values", "float": "a float", "int": "an int64 value",
                  "string": "a string"}


def _make_attribute(attribute: Attribute, value: Any, where: str) -> AttributeProto:
    """The attribute proto of a builder argument; ``where`` (op and node) prefixes errors."""
    try:
        if attribute.type == "ints":
            if isinstance(value, (str, bytes)) or not isinstance(value, Sequence | np.ndarray):
                raise TypeError(value)
            return helper.make_attribute(attribute.name, [_integer(v) for v in value],
                                         attr_type=AttributeProto.INTS)
        if attribute.type == "int":
            return helper.make_attribute(attribute.name, _integer(value))
        if attribute.type == "float":
            if isinstance(value, (str, bytes)):
                raise TypeError(value)
            return helper.make_attribute(attribute.name, float(value))
        if not isinstance(value, str):
            raise TypeError(value)
        return helper.make_attribute(attribute.name, value)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(f"{where}: attribute {attribute.name} takes "
                        f"{_BUILDER_TYPES[attribute.type]}, not {value!r}") from None


def _integer(value: Any) -> int:
    """An int64 from an integer (or an integral float); ``TypeError``/``ValueError`` else."""
    if isinstance(value, float | np.floating):
        if not float(value).is_integer():
            raise TypeError(value)
        value = int(value)
    result = operator.index(value)
    if not -(1 << 63) <= result < 1 << 63:
        raise ValueError(value)
    return result


# --------------------------------------------------------------------- shape helpers
def known(dim: Dim) -> TypeGuard[int]:
    """A dim with a value: an int, or a symbolic size one can compute with (torch's SymInt)."""
    return dim is not None and not isinstance(dim, str)


def product(dims: Sequence[Dim]) -> Dim:
    """The product of dims, or None when one is not known."""
    return math.prod(cast(Sequence[int], dims)) if all(known(d) for d in dims) else None


def __getattr__(name: str) -> Any:  # the earlier names (OPSET_VERSION), with a warning
    return renamed_attribute(__name__, name)
