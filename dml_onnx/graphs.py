"""Walking models: every node at any depth (:func:`walk_nodes`), element types of values, and
where ``dml_onnx`` nodes may not be."""

from __future__ import annotations

from collections.abc import Iterator

import onnx

from dml_onnx._utf8 import check_strings
from dml_onnx.definition import DOMAIN, DOMAIN_VERSION, RUNTIME_DOMAIN, node_label
from dml_onnx.model_files import copy_fields, without_weights
from dml_onnx.schemas import register_schemas


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


Dims = dict[str, tuple[int | None, ...]]
"""Each value's dimensions where its rank is known: ``None`` for one not a fixed number."""


def element_types_and_ranks(model: onnx.ModelProto) -> tuple[dict[str, int], dict[str, int]]:
    """:func:`element_types`, and the rank of every tensor value whose rank is known, from one
    shape inference."""
    types, dims = element_types_and_dims(model)
    return types, {name: len(shape) for name, shape in dims.items()}


def element_types_and_dims(model: onnx.ModelProto) -> tuple[dict[str, int], Dims]:
    """:func:`element_types`, and the dimensions of every tensor value whose rank is known
    (:data:`Dims`), from one shape inference."""
    graph = inferred_graph(model)
    types: dict[str, int] = {}
    dims: Dims = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        tensor = value.type.tensor_type
        if value.type.HasField("tensor_type") and tensor.elem_type:
            types[value.name] = tensor.elem_type
            if tensor.HasField("shape"):
                dims[value.name] = tuple(d.dim_value if d.HasField("dim_value") else None
                                         for d in tensor.shape.dim)
    constants = [(node.output[0], attribute.t) for node in graph.node
                 if node.op_type == "Constant" and node.domain in ("", "ai.onnx")
                 for attribute in node.attribute if attribute.name == "value"]
    for name, tensor in [*((t.name, t) for t in graph.initializer), *constants]:
        types[name], dims[name] = tensor.data_type, tuple(tensor.dims)
    return types, dims


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
    copy_fields(graph, skeleton, skipped="initializer")
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
