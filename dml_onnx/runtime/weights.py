"""The load stage: a model without its weights, the graph to check, plan and rewrite, the
weights apart.

:class:`dml_onnx.InferenceSession` rewrites a model's ``dml_onnx`` nodes and hands the rewritten
model to onnxruntime as bytes. Loading, copying and serializing a detector's weights (170 MB
for Mask R-CNN) took longer than onnxruntime's whole session creation, so the session takes
the large initializers out. A file or bytes is split on the wire
(:func:`~dml_onnx.runtime.wire.without_raw_weights`): the large ``raw_data``
fields of the main graph's initializers are left out before parsing and read into numpy arrays
(a file's with ``os.pread``, once, never memory-mapped: a session owns its weights, whatever
happens to the file later); a ModelProto's become arrays too (one copy each). Each sits behind
a stub (:mod:`~dml_onnx.runtime.stubs`), which onnxruntime takes as an external
initializer, or as a file in memory (:func:`~dml_onnx.runtime.stubs.in_memory_files`) where
the options are the caller's.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np
import onnx
from onnx import TensorProto

from dml_onnx.model_files import WEIGHT_ELEMENTS, load_model, model_source, parse_model
from dml_onnx.runtime.stubs import NUMPY_TYPES, stub_weights
from dml_onnx.runtime.wire import FileData, without_raw_weights

_Result = TypeVar("_Result")


def load_without_weights(model: str | os.PathLike | bytes | onnx.ModelProto
                         ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """:func:`dml_onnx.model_files.load_model`'s model with every large numeric initializer of the
    main graph as an external-data stub, and those initializers' values by name (C-contiguous,
    native byte order, owned by the caller); a given ModelProto is never the model returned.
    Raises as ``load_model`` does, and ``OSError`` for a file that changed while it was
    read."""
    light, arrays, _ = read_without_weights(model, lambda _: None)
    return light, arrays


def read_without_weights(model: str | os.PathLike | bytes | onnx.ModelProto,
                         meanwhile: Callable[[onnx.ModelProto], _Result], *,
                         absent_left: bool = False
                         ) -> tuple[onnx.ModelProto, dict[str, np.ndarray], _Result]:
    """:func:`load_without_weights`, and what ``meanwhile(model)`` returns: it is called with
    the model (stubs and all) while the weights are read on other threads: a session's
    checks and split, in Python, then overlap the copies, in C, where there are cores to
    spare (none on the 2-core machine, where the reads already take both). What
    ``meanwhile`` raises is raised once the reads have ended. ``absent_left``: external data
    whose file is not there stays external (:func:`~dml_onnx.model_files.parse_model`)."""
    if isinstance(model, onnx.ModelProto):
        stubbed, arrays = stub_weights(model, {})
        if stubbed is model:  # nothing to stub: a copy, which the caller's later edits miss
            stubbed = onnx.ModelProto()
            stubbed.CopyFrom(model)
        return _with_result((stubbed, arrays), meanwhile)
    what, path = model_source(model)
    if path is not None and onnx.serialization.registry.get_format_from_file_extension(
            path.suffix) not in (None, "protobuf"):  # a text format: nothing to split
        return _with_result(stub_weights(load_model(model), {}), meanwhile)
    source: FileData | memoryview
    if path is not None:
        source = FileData(path)
    else:
        assert isinstance(model, (bytes, bytearray)), "model_source: no path for bytes alone"
        source = memoryview(model)
    with source as data:
        try:
            light, spans = without_raw_weights(data)
        except (ValueError, IndexError):  # not protobuf wire format: parse_model says why
            whole = data.read(0, len(data)) if isinstance(data, FileData) else bytes(data)
            return _with_result(stub_weights(parse_model(whole, what, path,
                                                          absent_left=absent_left), {}),
                                meanwhile)
        proto = parse_model(light, what, path, absent_left=absent_left)
        arrays, reads = _take_values(proto.graph.initializer, spans, data)
        try:
            stubbed, arrays = stub_weights(proto, arrays)
            result = meanwhile(stubbed)
        except BaseException:
            with contextlib.suppress(Exception):  # the file's reads end before it closes
                reads()
            raise
        reads()
        if isinstance(data, FileData):
            data.check_unchanged()
        return stubbed, arrays, result


def _with_result(loaded: tuple[onnx.ModelProto, dict[str, np.ndarray]],
                 meanwhile: Callable[[onnx.ModelProto], _Result]
                 ) -> tuple[onnx.ModelProto, dict[str, np.ndarray], _Result]:
    return *loaded, meanwhile(loaded[0])


def _split_off(tensor: TensorProto, span: tuple[int, int] | None,
               data: FileData | memoryview, keep: bool) -> bool:
    """Whether the initializer whose raw_data was left out at ``span`` stays out of the
    model (it is large and not external, and not ``keep``); if not, it gets its raw_data
    back."""
    if span is None or tensor.HasField("raw_data"):  # external data read over it
        return False
    if keep or tensor.data_location == TensorProto.EXTERNAL or \
            math.prod(tensor.dims) <= WEIGHT_ELEMENTS:
        tensor.raw_data = bytes(data[span[0]:span[0] + span[1]])  # it stays in the model
        return False
    return True


def _take_values(initializers: Sequence[TensorProto], spans: list[tuple[int, int] | None],
                 data: FileData | memoryview
                 ) -> tuple[dict[str, np.ndarray], Callable[[], None]]:
    """The values of the initializers whose raw_data was left out at ``spans``, by name,
    where onnxruntime can take them as arrays; the others get their raw_data back. The
    arrays share one block (:func:`_block`), each at a 64-byte boundary: one large allocation
    fills about three times faster than thousands of small ones. The arrays are filled once
    the returned function has returned (:func:`_fill`)."""
    taken: list[tuple[TensorProto, type[np.generic], tuple[int, int]]] = []
    unique = len({t.name for t in initializers}) == len(initializers)
    for tensor, span in zip(initializers, spans, strict=True):
        numpy_type = NUMPY_TYPES.get(tensor.data_type)
        fits = numpy_type is not None and span is not None and min(tensor.dims, default=0) >= 0 \
            and span[1] == math.prod(tensor.dims) * np.dtype(numpy_type).itemsize
        if _split_off(tensor, span, data, keep=not (unique and fits)):
            assert numpy_type is not None and span is not None  # it fits
            taken.append((tensor, numpy_type, span))
    ends = np.cumsum([-(-size // _ALIGN) * _ALIGN for _, _, (_, size) in taken], dtype=np.int64)
    block = _block(int(ends[-1]) + _ALIGN if taken else 0)
    first = -block.ctypes.data % _ALIGN
    targets = []
    for (_, _, (start, size)), end in zip(taken, ends, strict=True):
        offset = first + int(end) - -(-size // _ALIGN) * _ALIGN
        targets.append((block[offset:offset + size], start))
    reads = _fill(targets, data)
    arrays = {tensor.name: target.view(numpy_type).reshape(tensor.dims)
              for (tensor, numpy_type, _), (target, _) in zip(taken, targets, strict=True)}

    def filled() -> None:
        reads()
        if sys.byteorder == "big":  # raw_data is little-endian
            for array in arrays.values():
                array.byteswap(inplace=True)

    return arrays, filled


def _block(size: int) -> np.ndarray:
    """``size`` bytes of new memory: an anonymous private mapping of the system's default
    pages, where there is one. numpy advises huge pages for an array this large, and how long
    their faults take depends on what the process freed before: Mask R-CNN's 170 MB of weights
    read in 26-30 ms right after another such block was freed, 95-129 ms after onnxruntime's
    own tensors were (2-core machine), and in 55-62 ms in every case with default pages.
    Smaller blocks, and every block where there is no such mapping (Windows), come from
    numpy, which advises huge pages from 4 MiB on Linux only."""
    if size < _HUGE_PAGES_FROM or not hasattr(mmap, "MAP_PRIVATE"):
        return np.empty(size, np.uint8)
    try:
        mapped = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError as error:  # a memory limit: numpy's error for it
        raise MemoryError(f"cannot map {size} bytes for the weights: {error}") from error
    return np.frombuffer(mapped, np.uint8)


_HUGE_PAGES_FROM = 1 << 22
"""The size from which numpy advises huge pages for an array's memory (Linux)."""
_READ_THREADS = 8
"""The most threads :func:`_fill` reads with."""
_READ_PIECE = 1 << 23
"""Bytes per piece of :func:`_fill`'s work (large weights are split)."""


