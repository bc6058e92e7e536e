"""The session: :class:`InferenceSession` (``onnxruntime.InferenceSession`` for models with
``dml_onnx`` nodes), which takes a model through the runtime's stages, and the worker threads
of its ``run_async``.

Load: the model without its weights (:mod:`~dml_onnx.runtime.weights`), checked
(:func:`~dml_onnx.runtime.rewrite.checked_types`). Plan: its steps where it runs split
(:mod:`~dml_onnx.runtime.plan`), both kept per graph (:mod:`~dml_onnx.runtime.prepare`).
Build: the split run's sessions (:mod:`~dml_onnx.runtime.segments`), or one onnxruntime
session of the model rewritten for PyOps (:mod:`~dml_onnx.runtime.rewrite`), the weights
handed over through their stubs (:mod:`~dml_onnx.runtime.stubs`), on the options
:mod:`~dml_onnx.runtime.options` sets. Run: :meth:`InferenceSession.run`, the kernels called
by :mod:`~dml_onnx.runtime.hook`, what onnxruntime refuses refused as it does
(:mod:`~dml_onnx.runtime.checks`), and the I/O binding (:mod:`~dml_onnx.runtime.io_binding`).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import onnx
import onnxruntime as ort

from dml_onnx._kernels._threads import thread_limit
from dml_onnx.definition import DOMAIN
from dml_onnx.graphs import inferred_graph, subgraphs, walk_nodes
from dml_onnx.runtime.checks import plain, refuse_as_onnxruntime, unusual_feed
from dml_onnx.runtime.hook import call_state, take_error
from dml_onnx.runtime.io_binding import IOBinding, ort_value
from dml_onnx.runtime.options import (
    no_spinning,
    register_extensions_library,
    segment_options,
)
from dml_onnx.runtime.plan import split_pays
from dml_onnx.runtime.prepare import Prepared, prepared
from dml_onnx.runtime.private_api import session_run
from dml_onnx.runtime.rewrite import runtime_model
from dml_onnx.runtime.segments import SplitRun, node_arg
from dml_onnx.runtime.stubs import in_memory_files
from dml_onnx.runtime.weights import read_without_weights

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

    Where a ``dml_onnx`` node reads or writes a value between standard nodes and those values
    are large (:func:`~dml_onnx.runtime.plan.split_pays`), or the model has no other nodes, it
    runs split (:mod:`~dml_onnx.runtime.plan`,
    :mod:`~dml_onnx.runtime.segments`): onnxruntime sessions over the standard nodes (for
    ``dml_onnx`` nodes alone, one that checks the feed, skipped for a plain one), the kernels
    between them, ``sess_options`` given ``session.intra_op.allow_spinning`` /
    ``session.inter_op.allow_spinning`` "0" and ``session.force_spinning_stop`` "1" unless set
    (:func:`~dml_onnx.runtime.options.segment_options`). Otherwise it runs as one
    onnxruntime session with a PyOp per node; ``sess_options`` then gets the
    onnxruntime-extensions library
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
    (:func:`~dml_onnx.runtime.stubs.in_memory_files`). The checks and the split run while
    the weights are read, and are kept for the next session of the same graph
    (:data:`~dml_onnx.runtime.prepare.PREPARED_MODELS`).
    """

    def __init__(self, path_or_bytes: str | os.PathLike | bytes | onnx.ModelProto,
                 sess_options: ort.SessionOptions | None = None,
                 providers: Sequence[str | tuple[str, dict]] | None = None,
                 provider_options: Sequence[dict] | None = None, **kwargs: Any):
        # the weights as arrays that onnxruntime takes from our own options, or, with the
        # caller's options (which would keep them after us), copies from files in memory
        read: list[bool] = []  # a model was read: what failed before is onnxruntime's to say

        def prepare(light: onnx.ModelProto) -> Prepared:
            read.append(True)
            return prepared(light, strings=isinstance(path_or_bytes, onnx.ModelProto),
                            split_it=sess_options is None  # one writes one optimized model
                            or not sess_options.optimized_model_filepath)
        try:
            model, weights, (elem_types, dims, steps) = read_without_weights(
                path_or_bytes, prepare, absent_left=sess_options is not None)  # the options
            # may hold those values
        except (OSError, ValueError, TypeError) as error:
            if not read:
                refuse_as_onnxruntime(path_or_bytes, error)
            raise
        arguments = dict(providers=list(providers) if providers else ["CPUExecutionProvider"],
                         provider_options=provider_options, **kwargs)
        self._threads = 0 if sess_options is None else sess_options.intra_op_num_threads  # 0: all
        self._split: SplitRun | None = None
        self._outputs: list[Any] | None = None  # get_outputs(), described on its first call
        if steps is not None and not split_pays(model, steps, elem_types, dims, sum(
                array.nbytes for array in weights.values())):
            steps = None  # small values: one session (see split_pays)
        kernels = [node for node in model.graph.node if node.domain == DOMAIN]
        self._model = model if kernels else None  # weights stubbed: for get_outputs()
        if steps is not None:
            if sess_options is not None:
                segment_options(sess_options)
            self._split = SplitRun(model, steps, weights, sess_options, segment_options,
                                   **arguments)
            self._session, self._weights = self._split.first, self._split.weights
            self._required = [i.name for i in self._split.inputs]  # tensors: all required
            self._split_outputs = {o.name for o in self._split.outputs}
            self._output_names = [o.name for o in self._split.outputs]
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
        register_extensions_library(options)
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL  # kernels on the caller thread
        no_spinning(options)  # idle workers would take the cores our kernels use
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
        split = self._split
        fits = split is not None and split.fits(input_feed)  # so every value is plain
        if not fits and not all(map(plain, input_feed.values())):
            input_feed = unusual_feed(split, self._kernel_inputs, output_names, input_feed,
                                      run_options)
        if split is not None:
            names = output_names or self._output_names
            if isinstance(names, str):  # onnxruntime's run takes a list of names alone
                raise TypeError(f"run(): output_names is a str ({names!r}), not a list of str")
            if not self._split_outputs.issuperset(names) or \
                    not fits and not all(isinstance(name, str) for name in input_feed):
                unusual_feed(split, self._kernel_inputs, names, input_feed,  # raises
                             run_options)  # onnxruntime's error
            threads = thread_limit.set(self._threads)
            try:
                return split.run(names, input_feed, run_options,
                                 fits or split.fits(input_feed))  # a converted feed may
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

    def run_with_ort_values(self, output_names: Sequence[str] | None,
                            input_dict_ort_values: dict[str, ort.OrtValue],
                            run_options: ort.RunOptions | None = None) -> list[ort.OrtValue]:
        """:meth:`run` over CPU ``OrtValue`` tensors, outputs as ``OrtValue`` tensors."""
        feeds = {name: value.numpy() for name, value in input_dict_ort_values.items()}
        for name in feeds:
            if not isinstance(name, str):  # onnxruntime's error (run() raises TypeError)
                raise RuntimeError(f"Unable to cast Python instance of type {type(name)} to "
                                   "C++ type 'str'")
        return [ort_value(output) for output in self.run(output_names, feeds, run_options)]

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
            made = {arg.name: arg for session in self._split.sessions
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
