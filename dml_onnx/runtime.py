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
  checks every run itself and uses unguarded PyOps, which return no shapes: on a graph output
  a guard costs a copy, and every extra output time.)

The invocation hook passes numpy arrays both ways (no lists) and never lets an exception escape:
it keeps the error for the calling thread, and :class:`InferenceSession` raises it from
``run()`` as :class:`KernelError`.

onnxruntime-extensions copies every input of a PyOp into a new array and every output into
onnxruntime's buffer. :class:`InferenceSession` avoids both where it can (``direct`` rewrite):
a graph input that a ``dml_onnx`` node reads reaches the kernel as the caller's array (the PyOp
gets an empty placeholder; onnxruntime still checks the feed's type and shape), and a graph
output that only a ``dml_onnx`` node produces is handed back as the kernel's array (the PyOp
returns an empty tensor that ``run()`` replaces). Direct float16 values are converted to and
from float32 by onnxruntime's ``Cast`` (numpy's float16 conversions are about 20 times slower),
except for the operators in :data:`FLOAT16_KERNELS`, which take float16 as it is when all
their inputs of that type are direct.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from custom_ops import KernelError
from custom_ops._threads import thread_limit
from dml_onnx.builders import IR_VERSION, STANDARD_OPSET
from dml_onnx.definition import DOMAIN, RUNTIME_DOMAIN, OpDefinition, node_label
from dml_onnx.graphs import (
    check_structure,
    element_types,
    load_model,
    subgraphs,
    unused_prefix,
)
from dml_onnx.ops import OPERATORS, OPERATORS_BY_NAME
from dml_onnx.private_api import (
    PyCustomOpDef,
    declare_pyop,
    extension_hook,
    get_library_path,
    install_hook,
    session_run,
)
from dml_onnx.schemas import register_schemas
from dml_onnx.weights import load_without_weights, serialized_with_weights

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
FLOAT16_KERNELS = frozenset({"Unfold"})
"""Operators whose kernels are as fast on float16 as on float32: they only copy values (the
others compute float16 in float32; numpy's float16 arithmetic is slow)."""
_CAST_BY_ONNXRUNTIME = 1 << 11  # elements: larger float16 conversions go through onnxruntime


@dataclass(frozen=True)
class _Variant:
    """One PyOp: an operator at one concrete element type per type constraint; a guarded one
    returns each output's shape too (for the guard ``Reshape``), an unguarded one does not."""

    definition: OpDefinition
    output_dtypes: tuple[np.dtype, ...]
    guarded: bool


_VARIANTS_BY_ID: dict[int, _Variant] = {}
_registration_lock = threading.Lock()


class _ThreadState(threading.local):
    """What one thread's runs share with the hook (class attributes: each thread's start)."""

    error: BaseException | None = None  # of the first failed kernel, until taken
    in_session = 0  # depth of InferenceSession.run calls
    feeds: dict[str, Any] | None = None  # the feed of the current InferenceSession.run
    fetched: dict[str, np.ndarray] | None = None  # its direct outputs, by name


_state = _ThreadState()


def _variant_name(definition: OpDefinition, types: dict[str, int], guarded: bool) -> str:
    return "_".join([definition.name, *(_PYOP_TYPES[types[name]][0] for name in types),
                     *([] if guarded else ["unguarded"])])


def _type_params(definition: OpDefinition) -> list[str]:
    return list(dict.fromkeys(p.type for p in (*definition.inputs, *definition.outputs)))


_TYPE_STRINGS = {"tensor(float16)": TensorProto.FLOAT16,
                 **{f"tensor({name})": elem for elem, (name, _, _) in _PYOP_TYPES.items()}}
"""Type-constraint strings of the schemas -> ONNX element types."""


