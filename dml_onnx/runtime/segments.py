"""Split execution: a model whose ``dml_onnx`` nodes pass values between standard nodes runs
as onnxruntime sessions over the standard nodes (segments) with the kernels called between them.

onnxruntime-extensions copies every input of a PyOp into a new array and every output into
onnxruntime's buffer, on one thread: a detector's feature maps and pooled regions (for a
512x512 image, 22 MB of maps into each of Mask R-CNN's two poolers, and 50 MB out of its box
pooler's 1000 regions). Here the kernels read the segments' outputs where
onnxruntime wrote them (``OrtValue.numpy()`` is a view) and the next segment reads the
kernels' arrays where they lie (``OrtValue.ortvalue_from_numpy``). A segment's idle workers
sleep rather than spin (:func:`~dml_onnx.runtime.options.segment_options`): each segment has a
pool of its own beside the kernels' threads, and with spinning workers onnxruntime's GEMM took
up to twice as long.

The steps are :mod:`~dml_onnx.runtime.plan`'s (:func:`~dml_onnx.runtime.plan.split`); this
stage builds their sessions (:class:`SplitRun`), each with the intra-op threads its work
calls for (:func:`segment_threads`), and runs them; a first segment that only checks the feed
(a model of ``dml_onnx`` nodes alone) is skipped where :meth:`SplitRun.fits` says the feed
would pass.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from dml_onnx.runtime import host_nodes
from dml_onnx.runtime.hook import kernel_error, parse_config, run_fetching
from dml_onnx.runtime.plan import HostNode, Kernel, Segment
from dml_onnx.runtime.private_api import ort_values_run
from dml_onnx.runtime.stubs import in_memory_files


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output as ``onnxruntime.NodeArg`` describes it."""

    name: str
    type: str  # "tensor(float)"
    shape: list[int | str | None]  # [] where unknown


SEGMENT_GRAIN = 4_000_000
"""The work (:func:`~dml_onnx.runtime.plan.work`: multiply-adds and values written) per
intra-op thread a segment is given, up to the session's threads: each segment is a session
with its own pool, and at 16 threads a new pool took 10-20 runs to reach its steady time
(the first runs of a small CNN's 9 segments took 19-57 ms against 5 for the plain session,
and runs 3-10 1.4-1.8x the plain session's). With 4 threads a segment the first runs took
7-9 ms, and runs 3-10 0.98x (16-core server, ``benchmarks/results/graphs_server.md``)."""


