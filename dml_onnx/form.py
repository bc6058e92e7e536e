"""What a standard-op form sees of one ``dml_onnx`` node, and where it writes its nodes.

A standard form (``OpDefinition.standard_form``) is a function ``form(node: StandardNode)``
that emits standard ``ai.onnx`` nodes computing the node's outputs from its inputs, through
``node.op(...)``. Forms are shape-generic: they read sizes with ``Shape`` in the graph, never
from the model, so one form serves every input size (and can be a model-local function body).
They depend only on the attributes, the element types and the default-domain opset.

Where the spec names a native ONNX equivalent, the attributes and element type fit,
``node.native`` is set and the opset resolves that op to a version whose meaning the form
relies on (:data:`NATIVE_VERSIONS`), the form is that op; otherwise it is an exact
decomposition. :data:`DIRECTML_VERSIONS` are the versions the DirectML execution provider
registers: a model whose opset resolves to them lets that provider run the DirectML operator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import NodeProto, TensorProto, helper

MINIMUM_OPSET = 16
"""Oldest default-domain opset the forms support (``ScatterND``/``ScatterElements`` with
``reduction="add"``)."""

NATIVE_VERSIONS = {"MaxRoiPool": (1,), "RoiAlign": (16,), "LpPool": (11, 18, 22),
                   "Col2Im": (18,)}
"""Versions of each native op that the forms may emit (later versions only add types; LpPool
takes dilations from version 18; onnxruntime's CPU provider has no MaxRoiPool-22 nor
RoiAlign-22)."""

DIRECTML_VERSIONS = {"MaxRoiPool": 1, "RoiAlign": 16, "LpPool": 11, "Col2Im": 18}
"""The version of each native op the DirectML execution provider registers."""

DIRECTML_MAX_RANK = 8
"""The most dimensions a DirectML tensor has (``DML_TENSOR_DIMENSION_COUNT_MAX1`` from feature
level 3.0): the DirectML execution provider refuses a node with a tensor of higher rank, so
every tensor of a form must have at most this many."""


class NotEquivalent(ValueError):
    """A node that has no standard-ONNX form here (unknown element type, opset too old)."""


def op_version(op_type: str, opset: int) -> int:
    """The version of ``op_type`` that default-domain ``opset`` resolves to."""
    return onnx.defs.get_schema(op_type, opset).since_version


@dataclass
class StandardNode:
    """One node being rewritten into standard ops.

    ``inputs`` and ``outputs`` are the node's names (``""`` where absent); ``input_types``
    their ONNX element types (``TensorProto`` values, ``None`` for an absent input);
    ``attributes`` the node's attributes with defaults filled in; ``opset`` the default-domain
    opset the emitted nodes must be valid in; ``native`` whether to prefer a native op.
    Emitted nodes collect in ``nodes``; intermediate names start with ``prefix``.
    """

    label: str
    inputs: list[str]
    outputs: list[str]
    attributes: dict[str, Any]
    input_types: list[int | None]
    opset: int
    prefix: str
    native: bool = True
    nodes: list[NodeProto] = field(default_factory=list)
    _count: int = 0

    # ----------------------------------------------------------------- emitting
    def fresh(self, hint: str = "t") -> str:
        """A new intermediate name."""
        self._count += 1
        return f"{self.prefix}_{hint}{self._count}"

    def op(self, op_type: str, *inputs: str, outputs: int | Sequence[str] = 1,
           **attributes: Any) -> Any:
        """Emit one node; returns its output name (or a list when ``outputs`` is a count > 1
        or a list of names). Attributes left ``None`` are omitted."""
        names = ([self.fresh(op_type.lower()) for _ in range(outputs)]
                 if isinstance(outputs, int) else list(outputs))
        kept = {k: v for k, v in attributes.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, list(inputs), names, **kept))
        return names[0] if isinstance(outputs, int) and outputs == 1 else names

    def constant(self, values: Any, elem_type: int = TensorProto.INT64) -> str:
        """A ``Constant`` of ``values`` (any shape) as ``elem_type``."""
        array = np.asarray(values, dtype=helper.tensor_dtype_to_np_dtype(elem_type))
        return self.op("Constant", value=onnx.numpy_helper.from_array(array, self.fresh("c")))

    def reduce(self, op_type: str, x: str, axes: Sequence[int], keepdims: int = 1) -> str:
        """``Reduce*`` over ``axes`` in this opset's form (axes an input from 13 for ReduceSum,
        from 18 for the others)."""
        as_input = self.opset >= (13 if op_type == "ReduceSum" else 18)
        if as_input:
            return self.op(op_type, x, self.constant(list(axes)), keepdims=keepdims)
        return self.op(op_type, x, axes=list(axes), keepdims=keepdims)

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        return self.op("Unsqueeze", x, self.constant(list(axes)))

    def squeeze(self, x: str, axes: Sequence[int]) -> str:
        return self.op("Squeeze", x, self.constant(list(axes)))

    def cast(self, x: str, elem_type: int) -> str:
        return self.op("Cast", x, to=elem_type)

    def maximum(self, a: str, b: str) -> str:
        """Elementwise maximum (broadcast) as ``Where(a < b, b, a)``: onnxruntime 1.31's CPU
        ``Max``, ``Min`` and ``Clip`` on int64 are wrong for some values beyond 2**31 (e.g.
        ``Max(2**31, 0)`` gives 0); use this and :meth:`minimum` for int64."""
        return self.op("Where", self.op("Less", a, b), b, a)

    def minimum(self, a: str, b: str) -> str:
        """Elementwise minimum (broadcast) as ``Where(b < a, b, a)``; see :meth:`maximum`."""
        return self.op("Where", self.op("Less", b, a), b, a)

    # ----------------------------------------------------------------- deciding
    def uses_native(self, op_type: str, minimum_version: int = 1) -> bool:
        """Whether to emit the native ``op_type``: preferred, and this opset resolves it to
        one of :data:`NATIVE_VERSIONS`, at least ``minimum_version``."""
        if not onnx.defs.has(op_type, self.opset):
            return False
        version = op_version(op_type, self.opset)
        return (self.native and version in NATIVE_VERSIONS[op_type]
                and version >= minimum_version)

    @property
    def elem_type(self) -> int:
        """The element type ``T`` (every operator here has it on its first present input)."""
        return next(t for t in self.input_types if t is not None)

    # ----------------------------------------------------------------- compute type
    @property
    def compute_type(self) -> int:
        """The type ``T`` is computed in: float16 in float32 (as the spec asks), every other
        type in itself."""
        return TensorProto.FLOAT if self.elem_type == TensorProto.FLOAT16 else self.elem_type

    def to_compute(self, value: str) -> str:
        """``value`` (of type ``T``) in the compute type."""
        ct = self.compute_type
        return value if self.elem_type == ct else self.cast(value, ct)

    def finish(self, op_type: str, *inputs: str, output: str | None = None,
               **attributes: Any) -> None:
        """Emit the last ``op_type`` node, computed in the compute type, which writes
        ``output`` (by default the node's first output) in type ``T``: through a final
        ``Cast`` when ``T`` is computed in another type. ``finish("Cast", value)`` writes the
        compute-type ``value`` as ``T`` itself: that ``Cast``, or an ``Identity`` where the
        types agree."""
        outputs = [output or self.outputs[0]]
        if op_type == "Cast":
            if self.elem_type == self.compute_type:
                self.op("Identity", *inputs, outputs=outputs)
            else:
                self.op("Cast", *inputs, outputs=outputs, to=self.elem_type)
        elif self.elem_type == self.compute_type:
            self.op(op_type, *inputs, outputs=outputs, **attributes)
        else:
            self.op("Cast", self.op(op_type, *inputs, **attributes), outputs=outputs,
                    to=self.elem_type)


__all__ = ["DIRECTML_MAX_RANK", "DIRECTML_VERSIONS", "MINIMUM_OPSET", "NATIVE_VERSIONS",
           "NotEquivalent", "StandardNode", "op_version"]