def register_runtime_ops() -> None:
    """Declare every operator's PyOps with onnxruntime-extensions and install the fast hook.

    Idempotent; runs when this module is imported (2 ms), so that a plain onnxruntime session
    may register the extension library before or after :func:`to_runtime_model` (the library
    sees only the operators declared when it is registered).
    """
    with _registration_lock:
        if _VARIANTS_BY_ID:
            return
        for definition in OPERATORS:
            params = _type_params(definition)
            choices = [sorted({_TYPE_STRINGS[t] for t in definition.type_constraints[p]}
                              - _CAST_TO_FLOAT) for p in params]
            for combo, guarded in itertools.product(itertools.product(*choices), (True, False)):
                types = dict(zip(params, combo))
                op_type = _variant_name(definition, types, guarded)
                outputs = []
                for parameter in definition.outputs:
                    outputs += [_PYOP_TYPES[types[parameter.type]][1],
                                *([PyCustomOpDef.dt_int64] if guarded else [])]
                op_id = declare_pyop(  # the config comes last, as uint8 (UTF-8 JSON)
                    f"{RUNTIME_DOMAIN}::{op_type}",
                    [*(_PYOP_TYPES[types[p.type]][1] for p in definition.inputs),
                     PyCustomOpDef.dt_uint8], outputs, {})
                _VARIANTS_BY_ID[op_id] = _Variant(
                    definition,
                    tuple(np.dtype(_PYOP_TYPES[types[p.type]][2]) for p in definition.outputs),
                    guarded)
        install_hook(_invoke)


@dataclass(frozen=True)
class _Call:
    """One node's kernel call, parsed once from its config."""

    definition: OpDefinition
    node: str
    run: Callable[[Sequence[np.ndarray | None]], tuple[np.ndarray | None, ...]]
    absent: tuple[int, ...]  # inputs the kernel gets as None
    feeds: tuple[tuple[int, str, np.dtype, np.dtype], ...]
    """Direct inputs: index, graph input, its element type, the element type the kernel gets."""
    fetches: tuple[tuple[str, np.dtype] | None, ...]  # per output: direct graph output, type


@functools.lru_cache(maxsize=1024)
def _parse_config(config: bytes) -> _Call:
    data = json.loads(config.decode())  # UnicodeDecodeError: a crafted node's, reported
    definition = OPERATORS_BY_NAME[data["op"]]
    feeds = data.get("feeds") or [None] * len(definition.inputs)
    fetches = data.get("fetches") or [None] * len(definition.outputs)
    return _Call(definition, data["node"],
                 definition.bind_kernel(data["attributes"], data["node"], data["outputs"]),
                 tuple(i for i, present in enumerate(data["inputs"]) if not present),
                 tuple((i, f[0], np.dtype(f[1]), np.dtype(f[2])) for i, f in enumerate(feeds)
                       if f),
                 tuple(f and (f[0], np.dtype(f[1])) for f in fetches))


def _invoke(k_id: int, feed: list[np.ndarray], attributes: dict[str, str]) -> tuple:
    """The hook: ``feed`` is the node's inputs, then its config (no string attribute: the
    extension would convert one to ``str`` in C++, and a value that is not UTF-8 would end
    the process there)."""
    variant = _VARIANTS_BY_ID.get(k_id)
    if variant is None:  # somebody else's PyOp: the extension's own hook
        return extension_hook(k_id, feed, attributes)
    if _state.in_session and _state.error is not None:
        return _placeholders(k_id, variant)  # a kernel of this run failed: report that one
    config = feed[-1].tobytes() if feed else b""
    try:
        return (k_id, *_run_call(_parse_config(config), feed[:-1], variant))
    except BaseException as exc:  # noqa: BLE001 - anything escaping here ends the process
        _state.error = _kernel_error(exc, variant, config)
        if not _state.in_session:
            _logger.error("%s", _state.error if isinstance(exc, Exception) else
                          f"{variant.definition.name} '{_node_of(config)}': kernel stopped "
                          f"by {type(exc).__name__}")
        return _placeholders(k_id, variant)


