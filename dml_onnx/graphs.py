"""Walking models: every node at any depth (:func:`walk_nodes`), element types of values, and
where ``dml_onnx`` nodes may not be."""

from __future__ import annotations

import contextlib
import math
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import onnx
from google.protobuf import (
    json_format,
    text_format,
    unknown_fields,
)
from google.protobuf.message import DecodeError, Message

from dml_onnx._utf8 import check_strings, strings_are_utf8
from dml_onnx.definition import DOMAIN, DOMAIN_VERSION, RUNTIME_DOMAIN, node_label
from dml_onnx.schemas import register_schemas


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
    _copy_fields(model, result, skipped="graph")
    _copy_fields(model.graph, result.graph, skipped="initializer")
    result.graph.initializer.extend(replace(tensor) for tensor in model.graph.initializer)
    return result


def _copy_fields(source: Message, target: Message, skipped: str) -> None:
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


def inferred_graph(model: onnx.ModelProto) -> onnx.GraphProto:
    """The main graph with onnx's shape inference (the domain's schemas registered);
    ``ValueError`` where a node contradicts its schema."""
    register_schemas()
    try:
        return onnx.shape_inference.infer_shapes(without_weights(model), check_type=False,
                                                 strict_mode=False).graph
    except onnx.shape_inference.InferenceError as error:
        raise ValueError(f"model: {str(error).splitlines()[0]}") from None


