"""Model files: reading a model from a path or bytes with its checks (:func:`load_model`),
writing one without leaving a part-written file (:func:`save_model`), and copies without the
large weights that shape inference and onnxruntime's serialized models need
(:func:`without_weights`)."""

from __future__ import annotations

import contextlib
import math
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

import onnx
from google.protobuf import (
    json_format,
    text_format,
    unknown_fields,
)
from google.protobuf.message import DecodeError, Message

from dml_onnx._utf8 import check_strings, strings_are_utf8


def save_model(model: onnx.ModelProto, path: str | os.PathLike) -> None:
    """Write ``model`` to ``path`` (:func:`write_file`); a model over 2 GB fails before any
    write."""
    write_file(path, model.SerializeToString())


def write_file(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` (through a symbolic link to its target) without ever
    leaving a part-written file there: the bytes go to a temporary file beside it, which then
    replaces it in one rename. An existing file keeps its permissions, a new one gets the
    umask's; a failure leaves what was at ``path`` as it was. A target that is not a regular
    file (a device, a FIFO) is written through and never replaced: a rename would turn
    ``/dev/null`` into a regular file, and a full device's error is raised."""
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        regular = True  # created by the rename
    if not regular:
        with os.fdopen(os.open(path, os.O_WRONLY), "wb") as file:
            file.write(data)
        return
    target = Path(os.path.realpath(path))
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                         suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        if target.exists():
            os.chmod(temporary, target.stat().st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def load_model(model: str | os.PathLike | bytes | onnx.ModelProto) -> onnx.ModelProto:
    """A ModelProto from a path, serialized bytes or a ModelProto.

    Raises ``ValueError`` naming the file for what is not an ONNX model: a path that is not a
    regular file (a directory, FIFO or device is never read), an empty file, bytes protobuf
    cannot parse (a string that is not UTF-8 included), a message without an IR version or a
    graph; ``OSError`` for a file that cannot be opened.
    """
    if isinstance(model, onnx.ModelProto):
        return model
    what, path = model_source(model)
    if path is None:
        assert isinstance(model, (bytes, bytearray)), "model_source: no path for bytes alone"
        return parse_model(bytes(model), what, None)
    return _checked(what, lambda: _load_file(what, path))


def _load_file(what: str, path: Path) -> onnx.ModelProto:
    """``onnx.load`` in the format the file's name says; a text-format name (``.json``,
    ``.textproto`` ...) over a binary model reads as protobuf, as onnxruntime reads it."""
    try:
        return onnx.load(what)
    except (json_format.ParseError, text_format.ParseError, UnicodeDecodeError) as error:
        if onnx.serialization.registry.get_format_from_file_extension(path.suffix) in (
                None, "protobuf"):
            raise
        try:
            return onnx.load(what, format="protobuf")
        except DecodeError:
            raise ValueError(f"{what} is not an ONNX model (neither the format its name "
                             f"says: {str(error).splitlines()[0]}, nor protobuf)") from None


def read_regular(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of the regular file at ``path`` (through links); ``ValueError`` naming it
    for anything else (a FIFO, a device or ``/dev/zero`` behind a link is opened without
    blocking and never read) and for a file over ``limit`` bytes."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(descriptor, "rb") as file:
        status = os.fstat(file.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise ValueError(f"{path} is not a regular file")
        if status.st_size > limit:
            raise ValueError(f"{path} is {status.st_size} bytes, above the {limit} read here")
        return file.read(limit + 1)[:limit]


def model_source(model: str | os.PathLike | bytes) -> tuple[str, Path | None]:
    """What errors call a path or bytes, and the path (``None`` for bytes); raises
    ``ValueError`` for a path that is not a regular file or is empty."""
    if isinstance(model, (bytes, bytearray)):
        return f"{len(model)} bytes", None
    path = Path(os.fspath(model))
    if path.exists() and not path.is_file():
        raise ValueError(f"{path} is not a regular file")
    if path.is_file() and path.stat().st_size == 0:
        raise ValueError(f"{path} is empty")
    return str(path), path


def parse_model(data: bytes, what: str, path: Path | None, *, absent_left: bool = False
                ) -> onnx.ModelProto:
    """The ModelProto serialized in ``data``, its external data read next to ``path`` (the
    file ``data`` came from, ``None`` for none); raises as :func:`load_model`. With
    ``absent_left`` an initializer of the main graph whose file is not there stays external
    data: onnxruntime may take its values from the session options (external initializers or
    files in memory)."""
    def parse() -> onnx.ModelProto:
        proto = onnx.load_from_string(data)
        if path is not None and b"location" in data:  # else no tensor names a file (the
            # walk over every tensor of every node takes 20 ms on Mask R-CNN)
            left = [t for t in proto.graph.initializer if absent_left
                    and t.data_location == onnx.TensorProto.EXTERNAL
                    and not (path.parent / _location(t)).exists()]
            for tensor in left:  # hidden from onnx's loader, which reads the others
                tensor.data_location = onnx.TensorProto.DEFAULT
            onnx.external_data_helper.load_external_data_for_model(proto, str(path.parent))
            for tensor in left:
                tensor.data_location = onnx.TensorProto.EXTERNAL
        return proto
    return _checked(what, parse, data)


def _location(tensor: onnx.TensorProto) -> str:
    """The file an external-data tensor names ("" for none)."""
    return next((entry.value for entry in tensor.external_data if entry.key == "location"), "")


def _checked(what: str, load: Callable[[], onnx.ModelProto],
             serialized: bytes | None = None) -> onnx.ModelProto:
    """``load()``'s model, its strings checked (through ``serialized``, its bytes, where
    given: a parse that checks them takes 1 ms where the walk over every field takes 26 on
    Mask R-CNN)."""
    try:
        proto = load()
    except (DecodeError, UnicodeDecodeError) as error:  # a string field that is not UTF-8
        raise ValueError(f"{what} is not an ONNX model ({error})") from None
    if not proto.ir_version or not proto.HasField("graph"):
        raise ValueError(f"{what} is not an ONNX model (it has no IR version or no graph)")
    if serialized is None or not strings_are_utf8(serialized):
        check_strings(proto, what)  # names the field
    return proto


WEIGHT_ELEMENTS = 1 << 12
"""Initializers of more elements are weights: their values are never shape data, and copying
them (to onnx's shape inference, into onnxruntime's serialized model) dominates the cost."""


def without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model as shape inference needs it: large initializers keep their name, type and
    dims but no values (the model itself when it has none)."""
    if all(math.prod(t.dims) <= WEIGHT_ELEMENTS for t in model.graph.initializer):
        return model
    return with_initializers(model, lambda tensor: tensor if math.prod(tensor.dims) <=
                             WEIGHT_ELEMENTS else onnx.TensorProto(
                                 name=tensor.name, data_type=tensor.data_type, dims=tensor.dims))


def with_initializers(model: onnx.ModelProto,
                      replace: Callable[[onnx.TensorProto], onnx.TensorProto]
                      ) -> onnx.ModelProto:
    """A copy of the model whose main graph's initializers are ``replace(tensor)`` each (the
    tensor itself keeps it); the replaced ones are never copied, the rest is."""
    result = onnx.ModelProto()
    copy_fields(model, result, skipped="graph")
    copy_fields(model.graph, result.graph, skipped="initializer")
    result.graph.initializer.extend(replace(tensor) for tensor in model.graph.initializer)
    return result


def copy_fields(source: Message, target: Message, skipped: str) -> None:
    """Copy every field of ``source`` into ``target`` but ``skipped``, which is never read,
    fields that the schema does not know included (a newer onnx's, or a damaged file's: they
    stay as protobuf's parser keeps them)."""
    for field, value in source.ListFields():
        if field.name == skipped:
            continue
        if isinstance(value, Message):
            getattr(target, field.name).CopyFrom(value)
        elif isinstance(value, (str, bytes, int, float)):
            setattr(target, field.name, value)
        else:  # a repeated field
            getattr(target, field.name).extend(value)
    target.MergeFromString(_encoded(unknown_fields.UnknownFieldSet(source)))


def _encoded(fields: unknown_fields.UnknownFieldSet) -> bytes:
    """Unknown fields in protobuf's wire format, as they were read."""
    out = bytearray()
    for field in fields:
        out += varint_bytes(field.field_number << 3 | field.wire_type)
        if field.wire_type == 0:  # varint
            out += varint_bytes(field.data)
        elif field.wire_type == 1:  # 64-bit
            out += field.data.to_bytes(8, "little")
        elif field.wire_type == 2:  # length-delimited
            out += varint_bytes(len(field.data)) + field.data
        elif field.wire_type == 3:  # a group, up to its end tag
            out += _encoded(field.data) + varint_bytes(field.field_number << 3 | 4)
        else:  # 32-bit
            out += field.data.to_bytes(4, "little")
    return bytes(out)


def varint_bytes(value: int) -> bytes:
    """``value`` (unsigned) as a protobuf varint."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