def _kernel_error(exc: BaseException, variant: _Variant, config: bytes) -> BaseException:
    """What ``run()`` raises for an exception of a kernel: a :class:`KernelError` as it is,
    an interrupt or exit (not an ``Exception``) as it is, anything else as a
    :class:`KernelError` naming the exception."""
    if isinstance(exc, KernelError) or not isinstance(exc, Exception):
        return exc
    error = KernelError(variant.definition.name, _node_of(config), "kernel",
                        type(exc).__name__, f"raised: {exc}")
    error.__cause__ = exc
    return error


def _placeholders(k_id: int, variant: _Variant) -> tuple:
    """The hook's result for a failed kernel: empty outputs, which a guard ``Reshape``
    refuses."""
    result: list[Any] = [k_id]
    for dtype in variant.output_dtypes:
        result += [(0,), np.zeros(0, dtype)]
        if variant.guarded:
            result += [(1,), np.ones(1, np.int64)]
    return tuple(result)


def _run_call(call: _Call, feed: list[np.ndarray], variant: _Variant) -> list[Any]:
    """The kernel's outputs as the hook returns them: shape and array for each output,
    followed, for a guarded variant, by its shape as a tensor (what the guard Reshape reads)."""
    inputs: list[np.ndarray | None] = list(feed)
    for i in call.absent:
        inputs[i] = None
    if call.feeds:
        given = _state.feeds
        for i, name, dtype, kernel_dtype in call.feeds:
            inputs[i] = _convert(_feed(given, name, dtype), kernel_dtype)
    result: list[Any] = []
    for array, dtype, fetch in zip(call.run(inputs), variant.output_dtypes, call.fetches):
        if array is not None and fetch is not None:
            _state.fetched[fetch[0]] = _convert(_contiguous(array, array.dtype), fetch[1])
            array = None
        array = _EMPTY[dtype] if array is None else _contiguous(array, dtype)
        result += (array.shape, array)
        if variant.guarded:
            result += ((array.ndim,), _shape_tensor(array.shape))
    return result


_EMPTY = {np.dtype(t): np.zeros(0, t) for _, _, t in _PYOP_TYPES.values()}


@functools.lru_cache(maxsize=256)
def _shape_tensor(shape: tuple[int, ...]) -> np.ndarray:
    return np.array(shape, np.int64)


def _contiguous(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if array.dtype == dtype and array.flags.c_contiguous:
        return array
    return np.ascontiguousarray(array, dtype)


def _convert(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``array`` as ``dtype``; large float16 conversions by onnxruntime's Cast."""
    if array.dtype == dtype:
        return array
    if array.size < _CAST_BY_ONNXRUNTIME:
        return array.astype(dtype)
    return _cast(array.dtype.str, dtype.str)(array)


@functools.cache
def _cast(source: str, target: str) -> Callable[[np.ndarray], np.ndarray]:
    """A Cast from ``source`` to ``target`` (numpy type strings) on onnxruntime's kernels,
    single-threaded (on the calling thread: no worker threads left spinning beside numpy)."""
    elem = {t: helper.np_dtype_to_tensor_dtype(np.dtype(t)) for t in (source, target)}
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=elem[target])], "cast",
        [helper.make_tensor_value_info("x", elem[source], ["n"])],
        [helper.make_tensor_value_info("y", elem[target], ["n"])])
    model = helper.make_model(graph, ir_version=IR_VERSION,
                              opset_imports=[helper.make_opsetid("", STANDARD_OPSET)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])

    def cast(array: np.ndarray) -> np.ndarray:
        return session.run(None, {"x": array.reshape(-1)})[0].reshape(array.shape)
    return cast


def _feed(given: dict[str, Any] | None, name: str, dtype: np.dtype) -> np.ndarray:
    """The caller's array for a direct input (onnxruntime has checked its type and shape)."""
    if given is None or name not in given:
        raise RuntimeError(f"input {name!r} reaches the kernel only through "
                           "dml_onnx.InferenceSession.run")
    value = given[name]
    if type(value) is np.ndarray and value.dtype == dtype:
        return value
    return np.asarray(value, dtype)