def segment_threads(work: int | None, threads: int) -> int:
    """The intra-op threads of a segment of ``work`` (``None``: unknown) in a session of
    ``threads`` (0: every usable core): one per :data:`SEGMENT_GRAIN`, at least one, at most
    ``threads``; 0 (onnxruntime's default) where that is every core."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1
    allowed = threads or cores
    wanted = allowed if work is None else max(1, min(allowed, work // SEGMENT_GRAIN))
    return 0 if wanted >= allowed and not threads else wanted


def _sessions(made: list[tuple[ort.SessionOptions, bytes, int]],
              options: ort.SessionOptions | None, prefix: str,
              session_arguments: dict[str, Any]) -> list[ort.InferenceSession]:
    """onnxruntime's sessions of ``made`` (options, serialized model and intra-op threads
    each: :func:`segment_threads`).

    On options of our own (``options`` None) they are created side by side on threads:
    onnxruntime optimizes each graph on one thread with the interpreter lock released, and
    Mask R-CNN's three segments took 176 + 79 + 15 ms one after the other on the 2-core
    machine (creation 1.94 -> 1.46-1.52x plain onnxruntime's there, in one process). With the
    caller's ``options`` one at a time: there onnxruntime copies each segment's weights, and
    side by side the copies and each graph's working memory added up (peak memory 1.44 ->
    1.49-1.67x plain onnxruntime's on the server); each segment then gets its own profile
    file (the prefix ``prefix_segment<k>`` while it is created). Where no thread can start (a
    memory limit), one at a time too."""
    def create(item: tuple[ort.SessionOptions, bytes, int]) -> ort.InferenceSession:
        return ort.InferenceSession(item[1], item[0], **session_arguments)

    if options is not None:
        sessions = []
        threads = options.intra_op_num_threads
        for k, item in enumerate(made):  # one profile file each (names are made to the second)
            options.profile_file_prefix = f"{prefix}_segment{k}"
            options.intra_op_num_threads = item[2]
            try:
                sessions.append(create(item))
            finally:
                options.profile_file_prefix = prefix
                options.intra_op_num_threads = threads
        return sessions
    threads = min(len(made), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                  else os.cpu_count() or 1)
    if threads > 1:
        try:
            with ThreadPoolExecutor(threads, thread_name_prefix="dml_onnx-segments") as pool:
                return list(pool.map(create, made))
        except RuntimeError as error:
            if "can't start new thread" not in str(error):
                raise
    return [create(item) for item in made]


_CHECKED_TYPES = frozenset({
    TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BOOL,
    TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
    TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64})
"""The graph input types :meth:`SplitRun.fits` checks: those of one numpy type each (a
bfloat16 or float8 input has none: a feed for it goes through onnxruntime's check)."""

RunValues = Callable[[list[str], Mapping[str, ort.OrtValue], Any], list[ort.OrtValue]]
"""A segment's ``run(output_names, feed, run_options)``, in ``OrtValue`` tensors."""


def _with_session(segment: Segment, session: ort.InferenceSession, *, first: bool
                  ) -> tuple[Segment, ort.InferenceSession, RunValues]:
    """A segment step: the first runs through the public ``run_with_ort_values``, which
    checks the feed as onnxruntime checks it; the later ones, fed by the steps before them,
    skip the wrapper's 40-65 µs (:func:`~dml_onnx.runtime.private_api.ort_values_run`)."""
    return segment, session, session.run_with_ort_values if first else ort_values_run(session)


class SplitRun:
    """The sessions of a model's :func:`~dml_onnx.runtime.plan.split` steps and its runs.

    ``weights`` are the values of the model's stubs. With the caller's ``options`` (which
    would keep external initializers after us) each segment takes its weights as files in
    memory, which onnxruntime copies (:func:`~dml_onnx.runtime.stubs.in_memory_files`);
    without, each segment's session gets options of ``make_options()`` and takes its weights
    as external initializers, read where they are; then the segments' sessions are created
    side by side (:func:`_sessions`).
    """

    def __init__(self, model: onnx.ModelProto, steps: list[Segment | Kernel | HostNode],
                 weights: dict[str, np.ndarray], options: ort.SessionOptions | None,
                 make_options: Callable[[], ort.SessionOptions], **session_arguments: Any):
        self.weights: list[ort.OrtValue] = []  # what onnxruntime reads where it is
        prefix = options.profile_file_prefix if options is not None else ""
        initializers = {tensor.name: tensor for tensor in model.graph.initializer}
        self._constants = {  # the initializers kernels read
            name: weights[name] if name in weights else numpy_helper.to_array(initializers[name])
            for step in steps if isinstance(step, Kernel | HostNode)
            for name in step.node.input if name in initializers}
        made: list[tuple[ort.SessionOptions, bytes, int]] = []  # each segment's, in order
        threads = options.intra_op_num_threads if options is not None else 0
        for step in steps:
            if isinstance(step, Kernel | HostNode):
                continue
            own_threads = segment_threads(step.work, threads)
            mine = {t.name: weights[t.name] for t in step.model.graph.initializer
                    if t.name in weights}
            if options is not None:  # onnxruntime copies the weights: none kept here
                pointed = onnx.ModelProto()
                pointed.CopyFrom(step.model)  # the steps are kept for the next session
                names, buffers = in_memory_files(pointed, mine)
                if names:
                    options.add_external_initializers_from_files_in_memory(
                        names, buffers, [b.size for b in buffers])
                made.append((options, pointed.SerializeToString(), own_threads))
            else:
                made.append((make_options(), step.model.SerializeToString(), own_threads))
                made[-1][0].intra_op_num_threads = own_threads
                values = [ort.OrtValue.ortvalue_from_numpy(array) for array in mine.values()]
                if values:
                    made[-1][0].add_external_initializers(list(mine), values)
                    self.weights += values
        sessions = iter(_sessions(made, options, prefix, session_arguments))
        self.steps: list[tuple[Segment, ort.InferenceSession, RunValues] | Kernel | HostNode] = [
            step if isinstance(step, Kernel | HostNode) else _with_session(step, next(sessions),
                                                                          first=k == 0)
            for k, step in enumerate(steps)]
        first = self.steps[0]
        assert isinstance(first, tuple)  # split() puts a segment first
        self.first = first[1]
        # the session's options, as the caller reads them, say the session's thread count,
        # not the first segment's own (the options onnxruntime keeps: the pool is made)
        self.first.get_session_options().intra_op_num_threads = threads
        self.inputs = [node_arg(v) for v in model.graph.input]
        self._input_dtypes = {v.name: helper.tensor_dtype_to_np_dtype(
            v.type.tensor_type.elem_type) for v in model.graph.input}
        self.outputs = [node_arg(v) for v in model.graph.output]
        self.profile: list[dict] | None = [] if self.first.get_session_options(
            ).enable_profiling else None
        self.start_ns = self.first.get_profiling_start_time_ns()
        self._checked_here = first[0].checks_only and self.profile is None
        self._declared = [(v.name, self._input_dtypes[v.name]
                           if v.type.tensor_type.elem_type in _CHECKED_TYPES else None,
                           _dimensions(v)) for v in model.graph.input]

    @property
    def sessions(self) -> list[ort.InferenceSession]:
        return [step[1] for step in self.steps if isinstance(step, tuple)]

    def run(self, output_names: Sequence[str], input_feed: Mapping[str, Any],
            run_options: ort.RunOptions | None, fits: bool) -> list[np.ndarray]:
        """The graph outputs ``output_names`` (graph outputs all: the session checks them)
        for ``input_feed``; where the first segment only checks the feed, a feed that
        :meth:`fits` (``fits``: the caller asked) skips it."""
        started = time.time_ns() if self.profile is not None else 0
        steps = self.steps
        if fits and self._checked_here and (run_options is None or isinstance(
                run_options, ort.RunOptions) and not run_options.terminate):  # else onnxruntime
            # raises: its terminate error, or its TypeError for what is no RunOptions
            values: dict[str, Any] = {**input_feed, **self._constants}
            steps = steps[1:]
        else:
            feed = {name: value if isinstance(value, ort.OrtValue) else  # checked as it is
                    ort.OrtValue.ortvalue_from_numpy(np.asarray(  # keeps a 0-d one 0-d
                        value, None if isinstance(value, np.ndarray) else  # a list as
                        self._input_dtypes.get(name), order="C"))  # onnxruntime reads it
                    for name, value in input_feed.items()}
            values = {**feed, **self._constants}
        for step in steps:
            if isinstance(step, Kernel):
                self._call(step, values)
            elif isinstance(step, HostNode):
                self._compute(step, values)
            else:
                segment, session, run_values = step
                got = run_values(  # the first checks the feed, names too
                    list(segment.outputs), feed if session is self.first else {
                        name: _ort_value(values[name]) for name in segment.inputs}, run_options)
                values.update(zip(segment.outputs, got))
        if self.profile is not None:
            self.profile.append(_event("model_run", "Session", started, self.start_ns))
        return [_array(values[name]) for name in output_names]

    def fits(self, feed: Mapping[str, Any]) -> bool:
        """Whether ``feed`` is an array of the declared element type, rank and fixed
        dimensions for each graph input and nothing else: what onnxruntime's run checks of a
        feed of arrays (every value plain, every name a graph input's). Where the first
        segment only checks the feed (a ``Size`` node: :attr:`Segment.checks_only`), a feed
        that fits skips it, and one that does not goes through it, which raises onnxruntime's
        error or takes the feed as onnxruntime takes it."""
        if len(feed) != len(self._declared):
            return False
        for name, dtype, dimensions in self._declared:
            value = feed.get(name)
            if type(value) is not np.ndarray or dtype is None or value.dtype != dtype:
                return False
            if dimensions is not None and value.shape != dimensions and (
                    value.ndim != len(dimensions) or any(
                        want is not None and got != want
                        for got, want in zip(value.shape, dimensions))):
                return False
        return True

    def _call(self, kernel: Kernel, values: dict[str, Any]) -> None:
        started = time.time_ns() if self.profile is not None else 0
        try:
            values.update(run_fetching(
                parse_config(kernel.config),
                {name: _array(values[name]) for name in kernel.inputs},
                kernel.variant))
        except BaseException as exc:
            error = kernel_error(exc, kernel.variant, kernel.config)
            if error is exc:
                raise
            raise error from exc
        if self.profile is not None:
            self.profile.append(_event(f"{kernel.node.name}_kernel_time", "Node", started,
                                       self.start_ns, op_name=kernel.variant.definition.name,
                                       provider="dml_onnx"))

    def _compute(self, step: HostNode, values: dict[str, Any]) -> None:
        """A host node (:func:`~dml_onnx.runtime.host_nodes.compute`)."""
        started = time.time_ns()
        node = step.node
        result = host_nodes.compute(node, [_array(values[name]) for name in node.input])
        values[node.output[0]] = result.copy() if step.copy else result
        if self.profile is not None:
            self.profile.append(_event(f"{node.name}_kernel_time", "Node", started,
                                       self.start_ns, op_name=node.op_type,
                                       provider="dml_onnx"))

    def end_profiling(self) -> str:
        """One trace of every segment's events (their runs named ``segment_run``) and the
        kernels' (``Node`` events named ``<node>_kernel_time``, op ``<operator>``) in the
        order they ended, as onnxruntime writes them, where the first segment's profile was."""
        events: list[dict] = list(self.profile or [])
        path = ""
        for session in self.sessions:
            written = session.end_profiling()
            if not written:
                continue
            path = path or written
            offset = (session.get_profiling_start_time_ns() - self.start_ns) / 1000
            for event in json.loads(Path(written).read_text()):
                if event.get("name") == "model_run":
                    event["name"] = "segment_run"
                event["ts"] = event.get("ts", 0) + offset
                events.append(event)
            if written != path:
                os.remove(written)
        if path:
            events.sort(key=lambda e: e.get("ts", 0) + e.get("dur", 0))  # as they ended
            Path(path).write_text(json.dumps(events))
        self.profile = None
        return path


def _event(name: str, category: str, started: int, start_ns: int, **args: str) -> dict:
    """A trace event as onnxruntime's profiler writes it (microseconds from its start)."""
    return {"cat": category, "pid": os.getpid(), "tid": 0, "ph": "X", "name": name,
            "ts": (started - start_ns) // 1000, "dur": (time.time_ns() - started) // 1000,
            "args": args}


def _dimensions(value: onnx.ValueInfoProto) -> tuple[int | None, ...] | None:
    """A graph input's declared dimensions (``None`` for one not fixed), or ``None`` where
    it declares no shape."""
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)


def _ort_value(value: Any) -> ort.OrtValue:
    return value if isinstance(value, ort.OrtValue) else \
        ort.OrtValue.ortvalue_from_numpy(np.asarray(value, order="C"))  # 0-d stays 0-d


def _array(value: Any) -> np.ndarray:
    """A value as numpy: a view of an ``OrtValue`` (which the view keeps alive)."""
    return value.numpy() if isinstance(value, ort.OrtValue) else value


def node_arg(value: onnx.ValueInfoProto) -> NodeArg:
    tensor = value.type.tensor_type
    shape = ([d.dim_value if d.HasField("dim_value") else d.dim_param or None
              for d in tensor.shape.dim] if tensor.HasField("shape") else [])
    elem = onnx.TensorProto.DataType.Name(tensor.elem_type).lower()
    return NodeArg(value.name, f"tensor({elem})", shape)