def element_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every value of the main graph whose type is known (declared,
    inferred with the domain's schemas, an initializer or a ``Constant``)."""
    return element_types_and_ranks(model)[0]


def element_types_and_ranks(model: onnx.ModelProto) -> tuple[dict[str, int], dict[str, int]]:
    """:func:`element_types`, and the rank of every tensor value whose rank is known, from one
    shape inference."""
    graph = inferred_graph(model)
    types, ranks = {}, {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        tensor = value.type.tensor_type
        if value.type.HasField("tensor_type") and tensor.elem_type:
            types[value.name] = tensor.elem_type
            if tensor.HasField("shape"):
                ranks[value.name] = len(tensor.shape.dim)
    constants = [(node.output[0], attribute.t) for node in graph.node
                 if node.op_type == "Constant" and node.domain in ("", "ai.onnx")
                 for attribute in node.attribute if attribute.name == "value"]
    for name, tensor in [*((t.name, t) for t in graph.initializer), *constants]:
        types[name], ranks[name] = tensor.data_type, len(tensor.dims)
    return types, ranks


def static_dims(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    """The dimensions of every value of the main graph whose rank is known (declared or
    inferred), ``None`` for a dimension that is not a fixed number."""
    graph = inferred_graph(model)
    return {value.name: [d.dim_value if d.HasField("dim_value") else None
                         for d in value.type.tensor_type.shape.dim]
            for value in (*graph.input, *graph.value_info, *graph.output)
            if value.type.tensor_type.HasField("shape")}


def unused_prefix(graph: onnx.GraphProto, base: str) -> str:
    """``base``, lengthened by underscores until no name in the graph or its subgraphs (at any
    depth: value, initializer and node names) starts with it, so that names made from it are
    new in every scope (a branch's own value of that name would break single assignment).

    Every name is in the graph's serialized bytes, so a prefix whose bytes are nowhere in them
    starts none (it may be lengthened where its text is inside another string, which is
    harmless); the main graph's initializers are left out of the bytes (their values may be
    hundreds of MB) and their names checked one by one."""
    skeleton = onnx.GraphProto()
    _copy_fields(graph, skeleton, skipped="initializer")
    serialized = skeleton.SerializeToString()
    initializers = [tensor.name for tensor in graph.initializer]
    prefix = base
    while prefix.encode() in serialized or any(name.startswith(prefix) for name in initializers):
        prefix += "_"
    return prefix


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs held by the node's attributes (an ``If``'s branches, a ``Loop``'s body)."""
    for attribute in node.attribute:
        if attribute.HasField("g"):
            yield attribute.g
        yield from attribute.graphs


def walk_nodes(graph: onnx.GraphProto | onnx.FunctionProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``graph`` (or of a function's body) and of the subgraphs its nodes hold
    (an ``If``'s branches, a ``Loop``'s or ``Scan``'s body, any graph attribute), at any depth;
    each node comes before the nodes inside it."""
    for node in graph.node:
        yield node
        for sub in subgraphs(node):
            yield from walk_nodes(sub)


def nested_graphs(graph: onnx.GraphProto | onnx.FunctionProto) -> Iterator[onnx.GraphProto]:
    """Every subgraph inside ``graph`` (not ``graph`` itself), at any depth."""
    for node in walk_nodes(graph):
        yield from subgraphs(node)


MISSING_DOMAIN_IMPORT = (
    f"no opset import of the {DOMAIN} domain, which its nodes use: add "
    f"onnx.helper.make_opsetid('{DOMAIN}', {DOMAIN_VERSION}) to the model's opset imports "
    f"(onnx.helper.make_model(..., opset_imports=[..., onnx.helper.make_opsetid('{DOMAIN}', "
    f"{DOMAIN_VERSION})]), or model.opset_import.append(...)), or build the model with "
    "dml_onnx.make_model, which imports it")
"""What is wrong with a model whose ``dml_onnx`` nodes the model does not import (as
``onnx.helper.make_model`` makes it without ``opset_imports``), and how to fix it."""


def structure_problems(model: onnx.ModelProto, what: str, *, strings: bool = True,
                       schemas: bool = True) -> list[str]:
    """What the model holds that ``what`` (the tool) refuses, whatever its nodes' attributes:
    a string field that is not UTF-8, a standard node that contradicts its schema
    (:func:`schema_problems`; ``schemas=False``: onnxruntime checks them itself), an opset
    import of the domain other than :data:`DOMAIN_VERSION`, ``dml_onnx`` nodes inside a
    subgraph or a model function (at any depth), and nodes of the binding's private domain
    :data:`RUNTIME_DOMAIN` (only :func:`dml_onnx.to_runtime_model` writes those)."""
    try:
        if strings:  # False: the caller checked them (load_model did)
            check_strings(model, "the model")
    except ValueError as error:
        return [f"model: {error}"]  # the rest reads those strings
    problems = []
    versions = {o.domain: o.version for o in model.opset_import}
    if any(node.domain == DOMAIN for node in model.graph.node):
        if DOMAIN not in versions:
            problems.append(f"model: {MISSING_DOMAIN_IMPORT}")
        elif versions[DOMAIN] != DOMAIN_VERSION:
            problems.append(f"model: opset import {DOMAIN} version {versions[DOMAIN]} is not "
                            f"{DOMAIN_VERSION}")

    standard = versions.get("", versions.get("ai.onnx")) if schemas else None

    def check(node: onnx.NodeProto, where: str | None) -> None:
        if node.domain in ("", "ai.onnx") and standard is not None:
            problems.extend(schema_problems(node, standard))
        if node.domain == RUNTIME_DOMAIN:
            problems.append(f"{node.op_type} '{node_label(node)}': domain {RUNTIME_DOMAIN} "
                            "is private to the onnxruntime binding (models hold "
                            f"{DOMAIN} nodes)")
        elif node.domain == DOMAIN and where is not None:
            problems.append(f"{node.op_type} '{node_label(node)}': dml_onnx nodes inside "
                            f"{where} are not supported by {what}")

    for node in model.graph.node:
        check(node, None)
        for sub in subgraphs(node):
            for inner in walk_nodes(sub):
                check(inner, f"a subgraph ({node.op_type} node '{node_label(node)}')")
    for function in model.functions:
        for node in walk_nodes(function):
            check(node, f"model function '{function.name}'")
    return list(dict.fromkeys(problems))  # a node of both branches of an If once


def schema_problems(node: onnx.NodeProto, opset: int) -> list[str]:
    """Where a standard node contradicts its onnx schema at ``opset`` (which onnxruntime
    refuses too): its input count, a required input left empty, a required attribute
    missing, an attribute of another type. None for an op onnx does not know."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return []
    label = f"{node.op_type} '{node_label(node)}'"
    name = f"{node.op_type}-{schema.since_version}"
    problems = []
    count = len(node.input)
    if not schema.min_input <= count <= schema.max_input:
        takes = (f"{schema.min_input}" if schema.min_input == schema.max_input else
                 f"{schema.min_input} to {schema.max_input}")
        problems.append(f"{label}: {count} inputs where {name} takes {takes}")
    for index, formal in enumerate(schema.inputs[:count]):
        if formal.option == onnx.defs.OpSchema.FormalParameterOption.Single and \
                not node.input[index]:
            problems.append(f"{label}: input {index} ({formal.name}) is required by {name}")
    given = {attribute.name: attribute for attribute in node.attribute}
    for attribute in schema.attributes.values():
        if attribute.required and attribute.name not in given:
            problems.append(f"{label}: attribute {attribute.name!r} is required by {name}")
        elif attribute.name in given and given[attribute.name].type not in (
                attribute.type, onnx.AttributeProto.UNDEFINED):
            problems.append(f"{label}: attribute {attribute.name!r} is "
                            f"{onnx.AttributeProto.AttributeType.Name(given[attribute.name].type)}"
                            f" where {name} takes "
                            f"{onnx.AttributeProto.AttributeType.Name(attribute.type)}")
    return problems


def check_structure(model: onnx.ModelProto, what: str, *, strings: bool = True,
                    schemas: bool = True) -> None:
    """Raise ``ValueError`` with the first of :func:`structure_problems`."""
    problems = structure_problems(model, what, strings=strings, schemas=schemas)
    if problems:
        raise ValueError(problems[0])
