"""The onnxruntime binding: run ``dml_onnx`` nodes in onnxruntime through onnxruntime-extensions.

onnxruntime-extensions runs Python kernels ("PyOps") but passes neither list attributes nor
exact float attributes, cannot pass float16, supports only required inputs and outputs, turns
outputs into Python lists, and ends the process when a kernel raises. So a model is rewritten
before onnxruntime sees it (:func:`to_runtime_model`): every ``dml_onnx`` node becomes one PyOp
node of the private domain ``dml_onnx.runtime``, chosen for the node's element types, that

- carries the node's attributes, defaults filled in, as one exact JSON string attribute;
- gets float16 inputs through ``Cast`` to float32 and casts its outputs back;
- receives an empty tensor for an absent optional input and a throw-away name for an absent
  optional output;
- returns, next to each output, that output's shape; in a model for plain onnxruntime sessions
  a ``Reshape`` by this shape guards the output: after a failed kernel the shapes disagree, so
  onnxruntime fails the run instead of handing back a wrong tensor. (:class:`InferenceSession`
  checks every run itself and leaves the guards out: on a graph output they cost a copy.)

The invocation hook passes numpy arrays both ways (no lists) and never lets an exception escape:
it keeps the error for the calling thread, and :class:`InferenceSession` raises it from
``run()`` as :class:`KernelError`.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime_extensions import PyCustomOpDef, _ocos, get_library_path

from custom_ops import KernelError
from dml_onnx.builders import STANDARD_OPSET
from dml_onnx.definition import DOMAIN, OpDefinition, node_label
from dml_onnx.graphs import element_types, reject_nested
from dml_onnx.ops import OPERATORS, OPERATORS_BY_NAME
from dml_onnx.schemas import register_schemas

RUNTIME_DOMAIN = "dml_onnx.runtime"
_logger = logging.getLogger("dml_onnx")

# ONNX element type -> (name in op types, PyOp type code, numpy dtype) of the types PyOps take.
_PYOP_TYPES = {
    TensorProto.FLOAT: ("float", PyCustomOpDef.dt_float, np.float32),
    TensorProto.DOUBLE: ("double", PyCustomOpDef.dt_double, np.float64),
    TensorProto.INT8: ("int8", PyCustomOpDef.dt_int8, np.int8),
    TensorProto.INT16: ("int16", PyCustomOpDef.dt_int16, np.int16),
    TensorProto.INT32: ("int32", PyCustomOpDef.dt_int32, np.int32),
    TensorProto.INT64: ("int64", PyCustomOpDef.dt_int64, np.int64),
    TensorProto.UINT8: ("uint8", PyCustomOpDef.dt_uint8, np.uint8),
    TensorProto.UINT16: ("uint16", PyCustomOpDef.dt_uint16, np.uint16),
    TensorProto.UINT32: ("uint32", PyCustomOpDef.dt_uint32, np.uint32),
    TensorProto.UINT64: ("uint64", PyCustomOpDef.dt_uint64, np.uint64),
    TensorProto.BOOL: ("bool", PyCustomOpDef.dt_bool, np.bool_),
}
# The element type a PyOp cannot take: computed in float32 (the spec's float16 rule).
_CAST_TO_FLOAT = {TensorProto.FLOAT16}


@dataclass(frozen=True)
class _Variant:
    """One PyOp: an operator at one concrete element type per type constraint."""

    definition: OpDefinition
    output_dtypes: tuple[np.dtype, ...]


_VARIANTS_BY_ID: dict[int, _Variant] = {}
_registration_lock = threading.Lock()
_errors = threading.local()


def _variant_name(definition: OpDefinition, types: dict[str, int]) -> str:
    return "_".join([definition.name, *(_PYOP_TYPES[types[name]][0] for name in types)])


def _type_params(definition: OpDefinition) -> list[str]:
    return list(dict.fromkeys(p.type for p in (*definition.inputs, *definition.outputs)))


_TYPE_STRINGS = {"tensor(float16)": TensorProto.FLOAT16,
                 **{f"tensor({name})": elem for elem, (name, _, _) in _PYOP_TYPES.items()}}
"""Type-constraint strings of the schemas -> ONNX element types."""


def register_runtime_ops() -> None:
    """Declare every operator's PyOps with onnxruntime-extensions and install the fast hook.

    Idempotent. :func:`to_runtime_model` and :class:`InferenceSession` call it.
    """
    with _registration_lock:
        if _VARIANTS_BY_ID:
            return
        for definition in OPERATORS:
            params = _type_params(definition)
            choices = [sorted({_TYPE_STRINGS[t] for t in definition.type_constraints[p]}
                              - _CAST_TO_FLOAT) for p in params]
            for combo in itertools.product(*choices):
                types = dict(zip(params, combo))
                op_type = _variant_name(definition, types)
                outputs = []
                for parameter in definition.outputs:
                    outputs += [_PYOP_TYPES[types[parameter.type]][1], PyCustomOpDef.dt_int64]
                opdef = _ocos.Opdef.create(
                    _never_called, op_type=f"{RUNTIME_DOMAIN}::{op_type}",
                    inputs=[_PYOP_TYPES[types[p.type]][1] for p in definition.inputs],
                    outputs=outputs, attrs={"config": PyCustomOpDef.dt_string})
                _VARIANTS_BY_ID[opdef._id] = _Variant(
                    definition,
                    tuple(np.dtype(_PYOP_TYPES[types[p.type]][2]) for p in definition.outputs))
        PyCustomOpDef.install_hooker(_invoke)


def _never_called(*args: Any, **kwargs: Any) -> None:  # pragma: no cover - the hook runs kernels
    raise AssertionError("dml_onnx runtime ops run through the dml_onnx hook")


@dataclass(frozen=True)
class _Call:
    definition: OpDefinition
    node: str
    attributes: dict[str, Any]
    inputs_present: tuple[bool, ...]
    outputs_present: tuple[bool, ...]


@functools.lru_cache(maxsize=1024)
def _parse_config(config: str) -> _Call:
    data = json.loads(config)
    return _Call(OPERATORS_BY_NAME[data["op"]], data["node"], data["attributes"],
                 tuple(data["inputs"]), tuple(data["outputs"]))


def _invoke(k_id: int, feed: list[np.ndarray], attributes: dict[str, str]) -> tuple:
    variant = _VARIANTS_BY_ID.get(k_id)
    if variant is None:  # somebody else's PyOp: the extension's own hook
        return _ocos._on_pyop_invocation(k_id, feed, attributes)
    try:
        return (k_id, *_run_call(_parse_config(attributes["config"]), feed, variant))
    except Exception as exc:  # noqa: BLE001 - an exception here would end the process
        error = exc if isinstance(exc, KernelError) else KernelError(
            variant.definition.name, _node_of(attributes), "kernel", type(exc).__name__,
            f"raised: {exc}")
        if error is not exc:
            error.__cause__ = exc
        _errors.error = error
        if not getattr(_errors, "in_session", 0):
            _logger.error("%s", error)
        result: list[Any] = [k_id]
        for dtype in variant.output_dtypes:  # an output the guard Reshape cannot accept
            result += [(0,), np.zeros(0, dtype), (1,), np.ones(1, np.int64)]
        return tuple(result)


def _run_call(call: _Call, feed: list[np.ndarray], variant: _Variant) -> list[Any]:
    """The kernel's outputs as the hook returns them: shape and array, for each output
    followed by its shape as a tensor (what the guard Reshape reads)."""
    inputs = [array if present else None for array, present in zip(feed, call.inputs_present)]
    outputs = call.definition.run_kernel(inputs, call.attributes, call.node,
                                         call.outputs_present)
    result: list[Any] = []
    for array, dtype in zip(outputs, variant.output_dtypes):
        array = np.zeros(0, dtype) if array is None else np.ascontiguousarray(array, dtype)
        result += [array.shape, array, (array.ndim,), np.array(array.shape, np.int64)]
    return result


def _node_of(attributes: dict[str, str]) -> str:
    try:
        return str(json.loads(attributes["config"])["node"])
    except Exception:  # noqa: BLE001 - only for the message of another error
        return "<unreadable config>"


# ----------------------------------------------------------------------------- rewriting
def to_runtime_model(model: onnx.ModelProto, *, guard: bool = True) -> onnx.ModelProto:
    """The model with every ``dml_onnx`` node replaced by its onnxruntime-extensions form.

    Raises ``ValueError`` naming operator, node and field for invalid attributes or inputs
    whose element type is not allowed. The result runs in a plain ``onnxruntime`` session
    whose options registered ``onnxruntime_extensions.get_library_path()``, in this process.
    ``guard=False`` leaves out the guard nodes that make such a session fail after a failed
    kernel; only for callers that check :func:`take_error` after every run.
    """
    register_schemas()
    register_runtime_ops()
    reject_nested(model, "the onnxruntime binding")
    elem_types = element_types(model)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    for index, node in enumerate(model.graph.node):
        if node.domain == DOMAIN:
            result.graph.node.extend(_rewrite(node, index, elem_types, guard))
        else:
            result.graph.node.append(node)
    imports = {o.domain: o for o in result.opset_import}
    if "" not in imports and "ai.onnx" not in imports:
        result.opset_import.append(helper.make_opsetid("", STANDARD_OPSET))
    if RUNTIME_DOMAIN not in imports:
        result.opset_import.append(helper.make_opsetid(RUNTIME_DOMAIN, 1))
    return result


def _rewrite(node: onnx.NodeProto, index: int, elem_types: dict[str, int],
             guard: bool) -> list:
    definition = OPERATORS_BY_NAME.get(node.op_type)
    label = node_label(node)
    if definition is None:
        raise ValueError(f"{node.op_type} '{label}': no such operator in the {DOMAIN} domain "
                         f"(known: {', '.join(OPERATORS_BY_NAME)})")
    attributes = definition.check_node(node)
    prefix = f"_dml_onnx_{index}"
    inputs = [node.input[i] if i < len(node.input) else "" for i in range(len(definition.inputs))]
    outputs_present = [i < len(node.output) and bool(node.output[i])
                       for i in range(len(definition.outputs))]
    types: dict[str, int] = {}
    for parameter, name in zip(definition.inputs, inputs):
        if not name:
            if not parameter.optional:
                raise ValueError(f"{definition.name} '{label}': input {parameter.name} is "
                                 "required but missing")
            continue
        if name not in elem_types:
            raise ValueError(f"{definition.name} '{label}': the element type of input "
                             f"{parameter.name} ('{name}') is not known; declare it in the "
                             "graph's inputs or value_info")
        elem = elem_types[name]
        allowed = {_TYPE_STRINGS[t] for t in definition.type_constraints[parameter.type]}
        if elem not in allowed:
            raise ValueError(f"{definition.name} '{label}': input {parameter.name} element "
                             f"type {helper.tensor_dtype_to_string(elem)} is not allowed "
                             f"(type {parameter.type})")
        if types.setdefault(parameter.type, elem) != elem:
            raise ValueError(f"{definition.name} '{label}': input {parameter.name} element "
                             f"type {helper.tensor_dtype_to_string(elem)} differs from the other "
                             f"{parameter.type} inputs "
                             f"({helper.tensor_dtype_to_string(types[parameter.type])})")
    runtime_types = {p: (TensorProto.FLOAT if types.get(p, TensorProto.FLOAT) in _CAST_TO_FLOAT
                         else types.get(p, TensorProto.FLOAT)) for p in _type_params(definition)}

    nodes, kernel_inputs = [], []
    for i, (parameter, name) in enumerate(zip(definition.inputs, inputs)):
        runtime_type = runtime_types[parameter.type]
        if not name:
            empty = numpy_helper.from_array(
                np.zeros(0, helper.tensor_dtype_to_np_dtype(runtime_type)))
            name = f"{prefix}_absent_{i}"
            nodes.append(helper.make_node("Constant", [], [name], value=empty))
        elif types[parameter.type] != runtime_type:
            cast = f"{prefix}_in_{i}"
            nodes.append(helper.make_node("Cast", [name], [cast], to=runtime_type))
            name = cast
        kernel_inputs.append(name)

    config = json.dumps({"op": definition.name, "node": label, "attributes": attributes,
                         "inputs": [bool(n) for n in inputs], "outputs": outputs_present},
                        allow_nan=True)
    kernel_outputs, guards = [], []
    for k, (parameter, present) in enumerate(zip(definition.outputs, outputs_present)):
        raw, shape = f"{prefix}_out_{k}", f"{prefix}_shape_{k}"
        kernel_outputs += [raw, shape]
        if not present:
            continue
        target = node.output[k]
        original = types.get(parameter.type, runtime_types[parameter.type])
        checked = f"{raw}_checked" if original != runtime_types[parameter.type] else target
        if guard:
            guards.append(helper.make_node(
                "Reshape", [raw, shape], [checked],
                name=f"{definition.name} '{label}' output {parameter.name} (fails when the "
                     "kernel failed; the dml_onnx logger has the reason)"))
        elif checked == target:
            kernel_outputs[-2] = target
        else:
            checked = raw
        if checked != target:
            guards.append(helper.make_node("Cast", [checked], [target], to=original))
    variant = _variant_name(definition, runtime_types)
    nodes.append(helper.make_node(variant, kernel_inputs, kernel_outputs, name=node.name or None,
                                  domain=RUNTIME_DOMAIN, config=config))
    return nodes + guards


# ----------------------------------------------------------------------------- session
def load_model(model: str | os.PathLike | bytes | onnx.ModelProto) -> onnx.ModelProto:
    """A ModelProto from a path, serialized bytes or a ModelProto."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_model_from_string(bytes(model))
    return onnx.load(os.fspath(model))


