"""Models without their weights: the graph to rewrite and serialize, the weights apart.

:class:`dml_onnx.InferenceSession` rewrites a model's ``dml_onnx`` nodes and hands the rewritten
model to onnxruntime as bytes. Loading, copying and serializing a detector's weights (170 MB
for Mask R-CNN) took longer than onnxruntime's whole session creation, so the session takes
the large initializers out. A file or bytes is split on the wire: the large ``raw_data``
fields of the main graph's initializers are left out before parsing and read into numpy arrays
(a file's with ``os.pread``, once, never memory-mapped: a session owns its weights, whatever
happens to the file later); a ModelProto's become arrays too (one copy each). Each sits behind
a stub (``location`` = ``dml_onnx:<name>``), which onnxruntime takes as an external
initializer, or as a file in memory (:func:`in_memory_files`) where the options are the
caller's.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import secrets
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar, overload

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from dml_onnx.graphs import (
    WEIGHT_ELEMENTS,
    load_model,
    model_source,
    parse_model,
    varint_bytes,
    with_initializers,
)

_NUMPY_TYPES: dict[int, type[np.generic]] = {
    TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64,
    TensorProto.FLOAT16: np.float16, TensorProto.BOOL: np.bool_,
    TensorProto.INT8: np.int8, TensorProto.INT16: np.int16,
    TensorProto.INT32: np.int32, TensorProto.INT64: np.int64,
    TensorProto.UINT8: np.uint8, TensorProto.UINT16: np.uint16,
    TensorProto.UINT32: np.uint32, TensorProto.UINT64: np.uint64}
"""Element types whose values onnxruntime takes as a numpy array of this (little-endian) type."""

_GRAPH, _INITIALIZER, _RAW_DATA = 7, 5, 9
"""Field numbers of ModelProto.graph, GraphProto.initializer and TensorProto.raw_data."""
_WEIGHT_PATH = (_GRAPH, _INITIALIZER, _RAW_DATA)


_Result = TypeVar("_Result")


def load_without_weights(model: str | os.PathLike | bytes | onnx.ModelProto
                         ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """:func:`dml_onnx.graphs.load_model`'s model with every large numeric initializer of the
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
    whose file is not there stays external (:func:`~dml_onnx.graphs.parse_model`)."""
    if isinstance(model, onnx.ModelProto):
        stubbed, arrays = _stub_weights(model, {})
        if stubbed is model:  # nothing to stub: a copy, which the caller's later edits miss
            stubbed = onnx.ModelProto()
            stubbed.CopyFrom(model)
        return _with_result((stubbed, arrays), meanwhile)
    what, path = model_source(model)
    if path is not None and onnx.serialization.registry.get_format_from_file_extension(
            path.suffix) not in (None, "protobuf"):  # a text format: nothing to split
        return _with_result(_stub_weights(load_model(model), {}), meanwhile)
    source: _FileData | memoryview
    if path is not None:
        source = _FileData(path)
    else:
        assert isinstance(model, (bytes, bytearray)), "model_source: no path for bytes alone"
        source = memoryview(model)
    with source as data:
        try:
            light, spans = _without_raw_weights(data)
        except (ValueError, IndexError):  # not protobuf wire format: parse_model says why
            whole = data.read(0, len(data)) if isinstance(data, _FileData) else bytes(data)
            return _with_result(_stub_weights(parse_model(whole, what, path,
                                                          absent_left=absent_left), {}),
                                meanwhile)
        proto = parse_model(light, what, path, absent_left=absent_left)
        arrays, reads = _take_values(proto.graph.initializer, spans, data)
        try:
            stubbed, arrays = _stub_weights(proto, arrays)
            result = meanwhile(stubbed)
        except BaseException:
            with contextlib.suppress(Exception):  # the file's reads end before it closes
                reads()
            raise
        reads()
        if isinstance(data, _FileData):
            data.check_unchanged()
        return stubbed, arrays, result


def _with_result(loaded: tuple[onnx.ModelProto, dict[str, np.ndarray]],
                 meanwhile: Callable[[onnx.ModelProto], _Result]
                 ) -> tuple[onnx.ModelProto, dict[str, np.ndarray], _Result]:
    return *loaded, meanwhile(loaded[0])


def _split_off(tensor: TensorProto, span: tuple[int, int] | None,
               data: _FileData | memoryview, keep: bool) -> bool:
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
                 data: _FileData | memoryview
                 ) -> tuple[dict[str, np.ndarray], Callable[[], None]]:
    """The values of the initializers whose raw_data was left out at ``spans``, by name,
    where onnxruntime can take them as arrays; the others get their raw_data back. The
    arrays share one block (:func:`_block`), each at a 64-byte boundary: one large allocation
    fills about three times faster than thousands of small ones. The arrays are filled once
    the returned function has returned (:func:`_fill`)."""
    taken: list[tuple[TensorProto, type[np.generic], tuple[int, int]]] = []
    unique = len({t.name for t in initializers}) == len(initializers)
    for tensor, span in zip(initializers, spans, strict=True):
        numpy_type = _NUMPY_TYPES.get(tensor.data_type)
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


def _fill(targets: list[tuple[np.ndarray, int]], data: _FileData | memoryview
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
            if isinstance(data, _FileData):
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


def _stub_weights(model: onnx.ModelProto, arrays: dict[str, np.ndarray]
                  ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model with a stub for each initializer in ``arrays`` and for each other large one
    of a type in ``_NUMPY_TYPES`` that holds its values (which join ``arrays``)."""
    def stub(tensor: TensorProto) -> TensorProto:
        if tensor.name not in arrays:
            if (tensor.data_type not in _NUMPY_TYPES or math.prod(tensor.dims) <= WEIGHT_ELEMENTS
                    or tensor.data_location == TensorProto.EXTERNAL or not unique):
                return tensor
            try:
                arrays[tensor.name] = np.ascontiguousarray(numpy_helper.to_array(tensor))
            except ValueError:  # values that do not fill its dims: onnxruntime says so
                return tensor
        light = TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims,
                            data_location=TensorProto.EXTERNAL)
        light.external_data.add(key="location", value=f"{_STUB}{tensor.name}")
        return light

    unique = len({t.name for t in model.graph.initializer}) == len(model.graph.initializer)
    if not arrays and all(math.prod(t.dims) <= WEIGHT_ELEMENTS for t in model.graph.initializer):
        return model, arrays
    return with_initializers(model, stub), arrays


