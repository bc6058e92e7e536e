"""The load stage's reading of a serialized model: a file's bytes by position
(:class:`FileData`), and the protobuf wire format walked to leave out the large ``raw_data``
of the main graph's initializers before the rest is parsed (:func:`without_raw_weights`), so
that :mod:`~dml_onnx.runtime.weights` reads those bytes into arrays once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import overload

import numpy as np

from dml_onnx.model_files import WEIGHT_ELEMENTS, varint_bytes

_GRAPH, _INITIALIZER, _RAW_DATA = 7, 5, 9
"""Field numbers of ModelProto.graph, GraphProto.initializer and TensorProto.raw_data."""
_WEIGHT_PATH = (_GRAPH, _INITIALIZER, _RAW_DATA)


def _field(number: int, size: int) -> bytes:
    """The tag and length of a length-delimited field."""
    return varint_bytes(number << 3 | 2) + varint_bytes(size)


class FileData:
    """A file's bytes by position, read with ``os.pread`` in blocks as the walk asks for them
    (not memory-mapped: a file cut short meanwhile gives short reads, which raise, where a
    mapping would kill the process with SIGBUS). A ``with`` block keeps the file open."""

    BLOCK = 1 << 16

    def __init__(self, path: Path) -> None:
        self._path = path

    def __enter__(self) -> FileData:
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


def without_raw_weights(data: bytes | FileData | memoryview
                        ) -> tuple[bytes, list[tuple[int, int] | None]]:
    """The serialized ModelProto ``data`` without the ``raw_data`` of each of its main graph's
    initializers that has one ``raw_data`` field of more than WEIGHT_ELEMENTS bytes, and per
    initializer (in order) the ``(start, size)`` of the one left out, or ``None``. Raises
    ``ValueError`` or ``IndexError`` where ``data`` is not protobuf wire format."""
    spans: list[tuple[int, int] | None] = []
    return b"".join(_pieces(data, 0, len(data), _WEIGHT_PATH, spans)), spans


def _pieces(data: bytes | FileData | memoryview, start: int, end: int,
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


def _only_raw_data(data: bytes | FileData | memoryview, start: int, end: int, number: int
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


def _fields(data: bytes | FileData | memoryview, start: int, end: int
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


def _varint(data: bytes | FileData | memoryview, position: int) -> tuple[int, int]:
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

