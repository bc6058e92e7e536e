"""The PyOps and the invocation hook: declare each operator's variants to
onnxruntime-extensions and run their kernels on numpy arrays.

A PyOp is one operator at one concrete element type per type constraint (no float16: that is
computed in float32), guarded (it returns each output's shape too) or not. Its inputs are the
node's inputs, then the node's config (UTF-8 JSON as uint8: op, node label, attributes,
present inputs and outputs, direct feeds and fetches; :mod:`dml_onnx.runtime.rewrite` writes
it). The hook returns ``(id, shape, array, ...)`` and never lets an exception escape: it keeps
the first error for the calling thread (:func:`take_error`).

Process-global state, all of it here:

- the hook itself: onnxruntime-extensions has one hook for every PyOp of the process
  (:func:`dml_onnx.runtime.private_api.install_hook`); ours hands the others' PyOps back to
  the extension's own hook. :func:`register_runtime_ops` installs it once, when this module
  is imported, so that the PyOps are declared before any session options register the
  extension library;
- ``_VARIANTS_BY_ID`` (PyOp id -> variant) and ``_registration_lock``, which keeps two threads
  from declaring the variants twice;
- ``call_state``, thread-local: the calls of one run happen on the thread that called ``run()``
  (sequential execution), which is how the hook gets the caller's feeds, hands back direct
  outputs and reports a failed kernel to that run alone.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from dml_onnx import calls
from dml_onnx._kernels import KernelError
from dml_onnx._kernels._threads import workers
from dml_onnx.builders import make_model
from dml_onnx.definition import RUNTIME_DOMAIN, OpDefinition
from dml_onnx.ops import OPERATORS, OPERATORS_BY_NAME
from dml_onnx.runtime.private_api import (
    PyCustomOpDef,
    declare_pyop,
    extension_hook,
    install_hook,
)

_logger = logging.getLogger("dml_onnx")

# ONNX element type -> (name in op types, PyOp type code, numpy dtype) of the types PyOps take.
_PYOP_TYPES: dict[int, tuple[str, int, type[np.generic]]] = {
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
CAST_TO_FLOAT = {TensorProto.FLOAT16}
_CAST_BY_ONNXRUNTIME = 1 << 11  # elements: larger float16 conversions go through onnxruntime
FLOAT16_CONVERTING = frozenset({"LpPooling", "RoiAlign1", "RoiPooling"})
"""Kernels that take direct float16 inputs as they are (in ``FLOAT16_KERNELS``) and convert
them to float32 over the threads (in their channels-last copy, by
:func:`dml_onnx._kernels._threads.converted`, or as their compiled loops read them: LpPooling), from
:data:`FLOAT16_THREADS` threads on."""
FLOAT16_THREADS = 8
"""With fewer threads, onnxruntime's one-thread vectorised ``Cast`` converts float16 to
float32 faster than :data:`FLOAT16_CONVERTING`'s kernels do (measured: RoiAlign1 at 16 cores
4.2-4.4 as it is against 7.2-7.6 ms with the Cast). LpPooling p=2 at one core of the 2-core
machine takes 7.2-7.4 ms as it is against 7.1-8.1 with the Cast. Fold, whose loop reads
float16 bits as it sums, takes them as it is at any thread count (2.5-2.7 ms against 4.4-4.9
with the Cast at one core), and so does RoiAlignGrad, whose dX by average reads dY's bits and
writes dX's (float16 dX on the 2-core machine: 8.2-9.3 ms at one core against 16-19 ms in
float32), and whose other kinds convert as fast as the Cast (0.17 ns a value on one thread)."""
_HALF, _FLOAT = np.dtype(np.float16), np.dtype(np.float32)


@dataclass(frozen=True)
class Variant:
    """One PyOp: an operator at one concrete element type per type constraint; a guarded one
    returns each output's shape too (for the guard ``Reshape``), an unguarded one does not."""

    definition: OpDefinition
    output_dtypes: tuple[np.dtype, ...]
    guarded: bool


_VARIANTS_BY_ID: dict[int, Variant] = {}
_registration_lock = threading.Lock()


class _ThreadState(threading.local):
    """What one thread's runs share with the hook (class attributes: each thread's start)."""

    error: BaseException | None = None  # of the first failed kernel, until taken
    in_session = 0  # depth of InferenceSession.run calls
    feeds: dict[str, Any] | None = None  # the feed of the current InferenceSession.run
    fetched: dict[str, np.ndarray] | None = None  # its direct outputs, by name


