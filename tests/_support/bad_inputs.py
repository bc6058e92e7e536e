"""The catalogue of bad inputs: one row per way a user can hand an operator something invalid.

Each :class:`BadInput` is one single-node model (valid base inputs and attributes of its
operator with a few things changed) and the layers a user would meet the problem in:

- ``BUILD``: the graph builder (``dml_onnx.roi_pooling(...)``) with the case's attributes;
- ``CHECKER``: ``onnx.checker.check_model(full_check=True)`` with the domain's schemas;
- ``CHECK``: ``dml_onnx.check_model`` / ``dml-onnx check``;
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


def _rois5(*row: float) -> np.ndarray:
    return np.array([ROIS5[0], row], np.float32)


def _rois4(*row: float) -> np.ndarray:
    return np.array([ROIS4[0], row], np.float32)


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
    "Unfold: window, stride, dilation < 1; padding < 0",
    "Unfold: block count below 1",
    "Fold: L not the block count of output_size",
    "Fold: second input size not a multiple of prod(window_sizes)",
    "element types",
    "memory limit",
    "work limit",
)
"""Each error the specification lists (OPERATORS.md, sections 0-6), plus the element-type and
memory rules; every one is some case's ``spec``."""

_ATTRIBUTE_TYPES = SPEC_ERRORS[0]


def _checker_type(name: str, actual: str) -> dict[str, tuple[str, str]]:
    """onnx.checker's wording of an attribute of the wrong type."""
    return {CHECKER: (f"{name}'. Expected", f"actual: '{actual}'")}