def _node_of(config: bytes) -> str:
    try:
        return str(json.loads(config.decode())["node"])
    except Exception:  # noqa: BLE001 - only for the message of another error
        return "<unreadable config>"


# ----------------------------------------------------------------------------- rewriting
def to_runtime_model(model: str | os.PathLike | bytes | onnx.ModelProto, *,
                     guard: bool = True, direct: bool = False) -> onnx.ModelProto:
    """The model with every ``dml_onnx`` node replaced by its onnxruntime-extensions form.

    Raises ``ValueError`` naming operator, node and field for invalid attributes or inputs
    whose element type is not allowed. The result runs in a plain ``onnxruntime`` session
    whose options registered ``onnxruntime_extensions.get_library_path()``, in this process.
    ``guard=False`` leaves out the guard nodes that make such a session fail after a failed
    kernel; only for callers that check :func:`take_error` after every run. ``direct=True``
    (implies ``guard=False``) passes graph inputs and outputs of ``dml_onnx`` nodes outside
    onnxruntime: only for :class:`InferenceSession`, which runs such a model. ``model``: a
    path, serialized bytes or a ModelProto.
    """
    return _runtime_model(load_model(model), guard=guard, direct=direct, strings=True)


def _runtime_model(model: onnx.ModelProto, *, guard: bool, direct: bool,
                   strings: bool) -> onnx.ModelProto:
    """:func:`to_runtime_model`; ``strings=False`` for a model whose strings
    :func:`dml_onnx.graphs.load_model` checked."""
    register_schemas()
    check_structure(model, "the onnxruntime binding", strings=strings, schemas=False)
    elem_types = element_types(model)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    direct_inputs, direct_outputs = _direct_values(model.graph) if direct else (set(), set())
    prefix = unused_prefix(model.graph, "_dml_onnx")
    for index, node in enumerate(model.graph.node):
        if node.domain == DOMAIN:
            result.graph.node.extend(_rewrite(node, f"{prefix}_{index}", elem_types,
                                              guard and not direct,
                                              direct_inputs, direct_outputs))
        else:
            result.graph.node.append(node)
    for value in result.graph.output:
        if value.name in direct_outputs:  # an empty placeholder: no shape to disagree with
            value.type.tensor_type.ClearField("shape")
    imports = {o.domain: o for o in result.opset_import}
    if "" not in imports and "ai.onnx" not in imports:
        result.opset_import.append(helper.make_opsetid("", STANDARD_OPSET))
    if RUNTIME_DOMAIN not in imports:
        result.opset_import.append(helper.make_opsetid(RUNTIME_DOMAIN, 1))
    return result


def _direct_values(graph: onnx.GraphProto) -> tuple[set[str], set[str]]:
    """Graph inputs (not initializers), and graph outputs listed once that no node reads."""
    read: set[str] = set()

    def visit(g: onnx.GraphProto) -> None:
        for node in g.node:
            read.update(node.input)
            for sub in subgraphs(node):
                visit(sub)
    visit(graph)
    initializers = {t.name for t in graph.initializer}
    names = [o.name for o in graph.output]
    inputs = {i.name for i in graph.input} - initializers
    return inputs, {n for n in names if names.count(n) == 1 and n not in read | inputs}


