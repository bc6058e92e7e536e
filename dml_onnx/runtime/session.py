"""The session: :class:`InferenceSession` (``onnxruntime.InferenceSession`` for models with
``dml_onnx`` nodes), the worker threads of its ``run_async``, and the session options every
process that runs ``dml_onnx`` kernels wants (:func:`quiet_session_options`)."""

from __future__ import annotations

import ctypes
import hashlib
import logging
import math
import os
import queue
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument

from dml_onnx._kernels import KernelError
from dml_onnx._kernels._threads import thread_limit
from dml_onnx.definition import DOMAIN
from dml_onnx.graphs import inferred_graph, subgraphs, walk_nodes
from dml_onnx.runtime.hook import call_state, take_error
from dml_onnx.runtime.private_api import get_library_path, session_run
from dml_onnx.runtime.rewrite import checked_types, runtime_model
from dml_onnx.runtime.segments import HostNode, Kernel, Segment, SplitRun, node_arg, split
from dml_onnx.runtime.weights import in_memory_files, read_without_weights

_logger = logging.getLogger("dml_onnx")


class InferenceSession(ort.InferenceSession):
    """``onnxruntime.InferenceSession`` for models with ``dml_onnx`` nodes.

    It is an ``onnxruntime.InferenceSession`` (``isinstance`` says so) without being created
    as one: code that takes either a model or a session dispatches on that check, and treated
    this one as a model. Every public method is onnxruntime's API: :meth:`run` and its kin
    are this class's, the rest read the (first) onnxruntime session, as attributes do.

    Takes a path, serialized bytes or a ModelProto (or a ``bytearray``: onnxruntime takes
    neither) and the constructor arguments of ``onnxruntime.InferenceSession``; a path or
    bytes that are no model fail with onnxruntime's error. ``run()`` has its signature and
    raises onnxruntime's errors for a bad feed or output name. An invalid input of a
    ``dml_onnx`` node makes ``run()`` raise :class:`KernelError` (a ``ValueError``) naming the
    operator, node, field and value; the session keeps working. Its
    ``intra_op_num_threads``, when set, also limits the threads of our kernels.

    Where a ``dml_onnx`` node reads or writes a value between standard nodes, the model runs
    split (:mod:`~dml_onnx.runtime.segments`): onnxruntime sessions over the standard nodes,
    the kernels between them, ``sess_options`` given ``session.force_spinning_stop`` "1"
    unless set (:func:`quiet_session_options`). Otherwise it runs as one onnxruntime session
    with a PyOp per node; ``sess_options`` then gets the onnxruntime-extensions library
    registered, sequential execution, and ``session.intra_op.allow_spinning`` /
    ``session.inter_op.allow_spinning`` "0" unless set (the kernels run inside onnxruntime's
    run: its idle workers would spin on their cores). Everything else is delegated to the
    (first) onnxruntime session.

    The rewritten model reaches onnxruntime without its weights (see
    :mod:`dml_onnx.runtime.weights`): they are read once, into arrays the session owns (a
    file's never memory-mapped: after creation the session does not depend on the file),
    which onnxruntime takes as external initializers on options of our own, or, with the
    caller's options (external initializers added to them would outlive the session and
    replace a later model's initializers of the same names), as external-data files in memory
    under random names, which onnxruntime copies while it creates the session
    (:func:`~dml_onnx.runtime.weights.in_memory_files`). The checks and the split run while
    the weights are read, and are kept for the next session of the same graph
    (:data:`PREPARED_MODELS`).
    """

    def __init__(self, path_or_bytes: str | os.PathLike | bytes | onnx.ModelProto,
                 sess_options: ort.SessionOptions | None = None,
                 providers: Sequence[str | tuple[str, dict]] | None = None,
                 provider_options: Sequence[dict] | None = None, **kwargs: Any):
        # the weights as arrays that onnxruntime takes from our own options, or, with the
        # caller's options (which would keep them after us), copies from files in memory
        read: list[bool] = []  # a model was read: what failed before is onnxruntime's to say

        def prepare(light: onnx.ModelProto) -> _Prepared:
            read.append(True)
            return _prepared(light, strings=isinstance(path_or_bytes, onnx.ModelProto),
                             split_it=sess_options is None  # one writes one optimized model
                             or not sess_options.optimized_model_filepath)
        try:
            model, weights, (elem_types, ranks, steps) = read_without_weights(
                path_or_bytes, prepare, absent_left=sess_options is not None)  # the options
            # may hold those values
        except (OSError, ValueError, TypeError) as error:
            if not read:
                _refuse_as_onnxruntime(path_or_bytes, error)
            raise
        arguments = dict(providers=list(providers) if providers else ["CPUExecutionProvider"],
                         provider_options=provider_options, **kwargs)
        self._threads = 0 if sess_options is None else sess_options.intra_op_num_threads  # 0: all
        self._split: SplitRun | None = None
        self._outputs: list[Any] | None = None  # get_outputs(), described on its first call
        kernels = [node for node in model.graph.node if node.domain == DOMAIN]
        self._model = model if kernels else None  # weights stubbed: for get_outputs()
        if steps is not None:
            if sess_options is not None:
                quiet_session_options(sess_options)
            self._split = SplitRun(model, steps, weights, sess_options, quiet_session_options,
                                   **arguments)
            self._session, self._weights = self._split.first, self._split.weights
            self._required = [i.name for i in self._split.inputs]  # tensors: all required
            self._split_outputs = {o.name for o in self._split.outputs}
            self._kernel_inputs: set[str] = set()  # the split run's feed check covers them
            return
        kernel_inputs = {name for node in kernels for name in node.input}
        model = runtime_model(model, mode="direct", strings=False, elem_types=elem_types)
        options = sess_options or ort.SessionOptions()
        if weights and sess_options is not None:  # onnxruntime copies them: none kept here
            names, buffers = in_memory_files(model, weights)
            options.add_external_initializers_from_files_in_memory(
                names, buffers, [b.size for b in buffers])
            weights = {}
        serialized = model.SerializeToString()
        if sess_options is None:
            options.log_severity_level = 4  # a failed kernel is reported by run(), not logged
        _register_extensions_library(options)
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL  # kernels on the caller thread
        _no_spinning(options)  # idle workers would take the cores our kernels use
        self._weights = [ort.OrtValue.ortvalue_from_numpy(a) for a in weights.values()]
        if weights:  # onnxruntime reads them where they are: they live as long as we do
            options.add_external_initializers(list(weights), self._weights)
        self._session = ort.InferenceSession(serialized, options, **arguments)
        self._output_names = [o.name for o in self._session.get_outputs()]
        self._required = [i.name for i in self._session.get_inputs()  # as onnxruntime's run
                          if not i.type.startswith("optional")]
        self._kernel_inputs = kernel_inputs & set(self._required)  # graph inputs they read
        self._run_options = ort.RunOptions()
        self._run_options.log_severity_level = 4  # a failed kernel is raised, not logged
        self._run = session_run(self._session)

    def run(self, output_names: Sequence[str] | None, input_feed: dict[str, Any],
            run_options: ort.RunOptions | None = None) -> list[Any]:
        keys = input_feed.keys  # as onnxruntime's run: a feed without keys() fails
        missing = [name for name in self._required if name not in input_feed]
        if missing:  # before anything runs, as onnxruntime's run (a kernel's direct input
            # would fail inside the run)
            raise ValueError(f"Required inputs ({missing}) are missing from input feed "
                             f"({list(keys())}).")
        if output_names and not isinstance(output_names, list | tuple | str):
            output_names = list(output_names)  # a generator is read once (and a set in its
            # order, as onnxruntime reads them)
        if not all(map(_plain, input_feed.values())):
            input_feed = self._unusual_feed(output_names, input_feed, run_options)
        if self._split is not None:
            names = output_names or [o.name for o in self._split.outputs]
            if isinstance(names, str):  # onnxruntime's run takes a list of names alone
                raise TypeError(f"run(): output_names is a str ({names!r}), not a list of str")
            if not self._split_outputs.issuperset(names) or \
                    not all(isinstance(name, str) for name in input_feed):
                self._unusual_feed(names, input_feed, run_options)  # raises onnxruntime's error
            threads = thread_limit.set(self._threads)
            try:
                return self._split.run(names, input_feed, run_options)
            finally:
                thread_limit.reset(threads)
        state = call_state
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

    def _unusual_feed(self, output_names: Sequence[str] | None, input_feed: dict[str, Any],
                      run_options: ort.RunOptions | None) -> dict[str, Any]:
        """``input_feed`` as the run takes it where not every value is a numeric array in the
        machine's byte order (or, in split execution, an output name is unknown), or the
        error onnxruntime's run raises for it: an array in the other byte order becomes one in
        this one (onnxruntime reads its bytes as they are, and the kernels as numpy does:
        neither result was the array's); a ``None`` is a value not given (onnxruntime fails
        the node that reads it with ``Fail``). In split execution, where the segments take
        the feed as ``OrtValue`` tensors made of arrays, onnxruntime's own run of the first
        segment (which declares every graph input) converts and checks the caller's feed
        first, as its run does before it looks at the output names."""
        feed = {name: value.astype(value.dtype.newbyteorder("="))
                if isinstance(value, np.ndarray) and not value.dtype.isnative else value
                for name, value in input_feed.items()}
        absent = [name for name, value in feed.items() if value is None]
        if self._split is None:
            for name in absent:
                if name in self._kernel_inputs:  # onnxruntime would fail its node
                    raise Fail(f"[ONNXRuntimeError] : 1 : FAIL : Missing Input: {name}")
            return feed
        segment = self._split.steps[0]
        assert isinstance(segment, tuple)  # split() puts a segment first
        first_outputs = list(segment[0].outputs)
        unknown = [name for name in output_names or () if name not in self._split_outputs]
        types = {arg.name: _numpy_type(arg.type) for arg in self._split.inputs}
        odd = [name for name, value in feed.items() if not isinstance(name, str) or not (
            isinstance(value, ort.OrtValue | list)  # a subclass (np.memmap) is an array:
            or isinstance(value, np.ndarray) and value.dtype in _PLAIN_TYPES)]  # no check
        for name, value in feed.items():
            if isinstance(value, list):  # as onnxruntime reads a list, where numpy can
                try:
                    feed[name] = np.asarray(value, types.get(name))
                except (ValueError, TypeError):  # a ragged list: onnxruntime's error
                    odd.append(name)
        if unknown or odd:  # its conversion, its input checks, then its output names
            self._split.first.run([name for name in unknown if name not in first_outputs]
                                  or first_outputs, feed, run_options)
        if unknown:  # the values only the first segment has
            raise InvalidArgument(
                f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Invalid output name:{unknown[0]}")
        for name in absent:  # the first segment's nodes took it: does a later step read it?
            if any(name in (step[0].inputs if isinstance(step, tuple) else step.node.input)
                   for step in self._split.steps[1:]):
                raise Fail(f"[ONNXRuntimeError] : 1 : FAIL : Missing Input: {name}")
            declared = next(arg for arg in self._split.inputs if arg.name == name)
            feed[name] = np.zeros([d if isinstance(d, int) else 0 for d in declared.shape],
                                  _numpy_type(declared.type))  # nothing reads it
        return feed

    def run_with_ort_values(self, output_names: Sequence[str] | None,
                            input_dict_ort_values: dict[str, ort.OrtValue],
                            run_options: ort.RunOptions | None = None) -> list[ort.OrtValue]:
        """:meth:`run` over CPU ``OrtValue`` tensors, outputs as ``OrtValue`` tensors."""
        feeds = {name: value.numpy() for name, value in input_dict_ort_values.items()}
        for name in feeds:
            if not isinstance(name, str):  # onnxruntime's error (run() raises TypeError)
                raise RuntimeError(f"Unable to cast Python instance of type {type(name)} to "
                                   "C++ type 'str'")
        return [_ort_value(output) for output in self.run(output_names, feeds, run_options)]

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

    def io_binding(self) -> IOBinding:
        """onnxruntime's I/O binding on the CPU (:class:`IOBinding`), over :meth:`run` in
        every mode: the onnxruntime session's own binding is not exact even where the model
        runs as one session (its PyOps are unguarded: after a failed kernel onnxruntime's
        binding kept the empty placeholder outputs, and wrote the next run into them), and
        split execution has no one session to bind to."""
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding,
                           run_options: ort.RunOptions | None = None) -> None:
        """Run with the inputs and outputs bound to ``iobinding`` (of :meth:`io_binding`).
        A binding of another session raises what the installed onnxruntime raises: a
        ``ValueError`` where its bindings know their session (its Python layer checks), else
        the ``RuntimeError`` of its run (onnxruntime 1.28)."""
        if not isinstance(iobinding, IOBinding) or iobinding._session is not self:
            checks = hasattr(self._session.io_binding(), "_session")
            if not isinstance(iobinding, IOBinding):  # what is no binding at all fails on
                getattr(iobinding, "_session" if checks else "_iobinding")  # what it lacks
            raise (ValueError if checks else RuntimeError)(
                "IOBinding must be used with the session that created it.")
        iobinding._run(run_options)

    def run_with_ortvaluevector(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "dml_onnx.InferenceSession does not support run_with_ortvaluevector: its kernels "
            "read and write numpy arrays; use run(), run_with_ort_values(), run_async() or "
            "run_with_iobinding()")

    def get_inputs(self) -> list[Any]:
        return self._session.get_inputs()  # the first segment declares every graph input

    def get_outputs(self) -> list[Any]:
        """The graph outputs as plain onnxruntime describes the model's (its shape inference
        reaches through a ``dml_onnx`` node's standard form): onnxruntime's description where
        a session of ours makes the output from the graph inputs alone, else the type and
        shape onnx's shape inference gives with the domain's schemas (onnxruntime infers no
        shape from a kernel's output), worked out on the first call."""
        if self._outputs is None:
            self._outputs = self._described_outputs()
        return self._outputs

    def _described_outputs(self) -> list[Any]:
        if self._split is None:
            described = list(self._session.get_outputs())
        else:
            made = {arg.name: arg for (segment, session) in (
                step for step in self._split.steps if isinstance(step, tuple))
                for arg in session.get_outputs() if arg.name in self._split_outputs}
            described = [made.get(arg.name, arg) for arg in self._split.outputs]
        if self._model is None:
            return described
        graph = self._model.graph
        after: set[str] = set()  # the values a dml_onnx node's output reaches
        grown = True
        while grown:  # to a fixed point: the nodes may be out of order
            before = len(after)
            for node in graph.node:
                if node.domain == DOMAIN or after.intersection(
                        name for inner in (node, *(n for g in subgraphs(node)
                                                   for n in walk_nodes(g)))
                        for name in inner.input):
                    after.update(name for name in node.output if name)
            grown = len(after) > before
        if not after.intersection(arg.name for arg in described):
            return described
        inferred = {value.name: value for value in inferred_graph(self._model).output
                    if value.type.HasField("tensor_type")}
        return [node_arg(inferred[arg.name]) if arg.name in after and arg.name in inferred
                else arg for arg in described]

    def get_overridable_initializers(self) -> list[Any]:
        return [] if self._split else self._session.get_overridable_initializers()

    def end_profiling(self) -> str:
        return self._split.end_profiling() if self._split else self._session.end_profiling()

    def set_providers(self, providers: Sequence[str | tuple[str, dict]] | None = None,
                      provider_options: Sequence[dict] | None = None) -> None:
        """The (first) onnxruntime session's: onnxruntime's own would recreate a session of
        the model on this object, which nothing here runs."""
        self._session.set_providers(providers, provider_options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


_PLAIN_TYPES = frozenset(np.dtype(code) for code in "?bhilqBHILQefd")
"""The numeric element types in the machine's byte order."""


def _plain(value: Any) -> bool:
    """Whether a feed is a numeric array in the machine's byte order (as nearly all are;
    a subclass of ``np.ndarray`` takes the longer way)."""
    return type(value) is np.ndarray and value.dtype in _PLAIN_TYPES


def _numpy_type(type_name: str) -> np.dtype:
    """The numpy type of a ``NodeArg`` type such as ``tensor(float)``."""
    name = type_name.removeprefix("tensor(").removesuffix(")").upper()
    return helper.tensor_dtype_to_np_dtype(getattr(onnx.TensorProto, name))


def _refuse_as_onnxruntime(source: Any, error: Exception) -> None:
    """Raise, from ``error``, what plain onnxruntime raises for a model ``source`` (a path or
    bytes) that could not be read (a missing file, bytes that are no model), so that the
    session is refused with onnxruntime's error type; return where onnxruntime takes it, or
    where it would wait on the path for ever (a FIFO) or read it without end (a device)."""
    if isinstance(source, onnx.ModelProto):  # ours alone: onnxruntime takes no ModelProto
        return
    if isinstance(source, bytearray | memoryview):  # ours too
        source = bytes(source)
    elif isinstance(source, str | os.PathLike):
        try:
            mode = os.stat(source).st_mode
        except FileNotFoundError:
            mode = stat.S_IFREG
        except (OSError, ValueError):
            return
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            return
    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(source, options, providers=["CPUExecutionProvider"],
                             enable_fallback=0)
    except Exception as refusal:  # noqa: BLE001 - whatever onnxruntime raises is the answer
        raise refusal from error


def _ort_value(output: Any) -> ort.OrtValue:
    """``output`` as an ``OrtValue`` whose C value holds the array: ``OrtValue.numpy()``
    returns a view that keeps the C value, not the Python wrapper, and
    ``ortvalue_from_numpy`` leaves the array to the wrapper, so the view of a dropped wrapper
    read freed memory, or a kept block (:mod:`dml_onnx._kernels._buffers`) that the next run wrote.
    DLPack hands the array itself to the C value (no copy); strings, which DLPack does not
    carry, ``ortvalue_from_numpy`` copies into the C value."""
    array = np.asarray(output, order="C")  # np.ascontiguousarray makes a 0-d array 1-d
    if array.dtype.kind in "OSU":
        return ort.OrtValue.ortvalue_from_numpy(array)
    return ort.OrtValue.from_dlpack(array)


class IOBinding:
    """``onnxruntime.IOBinding`` on the CPU over :meth:`InferenceSession.run` (a kernel's
    graph inputs and outputs never pass through onnxruntime, and split execution has no one
    session to bind). Inputs are read and outputs given as onnxruntime's binding gives them:
    a bound C-contiguous array is read when the session runs, another is copied when it is
    bound; an output bound to an ``OrtValue`` or a buffer is written there (its type and
    shape must be the output's), and one bound by name is bound to the ``OrtValue`` its
    first run gives. A failed run raises ``RuntimeError``, as onnxruntime's
    ``run_with_iobinding`` does (a kernel's :class:`KernelError` as it is)."""

    def __init__(self, session: InferenceSession):
        self._session = session
        self._names = {value.name for value in session.get_inputs()}
        self._inputs: dict[str, np.ndarray | ort.OrtValue] = {}
        self._outputs: dict[str, np.ndarray | ort.OrtValue | None] = {}  # None: allocated
        self._values: list[ort.OrtValue] = []  # the last run's outputs

    def _input(self, name: str, value: np.ndarray | ort.OrtValue) -> None:
        if name not in self._names:
            raise RuntimeError(f"Failed to find NodeArg with name: {name} in the def list")
        self._inputs[name] = value

    def bind_cpu_input(self, name: str, arr_on_cpu: np.ndarray) -> None:
        if not isinstance(arr_on_cpu, np.ndarray):
            raise RuntimeError("Unable to create OrtValue from the given python object")
        self._input(name, np.asarray(arr_on_cpu, order="C"))  # a 0-d array stays 0-d

    def bind_input(self, name: str, device_type: str, device_id: int, element_type: Any,
                   shape: Sequence[int], buffer_ptr: int) -> None:
        self._input(name, _buffer(device_type, device_id, element_type, shape, buffer_ptr))

    def bind_ortvalue_input(self, name: str, ortvalue: ort.OrtValue) -> None:
        self._input(name, _checked_ort_value(ortvalue))

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0,
                    element_type: Any = None, shape: Sequence[int] | None = None,
                    buffer_ptr: int | None = None) -> None:
        if buffer_ptr is None:
            ort.OrtDevice.make(device_type, device_id)  # refuses an unknown device type
            self._outputs[name] = None
        elif element_type is None or shape is None:
            raise ValueError("`element_type` and `shape` are to be provided if pre-allocated "
                             "memory is provided")
        else:
            self._outputs[name] = _buffer(device_type, device_id, element_type, shape,
                                          buffer_ptr)

    def bind_ortvalue_output(self, name: str, ortvalue: ort.OrtValue) -> None:
        self._outputs[name] = _checked_ort_value(ortvalue)

    def synchronize_inputs(self) -> None:
        """Nothing to wait for: the inputs are on the CPU."""

    def synchronize_outputs(self) -> None:
        """Nothing to wait for: the outputs are on the CPU."""

    def get_outputs(self) -> list[ort.OrtValue]:
        return list(self._values)

    def get_outputs_as_ortvaluevector(self) -> Any:
        """The last run's outputs as onnxruntime's ``OrtValueVector``."""
        vector = ort.capi._pybind_state.OrtValueVector()
        for value in self._values:
            vector.push_back(value._ortvalue)
        return vector

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        return [value.numpy().copy() for value in self._values]

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._values = []

    def _run(self, run_options: ort.RunOptions | None) -> None:
        """:meth:`InferenceSession.run` of the bound inputs, its outputs written where they
        are bound; one bound by name is bound to its ``OrtValue`` afterwards, as onnxruntime
        keeps it (the next run writes into it, and fails where its shape changed)."""
        if not self._outputs:
            raise RuntimeError("Error in execution: At least one output should be requested.")
        feeds = {name: value.numpy() if isinstance(value, ort.OrtValue) else value
                 for name, value in self._inputs.items()}
        try:
            results = self._session.run(list(self._outputs), feeds, run_options)
        except KernelError:
            raise
        except Exception as error:  # onnxruntime's binding reports every failure so
            raise RuntimeError(f"Error in execution: {error}") from error
        values = []
        for (name, bound), result in zip(self._outputs.items(), results):
            if bound is None:
                values.append(_ort_value(result))
                continue
            target = bound.numpy() if isinstance(bound, ort.OrtValue) else bound
            result = np.asarray(result)
            if target.dtype != result.dtype or target.shape != result.shape:
                raise RuntimeError(
                    f"Error in execution: the output OrtValue provided for output '{name}' is "
                    f"{target.dtype} {list(target.shape)}, the output is {result.dtype} "
                    f"{list(result.shape)}")
            np.copyto(target, result)
            values.append(bound if isinstance(bound, ort.OrtValue) else
                          ort.OrtValue.ortvalue_from_numpy(target))
        self._outputs.update(zip(self._outputs, values))
        self._values = values


