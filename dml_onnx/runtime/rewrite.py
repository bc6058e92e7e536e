"""The model rewrite: every ``dml_onnx`` node becomes the PyOp of :mod:`dml_onnx.runtime.hook`
for its element types, with the ``Constant``, ``Cast`` and guard ``Reshape`` nodes around it."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from custom_ops import KernelError
from dml_onnx.builders import STANDARD_OPSET
from dml_onnx.definition import DOMAIN, RUNTIME_DOMAIN, node_label
from dml_onnx.graphs import check_structure, element_types, load_model, subgraphs, unused_prefix
from dml_onnx.ops import OPERATORS_BY_NAME
from dml_onnx.runtime.hook import _CAST_TO_FLOAT, _type_params, _variant_name
from dml_onnx.schemas import register_schemas

FLOAT16_KERNELS = frozenset({"Unfold"})
"""Operators whose kernels are as fast on float16 as on float32: they only copy values (the
others compute float16 in float32; numpy's float16 arithmetic is slow)."""


def to_runtime_model(model: str | os.PathLike | bytes | onnx.ModelProto, *,
                     guard: bool = True, direct: bool = False) -> onnx.ModelProto:
    """The model with every ``dml_onnx`` node replaced by its onnxruntime-extensions form.

    Raises ``ValueError`` naming operator, node and field for invalid attributes or inputs
    whose element type is not allowed. The result runs in a plain ``onnxruntime`` session
    whose options registered ``onnxruntime_extensions.get_library_path()``, in this process.
    ``guard=False`` leaves out the guard nodes that make such a session fail after a failed
    kernel; only for callers that check :func:`take_error` after every run. ``direct=True``
    (implies ``guard=False``) passes graph inputs and outputs of ``dml_onnx`` nodes outside
    onnxruntime: only for :class:`InferenceSession`, which runs such a model. ``model``: a
    path, serialized bytes or a ModelProto.
    """
    return _runtime_model(load_model(model), guard=guard, direct=direct, strings=True)


def _runtime_model(model: onnx.ModelProto, *, guard: bool, direct: bool,
                   strings: bool) -> onnx.ModelProto:
    """:func:`to_runtime_model`; ``strings=False`` for a model whose strings
    :func:`dml_onnx.graphs.load_model` checked."""
    register_schemas()
    check_structure(model, "the onnxruntime binding", strings=strings, schemas=False)
    elem_types = element_types(model)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    direct_inputs, direct_outputs = _direct_values(model.graph) if direct else (set(), set())
    prefix = unused_prefix(model.graph, "_dml_onnx")
    for index, node in enumerate(model.graph.node):
        if node.domain == DOMAIN:
            result.graph.node.extend(_rewrite(node, f"{prefix}_{index}", elem_types,
                                              guard and not direct,
                                              direct_inputs, direct_outputs))
        else:
            result.graph.node.append(node)
    for value in result.graph.output:
        if value.name in direct_outputs:  # an empty placeholder: no shape to disagree with
            value.type.tensor_type.ClearField("shape")
    imports = {o.domain: o for o in result.opset_import}
    if "" not in imports and "ai.onnx" not in imports:
        result.opset_import.append(helper.make_opsetid("", STANDARD_OPSET))
    if RUNTIME_DOMAIN not in imports:
        result.opset_import.append(helper.make_opsetid(RUNTIME_DOMAIN, 1))
    return result


def _direct_values(graph: onnx.GraphProto) -> tuple[set[str], set[str]]:
    """Graph inputs (not initializers), and graph outputs listed once that no node reads."""
    read: set[str] = set()

    def visit(g: onnx.GraphProto) -> None:
        for node in g.node:
            read.update(node.input)
            for sub in subgraphs(node):
                visit(sub)
    visit(graph)
    initializers = {t.name for t in graph.initializer}
    names = [o.name for o in graph.output]
    inputs = {i.name for i in graph.input} - initializers
    return inputs, {n for n in names if names.count(n) == 1 and n not in read | inputs}


def _rewrite(node: onnx.NodeProto, prefix: str, elem_types: dict[str, int], guard: bool,
             direct_inputs: set[str], direct_outputs: set[str]) -> list:
    definition = OPERATORS_BY_NAME.get(node.op_type)
    label = node_label(node)
    if definition is None:
        raise KernelError(node.op_type, label, "op type", node.op_type,
                          f"is not an operator of the {DOMAIN} domain "
                          f"(known: {', '.join(OPERATORS_BY_NAME)})")
    attributes = definition.check_node(node)
    inputs = [node.input[i] if i < len(node.input) else "" for i in range(len(definition.inputs))]
    outputs_present = [i < len(node.output) and bool(node.output[i])
                       for i in range(len(definition.outputs))]
    types = definition.input_element_types(node, elem_types)
    runtime_types = {p: (TensorProto.FLOAT if types.get(p, TensorProto.FLOAT) in _CAST_TO_FLOAT
                         else types.get(p, TensorProto.FLOAT)) for p in _type_params(definition)}
    # A cast type reaches the kernel uncast when the kernel takes it (FLOAT16_KERNELS) and all
    # its inputs are direct (they must agree), else as the runtime type.
    uncast = {p for p in types if types[p] == runtime_types[p] or (
        definition.name in FLOAT16_KERNELS and all(
            n in direct_inputs for q, n in zip(definition.inputs, inputs) if q.type == p and n))}

    nodes, kernel_inputs, feeds = [], [], []
    for i, (parameter, name) in enumerate(zip(definition.inputs, inputs)):
        runtime_type = runtime_types[parameter.type]
        direct = name in direct_inputs
        kernel_type = types[parameter.type] if parameter.type in uncast else runtime_type
        feeds.append([name, *(helper.tensor_dtype_to_np_dtype(t).name
                              for t in (types[parameter.type], kernel_type))]
                     if direct else None)
        if not name or direct:
            empty = numpy_helper.from_array(
                np.zeros(0, helper.tensor_dtype_to_np_dtype(runtime_type)))
            name = f"{prefix}_{'direct' if direct else 'absent'}_{i}"
            nodes.append(helper.make_node("Constant", [], [name], value=empty))
        elif types[parameter.type] != runtime_type:
            cast = f"{prefix}_in_{i}"
            nodes.append(helper.make_node("Cast", [name], [cast], to=runtime_type))
            name = cast
        kernel_inputs.append(name)

    fetches = [[node.output[k], helper.tensor_dtype_to_np_dtype(
        types.get(p.type, runtime_types[p.type])).name]
        if present and node.output[k] in direct_outputs else None
        for k, (p, present) in enumerate(zip(definition.outputs, outputs_present))]
    config = {"op": definition.name, "node": label, "attributes": attributes,
              "inputs": [bool(n) for n in inputs], "outputs": outputs_present}
    if any(feeds) or any(fetches):
        config.update(feeds=feeds, fetches=fetches)
    config_name = f"{prefix}_config"
    nodes.append(helper.make_node("Constant", [], [config_name], value=numpy_helper.from_array(
        np.frombuffer(json.dumps(config, allow_nan=True).encode(), np.uint8))))
    kernel_outputs, guards = [], []
    for k, (parameter, present) in enumerate(zip(definition.outputs, outputs_present)):
        raw, shape = f"{prefix}_out_{k}", f"{prefix}_shape_{k}"
        kernel_outputs += [raw, shape] if guard else [raw]
        if not present:
            continue
        target = node.output[k]
        original = types.get(parameter.type, runtime_types[parameter.type])
        checked = f"{raw}_checked" if original != runtime_types[parameter.type] else target
        if guard:
            guards.append(helper.make_node(
                "Reshape", [raw, shape], [checked],
                name=f"{definition.name} '{label}' output {parameter.name} (fails when the "
                     "kernel failed; the dml_onnx logger has the reason)"))
        elif checked == target:
            kernel_outputs[-1] = target
        else:
            checked = raw
        if checked != target:
            guards.append(helper.make_node("Cast", [checked], [target], to=original))
    variant = _variant_name(definition, runtime_types, guard)
    nodes.append(helper.make_node(variant, [*kernel_inputs, config_name], kernel_outputs,
                                  name=node.name or None, domain=RUNTIME_DOMAIN))
    return nodes + guards
