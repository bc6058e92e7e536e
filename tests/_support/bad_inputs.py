"""The catalogue of bad inputs: one row per way a user can hand an operator something invalid.
The rows are in :mod:`tests._support.bad_input_cases`; this module holds what a row is, the
layers, the base inputs a row alters, and the errors the rows must cover.

Each :class:`BadInput` is one single-node model (valid base inputs and attributes of its
operator with a few things changed) and the layers a user would meet the problem in:

- ``BUILD``: the graph builder (``dml_onnx.roi_pooling(...)``) with the case's attributes;
- ``CHECKER``: ``onnx.checker.check_model(full_check=True)`` with the domain's schemas;
- ``CHECK``: ``dml_onnx.model_problems`` / ``dml-onnx check``;
- ``LOAD``: ``dml_onnx.InferenceSession(model)`` over the model with static shapes;
- ``RUN``: ``InferenceSession.run`` (inputs declared without shapes, so the model loads) and
  the plain onnxruntime session of the README.

Every layer must raise (or, for ``CHECK``, report) a message naming the op type, the node (the
case name), the field and the offending value. ``error`` is the exception type of ``BUILD``
and ``LOAD``; ``RUN`` always raises :class:`dml_onnx.KernelError`. Where a layer words the
problem its own way (onnx.checker's schema checks, the builder's Python type checks, shape
inference versus the kernel's input checks), ``wording`` gives that layer's field and value.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from onnx import AttributeProto, ModelProto, TensorProto, helper

import dml_onnx
from dml_onnx import KernelError
from dml_onnx.builders import snake

BUILD, CHECKER, CHECK, LOAD, RUN = "build", "checker", "check", "load", "run"
LAYERS = (BUILD, CHECKER, CHECK, LOAD, RUN)
ATTRIBUTE = frozenset({BUILD, CHECKER, CHECK, LOAD})  # invalid attribute values
MODEL = frozenset({CHECKER, CHECK, LOAD})  # what only a hand-written or loaded model can hold
SHAPE = frozenset({CHECKER, CHECK, LOAD, RUN})  # shapes that do not fit, known or not
DATA = frozenset({RUN})  # values only a run sees

TRILLION = 10 ** 12


class Declared(NamedTuple):
    """An input known by its declaration only (too large to feed): shape and dtype."""

    shape: tuple[int, ...]
    dtype: np.dtype


Input = np.ndarray | Declared | None


@dataclass(frozen=True)
class BadInput:
    """One bad input (see the module docstring). ``inputs`` overrides the base inputs by name
    (``None`` omits one); ``node_inputs``/``node_outputs`` override the node's value names;
    ``valid`` holds inputs that the same session must then run correctly (``"base"``: the
    operator's base inputs; ``None``: no input is valid for these attributes);
    ``memory_limit`` is set while the case runs; ``repeated`` names an attribute the node
    holds twice."""

    name: str
    op: str
    field: str
    value: str
    layers: frozenset[str]
    spec: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Input] = field(default_factory=dict)
    outputs: tuple[bool, ...] = (True,)
    error: type[Exception] = KernelError
    op_type: str = ""
    node_inputs: tuple[str, ...] | None = None
    node_outputs: tuple[str, ...] | None = None
    memory_limit: int | None = None
    repeated: str = ""
    valid: dict[str, np.ndarray] | None | str = "base"
    wording: dict[str, tuple[str, str]] = field(default_factory=dict)

    # ------------------------------------------------------------------ what it is made of
    @property
    def definition(self) -> Any:
        return dml_onnx.OPERATORS_BY_NAME[self.op]

    @property
    def node_type(self) -> str:
        return self.op_type or self.op

    def expected(self, layer: str) -> tuple[str, ...]:
        """What the layer's message must contain: op type, node, field, value."""
        field_name, value = self.wording.get(layer, (self.field, self.value))
        return self.node_type, f"'{self.name}'" if layer != CHECKER else self.name, \
            field_name, value

    def all_attributes(self) -> dict[str, Any]:
        base = {**BASE[self.op].attributes, **self.attributes}
        return {k: v for k, v in base.items() if v is not None}

    def arrays(self) -> dict[str, Input]:
        base = {**BASE[self.op].inputs, **self.inputs}
        return {k: v for k, v in base.items() if v is not None}

    def valid_feeds(self) -> dict[str, np.ndarray] | None:
        return dict(BASE[self.op].inputs) if self.valid == "base" else self.valid

    def _names(self) -> tuple[list[str], list[str]]:
        definition, arrays = self.definition, self.arrays()
        inputs = list(self.node_inputs or [p.name if p.name in arrays else ""
                                           for p in definition.inputs])
        outputs = list(self.node_outputs or [
            p.name if k < len(self.outputs) and self.outputs[k] else ""
            for k, p in enumerate(definition.outputs)])
        while outputs and not outputs[-1]:
            outputs.pop()
        return inputs, outputs

    def node(self) -> Any:
        inputs, outputs = self._names()
        node = helper.make_node(self.node_type, inputs, outputs, name=self.name,
                                domain=dml_onnx.DOMAIN)
        node.attribute.extend(  # an empty list has no type of its own: ints
            helper.make_attribute(k, v, attr_type=None if v != [] else AttributeProto.INTS)
            for k, v in self.all_attributes().items())
        node.attribute.extend(a for a in list(node.attribute) if a.name == self.repeated)
        return node

    def build(self) -> Any:
        """The node through the op's graph builder."""
        builder = dml_onnx.BUILDERS[snake(self.op)]
        inputs, outputs = self._names()
        names = inputs[:len(self.definition.inputs)] + outputs
        names += [""] * (len(self.definition.inputs) + len(self.definition.outputs) - len(names))
        return builder(*[n or None for n in names], name=self.name, **self.all_attributes())

    # ------------------------------------------------------------------ models
    def static_model(self) -> ModelProto:
        """The node over inputs declared with their exact shapes; each output feeds a
        ``Shape`` node (graph outputs need a rank, which a bad node may not have)."""
        node = self.node()
        arrays = self.arrays()
        inputs = [_value(name, arrays[name], list(arrays[name].shape))
                  for name in dict.fromkeys(n for n in node.input if n)]
        shapes = [helper.make_node("Shape", [o], [f"{o}_shape"]) for o in node.output if o]
        outputs = [helper.make_tensor_value_info(f"{o}_shape", TensorProto.INT64, [None])
                   for o in node.output if o]
        return dml_onnx.make_model([node, *shapes], inputs, outputs, name=self.name)

    def runtime_model(self) -> ModelProto:
        """The node over inputs declared without shapes: it loads, the problem shows when it
        runs, and inputs of any shape (the valid ones too) can follow."""
        node = self.node()
        arrays = self.arrays()
        inputs = [_value(name, arrays[name], None)
                  for name in dict.fromkeys(n for n in node.input if n)]
        types = {p.type: arrays[n].dtype for p, n in zip(self.definition.inputs, node.input)
                 if n}
        outputs = [helper.make_tensor_value_info(
            o, helper.np_dtype_to_tensor_dtype(types[p.type]), None)
            for p, o in zip(self.definition.outputs, node.output) if o]
        return dml_onnx.make_model([node], inputs, outputs, name=self.name)

    def feeds(self) -> dict[str, np.ndarray]:
        node = self.node()
        return {n: self.arrays()[n] for n in dict.fromkeys(node.input) if n}


@contextlib.contextmanager
def limited(case: BadInput) -> Iterator[None]:
    """The case's memory limit, while the block runs."""
    if case.memory_limit is None:
        yield
        return
    previous = dml_onnx.set_memory_limit(case.memory_limit)
    try:
        yield
    finally:
        dml_onnx.set_memory_limit(previous)


def _value(name: str, array: np.ndarray | Declared, shape: list | None) -> Any:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(array.dtype))
    return helper.make_tensor_value_info(name, elem, shape)