def _checked_ort_value(value: Any) -> ort.OrtValue:
    """``value``, an ``OrtValue``; anything else raises the ``AttributeError`` onnxruntime's
    binding raises for it (it reads the ``OrtValue``'s C value at once)."""
    if not isinstance(value, ort.OrtValue):
        raise AttributeError(f"'{type(value).__name__}' object has no attribute '_ortvalue'")
    return value


def _buffer(device_type: str, device_id: int, element_type: Any, shape: Sequence[int],
            buffer_ptr: int) -> np.ndarray:
    """The array of ``shape`` and ``element_type`` (a numpy type, or an onnx element type)
    at ``buffer_ptr`` in the CPU's memory, as ``IOBinding.bind_input`` takes it."""
    ort.OrtDevice.make(device_type, device_id)  # refuses an unknown device type
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(element_type)
                     if isinstance(element_type, int) else element_type)
    size = math.prod(shape) * dtype.itemsize
    memory = memoryview((ctypes.c_byte * size).from_address(buffer_ptr))
    return np.frombuffer(memory, dtype).reshape(shape)


_Prepared = tuple[dict[str, int], dict[str, int], list[Segment | Kernel | HostNode] | None]
PREPARED_MODELS = 8
"""How many models' checked types and steps the process keeps (the latest used), by the digest
of the model without its weights' values: creating a session of a model again skips them
(Mask R-CNN: 60-90 ms of a 300-500 ms creation on the 2-core machine). What is kept is never
changed."""
PREPARED_BYTES = 1 << 28
"""The most bytes of models (serialized, without the weights' values) whose preparations are
kept at once: a larger one is not kept."""
_prepared_models: OrderedDict[tuple[bytes, bool, bool], tuple[int, _Prepared]] = OrderedDict()
_prepared_lock = threading.Lock()