_STUB = "dml_onnx:"
"""How a stub's location starts: the session holds its values (:func:`_stub_weights`)."""


def read_by_onnxruntime(tensor: TensorProto) -> bool:
    """Whether ``tensor`` is external data other than a stub: onnxruntime reads its values
    (from the session options or a file), and the session holds no array of them."""
    return tensor.data_location == TensorProto.EXTERNAL and not any(
        entry.key == "location" and entry.value.startswith(_STUB)
        for entry in tensor.external_data)


def in_memory_files(model: onnx.ModelProto, arrays: dict[str, np.ndarray]
                    ) -> tuple[list[str], list[np.ndarray]]:
    """Point each of ``model``'s stubs named in ``arrays`` at an external-data file of its own
    held in memory, for onnxruntime's
    ``SessionOptions.add_external_initializers_from_files_in_memory``: the files' names and
    their bytes (raw_data's little-endian order, the arrays themselves where they are in it).
    onnxruntime copies the values as it creates the session and keeps no reference to them;
    the options keep each name, a random one that no later model names."""
    token = secrets.token_hex(16)
    names: list[str] = []
    buffers: list[np.ndarray] = []
    for tensor in model.graph.initializer:
        if tensor.name in arrays:
            array = arrays[tensor.name]
            values = array.astype(array.dtype.newbyteorder("<"), copy=False)
            names.append(f"dml_onnx-{token}-{len(names)}")
            del tensor.external_data[:]
            tensor.external_data.add(key="location", value=names[-1])
            tensor.external_data.add(key="length", value=str(values.nbytes))
            buffers.append(values.reshape(-1).view(np.uint8))
    return names, buffers


def _field(number: int, size: int) -> bytes:
    """The tag and length of a length-delimited field."""
    return varint_bytes(number << 3 | 2) + varint_bytes(size)