def _fill(targets: list[tuple[np.ndarray, int]], data: FileData | memoryview
          ) -> Callable[[], None]:
    """Start filling each ``(target, start)`` with the bytes of ``data`` at ``start``, in
    pieces of :data:`_READ_PIECE` bytes on up to :data:`_READ_THREADS` threads: the fresh
    block's pages fault in as it fills, and faults on several cores go side by side (Mask
    R-CNN's 170 MB took 0.41 s on one thread in a fresh process on the 2-core machine). The
    function returned waits for the reads to end and raises the first one's error. Where
    there is one CPU, or a thread cannot start (a memory limit), the reads are done on this
    thread before it returns."""
    pieces = [(target[at:at + _READ_PIECE], start + at) for target, start in targets
              for at in range(0, target.size, _READ_PIECE)]

    def read(group: Sequence[tuple[np.ndarray, int]]) -> None:
        for target, start in group:
            if isinstance(data, FileData):
                data.read_into(target, start)
            else:
                target[:] = np.frombuffer(data, np.uint8, target.size, start)

    threads = min(_READ_THREADS, len(pieces), len(os.sched_getaffinity(0))
                  if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    if threads <= 1:
        read(pieces)
        return lambda: None
    pool = ThreadPoolExecutor(threads, thread_name_prefix="dml_onnx-weights")
    try:
        reads = [pool.submit(read, pieces[k::threads]) for k in range(threads)]
    except RuntimeError:  # "can't start new thread": the copies are idempotent
        pool.shutdown()
        read(pieces)
        return lambda: None
    except BaseException:  # Ctrl-C as a thread started, maybe before the pool registered it:
        pool.shutdown(wait=False)  # the end it queues reaches every reader
        raise

    def wait() -> None:
        pool.shutdown()  # every read ends
        for done in reads:
            done.result()

    return wait


_ALIGN = 64
"""Byte alignment of each array in :func:`_take_values`' block."""