def _prepared(model: onnx.ModelProto, *, strings: bool, split_it: bool) -> _Prepared:
    """``model``'s element types and ranks (:func:`checked_types`, which raises for a bad
    model) and its steps (:func:`split`; None where it runs as one session or ``split_it`` is
    false), from the kept ones (:data:`PREPARED_MODELS`, :data:`PREPARED_BYTES`) where the
    same model (``model`` is its graph without the weights' values) was prepared before."""
    def prepare() -> _Prepared:
        elem_types, ranks = checked_types(model, strings=strings)
        return elem_types, ranks, split(model, elem_types, ranks) if split_it else None

    size = model.ByteSize()
    if size > PREPARED_BYTES:  # not kept: no serialized copy of it just for the key
        return prepare()
    key = hashlib.sha256(model.SerializeToString()).digest(), strings, split_it
    with _prepared_lock:
        if key in _prepared_models:
            _prepared_models.move_to_end(key)
            return _prepared_models[key][1]
    prepared = prepare()
    with _prepared_lock:
        _prepared_models[key] = size, prepared
        while len(_prepared_models) > PREPARED_MODELS or \
                sum(kept for kept, _ in _prepared_models.values()) > PREPARED_BYTES:
            _prepared_models.popitem(last=False)
    return prepared


def _new_prepared_lock() -> None:
    """A forked child's lock: another thread may have held the parent's as it forked."""
    global _prepared_lock
    _prepared_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_prepared_lock)


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
"""The session config entry that marks options on which the onnxruntime-extensions library
is registered (registering it twice fails the session)."""
_NO_SPINNING = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")
"""Session options set to "0" unless the caller set them: onnxruntime's idle worker threads
then sleep instead of spinning on the cores a Python kernel right after them needs."""