def _cases() -> list[BadInput]:
    c = BadInput
    float16 = np.float16
    return [
        # ---- every operator: the node itself
        c("unknown_attribute", "RoiPooling", "attribute", "'spatial_scale_x'", MODEL,
          _ATTRIBUTE_TYPES, {"spatial_scale_x": 0.5},
          wording={CHECKER: ("Unrecognized attribute", "spatial_scale_x")}),
        c("missing_attribute", "Unfold", "attribute", "'window_sizes'", MODEL, _ATTRIBUTE_TYPES,
          {"window_sizes": None},
          wording={CHECKER: ("Required attribute", "'window_sizes'")}),
        c("ints_given_as_int", "RoiPooling", "attribute pooled_size type", "'INT'", MODEL,
          _ATTRIBUTE_TYPES, {"pooled_size": 2}, wording=_checker_type("pooled_size", "INT")),
        c("float_given_as_int", "RoiPooling", "attribute spatial_scale type", "'INT'", MODEL,
          _ATTRIBUTE_TYPES, {"spatial_scale": 1}, wording=_checker_type("spatial_scale", "INT")),
        c("string_given_as_int", "RoiAlign1", "attribute reduction_function type", "'INT'",
          MODEL, _ATTRIBUTE_TYPES, {"reduction_function": 1},
          wording=_checker_type("reduction_function", "INT")),
        c("int_given_as_float", "LpPooling", "attribute p type", "'FLOAT'", MODEL,
          _ATTRIBUTE_TYPES, {"p": 2.5}, wording=_checker_type("p", "FLOAT")),
        c("builder_string_given_int", "RoiAlign1", "attribute reduction_function takes a "
          "string,", "not 1", frozenset({BUILD}), _ATTRIBUTE_TYPES, {"reduction_function": 1},
          error=TypeError),
        c("builder_int_given_fraction", "LpPooling", "attribute p takes an int64 value,",
          "not 2.5", frozenset({BUILD}), _ATTRIBUTE_TYPES, {"p": 2.5}, error=TypeError),
        c("int_given_as_string", "RoiAlign1", "attribute align_regions_to_corners type",
          "'STRING'", MODEL, _ATTRIBUTE_TYPES, {"align_regions_to_corners": "yes"},
          wording=_checker_type("align_regions_to_corners", "STRING")),
        c("ints_with_a_fraction", "Unfold", "attribute window_sizes takes a list of int64 "
          "values,", "not [2, 2.5]", frozenset({BUILD}), _ATTRIBUTE_TYPES,
          {"window_sizes": [2, 2.5]}, error=TypeError),
        c("ints_beyond_int64", "Fold", "attribute strides takes a list of int64 values,",
          f"not [1, {1 << 64}]", frozenset({BUILD}), _ATTRIBUTE_TYPES,
          {"strides": [1, 1 << 64]}, error=TypeError),
        c("attribute_given_twice", "RoiAlign1", "attribute", "'output_size'", MODEL,
          _ATTRIBUTE_TYPES, repeated="output_size",
          wording={CHECKER: ("Attribute 'output_size'", "appeared multiple times")}),
        c("string_not_utf8", "RoiAlign1", "attribute reduction_function", r"b'\xff\xfe'", MODEL,
          _ATTRIBUTE_TYPES, {"reduction_function": b"\xff\xfe"}),
        c("too_many_inputs", "RoiPooling", "input count", "3", MODEL, _ATTRIBUTE_TYPES,
          node_inputs=("X", "rois", "X"),
          wording={CHECKER: ("input size", "3 not in range")}),
        c("too_many_outputs", "LpPooling", "output count", "2", MODEL, _ATTRIBUTE_TYPES,
          node_outputs=("Y", "Z"), wording={CHECKER: ("output size", "2 not in range")}),
        c("missing_input", "RoiAlign1", "input", "'batch_indices'", MODEL, _ATTRIBUTE_TYPES,
          node_inputs=("X", "rois"), wording={CHECKER: ("input size", "2 not in range")}),
        c("unknown_op_type", "RoiAlign1", "op type", "'RoiAlign'", frozenset({CHECK, LOAD}),
          _ATTRIBUTE_TYPES, op_type="RoiAlign"),  # onnx.checker accepts unknown custom ops

        # ---- element types
        c("roi_pooling_int32", "RoiPooling", "X element type", "'int32'", MODEL,
          "element types", inputs={"X": IMAGE.astype(np.int32), "rois": ROIS5.astype(np.int32)},
          wording={CHECKER: ("X typestr: T", "tensor(int32)")}),
        c("roi_pooling_mixed_float_double", "RoiPooling", "rois element type", "'double'",
          MODEL, "element types", inputs={"rois": ROIS5.astype(np.float64)},
          wording={CHECKER: ("rois has inconsistent type", "tensor(double)")}),
        c("roi_align_float_indices", "RoiAlign1", "batch_indices element type", "'float'",
          MODEL, "element types", inputs={"batch_indices": BATCH.astype(np.float32)},
          wording={CHECKER: ("batch_indices typestr: TI", "tensor(float)")}),
        c("roi_align_grad_int8_indices", "RoiAlignGrad", "batch_indices element type", "'int8'",
          MODEL, "element types", outputs=(True, True),
          inputs={"batch_indices": BATCH.astype(np.int8)},
          wording={CHECKER: ("batch_indices typestr: TI", "tensor(int8)")}),
        c("lp_pooling_bool", "LpPooling", "X element type", "'bool'", MODEL, "element types",
          inputs={"X": POOL_X > 0}, wording={CHECKER: ("X typestr: T", "tensor(bool)")}),
        c("unfold_complex", "Unfold", "X element type", "'complex64'", MODEL, "element types",
          inputs={"X": POOL_X.astype(np.complex64)},
          wording={CHECKER: ("X typestr: T", "tensor(complex64)")}),
        c("fold_bool", "Fold", "X element type", "'bool'", MODEL, "element types",
          inputs={"X": COLUMNS > 0}, wording={CHECKER: ("X typestr: T", "tensor(bool)")}),

        # ---- RoiPooling
        c("roi_pooling_x_rank_3", "RoiPooling", "X rank", "3", SHAPE, "RoiPooling: X not 4-D",
          inputs={"X": IMAGE[0]}, error=ValueError),
        c("roi_pooling_rois_rows_of_4", "RoiPooling", "rois shape", "[2, 4]", SHAPE,
          "RoiPooling: rois not [..., R, 5]", inputs={"rois": ROIS4}, error=ValueError,
          wording={layer: ("rois last dim", "4") for layer in MODEL}),
        c("roi_pooling_rois_rank_5", "RoiPooling", "rois shape", "[1, 1, 1, 2, 5]", SHAPE,
          "RoiPooling: rois not [..., R, 5]", inputs={"rois": ROIS5[None, None, None]},
          error=ValueError, wording={layer: ("rois rank", "5") for layer in MODEL}),
        c("roi_pooling_rois_leading_2", "RoiPooling", "rois shape", "[2, 2, 5]", SHAPE,
          "RoiPooling: rois not [..., R, 5]", inputs={"rois": np.stack([ROIS5, ROIS5])},
          error=ValueError, wording={layer: ("rois dim 0", "2") for layer in MODEL}),
        c("roi_pooling_pooled_size_0", "RoiPooling", "pooled_size[0]", "0", ATTRIBUTE,
          "RoiPooling: pooled_size not two values >= 1", {"pooled_size": [0, 2]}),
        c("roi_pooling_pooled_size_negative", "RoiPooling", "pooled_size[1]", "-3", ATTRIBUTE,
          "RoiPooling: pooled_size not two values >= 1", {"pooled_size": [2, -3]}),
        c("roi_pooling_pooled_size_one_value", "RoiPooling", "pooled_size", "[2]", ATTRIBUTE,
          "RoiPooling: pooled_size not two values >= 1", {"pooled_size": [2]}),
        c("roi_pooling_pooled_size_three_values", "RoiPooling", "pooled_size", "[2, 2, 2]",
          ATTRIBUTE, "RoiPooling: pooled_size not two values >= 1", {"pooled_size": [2, 2, 2]}),
        c("roi_pooling_scale_infinite", "RoiPooling", "spatial_scale", "inf", ATTRIBUTE,
          "RoiPooling: spatial_scale not finite", {"spatial_scale": float("inf")}),
        c("roi_pooling_scale_nan", "RoiPooling", "spatial_scale", "nan", ATTRIBUTE,
          "RoiPooling: spatial_scale not finite", {"spatial_scale": float("nan")}),
        c("roi_pooling_batch_nan", "RoiPooling", "rois[1] batch index", "nan", DATA,
          "RoiPooling: batch id NaN or outside [0, N)",
          inputs={"rois": _rois5(np.nan, 0, 0, 1, 1)}),
        c("roi_pooling_batch_negative", "RoiPooling", "rois[1] batch index", "-1", DATA,
          "RoiPooling: batch id NaN or outside [0, N)",
          inputs={"rois": _rois5(-1, 0, 0, 1, 1)}),
        c("roi_pooling_batch_is_n", "RoiPooling", "rois[1] batch index", "2", DATA,
          "RoiPooling: batch id NaN or outside [0, N)", inputs={"rois": _rois5(2, 0, 0, 1, 1)}),
        c("roi_pooling_batch_infinite", "RoiPooling", "rois[1] batch index", "inf", DATA,
          "RoiPooling: batch id NaN or outside [0, N)",
          inputs={"rois": _rois5(np.inf, 0, 0, 1, 1)}),
        c("roi_pooling_empty_batch", "RoiPooling", "rois[0] batch index", "0", DATA,
          "RoiPooling: batch id NaN or outside [0, N)", inputs={"X": IMAGE[:0]}),
        c("roi_pooling_x1_nan", "RoiPooling", "rois[1] x1", "nan", DATA,
          "RoiPooling: ROI coordinate NaN or infinite",
          inputs={"rois": _rois5(0, np.nan, 0, 1, 1)}),
        c("roi_pooling_y2_infinite", "RoiPooling", "rois[1] y2", "inf", DATA,
          "RoiPooling: ROI coordinate NaN or infinite",
          inputs={"rois": _rois5(0, 0, 0, 1, np.inf)}),
        c("roi_pooling_x2_minus_infinity", "RoiPooling", "rois[1] x2", "-inf", DATA,
          "RoiPooling: ROI coordinate NaN or infinite",
          inputs={"rois": _rois5(0, 0, 0, -np.inf, 1)}),
        c("roi_pooling_scaled_overflow", "RoiPooling", "rois[1] x1", "3.0000000054977558e+38", DATA,
          "RoiPooling: ROI coordinate NaN or infinite", {"spatial_scale": 10.0},
          inputs={"rois": _rois5(0, 3e38, 0, 1, 1)}, valid=None),
        c("roi_pooling_float16_nan", "RoiPooling", "rois[1] y1", "nan", DATA,
          "RoiPooling: ROI coordinate NaN or infinite",
          inputs={"X": IMAGE.astype(float16), "rois": _rois5(0, 0, np.nan, 1, 1).astype(
              float16)}, valid={"X": IMAGE.astype(float16), "rois": ROIS5.astype(float16)}),

        # ---- RoiAlign1
        c("roi_align_x_rank_5", "RoiAlign1", "X rank", "5", SHAPE, "RoiAlign1: ranks and shapes",
          inputs={"X": IMAGE[None]}, error=ValueError),
        c("roi_align_rois_rank_1", "RoiAlign1", "rois rank", "1", SHAPE,
          "RoiAlign1: ranks and shapes", inputs={"rois": ROIS4[0]}, error=ValueError),
        c("roi_align_rois_rows_of_5", "RoiAlign1", "rois shape", "[2, 5]", SHAPE,
          "RoiAlign1: ranks and shapes", inputs={"rois": ROIS5}, error=ValueError,
          wording={layer: ("rois last dim", "5") for layer in MODEL}),
        c("roi_align_batch_indices_column", "RoiAlign1", "batch_indices shape", "[2, 1]", SHAPE,
          "RoiAlign1: ranks and shapes", inputs={"batch_indices": BATCH[:, None]},
          error=ValueError, wording={layer: ("batch_indices dim 0", "2") for layer in MODEL}),
        c("roi_align_r_differs", "RoiAlign1", "batch_indices length", "3", SHAPE,
          "RoiAlign1: R of rois and batch_indices differ",
          inputs={"batch_indices": np.array([0, 1, 1])}, error=ValueError,
          wording={layer: ("R of rois and batch_indices", "disagree: 2 vs 3")
                   for layer in MODEL}),
        c("roi_align_batch_negative", "RoiAlign1", "batch_indices[1]", "-1", DATA,
          "RoiAlign1: batch index outside [0, N)", inputs={"batch_indices": np.array([0, -1])}),
        c("roi_align_batch_is_n", "RoiAlign1", "batch_indices[0]", "2", DATA,
          "RoiAlign1: batch index outside [0, N)",
          inputs={"batch_indices": np.array([2, 0], np.int32)},
          valid={"X": IMAGE, "rois": ROIS4, "batch_indices": BATCH.astype(np.int32)}),
        c("roi_align_batch_uint64_max", "RoiAlign1", "batch_indices[1]", str(2 ** 64 - 1), DATA,
          "RoiAlign1: batch index outside [0, N)",
          inputs={"batch_indices": np.array([0, 2 ** 64 - 1], np.uint64)},
          valid={"X": IMAGE, "rois": ROIS4, "batch_indices": BATCH.astype(np.uint64)}),
        c("roi_align_coordinate_nan", "RoiAlign1", "rois[1]", "[0.0, nan, 1.0, 1.0]", DATA,
          "RoiAlign1: ROI coordinate NaN/infinite", inputs={"rois": _rois4(0, np.nan, 1, 1)}),
        c("roi_align_coordinate_infinite", "RoiAlign1", "rois[1]", "[0.0, 0.0, inf, 1.0]", DATA,
          "RoiAlign1: ROI coordinate NaN/infinite", inputs={"rois": _rois4(0, 0, np.inf, 1)}),
        c("roi_align_scaled_overflow", "RoiAlign1", "rois[1]", "[0.0, 0.0, 1.0000000200408773e+20"
          ", 1.0]", DATA, "RoiAlign1: ROI coordinate NaN/infinite",
          {"spatial_scale_x": 1e30}, inputs={"rois": _rois4(0, 0, 1e20, 1)},
          valid={"X": IMAGE, "rois": np.array([[0, 0, 0, 3], [1, 1, 1, 4]], np.float32),
                 "batch_indices": BATCH}),
        c("roi_align_empty_image", "RoiAlign1", "X shape", "[2, 3, 0, 6]", DATA,
          "RoiAlign1: ranks and shapes", inputs={"X": IMAGE[:, :, :0]}),
        c("roi_align_output_size_0", "RoiAlign1", "output_size[1]", "0", ATTRIBUTE,
          "RoiAlign1: output_size not two values >= 1", {"output_size": [2, 0]}),
        c("roi_align_output_size_one_value", "RoiAlign1", "output_size", "[7]", ATTRIBUTE,
          "RoiAlign1: output_size not two values >= 1", {"output_size": [7]}),
        c("roi_align_reduction_sum", "RoiAlign1", "reduction_function", "'sum'", ATTRIBUTE,
          "RoiAlign1: unknown reduction_function or interpolation_mode",
          {"reduction_function": "sum"}),
        c("roi_align_interpolation_cubic", "RoiAlign1", "interpolation_mode", "'cubic'",
          ATTRIBUTE, "RoiAlign1: unknown reduction_function or interpolation_mode",
          {"interpolation_mode": "cubic"}),
        c("roi_align_minimum_samples_0", "RoiAlign1", "minimum_samples_per_output", "0",
          ATTRIBUTE, "RoiAlign1: minimum_samples_per_output < 1 or maximum < minimum",
          {"minimum_samples_per_output": 0}),
        c("roi_align_maximum_below_minimum", "RoiAlign1", "maximum_samples_per_output", "2",
          ATTRIBUTE, "RoiAlign1: minimum_samples_per_output < 1 or maximum < minimum",
          {"minimum_samples_per_output": 3, "maximum_samples_per_output": 2}),
        c("roi_align_maximum_samples_huge", "RoiAlign1", "maximum_samples_per_output",
          str(1 << 40), ATTRIBUTE,
          "RoiAlign1: minimum_samples_per_output < 1 or maximum < minimum",
          {"maximum_samples_per_output": 1 << 40}),
        c("roi_align_corners_2", "RoiAlign1", "align_regions_to_corners", "2", ATTRIBUTE, "",
          {"align_regions_to_corners": 2}),
        c("roi_align_scale_nan", "RoiAlign1", "spatial_scale_y", "nan", ATTRIBUTE, "",
          {"spatial_scale_y": float("nan")}),
        c("roi_align_offset_infinite", "RoiAlign1", "input_pixel_offset", "-inf", ATTRIBUTE, "",
          {"input_pixel_offset": float("-inf")}),
        c("roi_align_sample_limit", "RoiAlign1", "rois[1] samples along x", "10000000", DATA,
          "memory limit", inputs={"rois": _rois4(0, 0, 1e7, 1)}),

        c("roi_align_max_over_a_huge_region", "RoiAlign1", "sample reads", "5033164800", DATA,
          "work limit", {"reduction_function": "max", "output_size": [20, 1]},
          inputs={"X": IMAGE[:1, :1, :1, :1], "rois": HUGE_ROIS,
                  "batch_indices": np.zeros(60, np.int64)}),

        # ---- RoiAlignGrad
        c("roi_align_grad_no_output", "RoiAlignGrad", "requested outputs", "[]",
          ATTRIBUTE, "RoiAlignGrad: no output requested", outputs=(False, False)),
        c("roi_align_grad_drois_without_x", "RoiAlignGrad", "X", "None", ATTRIBUTE,
          "RoiAlignGrad: X missing when required", {"input_shape": [2, 3, 6, 6]},
          inputs={"X": None}, outputs=(False, True)),
        c("roi_align_grad_max_without_x", "RoiAlignGrad", "X", "None", ATTRIBUTE,
          "RoiAlignGrad: X missing when required",
          {"input_shape": [2, 3, 6, 6], "reduction_function": "max"}, inputs={"X": None}),
        c("roi_align_grad_no_input_shape", "RoiAlignGrad", "input_shape", "[]", ATTRIBUTE,
          "RoiAlignGrad: input_shape missing or disagreeing with X", inputs={"X": None}),
        c("roi_align_grad_input_shape_3_values", "RoiAlignGrad", "input_shape", "[2, 3, 6]",
          ATTRIBUTE, "RoiAlignGrad: input_shape missing or disagreeing with X",
          {"input_shape": [2, 3, 6]}, inputs={"X": None}),
        c("roi_align_grad_input_shape_disagrees", "RoiAlignGrad", "input_shape", "[2, 3, 6, 7]",
          SHAPE, "RoiAlignGrad: input_shape missing or disagreeing with X",
          {"input_shape": [2, 3, 6, 7]}, error=ValueError, valid=None,
          wording={layer: ("X dim 3 and input_shape[3]", "disagree: 6 vs 7")
                   for layer in MODEL}),
        c("roi_align_grad_dy_rows", "RoiAlignGrad", "dY shape", "[1, 3, 2, 2]", SHAPE,
          "RoiAlignGrad: dY's R or C disagreeing with rois or X", inputs={"dY": GRAD[:1]},
          error=ValueError, wording={layer: ("R of dY and rois", "disagree: 1 vs 2")
                                     for layer in MODEL}),
        c("roi_align_grad_dy_channels", "RoiAlignGrad", "dY shape", "[2, 2, 2, 2]", SHAPE,
          "RoiAlignGrad: dY's R or C disagreeing with rois or X", inputs={"dY": GRAD[:, :2]},
          error=ValueError, wording={layer: ("C of dY and X", "disagree: 2 vs 3")
                                     for layer in MODEL}),
        c("roi_align_grad_dy_rank_3", "RoiAlignGrad", "dY rank", "3", SHAPE,
          "RoiAlignGrad: dY's R or C disagreeing with rois or X", inputs={"dY": GRAD[0]},
          error=ValueError),
        c("roi_align_grad_batch_outside", "RoiAlignGrad", "batch_indices[0]", "5", DATA,
          "RoiAlign1: batch index outside [0, N)", inputs={"batch_indices": np.array([5, 0])},
          outputs=(True, True)),
        c("roi_align_grad_coordinate_nan", "RoiAlignGrad", "rois[0]", "[nan, 0.0, 3.0, 3.0]",
          DATA, "RoiAlign1: ROI coordinate NaN/infinite",
          inputs={"rois": np.array([[np.nan, 0, 3, 3], ROIS4[1]], np.float32)}),
        c("roi_align_grad_dx_beyond_memory", "RoiAlignGrad", "output dX",
          f"[{TRILLION}, 3, {TRILLION}, 6]", frozenset({CHECK, RUN}), "memory limit",
          {"input_shape": [TRILLION, 3, TRILLION, 6]}, inputs={"X": None}, valid=None),

        c("roi_align_grad_max_over_a_huge_region", "RoiAlignGrad", "sample reads",
          "5033164800", DATA, "work limit", {"reduction_function": "max"},
          inputs={"X": IMAGE[:1, :1, :1, :1], "rois": HUGE_ROIS,
                  "batch_indices": np.zeros(60, np.int64),
                  "dY": np.ones((60, 1, 20, 1), np.float32)}),

        # ---- LpPooling
        c("lp_pooling_rank_2", "LpPooling", "X rank", "2", SHAPE, "LpPooling: rank outside 3..5",
          {"window_size": [2]}, inputs={"X": POOL_X[0, 0]}, error=ValueError,
          valid={"X": POOL_X[0]}),
        c("lp_pooling_rank_5", "LpPooling", "X rank", "5", SHAPE, "LpPooling: rank outside 3..5",
          inputs={"X": POOL_X[None]}, error=ValueError),
        c("lp_pooling_empty_axis", "LpPooling", "spatial axis 0 output size", "0", SHAPE,
          "LpPooling: output size below 1", inputs={"X": POOL_X[:, :, :0]}, error=ValueError),
        c("lp_pooling_four_axes", "LpPooling", "window_size", "[1, 1, 1, 1]", ATTRIBUTE,
          "LpPooling: rank outside 3..5", {"window_size": [1, 1, 1, 1]}),
        c("lp_pooling_window_0", "LpPooling", "window_size[1]", "0", ATTRIBUTE,
          "LpPooling: list attribute of the wrong length or value out of range",
          {"window_size": [2, 0]}),
        c("lp_pooling_strides_length", "LpPooling", "strides", "[1, 1, 1]", ATTRIBUTE,
          "LpPooling: list attribute of the wrong length or value out of range",
          {"strides": [1, 1, 1]}),
        c("lp_pooling_dilation_0", "LpPooling", "dilations[0]", "0", ATTRIBUTE,
          "LpPooling: list attribute of the wrong length or value out of range",
          {"dilations": [0, 1]}),
        c("lp_pooling_padding_negative", "LpPooling", "end_padding[1]", "-1", ATTRIBUTE,
          "LpPooling: list attribute of the wrong length or value out of range",
          {"end_padding": [0, -1]}),
        c("lp_pooling_p_0", "LpPooling", "p", "0", ATTRIBUTE, "LpPooling: p < 1", {"p": 0}),
        c("lp_pooling_window_beyond_input", "LpPooling", "spatial axis 1 output size", "0", SHAPE,
          "LpPooling: output size below 1", {"window_size": [2, 7]}, error=ValueError,
          valid={"X": np.ones((1, 1, 2, 7), np.float32)}),
        c("lp_pooling_output_above_limit", "LpPooling", "output Y", "[1, 2, 4, 4]",
          frozenset({CHECK, RUN}), "memory limit", memory_limit=100,
          valid={"X": POOL_X[:, :1, :3, :3]}),

        c("lp_pooling_huge_window_over_padding", "LpPooling", "window tap reads", "40999805000",
          DATA, "work limit", {"window_size": [1, 200000], "start_padding": [0, 199999],
                               "end_padding": [0, 199999]},
          inputs={"X": POOL_X[:1, :1, :1].repeat(1000, axis=3)}, valid=None),

        # ---- Unfold
        c("unfold_seven_axes", "Unfold", "window_sizes", "[1, 1, 1, 1, 1, 1, 1]", ATTRIBUTE,
          "Unfold: k outside 1..6", {"window_sizes": [1] * 7}),
        c("unfold_no_axes", "Unfold", "window_sizes", "[]", ATTRIBUTE, "Unfold: k outside 1..6",
          {"window_sizes": []}),
        c("unfold_dilations_length", "Unfold", "dilations", "[1]", ATTRIBUTE,
          "Unfold: attribute lengths", {"dilations": [1]}),
        c("unfold_stride_0", "Unfold", "strides[0]", "0", ATTRIBUTE,
          "Unfold: window, stride, dilation < 1; padding < 0", {"strides": [0, 1]}),
        c("unfold_padding_negative", "Unfold", "start_padding[0]", "-2", ATTRIBUTE,
          "Unfold: window, stride, dilation < 1; padding < 0", {"start_padding": [-2, 0]}),
        c("unfold_window_negative", "Unfold", "window_sizes[0]", "-1", ATTRIBUTE,
          "Unfold: window, stride, dilation < 1; padding < 0", {"window_sizes": [-1, 2]}),
        c("unfold_block_count_0", "Unfold", "spatial axis 0 block count", "0", SHAPE,
          "Unfold: block count below 1", {"window_sizes": [3, 1], "dilations": [3, 1]},
          error=ValueError, valid={"X": np.ones((1, 1, 7, 3), np.float32)}),
        c("unfold_empty_axis", "Unfold", "spatial axis 1 block count", "0", SHAPE,
          "Unfold: block count below 1", inputs={"X": POOL_X[:, :, :, :0]}, error=ValueError),
        c("unfold_rank_differs", "Unfold", "X rank", "3", SHAPE, "Unfold: attribute lengths",
          inputs={"X": POOL_X[0]}, error=ValueError),
        c("unfold_trillion_by_padding", "Unfold", "output Y", f"[1, 2, {TRILLION + 5}]",
          frozenset({CHECK, RUN}), "memory limit", {"window_sizes": [1], "start_padding":
          [TRILLION]}, inputs={"X": POOL_X[:, :, 0]}, valid=None),
        c("unfold_trillion_by_window", "Unfold", "output Y", "[1, 1000000, 1002001]",
          frozenset({CHECK, RUN}), "memory limit", {"window_sizes": [1000, 1000]},
          inputs={"X": np.zeros((1, 1, 2000, 2000), np.uint8)},
          valid={"X": np.zeros((1, 1, 1000, 1000), np.uint8)}),
        c("unfold_dilated_beyond_memory", "Unfold", "temporary padded X",
          f"[1, 2, {TRILLION + 1}]", DATA, "memory limit",
          {"window_sizes": [2], "dilations": [TRILLION], "start_padding": [TRILLION]},
          inputs={"X": POOL_X[:, :, 0, :1]}, valid=None),

        # ---- Fold
        c("fold_rank_4", "Fold", "X rank", "4", SHAPE, "",
          inputs={"X": COLUMNS[None]}, error=ValueError),
        c("fold_rows_not_multiple", "Fold", "X dim 1", "7", SHAPE,
          "Fold: second input size not a multiple of prod(window_sizes)",
          inputs={"X": COLUMNS[:, :7]}, error=ValueError),
        c("fold_length_differs", "Fold", "X dim 2", "8", SHAPE,
          "Fold: L not the block count of output_size", inputs={"X": COLUMNS[:, :, :8]},
          error=ValueError),
        c("fold_output_size_length", "Fold", "output_size", "[4, 4, 4]", ATTRIBUTE,
          "Fold: L not the block count of output_size", {"output_size": [4, 4, 4]}),
        c("fold_output_size_negative", "Fold", "output_size[0]", "-4", ATTRIBUTE,
          "Fold: L not the block count of output_size", {"output_size": [-4, 4]}),
        c("fold_output_smaller_than_window", "Fold", "spatial axis 1 block count", "0",
          ATTRIBUTE, "Fold: L not the block count of output_size", {"output_size": [4, 1]}),
        c("fold_trillion_output", "Fold", "output Y",
          "[1, 1, 10000, 10000, 10000]", frozenset({CHECK}), "memory limit",
          {"window_sizes": [10 ** 4] * 3, "output_size": [10 ** 4] * 3},
          inputs={"X": Declared((1, TRILLION, 1), np.dtype(np.float32))}, valid=None),
        c("roi_pooling_bin_edges_beyond_memory", "RoiPooling", "temporary bin edges",
          "[2, 1099511627776]", DATA, "memory limit", {"pooled_size": [1 << 40, 1]},
          inputs={"X": IMAGE[:, :0]}, valid=None),
    ]


CASES: tuple[BadInput, ...] = tuple(_cases())