def _rewrite(node: onnx.NodeProto, prefix: str, elem_types: dict[str, int], guard: bool,
             direct_inputs: set[str], direct_outputs: set[str]) -> list:
    definition = OPERATORS_BY_NAME.get(node.op_type)
    label = node_label(node)
    if definition is None:
        raise KernelError(node.op_type, label, "op type", node.op_type,
                          f"is not an operator of the {DOMAIN} domain "
                          f"(known: {', '.join(OPERATORS_BY_NAME)})")
    attributes = definition.check_node(node)
    inputs = [node.input[i] if i < len(node.input) else "" for i in range(len(definition.inputs))]
    outputs_present = [i < len(node.output) and bool(node.output[i])
                       for i in range(len(definition.outputs))]
    types = definition.input_element_types(node, elem_types)
    runtime_types = {p: (TensorProto.FLOAT if types.get(p, TensorProto.FLOAT) in _CAST_TO_FLOAT
                         else types.get(p, TensorProto.FLOAT)) for p in _type_params(definition)}
    # A cast type reaches the kernel uncast when the kernel takes it (FLOAT16_KERNELS) and all
    # its inputs are direct (they must agree), else as the runtime type.
    uncast = {p for p in types if types[p] == runtime_types[p] or (
        definition.name in FLOAT16_KERNELS and all(
            n in direct_inputs for q, n in zip(definition.inputs, inputs) if q.type == p and n))}

    nodes, kernel_inputs, feeds = [], [], []
    for i, (parameter, name) in enumerate(zip(definition.inputs, inputs)):
        runtime_type = runtime_types[parameter.type]
        direct = name in direct_inputs
        kernel_type = types[parameter.type] if parameter.type in uncast else runtime_type
        feeds.append([name, *(helper.tensor_dtype_to_np_dtype(t).name
                              for t in (types[parameter.type], kernel_type))]
                     if direct else None)
        if not name or direct:
            empty = numpy_helper.from_array(
                np.zeros(0, helper.tensor_dtype_to_np_dtype(runtime_type)))
            name = f"{prefix}_{'direct' if direct else 'absent'}_{i}"
            nodes.append(helper.make_node("Constant", [], [name], value=empty))
        elif types[parameter.type] != runtime_type:
            cast = f"{prefix}_in_{i}"
            nodes.append(helper.make_node("Cast", [name], [cast], to=runtime_type))
            name = cast
        kernel_inputs.append(name)

    fetches = [[node.output[k], helper.tensor_dtype_to_np_dtype(
        types.get(p.type, runtime_types[p.type])).name]
        if present and node.output[k] in direct_outputs else None
        for k, (p, present) in enumerate(zip(definition.outputs, outputs_present))]
    config = {"op": definition.name, "node": label, "attributes": attributes,
              "inputs": [bool(n) for n in inputs], "outputs": outputs_present}
    if any(feeds) or any(fetches):
        config.update(feeds=feeds, fetches=fetches)
    config_name = f"{prefix}_config"
    nodes.append(helper.make_node("Constant", [], [config_name], value=numpy_helper.from_array(
        np.frombuffer(json.dumps(config, allow_nan=True).encode(), np.uint8))))
    kernel_outputs, guards = [], []
    for k, (parameter, present) in enumerate(zip(definition.outputs, outputs_present)):
        raw, shape = f"{prefix}_out_{k}", f"{prefix}_shape_{k}"
        kernel_outputs += [raw, shape] if guard else [raw]
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
            kernel_outputs[-1] = target
        else:
            checked = raw
        if checked != target:
            guards.append(helper.make_node("Cast", [checked], [target], to=original))
    variant = _variant_name(definition, runtime_types, guard)
    nodes.append(helper.make_node(variant, [*kernel_inputs, config_name], kernel_outputs,
                                  name=node.name or None, domain=RUNTIME_DOMAIN))
    return nodes + guards


