"""Walking models: element types of values, and where ``dml_onnx`` nodes may not be."""

from __future__ import annotations

import onnx

from dml_onnx.definition import DOMAIN, node_label
from dml_onnx.schemas import register_schemas


def element_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every value of the main graph whose type is known (declared,
    inferred with the domain's schemas, an initializer or a ``Constant``)."""
    register_schemas()
    graph = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False).graph
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


def reject_nested(model: onnx.ModelProto, what: str) -> None:
    """Raise ``ValueError`` for a ``dml_onnx`` node inside a subgraph or a model function
    (``what`` names the tool that cannot handle it)."""
    def visit(graph: onnx.GraphProto, where: str) -> None:
        for node in graph.node:
            for attribute in node.attribute:
                for sub in (*([attribute.g] if attribute.HasField("g") else []),
                            *attribute.graphs):
                    for inner in sub.node:
                        if inner.domain == DOMAIN:
                            raise ValueError(
                                f"{inner.op_type} '{node_label(inner)}': dml_onnx nodes inside "
                                f"a subgraph ({where} node '{node_label(node)}') are not "
                                f"supported by {what}")
                    visit(sub, node.op_type)
    visit(model.graph, "graph")
    for function in model.functions:
        for inner in function.node:
            if inner.domain == DOMAIN:
                raise ValueError(f"{inner.op_type} '{node_label(inner)}': dml_onnx nodes inside "
                                 f"model function '{function.name}' are not supported by "
                                 f"{what}")
