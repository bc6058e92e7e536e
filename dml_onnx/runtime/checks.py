"""What onnxruntime refuses, refused as it does, for
:class:`~dml_onnx.runtime.session.InferenceSession`: a model source that cannot be read, at
load (:func:`refuse_as_onnxruntime`), and at run a feed that is not all numeric arrays in the
machine's byte order (:func:`unusual_feed`), so that the session raises onnxruntime's error
types and messages.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument

from dml_onnx.runtime.segments import SplitRun

PLAIN_TYPES = frozenset(np.dtype(code) for code in "?bhilqBHILQefd")
"""The numeric element types in the machine's byte order."""


def plain(value: Any) -> bool:
    """Whether a feed is a numeric array in the machine's byte order (as nearly all are;
    a subclass of ``np.ndarray`` takes the longer way)."""
    return type(value) is np.ndarray and value.dtype in PLAIN_TYPES


def numpy_type(type_name: str) -> np.dtype:
    """The numpy type of a ``NodeArg`` type such as ``tensor(float)``."""
    name = type_name.removeprefix("tensor(").removesuffix(")").upper()
    return helper.tensor_dtype_to_np_dtype(getattr(onnx.TensorProto, name))


def refuse_as_onnxruntime(source: Any, error: Exception) -> None:
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


def unusual_feed(split: SplitRun | None, kernel_inputs: set[str],
                 output_names: Sequence[str] | None, input_feed: dict[str, Any],
                 run_options: ort.RunOptions | None) -> dict[str, Any]:
    """``input_feed`` as the run takes it where not every value is a numeric array in the
    machine's byte order (or, in split execution, an output name is unknown), or the
    error onnxruntime's run raises for it: an array in the other byte order becomes one in
    this one (onnxruntime reads its bytes as they are, and the kernels as numpy does:
    neither result was the array's); a ``None`` is a value not given (onnxruntime fails
    the node that reads it with ``Fail``). In split execution, where the segments take
    the feed as ``OrtValue`` tensors made of arrays, onnxruntime's own run of the first
    segment (which declares every graph input) converts and checks the caller's feed
    first, as its run does before it looks at the output names. ``split`` and
    ``kernel_inputs`` are the session's: its split run, if any, and the graph inputs
    its kernels read."""
    feed = {name: value.astype(value.dtype.newbyteorder("="))
            if isinstance(value, np.ndarray) and not value.dtype.isnative else value
            for name, value in input_feed.items()}
    absent = [name for name, value in feed.items() if value is None]
    if split is None:
        for name in absent:
            if name in kernel_inputs:  # onnxruntime would fail its node
                raise Fail(f"[ONNXRuntimeError] : 1 : FAIL : Missing Input: {name}")
        return feed
    segment = split.steps[0]
    assert isinstance(segment, tuple)  # split() puts a segment first
    first_outputs = list(segment[0].outputs)
    split_outputs = {arg.name for arg in split.outputs}
    unknown = [name for name in output_names or () if name not in split_outputs]
    types = {arg.name: numpy_type(arg.type) for arg in split.inputs}
    odd = [name for name, value in feed.items() if not isinstance(name, str) or not (
        isinstance(value, ort.OrtValue | list)  # a subclass (np.memmap) is an array:
        or isinstance(value, np.ndarray) and value.dtype in PLAIN_TYPES)]  # no check
    for name, value in feed.items():
        if isinstance(value, list):  # as onnxruntime reads a list, where numpy can
            try:
                feed[name] = np.asarray(value, types.get(name))
            except (ValueError, TypeError):  # a ragged list: onnxruntime's error
                odd.append(name)
    if unknown or odd:  # its conversion, its input checks, then its output names
        split.first.run([name for name in unknown if name not in first_outputs]
                        or first_outputs, feed, run_options)
    if unknown:  # the values only the first segment has
        raise InvalidArgument(
            f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Invalid output name:{unknown[0]}")
    for name in absent:  # the first segment's nodes took it: does a later step read it?
        if any(name in (step[0].inputs if isinstance(step, tuple) else step.node.input)
               for step in split.steps[1:]):
            raise Fail(f"[ONNXRuntimeError] : 1 : FAIL : Missing Input: {name}")
        declared = next(arg for arg in split.inputs if arg.name == name)
        feed[name] = np.zeros([d if isinstance(d, int) else 0 for d in declared.shape],
                              numpy_type(declared.type))  # nothing reads it
    return feed