class _FileData:
    """A file's bytes by position, read with ``os.pread`` in blocks as the walk asks for them
    (not memory-mapped: a file cut short meanwhile gives short reads, which raise, where a
    mapping would kill the process with SIGBUS). A ``with`` block keeps the file open."""

    BLOCK = 1 << 16

    def __init__(self, path: Path) -> None:
        self._path = path

    def __enter__(self) -> _FileData:
        self._fd = os.open(self._path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        self._stat = self._identity()
        self._size = self._stat[0]
        self._start, self._block = 0, b""
        return self

    def _identity(self) -> tuple[int, int, int]:
        status = os.fstat(self._fd)
        return status.st_size, status.st_mtime_ns, status.st_ctime_ns

    def check_unchanged(self) -> None:
        """``OSError`` if the file was written while it was read (its parts may not fit)."""
        if self._identity() != self._stat:
            raise OSError(f"{self._path} changed while it was read: open it again")

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> bytes: ...

    def __getitem__(self, index: int | slice) -> int | bytes:
        if isinstance(index, slice):
            return self.read(index.start, index.stop - index.start)
        if not self._start <= index < self._start + len(self._block):
            self._start, self._block = index, os.pread(self._fd, self.BLOCK, index)
        return self._block[index - self._start]  # IndexError past the end

    def read(self, start: int, size: int) -> bytes:
        """``size`` bytes at ``start``; ``OSError`` if the file ends before."""
        if self._start <= start and start + size <= self._start + len(self._block):
            return self._block[start - self._start:start + size - self._start]
        buffer = bytearray(size)
        self.read_into(buffer, start)
        return bytes(buffer)

    def read_into(self, target: bytearray | np.ndarray, start: int) -> None:
        """Fill ``target`` with the bytes at ``start``; ``OSError`` if the file ends before."""
        # numpy's stubs give ndarray the buffer protocol for Python >= 3.12 alone
        view = memoryview(target).cast("B")  # type: ignore[arg-type]
        done = 0
        while done < len(view):
            count = os.preadv(self._fd, [view[done:]], start + done)
            if count == 0:
                raise OSError(f"{self._path} ended at byte {start + done} while it was read")
            done += count


def _without_raw_weights(data: bytes | _FileData | memoryview
                         ) -> tuple[bytes, list[tuple[int, int] | None]]:
    """The serialized ModelProto ``data`` without the ``raw_data`` of each of its main graph's
    initializers that has one ``raw_data`` field of more than WEIGHT_ELEMENTS bytes, and per
    initializer (in order) the ``(start, size)`` of the one left out, or ``None``. Raises
    ``ValueError`` or ``IndexError`` where ``data`` is not protobuf wire format."""
    spans: list[tuple[int, int] | None] = []
    return b"".join(_pieces(data, 0, len(data), _WEIGHT_PATH, spans)), spans


def _pieces(data: bytes | _FileData | memoryview, start: int, end: int,
            path: tuple[int, ...], spans: list[tuple[int, int] | None]) -> Iterator[bytes]:
    """The message ``data[start:end]`` re-encoded piece by piece: the fields on ``path`` are
    rebuilt (their lengths change), a large last one is left out, the rest copied."""
    if len(path) == 1:  # an initializer: the raw_data to leave out, if one large one
        raw = _only_raw_data(data, start, end, path[0])
        if raw is not None and raw[2] - raw[1] > WEIGHT_ELEMENTS:
            spans.append((raw[1], raw[2] - raw[1]))
            yield bytes(data[start:raw[0]])
            yield bytes(data[raw[2]:end])
        else:
            spans.append(None)
            yield bytes(data[start:end])
        return
    for number, wire_type, first, value_start, value_end in list(_fields(data, start, end)):
        if wire_type != 2 or number != path[0]:
            yield bytes(data[first:value_end])
        else:
            inner = b"".join(_pieces(data, value_start, value_end, path[1:], spans))
            yield _field(number, len(inner)) + inner


_TYPED_DATA = frozenset({4, 5, 6, 7, 10, 11})
"""Field numbers of TensorProto's typed values (float_data ... uint64_data)."""


def _only_raw_data(data: bytes | _FileData | memoryview, start: int, end: int, number: int
                   ) -> tuple[int, int, int] | None:
    """``(field start, value start, value end)`` of the TensorProto ``data[start:end]``'s
    raw_data field ``number`` where it is its only one and no typed values come before a
    second one; else ``None``. Stops at the first typed value: unpacked, they may be
    millions of fields (a raw_data beside them makes the tensor invalid anyway)."""
    found = None
    for field, wire_type, first, value_start, value_end in _fields(data, start, end):
        if field in _TYPED_DATA or (field == number and found is not None):
            return None
        if field == number and wire_type == 2:
            found = first, value_start, value_end
    return found


def _fields(data: bytes | _FileData | memoryview, start: int, end: int
            ) -> Iterator[tuple[int, int, int, int, int]]:
    """``(field number, wire type, field start, value start, value end)`` of each field of the
    message ``data[start:end]``."""
    position = start
    while position < end:
        first = position
        tag, position = _varint(data, position)
        wire_type = tag & 7
        if wire_type == 0:
            _, position = _varint(data, position)
            value_start = position
        elif wire_type in (1, 5):
            value_start, position = position, position + (8 if wire_type == 1 else 4)
        elif wire_type == 2:
            size, value_start = _varint(data, position)
            position = value_start + size
        else:
            raise ValueError(f"wire type {wire_type}")  # groups: ONNX has none
        if position > end or tag >> 3 == 0:
            raise ValueError("truncated field")
        yield tag >> 3, wire_type, first, value_start, position


def _varint(data: bytes | _FileData | memoryview, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position += 1
        if byte < 0x80:
            return value, position
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")