call_state = _ThreadState()


def variant_name(definition: OpDefinition, types: dict[str, int], guarded: bool) -> str:
    return "_".join([definition.name, *(_PYOP_TYPES[types[name]][0] for name in types),
                     *([] if guarded else ["unguarded"])])


def type_params(definition: OpDefinition) -> list[str]:
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
            params = type_params(definition)
            choices = [sorted({_TYPE_STRINGS[t] for t in definition.type_constraints[p]}
                              - CAST_TO_FLOAT) for p in params]
            for combo, guarded in itertools.product(itertools.product(*choices), (True, False)):
                types = dict(zip(params, combo))
                op_type = variant_name(definition, types, guarded)
                outputs = []
                for parameter in definition.outputs:
                    outputs += [_PYOP_TYPES[types[parameter.type]][1],
                                *([PyCustomOpDef.dt_int64] if guarded else [])]
                op_id = declare_pyop(  # the config comes last, as uint8 (UTF-8 JSON)
                    f"{RUNTIME_DOMAIN}::{op_type}",
                    [*(_PYOP_TYPES[types[p.type]][1] for p in definition.inputs),
                     PyCustomOpDef.dt_uint8], outputs, {})
                _VARIANTS_BY_ID[op_id] = Variant(
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
    rounded_inputs: tuple[int, ...]
    rounded_outputs: tuple[int, ...]
    half_feeds: bool  # a direct input the kernel gets as float16
    """Inputs and outputs the node has as float16 and the PyOp takes and returns as float32:
    rounded to float16's values here, since onnxruntime drops a Cast to float16 that a Cast
    back to float32 follows (it casts around its CPU kernels that take no float16, such as
    Add's): a float16 Add before a node would reach its kernel unrounded."""


@functools.lru_cache(maxsize=1024)
def parse_config(config: bytes) -> _Call:
    data = json.loads(config.decode())  # UnicodeDecodeError: a crafted node's, reported
    definition = OPERATORS_BY_NAME[data["op"]]
    feeds = data.get("feeds") or [None] * len(definition.inputs)
    fetches = data.get("fetches") or [None] * len(definition.outputs)
    direct = tuple((i, f[0], np.dtype(f[1]), np.dtype(f[2])) for i, f in enumerate(feeds) if f)
    return _Call(definition, data["node"],
                 calls.bind_kernel(definition, data["attributes"], data["node"], data["outputs"]),
                 tuple(i for i, present in enumerate(data["inputs"]) if not present), direct,
                 tuple(f and (f[0], np.dtype(f[1])) for f in fetches),
                 tuple(data.get("rounded_inputs", ())), tuple(data.get("rounded_outputs", ())),
                 any(kernel_dtype == _HALF for *_, kernel_dtype in direct))


def _invoke(k_id: int, feed: list[np.ndarray], attributes: dict[str, str]) -> tuple:
    """The hook: ``feed`` is the node's inputs, then its config (no string attribute: the
    extension would convert one to ``str`` in C++, and a value that is not UTF-8 would end
    the process there)."""
    variant = _VARIANTS_BY_ID.get(k_id)
    if variant is None:  # somebody else's PyOp: the extension's own hook
        return extension_hook(k_id, feed, attributes)
    if call_state.in_session and call_state.error is not None:
        return _placeholders(k_id, variant)  # a kernel of this run failed: report that one
    config = feed[-1].tobytes() if feed else b""
    try:
        return (k_id, *run_call(parse_config(config), feed[:-1], variant))
    except BaseException as exc:  # noqa: BLE001 - anything escaping here ends the process
        call_state.error = kernel_error(exc, variant, config)
        if not call_state.in_session:
            _logger.error("%s", call_state.error if isinstance(exc, Exception) else
                          f"{variant.definition.name} '{_node_of(config)}': kernel stopped "
                          f"by {type(exc).__name__}")
        return _placeholders(k_id, variant)


def kernel_error(exc: BaseException, variant: Variant, config: bytes) -> BaseException:
    """What ``run()`` raises for an exception of a kernel: a :class:`KernelError` as it is,
    an interrupt or exit (not an ``Exception``) as it is, anything else as a
    :class:`KernelError` naming the exception."""
    if isinstance(exc, KernelError) or not isinstance(exc, Exception):
        return exc
    error = KernelError(variant.definition.name, _node_of(config), "kernel",
                        type(exc).__name__, f"raised: {exc}")
    error.__cause__ = exc
    return error


def _placeholders(k_id: int, variant: Variant) -> tuple:
    """The hook's result for a failed kernel: empty outputs, which a guard ``Reshape``
    refuses."""
    result: list[Any] = [k_id]
    for dtype in variant.output_dtypes:
        result += [(0,), np.zeros(0, dtype)]
        if variant.guarded:
            result += [(1,), np.ones(1, np.int64)]
    return tuple(result)


def run_call(call: _Call, feed: Sequence[np.ndarray | None], variant: Variant) -> list[Any]:
    """The kernel's outputs as the hook returns them: shape and array for each output,
    followed, for a guarded variant, by its shape as a tensor (what the guard Reshape reads)."""
    result: list[Any] = []
    outputs = _computed(call, list(feed), call_state.feeds, variant)
    for array, dtype, fetch in zip(outputs, variant.output_dtypes, call.fetches):
        if array is not None and fetch is not None:
            fetched = call_state.fetched
            if fetched is None:
                raise RuntimeError(f"output {fetch[0]!r} leaves the kernel only through "
                                   "dml_onnx.InferenceSession.run")
            fetched[fetch[0]] = _convert(_contiguous(array, array.dtype), fetch[1])
            array = None
        array = _EMPTY[dtype] if array is None else _contiguous(array, dtype)
        result += (array.shape, array)
        if variant.guarded:
            result += ((array.ndim,), _shape_tensor(array.shape))
    return result


def run_fetching(call: _Call, given: dict[str, np.ndarray], variant: Variant
                 ) -> dict[str, np.ndarray]:
    """Split execution's kernel call, every present input read from ``given`` by name and
    every output fetched: its outputs by name, each contiguous and of its node's type."""
    outputs = _computed(call, [None] * len(variant.definition.inputs), given, variant)
    return {fetch[0]: array if array.dtype == fetch[1] and array.flags.c_contiguous else
            _convert(np.ascontiguousarray(array), fetch[1])
            for array, fetch in zip(outputs, call.fetches) if array is not None and fetch}


def _computed(call: _Call, inputs: list[np.ndarray | None], given: dict[str, Any] | None,
              variant: Variant) -> list[np.ndarray | None]:
    """The kernel's outputs, ``inputs`` (the PyOp's feed) completed by the direct feeds read
    from ``given`` and rounded as :class:`_Call` says."""
    for i in call.absent:
        inputs[i] = None
    if call.feeds:
        wide = (call.half_feeds and variant.definition.name in FLOAT16_CONVERTING
                and workers() < FLOAT16_THREADS)  # few threads: the Cast is faster
        for i, name, dtype, kernel_dtype in call.feeds:
            if wide and kernel_dtype == _HALF:
                kernel_dtype = _FLOAT
            inputs[i] = _convert(_feed(given, name, dtype), kernel_dtype)
    for k in call.rounded_inputs:
        inputs[k] = _to_half_values(inputs[k])
    outputs = list(call.run(inputs))
    for k in call.rounded_outputs:
        outputs[k] = _to_half_values(outputs[k])
    return outputs


def _to_half_values(array: np.ndarray | None) -> np.ndarray | None:
    """float32 ``array`` rounded to float16's values (still float32)."""
    return None if array is None else _convert(_convert(np.asarray(array), _HALF), _FLOAT)


_EMPTY: dict[np.dtype, np.ndarray] = {np.dtype(t): np.zeros(0, t)
                                      for _, _, t in _PYOP_TYPES.values()}


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
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=elem[target])],
                       [helper.make_tensor_value_info("x", elem[source], ["n"])],
                       [helper.make_tensor_value_info("y", elem[target], ["n"])], name="cast")
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


def take_error() -> BaseException | None:
    """The error of the first kernel that failed on this thread since the last call, if any:
    a :class:`KernelError`, or the ``KeyboardInterrupt`` or ``SystemExit`` that stopped it."""
    error, call_state.error = call_state.error, None
    return error


register_runtime_ops()