# ---------------------------------------------------------------------------- base inputs
class Base(NamedTuple):
    attributes: dict[str, Any]
    inputs: dict[str, np.ndarray]


_RNG = np.random.default_rng(20)
IMAGE = _RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
ROIS5 = np.array([[0, 0, 0, 3, 3], [1, 1.5, 1, 5, 4.5]], np.float32)
ROIS4 = np.ascontiguousarray(ROIS5[:, 1:])
BATCH = np.array([0, 1], np.int64)
HUGE_ROIS = np.tile(np.float32([[0, 0, 2048, 40960]]), (60, 1))  # 40960 x 2048 samples each
GRAD = _RNG.standard_normal((2, 3, 2, 2)).astype(np.float32)
POOL_X = _RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
COLUMNS = _RNG.standard_normal((1, 8, 9)).astype(np.float32)  # Fold 2x2 over 4x4: 9 blocks

BASE = {
    "RoiPooling": Base({"pooled_size": [2, 2]}, {"X": IMAGE, "rois": ROIS5}),
    "RoiAlign1": Base({"output_size": [2, 2]},
                      {"X": IMAGE, "rois": ROIS4, "batch_indices": BATCH}),
    "RoiAlignGrad": Base({}, {"X": IMAGE, "dY": GRAD, "rois": ROIS4, "batch_indices": BATCH}),
    "LpPooling": Base({"window_size": [2, 2]}, {"X": POOL_X}),
    "Unfold": Base({"window_sizes": [2, 2]}, {"X": POOL_X}),
    "Fold": Base({"window_sizes": [2, 2], "output_size": [4, 4]}, {"X": COLUMNS}),
}


# ---------------------------------------------------------------------------- the spec's errors
SPEC_ERRORS = (
    "all: invalid attribute types, unknown or missing attributes, input/output counts",
    "RoiPooling: X not 4-D",
    "RoiPooling: rois not [..., R, 5]",
    "RoiPooling: batch id NaN or outside [0, N)",
    "RoiPooling: ROI coordinate NaN or infinite",
    "RoiPooling: pooled_size not two values >= 1",
    "RoiPooling: spatial_scale not finite",
    "RoiAlign1: ranks and shapes",
    "RoiAlign1: R of rois and batch_indices differ",
    "RoiAlign1: batch index outside [0, N)",
    "RoiAlign1: ROI coordinate NaN/infinite",
    "RoiAlign1: unknown reduction_function or interpolation_mode",
    "RoiAlign1: minimum_samples_per_output < 1 or maximum < minimum",
    "RoiAlign1: output_size not two values >= 1",
    "RoiAlignGrad: no output requested",
    "RoiAlignGrad: X missing when required",
    "RoiAlignGrad: input_shape missing or disagreeing with X",
    "RoiAlignGrad: dY's R or C disagreeing with rois or X",
    "LpPooling: rank outside 3..5",
    "LpPooling: list attribute of the wrong length or value out of range",
    "LpPooling: p < 1",
    "LpPooling: output size below 1",
    "Unfold: k outside 1..6",
    "Unfold: attribute lengths",
    "Unfold: window, stride < 1; dilation < 0; padding < 0",
    "Unfold: block count below 1",
    "Fold: L not the block count of output_size",
    "Fold: second input size not a multiple of prod(window_sizes)",
    "element types",
    "memory limit",
    "work limit",
)
"""Each error the specification lists (OPERATORS.md, sections 0-6), plus the element-type and
memory rules; every one is some case's ``spec``."""
