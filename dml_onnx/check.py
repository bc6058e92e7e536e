"""``dml-onnx check``: every problem of a model's ``dml_onnx`` nodes, without running it.

:func:`model_problems` (``check_model``, its earlier name, warns) validates each
``dml_onnx`` node of the main graph the way the layers that load and run it do: the operator
exists, inputs and outputs fit its signature, attributes have their types and valid values
(:meth:`OpDefinition.check_node`), input element types fit the type constraints, shapes pass
the operator's shape inference (onnx shape inference with the domain's schemas, so shapes flow
through standard nodes too) and outputs whose sizes are known fit the memory limit
(:func:`dml_onnx.memory_limit`). Problems found only with data (ROI values, batch indices)
need a run: :class:`dml_onnx.InferenceSession` reports those.
"""

from __future__ import annotations

import os
from typing import Any

import onnx
from onnx import helper

from dml_onnx._renamed import renamed_attribute
from dml_onnx.calls import output_memory_errors
from dml_onnx.definition import DOMAIN, Shape, node_label
from dml_onnx.graphs import element_types, structure_problems
from dml_onnx.model_files import load_model, without_weights
from dml_onnx.ops import OPERATORS_BY_NAME
from dml_onnx.schemas import lenient_inference, register_schemas


def model_problems(model: str | os.PathLike | bytes | onnx.ModelProto) -> list[str]:
    """The problems of a model (a path, serialized bytes or a ModelProto), in graph order.

    Each problem of a node reads ``"<Op> '<node>': <field> <value> <rule>"``; problems of the
    model as a whole start with ``"model: "``. An empty list: nothing wrong that shows
    without input values (ROI coordinates, batch indices, sizes the model leaves open).
    """
    try:
        model = load_model(model)
    except (OSError, ValueError) as error:
        return [f"model: cannot be read as ONNX ({error})"]
    register_schemas()
    problems = structure_problems(model, "dml_onnx")
    try:
        with lenient_inference():
            inferred = onnx.shape_inference.infer_shapes(without_weights(model),
                                                         check_type=False, strict_mode=False)
            types = element_types(inferred)
    except (onnx.shape_inference.InferenceError, ValueError) as error:
        # a node that contradicts its schema (said above, if it is a standard one)
        return problems or [f"model: {str(error).splitlines()[0]}"]
    shapes = _shapes(inferred.graph)
    for node in model.graph.node:
        if node.domain == DOMAIN:
            problems += _node_problems(node, types, shapes)
    return problems


def __getattr__(name: str) -> Any:  # the earlier names (check_model), with a warning
    return renamed_attribute(__name__, name)


def _shapes(graph: onnx.GraphProto) -> dict[str, Shape]:
    """Known shapes of the graph's values (declared, inferred or initializers)."""
    shapes: dict[str, Shape] = {t.name: list(t.dims) for t in graph.initializer}
    for value in (*graph.input, *graph.value_info, *graph.output):
        tensor = value.type.tensor_type
        if value.type.HasField("tensor_type") and tensor.HasField("shape"):
            shapes[value.name] = [d.dim_value if d.HasField("dim_value") else
                                  d.dim_param or None for d in tensor.shape.dim]
    return shapes


def _node_problems(node: onnx.NodeProto, types: dict[str, int],
                   shapes: dict[str, Shape]) -> list[str]:
    """The problems of one ``dml_onnx`` node: signature and attributes first (the rest
    needs them), then element types, and shapes (the shape function of its schema, over the
    input shapes that inference found) with the memory limit."""
    label = node_label(node)
    definition = OPERATORS_BY_NAME.get(node.op_type)
    if definition is None:
        return [f"{node.op_type} '{label}': op type '{node.op_type}' is not an operator of the "
                f"{DOMAIN} domain (known: {', '.join(OPERATORS_BY_NAME)})"]
    try:
        attributes = definition.check_node(node)
    except ValueError as error:
        return [str(error)]
    problems = []
    try:
        elem_types = definition.input_element_types(node, types)
    except ValueError as error:
        problems.append(str(error))
        elem_types = {}
    input_shapes = [shapes.get(node.input[i]) if i < len(node.input) and node.input[i] else None
                    for i in range(len(definition.inputs))]
    try:
        output_shapes = definition.infer_shapes(input_shapes, attributes, label)
    except ValueError as error:
        return [*problems, str(error)]
    dtypes = {name: helper.tensor_dtype_to_np_dtype(elem) for name, elem in elem_types.items()}
    present = [k < len(node.output) and bool(node.output[k])
               for k in range(len(definition.outputs))]
    errors = output_memory_errors(definition, label, output_shapes, dtypes, present)
    return [*problems, *(str(error) for error in errors)]