# ----------------------------------------------------------------------------- session
class InferenceSession:
    """``onnxruntime.InferenceSession`` for models with ``dml_onnx`` nodes.

    Takes a path, serialized bytes or a ModelProto and the constructor arguments of
    ``onnxruntime.InferenceSession``; ``run()`` has its signature. An invalid input of a
    ``dml_onnx`` node makes ``run()`` raise :class:`KernelError` (a ``ValueError``) naming the
    operator, node, field and value; the session keeps working. The given ``sess_options``
    gets the onnxruntime-extensions library registered, sequential execution, and
    ``session.intra_op.allow_spinning`` / ``session.inter_op.allow_spinning`` set to "0"
    unless already set (onnxruntime's idle workers would spin on the cores our kernels use);
    its ``intra_op_num_threads``, when set, also limits the threads of our kernels.
    Everything else is delegated to the wrapped onnxruntime session.

    The rewritten model reaches onnxruntime without its weights (see :mod:`dml_onnx.weights`):
    they are read once, into arrays the session owns (a file's never memory-mapped: after
    creation the session does not depend on the file), which onnxruntime takes as external
    initializers on options of our own, or, with the caller's options (external initializers
    added to them would outlive the session), inside the serialized model.
    """

    def __init__(self, path_or_bytes: str | os.PathLike | bytes | onnx.ModelProto,
                 sess_options: ort.SessionOptions | None = None,
                 providers: Sequence[str | tuple[str, dict]] | None = None,
                 provider_options: Sequence[dict] | None = None, **kwargs: Any):
        # the weights as arrays that onnxruntime takes from our own options, or, with the
        # caller's options (which would keep them after us), inside the serialized model
        model, weights = load_without_weights(path_or_bytes)
        model = _runtime_model(model, guard=False, direct=True,
                               strings=isinstance(path_or_bytes, onnx.ModelProto))
        if weights and sess_options is not None:
            serialized, weights = serialized_with_weights(model, weights), {}
        else:
            serialized = model.SerializeToString()
        options = sess_options or ort.SessionOptions()
        if sess_options is None:
            options.log_severity_level = 4  # a failed kernel is reported by run(), not logged
        _register_extensions_library(options)
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL  # kernels on the caller thread
        quiet_session_options(options)  # idle workers would take the cores our kernels use
        self._threads = options.intra_op_num_threads  # 0: every core
        self._weights = [ort.OrtValue.ortvalue_from_numpy(a) for a in weights.values()]
        if weights:  # onnxruntime reads them where they are: they live as long as we do
            options.add_external_initializers(list(weights), self._weights)
        self._session = ort.InferenceSession(
            serialized, options,
            providers=list(providers) if providers else ["CPUExecutionProvider"],
            provider_options=provider_options, **kwargs)
        self._output_names = [o.name for o in self._session.get_outputs()]
        self._run_options = ort.RunOptions()
        self._run_options.log_severity_level = 4  # a failed kernel is raised, not logged
        self._run = session_run(self._session)

    def run(self, output_names: Sequence[str] | None, input_feed: dict[str, Any],
            run_options: ort.RunOptions | None = None) -> list[Any]:
        state = _state
        state.error = None
        state.in_session += 1
        outer = state.feeds, state.fetched
        state.feeds, state.fetched = input_feed, {}
        names = output_names or self._output_names
        threads = thread_limit.set(self._threads)
        try:
            outputs = self._run(names, input_feed, run_options or self._run_options)
            fetched = state.fetched
        except Exception as exc:
            error = take_error()
            if error is None:
                raise
            raise error from error.__cause__ or exc
        finally:
            thread_limit.reset(threads)
            state.in_session -= 1
            state.feeds, state.fetched = outer
        error = take_error()
        if error is not None:
            raise error
        if fetched:
            outputs = [fetched.get(name, value) for name, value in zip(names, outputs)]
        return outputs

    def run_with_ort_values(self, output_names: Sequence[str] | None,
                            input_dict_ort_values: dict[str, ort.OrtValue],
                            run_options: ort.RunOptions | None = None) -> list[ort.OrtValue]:
        """:meth:`run` over CPU ``OrtValue`` tensors, outputs as ``OrtValue`` tensors."""
        feeds = {name: value.numpy() for name, value in input_dict_ort_values.items()}
        return [ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(output))
                for output in self.run(output_names, feeds, run_options)]

    def run_async(self, output_names: Sequence[str] | None, input_feed: dict[str, Any],
                  callback: Callable[[list[Any] | None, Any, str], None], user_data: Any,
                  run_options: ort.RunOptions | None = None) -> None:
        """:meth:`run` on one of :data:`ASYNC_THREADS` shared worker threads (calls beyond
        them wait in a queue), then ``callback(outputs, user_data, "")``, or
        ``callback(None, user_data, message)`` when the run fails."""
        def work() -> None:
            try:
                outputs = self.run(output_names, input_feed, run_options)
            except Exception as error:  # noqa: BLE001 - reported to the callback, as onnxruntime
                callback(None, user_data, str(error))
            else:
                callback(outputs, user_data, "")
        _async_queue().put(work)

    def _unsupported(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "dml_onnx.InferenceSession does not support I/O binding (io_binding, "
            "run_with_iobinding, run_with_ortvaluevector): its kernels read and write numpy "
            "arrays; use run(), run_with_ort_values() or run_async()")

    io_binding = run_with_iobinding = run_with_ortvaluevector = _unsupported

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