class InferenceSession:
    """``onnxruntime.InferenceSession`` for models with ``dml_onnx`` nodes.

    Takes a path, serialized bytes or a ModelProto and the constructor arguments of
    ``onnxruntime.InferenceSession``; ``run()`` has its signature. An invalid input of a
    ``dml_onnx`` node makes ``run()`` raise :class:`KernelError` (a ``ValueError``) naming the
    operator, node, field and value; the session keeps working. The given ``sess_options``
    gets the onnxruntime-extensions library registered and sequential execution set.
    Everything else is delegated to the wrapped onnxruntime session.
    """

    def __init__(self, path_or_bytes: str | os.PathLike | bytes | onnx.ModelProto,
                 sess_options: ort.SessionOptions | None = None,
                 providers: Sequence[str | tuple[str, dict]] | None = None,
                 provider_options: Sequence[dict] | None = None, **kwargs: Any):
        model = to_runtime_model(load_model(path_or_bytes), guard=False)
        options = sess_options or ort.SessionOptions()
        if sess_options is None:
            options.log_severity_level = 4  # a failed kernel is reported by run(), not logged
        _register_extensions_library(options)
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL  # kernels on the caller thread
        self._session = ort.InferenceSession(
            model.SerializeToString(), options,
            providers=list(providers) if providers else ["CPUExecutionProvider"],
            provider_options=provider_options, **kwargs)

    def run(self, output_names: Sequence[str] | None, input_feed: dict[str, Any],
            run_options: ort.RunOptions | None = None) -> list[Any]:
        _errors.error = None
        _errors.in_session = getattr(_errors, "in_session", 0) + 1
        if run_options is None:
            run_options = ort.RunOptions()
            run_options.log_severity_level = 4  # a failed kernel is raised, not logged
        try:
            outputs = self._session.run(output_names, input_feed, run_options)
        except Exception as exc:
            error = take_error()
            if error is None:
                raise
            raise error from error.__cause__ or exc
        finally:
            _errors.in_session -= 1
        error = take_error()
        if error is not None:
            raise error
        return outputs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


_REGISTERED_KEY = "dml_onnx.extensions_library_registered"


def _register_extensions_library(options: ort.SessionOptions) -> None:
    """Register onnxruntime-extensions once per options object (twice fails the session)."""
    try:
        options.get_session_config_entry(_REGISTERED_KEY)
    except RuntimeError:  # not registered yet
        options.register_custom_ops_library(get_library_path())
        options.add_session_config_entry(_REGISTERED_KEY, "1")


def take_error() -> KernelError | None:
    """The error of the last failed kernel run by this thread since the last call, if any."""
    error, _errors.error = getattr(_errors, "error", None), None
    return error