def quiet_session_options(options: ort.SessionOptions | None = None) -> ort.SessionOptions:
    """``options`` (or new ones) for your other, plain onnxruntime sessions in a process that
    runs ``dml_onnx`` kernels: their worker threads spin while a run lasts and stop when it
    ends (``session.force_spinning_stop`` "1", unless already set), so that a kernel called
    right after them gets the cores. On the 16-core server a RoiAlign1 call (X
    ``[1,256,128,128]``, 1000 ROIs) took 9.3 ms alone, 26.0 ms right after a plain session with
    onnxruntime's defaults, 10.2 ms after one with these options (2 cores: 35.4, 58.9 and 36.0
    ms); sleeping idle workers (``allow_spinning`` "0") protected it as well (9.9 ms) but slow
    the session's own nodes by about a fifth. :class:`InferenceSession` sets it on the
    sessions of its segments."""
    options = options or ort.SessionOptions()
    if _config_entry(options, _STOP_SPINNING) is None:
        options.add_session_config_entry(_STOP_SPINNING, "1")
    return options


_STOP_SPINNING = "session.force_spinning_stop"


def _no_spinning(options: ort.SessionOptions) -> None:
    """Set :data:`_NO_SPINNING` unless the caller set them: the PyOps run inside onnxruntime's
    run, so its threads must not spin through it."""
    for key in _NO_SPINNING:
        if _config_entry(options, key) is None:
            options.add_session_config_entry(key, "0")


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