ASYNC_THREADS = 4
"""Worker threads of ``run_async``, shared by every session of the process: a run takes the
cores by itself (its kernels and onnxruntime's use all of them), so more would only queue on
the interpreter lock, and a thread per call ran out of threads (2,000 calls: 1,345 threads)."""
_async: tuple[int, queue.SimpleQueue] | None = None  # with the process that started it
_async_lock = threading.Lock()


def _async_queue() -> queue.SimpleQueue:
    """The queue of ``run_async`` work, served by :data:`ASYNC_THREADS` daemon threads (a
    forked child starts its own)."""
    global _async
    with _async_lock:
        if _async is None or _async[0] != os.getpid():
            tasks: queue.SimpleQueue = queue.SimpleQueue()

            def serve() -> None:
                while True:
                    task = tasks.get()
                    try:
                        task()
                    except Exception:  # a failing callback stops neither this thread nor others
                        _logger.exception("dml_onnx.InferenceSession.run_async: the callback "
                                          "raised")

            for k in range(ASYNC_THREADS):
                threading.Thread(target=serve, name=f"dml_onnx.run_async.{k}",
                                 daemon=True).start()
            _async = os.getpid(), tasks
        return _async[1]


_REGISTERED_KEY = "dml_onnx.extensions_library_registered"
"""Where onnxruntime reads the external data of a model given as bytes: the folder of the
model file whose weights the serialized model refers to."""
_NO_SPINNING = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")
"""Session options set to "0" unless the caller set them: onnxruntime's idle worker threads
then sleep instead of spinning on the cores a Python kernel right after them needs."""


def quiet_session_options(options: ort.SessionOptions | None = None) -> ort.SessionOptions:
    """``options`` (or new ones) for your other, plain onnxruntime sessions in a process that
    runs ``dml_onnx`` kernels: their idle worker threads sleep instead of spinning after each
    run (``session.intra_op.allow_spinning`` and ``session.inter_op.allow_spinning`` "0",
    unless already set), so that a kernel called right after them gets the cores. On the
    16-core server a RoiAlign1 call that takes 10 ms alone took 38 ms right after a plain
    session with onnxruntime's default, 12.5 ms with these options."""
    options = options or ort.SessionOptions()
    for key in _NO_SPINNING:
        if _config_entry(options, key) is None:
            options.add_session_config_entry(key, "0")
    return options


def _config_entry(options: ort.SessionOptions, key: str) -> str | None:
    """The session config entry ``key`` of ``options``, or ``None`` where it is not set."""
    try:
        return options.get_session_config_entry(key)
    except RuntimeError:  # not set
        return None


def _register_extensions_library(options: ort.SessionOptions) -> None:
    """Register onnxruntime-extensions once per options object (twice fails the session)."""
    if _config_entry(options, _REGISTERED_KEY) is None:
        options.register_custom_ops_library(get_library_path())
        options.add_session_config_entry(_REGISTERED_KEY, "1")


def take_error() -> BaseException | None:
    """The error of the first kernel that failed on this thread since the last call, if any:
    a :class:`KernelError`, or the ``KeyboardInterrupt`` or ``SystemExit`` that stopped it."""
    error, _state.error = _state.error, None
    return error


register_runtime_ops()
