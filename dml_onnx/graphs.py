"""Walking models: element types of values, and where ``dml_onnx`` nodes may not be."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError, Message

from dml_onnx.definition import DOMAIN, OPSET_VERSION, RUNTIME_DOMAIN, node_label
from dml_onnx.schemas import register_schemas


def load_model(model: str | os.PathLike | bytes | onnx.ModelProto) -> onnx.ModelProto:
    """A ModelProto from a path, serialized bytes or a ModelProto.

    Raises ``ValueError`` naming the file for what is not an ONNX model: a path that is not a
    regular file (a directory, FIFO or device is never read), an empty file, bytes protobuf
    cannot parse (a string that is not UTF-8 included), a message without an IR version or a
    graph; ``OSError`` for a file that
    cannot be opened.
    """
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        what, serialized = f"{len(model)} bytes", bytes(model)
    else:
        path = Path(os.fspath(model))
        what = str(path)
        if path.exists() and not path.is_file():
            raise ValueError(f"{what} is not a regular file")
        if path.is_file() and path.stat().st_size == 0:
            raise ValueError(f"{what} is empty")
        serialized = None
    try:
        proto = onnx.load(what) if serialized is None else onnx.load_from_string(serialized)
    except (DecodeError, UnicodeDecodeError) as error:  # a string field that is not UTF-8
        raise ValueError(f"{what} is not an ONNX model ({error})") from None
    if not proto.ir_version or not proto.HasField("graph"):
        raise ValueError(f"{what} is not an ONNX model (it has no IR version or no graph)")
    _check_strings(proto, what)
    return proto


def _check_strings(message: Message, what: str) -> None:
    """Raise ``ValueError`` for a string field that is not UTF-8: ONNX files are proto2,
    whose parser hands such a string over as bytes (or fails later, on reading it)."""
    for field in message.DESCRIPTOR.fields:  # not ListFields: it copies every bytes field
        if field.type not in (field.TYPE_MESSAGE, field.TYPE_STRING):
            continue
        value = getattr(message, field.name)
        singular = isinstance(value, (Message, str, bytes))
        if field.type == field.TYPE_MESSAGE:
            if not singular or message.HasField(field.name):
                for item in [value] if singular else value:
                    _check_strings(item, what)
            continue
        for item in [value] if singular else value:
            if not isinstance(item, str):
                raise ValueError(f"{what} is not an ONNX model (field "
                                 f"{field.full_name} {item!r} is not UTF-8)")


WEIGHT_ELEMENTS = 1 << 12
"""Initializers of more elements are weights: their values are never shape data, and copying
them (to onnx's shape inference, into onnxruntime's serialized model) dominates the cost."""


def without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model as shape inference needs it: large initializers keep their name, type and
    dims but no values (the model itself when it has none)."""
    if all(math.prod(t.dims) <= WEIGHT_ELEMENTS for t in model.graph.initializer):
        return model
    source = model.graph
    graph = onnx.GraphProto(name=source.name, node=source.node, input=source.input,
                            output=source.output, value_info=source.value_info,
                            sparse_initializer=source.sparse_initializer)
    for tensor in source.initializer:
        if math.prod(tensor.dims) <= WEIGHT_ELEMENTS:
            graph.initializer.append(tensor)
        else:
            graph.initializer.add(name=tensor.name, data_type=tensor.data_type,
                                  dims=tensor.dims)
    return onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import,
                           functions=model.functions, graph=graph)


def element_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every value of the main graph whose type is known (declared,
    inferred with the domain's schemas, an initializer or a ``Constant``)."""
    register_schemas()
    graph = onnx.shape_inference.infer_shapes(without_weights(model), check_type=False,
                                              strict_mode=False).graph
    types = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
            types[value.name] = value.type.tensor_type.elem_type
    for tensor in graph.initializer:
        types[tensor.name] = tensor.data_type
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for attribute in node.attribute:
                if attribute.name == "value":
                    types[node.output[0]] = attribute.t.data_type
    return types


def static_dims(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    """The dimensions of every value of the main graph whose rank is known (declared or
    inferred), ``None`` for a dimension that is not a fixed number."""
    register_schemas()
    graph = onnx.shape_inference.infer_shapes(without_weights(model), check_type=False,
                                              strict_mode=False).graph
    return {value.name: [d.dim_value if d.HasField("dim_value") else None
                         for d in value.type.tensor_type.shape.dim]
            for value in (*graph.input, *graph.value_info, *graph.output)
            if value.type.tensor_type.HasField("shape")}


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs held by the node's attributes (an ``If``'s branches, a ``Loop``'s body)."""
    for attribute in node.attribute:
        if attribute.HasField("g"):
            yield attribute.g
        yield from attribute.graphs


def structure_problems(model: onnx.ModelProto, what: str) -> list[str]:
    """What the model holds that ``what`` (the tool) refuses, whatever its nodes' attributes:
    a string field that is not UTF-8, an opset import of the domain other than
    :data:`OPSET_VERSION`, ``dml_onnx`` nodes inside a subgraph or a model function (at any
    depth), and nodes of the binding's private domain :data:`RUNTIME_DOMAIN` (only
    :func:`dml_onnx.to_runtime_model` writes those)."""
    try:
        _check_strings(model, "the model")
    except ValueError as error:
        return [f"model: {error}"]  # the rest reads those strings
    problems = []
    versions = {o.domain: o.version for o in model.opset_import}
    if any(node.domain == DOMAIN for node in model.graph.node) and \
            versions.get(DOMAIN) != OPSET_VERSION:
        problems.append(f"model: opset import {DOMAIN} version {versions.get(DOMAIN)} is not "
                        f"{OPSET_VERSION}")

    def visit(nodes: Iterable[onnx.NodeProto], where: str | None) -> None:
        for node in nodes:
            if node.domain == RUNTIME_DOMAIN:
                problems.append(f"{node.op_type} '{node_label(node)}': domain {RUNTIME_DOMAIN} "
                                "is private to the onnxruntime binding (models hold "
                                f"{DOMAIN} nodes)")
            elif node.domain == DOMAIN and where is not None:
                problems.append(f"{node.op_type} '{node_label(node)}': dml_onnx nodes inside "
                                f"{where} are not supported by {what}")
            for sub in subgraphs(node):
                visit(sub.node, where or f"a subgraph ({node.op_type} node "
                                         f"'{node_label(node)}')")
    visit(model.graph.node, None)
    for function in model.functions:
        visit(function.node, f"model function '{function.name}'")
    return list(dict.fromkeys(problems))  # a node of both branches of an If once


def check_structure(model: onnx.ModelProto, what: str) -> None:
    """Raise ``ValueError`` with the first of :func:`structure_problems`."""
    problems = structure_problems(model, what)
    if problems:
        raise ValueError(problems[0])
