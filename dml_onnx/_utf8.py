"""The check that every string field of an ONNX model is UTF-8: ONNX files are proto2, whose
parser hands a string that is not UTF-8 over as bytes (or fails later, on reading it)."""

from __future__ import annotations

import functools
from collections.abc import Iterable

import onnx
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message


def strings_are_utf8(serialized: bytes) -> bool:
    """Whether every string field of the ModelProto ``serialized`` is UTF-8 (False also where
    that cannot be told this way)."""
    checking = _utf8_checking_model()
    if checking is None:
        return False
    try:
        checking.FromString(serialized)
    except (DecodeError, UnicodeDecodeError):
        return False
    return True


@functools.cache
def _utf8_checking_model() -> type[Message] | None:
    """onnx's ModelProto declared again as proto3, whose parser checks that every string is
    UTF-8 (proto2's hands such a string over as bytes); ``None`` where protobuf refuses it."""
    declared = descriptor_pb2.FileDescriptorProto()
    onnx.ModelProto.DESCRIPTOR.file.CopyToProto(declared)
    if declared.dependency:
        return None
    package = declared.package
    declared.package, declared.name = f"dml_onnx_utf8.{package}", "dml_onnx_utf8/onnx.proto"
    declared.syntax = "proto3"

    def to_proto3(messages: Iterable[descriptor_pb2.DescriptorProto]) -> None:
        for message in messages:
            for field in message.field:
                field.ClearField("default_value")
                field.ClearField("proto3_optional")
                if field.label == field.LABEL_REQUIRED:
                    field.label = field.LABEL_OPTIONAL
                if field.type_name:
                    field.type_name = field.type_name.replace(f".{package}.",
                                                              f".{declared.package}.", 1)
            to_proto3(message.nested_type)
    to_proto3(declared.message_type)
    try:
        pool = descriptor_pool.DescriptorPool()
        pool.Add(declared)
        return message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"{declared.package}.ModelProto"))
    except Exception:  # noqa: BLE001 - an enum or field proto3 refuses: walk the fields instead
        return None


def check_strings(message: Message, what: str) -> None:
    """Raise ``ValueError`` for a string field that is not UTF-8: ONNX files are proto2,
    whose parser hands such a string over as bytes (or fails later, on reading it)."""
    if message.DESCRIPTOR is onnx.TensorProto.DESCRIPTOR:  # ListFields copies raw_data
        fields = [(field, getattr(message, field.name)) for field in _TENSOR_TEXT_FIELDS]
    else:
        fields = message.ListFields()
    for field, value in fields:
        if field.type == field.TYPE_MESSAGE:
            for item in [value] if isinstance(value, Message) else value:
                check_strings(item, what)
        elif field.type == field.TYPE_STRING and not isinstance(value, str):
            for item in [value] if isinstance(value, bytes) else value:
                if not isinstance(item, str):
                    raise ValueError(f"{what} is not an ONNX model (field {field.full_name} "
                                     f"{item!r} is not UTF-8)")


_TENSOR_TEXT_FIELDS = tuple(field for field in onnx.TensorProto.DESCRIPTOR.fields
                            if field.type in (field.TYPE_MESSAGE, field.TYPE_STRING))
"""The message and string fields of a TensorProto (an unset message reads as empty)."""
