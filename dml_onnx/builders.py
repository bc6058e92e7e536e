"""Graph builders: one function per operator returning a NodeProto, ``make_model``, and
:func:`single_node_model` (a whole model of one operator node, as tests and benchmarks use).

The per-operator functions live beside their definitions in ``dml_onnx.ops`` and are exported
here from the operator table (``dml_onnx.roi_pooling`` ...); they validate attributes at build
time and raise ``ValueError`` naming the operator, node, field and value. :func:`snake` gives
an operator's builder name (``RoiAlign1`` -> ``roi_align1``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper

from dml_onnx.definition import DOMAIN, DOMAIN_VERSION, OpDefinition, Shape
from dml_onnx.ops import BUILDERS

IR_VERSION = 10
"""IR version of the models the project writes (onnxruntime >= 1.16 reads it)."""
STANDARD_OPSET = 18
"""Default-domain opset the project's models import."""

globals().update(BUILDERS)
__all__ = ["IR_VERSION", "STANDARD_OPSET", "make_model", *BUILDERS]


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
               outputs: Sequence[onnx.ValueInfoProto], *, name: str = "dml_onnx",
               initializers: Sequence[onnx.TensorProto] = (),
               standard_opset: int = STANDARD_OPSET) -> onnx.ModelProto:
    """A model over ``nodes`` that imports ``dml_onnx`` version 1 and the standard opset,
    with a pinned IR version onnxruntime accepts."""
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs),
                              initializer=list(initializers))
    return helper.make_model(graph, ir_version=IR_VERSION, producer_name="dml_onnx",
                             opset_imports=[helper.make_opsetid("", standard_opset),
                                            helper.make_opsetid(DOMAIN, DOMAIN_VERSION)])


def snake(name: str) -> str:
    """The snake-case form of an operator's name (``RoiAlign1`` -> ``roi_align1``): its
    builder's name, and the prefix of its conformance cases' names."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def single_node_model(definition: OpDefinition, inputs: tuple[np.ndarray | None, ...],
                      attributes: dict, outputs: tuple[bool, ...] = (True,), *,
                      node_name: str = "node", symbolic: bool = False,
                      opset: int = STANDARD_OPSET) -> onnx.ModelProto:
    """A model of one ``definition`` node over ``inputs`` (``None``: omitted), output types
    from the element types of the inputs, output shapes from the shape function.

    ``symbolic`` declares every input dim as a symbol (``X_0``, ``X_1``, ...), so that sizes
    are only known when the model runs. ``opset`` is the default-domain opset it imports.
    """
    input_names = [p.name if a is not None else "" for p, a in zip(definition.inputs, inputs)]
    output_names = [p.name if (k < len(outputs) and outputs[k]) else ""
                    for k, p in enumerate(definition.outputs)]
    while output_names and not output_names[-1]:
        output_names.pop()
    node = definition.make_node(input_names, output_names, name=node_name, **attributes)
    elem_types: dict[str, int] = {}
    graph_inputs: list[onnx.ValueInfoProto] = []
    input_shapes: list[Shape] = []
    for parameter, array in zip(definition.inputs, inputs):
        if array is None:
            input_shapes.append(None)
            continue
        elem = helper.np_dtype_to_tensor_dtype(array.dtype)
        elem_types.setdefault(parameter.type, elem)
        shape = ([f"{parameter.name}_{axis}" for axis in range(array.ndim)] if symbolic
                 else list(array.shape))
        input_shapes.append(shape)
        graph_inputs.append(helper.make_tensor_value_info(parameter.name, elem, shape))
    shapes = definition.infer_shapes(input_shapes, definition.node_attributes(node), node.name)
    graph_outputs = [helper.make_tensor_value_info(name, elem_types[parameter.type], shape)
                     for name, parameter, shape in zip(output_names, definition.outputs, shapes)
                     if name]
    return make_model([node], graph_inputs, graph_outputs, name=f"{definition.name}_model",
                      standard_opset=opset)
