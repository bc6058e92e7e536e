"""The model rewrite: every ``dml_onnx`` node becomes the PyOp of :mod:`dml_onnx.runtime.hook`
for its element types, with the ``Constant``, ``Cast`` and guard ``Reshape`` nodes around it."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dml_onnx._kernels import KernelError
from dml_onnx.builders import STANDARD_OPSET
from dml_onnx.definition import DOMAIN, RUNTIME_DOMAIN, OpDefinition, node_label
from dml_onnx.graphs import Dims, check_structure, element_types_and_dims, unused_prefix, walk_nodes
from dml_onnx.model_files import load_model
from dml_onnx.ops import OPERATORS_BY_NAME
from dml_onnx.runtime.hook import (
    CAST_TO_FLOAT,
    FLOAT16_CONVERTING,
    type_params,
    variant_name,
)
from dml_onnx.schemas import register_schemas

FLOAT16_KERNELS = frozenset({"Unfold", "Fold", "RoiAlignGrad", *FLOAT16_CONVERTING})
"""Operators that take direct float16 values as they are: Unfold only copies them, Fold's
loop reads their bits as it sums and RoiAlignGrad's scatter as it reads dY (at any thread
count, see :data:`~dml_onnx.runtime.hook.FLOAT16_THREADS`); the others
(:data:`~dml_onnx.runtime.hook.FLOAT16_CONVERTING`) convert them over the threads, where
onnxruntime's Cast takes one, from :data:`~dml_onnx.runtime.hook.FLOAT16_THREADS` threads on
(server, 16 cores, float16 rows: Fold 8.3-9.4 -> 3.0-3.1 ms, RoiAlignGrad dX 8.0-8.4 -> 3.9,
RoiAlign1 7.2-7.6 -> 4.2-4.4, RoiPooling 6.8-7.8 -> 4.0-4.3)."""


_Mode = Literal["guarded", "unguarded", "direct"]
"""How the PyOps are wired: ``guarded`` for plain onnxruntime sessions (a guard ``Reshape`` on
every output of a ``dml_onnx`` node makes the run fail after a failed kernel); ``unguarded``
without guards (the caller checks :func:`~dml_onnx.runtime.hook.take_error` after every run);
``direct`` unguarded, with the graph inputs and outputs of ``dml_onnx`` nodes passed outside
onnxruntime (only :class:`~dml_onnx.runtime.session.InferenceSession` runs such a model)."""


def to_runtime_model(model: str | os.PathLike | bytes | onnx.ModelProto) -> onnx.ModelProto:
    """The model with every ``dml_onnx`` node replaced by its onnxruntime-extensions form.

    Raises ``ValueError`` naming operator, node and field for invalid attributes or inputs
    whose element type is not allowed. The result runs in a plain ``onnxruntime`` session
    whose options registered ``onnxruntime_extensions.get_library_path()``, in this process;
    after a failed kernel a guard node fails the run (the ``dml_onnx`` logger has the reason).
    ``model``: a path, serialized bytes or a ModelProto.
    """
    return runtime_model(load_model(model), mode="guarded", strings=True)


def checked_types(model: onnx.ModelProto, *, strings: bool) -> tuple[dict[str, int], Dims]:
    """The element types and dimensions of ``model``'s values
    (:func:`dml_onnx.graphs.element_types_and_dims`), after its structure is checked;
    ``strings=False`` for a model whose strings :func:`dml_onnx.model_files.load_model` checked."""
    register_schemas()
    check_structure(model, "the onnxruntime binding", strings=strings, schemas=False)
    return element_types_and_dims(model)


def runtime_model(model: onnx.ModelProto, *, mode: _Mode, strings: bool,
                   elem_types: dict[str, int] | None = None) -> onnx.ModelProto:
    """:func:`to_runtime_model` in any :data:`_Mode`; ``strings`` as :func:`checked_types`
    takes it, which ``elem_types`` comes from where given."""
    if elem_types is None:
        elem_types = checked_types(model, strings=strings)[0]
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    direct_inputs, direct_outputs = (_direct_values(model.graph) if mode == "direct"
                                     else (set(), set()))
    prefix = unused_prefix(model.graph, "_dml_onnx")
    fetched: set[str] = set()  # graph outputs a kernel writes outside onnxruntime
    for index, node in enumerate(model.graph.node):
        if node.domain == DOMAIN:
            plan = plan_node(node, elem_types, direct_inputs, direct_outputs)
            fetched.update(o.name for o in plan.outputs if o.name in direct_outputs)
            result.graph.node.extend(_emit_node(plan, f"{prefix}_{index}", mode))
        else:
            result.graph.node.append(node)
    for value in result.graph.output:
        if value.name in fetched:  # an empty placeholder: no shape to disagree with (only
            # these: clearing another output's, a sequence's say, made it a tensor of type 0)
            value.type.tensor_type.ClearField("shape")
    imports = {o.domain: o for o in result.opset_import}
    if "" not in imports and "ai.onnx" not in imports:
        result.opset_import.append(helper.make_opsetid("", STANDARD_OPSET))
    if RUNTIME_DOMAIN not in imports:
        result.opset_import.append(helper.make_opsetid(RUNTIME_DOMAIN, 1))
    return result


def _direct_values(graph: onnx.GraphProto) -> tuple[set[str], set[str]]:
    """Graph inputs (not initializers), and graph outputs listed once that no node reads."""
    read = {name for node in walk_nodes(graph) for name in node.input}
    initializers = {t.name for t in graph.initializer}
    names = [o.name for o in graph.output]
    inputs = {i.name for i in graph.input} - initializers
    return inputs, {n for n in names if names.count(n) == 1 and n not in read | inputs}


@dataclass(frozen=True)
class _PlannedInput:
    """One declared input of a PyOp."""

    name: str  # the node's value; "" where absent
    runtime_type: int  # the ONNX element type the PyOp takes
    cast: bool  # the value reaches the PyOp through a Cast to runtime_type
    direct: bool  # the kernel reads the caller's array; the PyOp gets an empty placeholder


@dataclass(frozen=True)
class _PlannedOutput:
    """One declared output of a PyOp."""

    name: str  # the node's value; "" where absent
    parameter: str  # the declared output's name
    runtime_type: int  # the ONNX element type the PyOp returns
    node_type: int  # the node's element type: a Cast from runtime_type follows where they differ


@dataclass(frozen=True)
class _NodePlan:
    """What one ``dml_onnx`` node becomes, decided from the node and its element types alone:
    the PyOp's element types, inputs and outputs, and its config (the JSON that the hook's
    :func:`~dml_onnx.runtime.hook.parse_config` reads: op, node label, attributes with their
    defaults, present inputs and outputs, and, where any, the direct feeds and fetches)."""

    definition: OpDefinition
    label: str
    node_name: str  # "" where the node has none
    runtime_types: dict[str, int]  # type parameter -> ONNX element type, in declaration order
    inputs: tuple[_PlannedInput, ...]
    outputs: tuple[_PlannedOutput, ...]
    config: dict[str, Any]


def plan_node(node: onnx.NodeProto, elem_types: dict[str, int], direct_inputs: set[str],
               direct_outputs: set[str]) -> _NodePlan:
    """The plan of ``node`` (``elem_types``: element types by value name); raises
    :class:`KernelError` for an unknown operator, invalid attributes or input types."""
    definition = OPERATORS_BY_NAME.get(node.op_type)
    label = node_label(node)
    if definition is None:
        raise KernelError(node.op_type, label, "op type", node.op_type,
                          f"is not an operator of the {DOMAIN} domain "
                          f"(known: {', '.join(OPERATORS_BY_NAME)})")
    attributes = definition.check_node(node)
    inputs = [node.input[i] if i < len(node.input) else "" for i in range(len(definition.inputs))]
    outputs = [node.output[i] if i < len(node.output) else ""
               for i in range(len(definition.outputs))]
    types = definition.input_element_types(node, elem_types)
    runtime_types = {p: (TensorProto.FLOAT if types.get(p, TensorProto.FLOAT) in CAST_TO_FLOAT
                         else types.get(p, TensorProto.FLOAT)) for p in type_params(definition)}
    uncast = _uncast_types(definition, types, runtime_types, inputs, direct_inputs)

    planned_inputs, feeds = [], []
    for parameter, name in zip(definition.inputs, inputs):
        runtime_type = runtime_types[parameter.type]
        direct = name in direct_inputs
        kernel_type = types[parameter.type] if parameter.type in uncast else runtime_type
        feeds.append([name, *(helper.tensor_dtype_to_np_dtype(t).name
                              for t in (types[parameter.type], kernel_type))]
                     if direct else None)
        cast = bool(name) and not direct and types[parameter.type] != runtime_type
        planned_inputs.append(_PlannedInput(name, runtime_type, cast, direct))
    planned_outputs = tuple(
        _PlannedOutput(name, p.name, runtime_types[p.type],
                       types.get(p.type, runtime_types[p.type]))
        for p, name in zip(definition.outputs, outputs))
    fetches = [[o.name, helper.tensor_dtype_to_np_dtype(o.node_type).name]
               if o.name and o.name in direct_outputs else None for o in planned_outputs]
    config = {"op": definition.name, "node": label, "attributes": attributes,
              "inputs": [bool(n) for n in inputs], "outputs": [bool(n) for n in outputs]}
    # onnxruntime drops a Cast to float16 that a Cast back to float32 follows: the hook
    # rounds these values to float16's itself
    rounded_inputs = [k for k, i in enumerate(planned_inputs) if i.cast
                      and types[definition.inputs[k].type] in CAST_TO_FLOAT]
    rounded_outputs = [k for k, (o, f) in enumerate(zip(planned_outputs, fetches))
                       if o.name and not f and o.node_type in CAST_TO_FLOAT]
    if rounded_inputs or rounded_outputs:
        config.update(rounded_inputs=rounded_inputs, rounded_outputs=rounded_outputs)
    if any(feeds) or any(fetches):
        config.update(feeds=feeds, fetches=fetches)
    return _NodePlan(definition, label, node.name, runtime_types, tuple(planned_inputs),
                     planned_outputs, config)


def _uncast_types(definition: OpDefinition, types: dict[str, int],
                  runtime_types: dict[str, int], inputs: list[str],
                  direct_inputs: set[str]) -> set[str]:
    """The type parameters whose values reach the kernel in the node's own element type: those
    a PyOp takes, and a cast type where the kernel takes it (:data:`FLOAT16_KERNELS`) and all
    its present inputs are direct (they must agree); the others reach it as the runtime type."""
    return {p for p in types if types[p] == runtime_types[p] or (
        definition.name in FLOAT16_KERNELS and all(
            n in direct_inputs for q, n in zip(definition.inputs, inputs) if q.type == p and n))}


def _emit_node(plan: _NodePlan, prefix: str, mode: _Mode) -> list[onnx.NodeProto]:
    """The nodes of ``plan``, named from ``prefix``: the inputs' ``Constant`` placeholders and
    ``Cast`` nodes, the config ``Constant``, the PyOp, then the outputs' guard ``Reshape`` and
    ``Cast`` nodes."""
    guarded = mode == "guarded"
    nodes, kernel_inputs = [], []
    for i, planned in enumerate(plan.inputs):
        name = planned.name
        if not name or planned.direct:
            empty = numpy_helper.from_array(
                np.zeros(0, helper.tensor_dtype_to_np_dtype(planned.runtime_type)))
            name = f"{prefix}_{'direct' if planned.direct else 'absent'}_{i}"
            nodes.append(helper.make_node("Constant", [], [name], value=empty))
        elif planned.cast:
            name = f"{prefix}_in_{i}"
            nodes.append(helper.make_node("Cast", [planned.name], [name],
                                          to=planned.runtime_type))
        kernel_inputs.append(name)
    config_name = f"{prefix}_config"
    nodes.append(helper.make_node("Constant", [], [config_name], value=numpy_helper.from_array(
        np.frombuffer(json.dumps(plan.config, allow_nan=True).encode(), np.uint8))))
    kernel_outputs, guards = [], []
    for k, output in enumerate(plan.outputs):
        raw, shape = f"{prefix}_out_{k}", f"{prefix}_shape_{k}"
        kernel_outputs += [raw, shape] if guarded else [raw]
        if not output.name:
            continue
        target = output.name
        checked = f"{raw}_checked" if output.node_type != output.runtime_type else target
        if guarded:
            guards.append(helper.make_node(
                "Reshape", [raw, shape], [checked],
                name=f"{plan.definition.name} '{plan.label}' output {output.parameter} (fails "
                     "when the kernel failed; the dml_onnx logger has the reason)"))
        elif checked == target:
            kernel_outputs[-1] = target
        else:
            checked = raw
        if checked != target:
            guards.append(helper.make_node("Cast", [checked], [target], to=output.node_type))
    variant = variant_name(plan.definition, plan.runtime_types, guarded)
    nodes.append(helper.make_node(variant, [*kernel_inputs, config_name], kernel_outputs,
                                  name=plan.node_name or None, domain=RUNTIME_DOMAIN))
    return nodes + guards
