"""Standard-op forms of whole models: lowering, and model-local functions.

- :func:`lower_model` rewrites every ``dml_onnx`` node into standard ``ai.onnx`` nodes (each
  operator's ``standard_form``; see :mod:`dml_onnx.form`). The result runs on any ONNX runtime.
- :func:`with_functions` gives every ``dml_onnx`` node its standard form as a model-local
  function (an ONNX function op): plain onnxruntime, which has no kernel for the domain,
  inlines it, while :class:`dml_onnx.InferenceSession` runs the domain's kernels.

Forms need the element type of every input of a ``dml_onnx`` node (from the graph's types
and onnx shape inference) and a default-domain opset of at least :data:`MINIMUM_OPSET`.
"""

from __future__ import annotations

import hashlib
import json
import os

import onnx
from onnx import TensorProto, helper

from dml_onnx.definition import DOMAIN, OpDefinition, node_label
from dml_onnx.form import MINIMUM_OPSET, NotEquivalent, StandardNode
from dml_onnx.graphs import check_structure, element_types, unused_prefix
from dml_onnx.model_files import load_model
from dml_onnx.ops import OPERATORS_BY_NAME


def default_opset(model: onnx.ModelProto) -> int:
    """The model's default-domain opset; raises :class:`NotEquivalent` below the minimum."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < MINIMUM_OPSET:
        raise NotEquivalent(f"the standard forms need the default opset >= {MINIMUM_OPSET}, "
                            f"the model imports {opset or 'none'} (onnx.version_converter "
                            "can convert the model first)")
    return opset


def standard_nodes(definition: OpDefinition, node: onnx.NodeProto, types: dict[str, int],
                   opset: int, prefix: str, *, native: bool = True) -> list[onnx.NodeProto]:
    """The standard nodes of one ``dml_onnx`` node, named ``<prefix>/<k>``."""
    label = node_label(node)
    attributes = definition.check_node(node)
    input_types = []
    for name in node.input:
        if name and name not in types:
            raise NotEquivalent(f"{definition.name} '{label}': the element type of input "
                                f"{name!r} is unknown (declare it in the graph)")
        input_types.append(types[name] if name else None)
    view = StandardNode(label, list(node.input), list(node.output), attributes, input_types,
                        opset, prefix, native=native)
    if definition.standard_form is None:
        raise NotEquivalent(f"{definition.name} '{label}': the operator has no standard form")
    definition.standard_form(view)
    for k, emitted in enumerate(view.nodes):
        emitted.name = f"{prefix}/{k}"
    return view.nodes


def lower_model(model: str | os.PathLike | bytes | onnx.ModelProto, *,
                native: bool = True) -> onnx.ModelProto:
    """The model with every ``dml_onnx`` node replaced by standard ops computing the same.

    ``native=False`` uses the exact decompositions even where a native op (MaxRoiPool,
    RoiAlign, LpPool, Col2Im) fits. The model keeps its default-domain opset; it loses the
    ``dml_onnx`` import and functions. Raises :class:`NotEquivalent` for an opset below
    :data:`MINIMUM_OPSET` or an input of unknown element type. ``model``: a path, serialized
    bytes or a ModelProto.
    """
    model = load_model(model)
    opset = default_opset(model)  # before the nodes: they follow it
    check_structure(model, "the standard forms")
    types = element_types(model)
    base = unused_prefix(model.graph, "_dml_onnx")
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    for index, node in enumerate(model.graph.node):
        if node.domain != DOMAIN:
            result.graph.node.append(node)
            continue
        result.graph.node.extend(standard_nodes(OPERATORS_BY_NAME[node.op_type], node, types,
                                                opset, f"{base}{index}", native=native))
    _drop_domain(result)
    return result


def with_functions(model: str | os.PathLike | bytes | onnx.ModelProto) -> onnx.ModelProto:
    """The model with a model-local function for every ``dml_onnx`` node.

    Each node gets its own ``overload`` (a digest of what its form depends on: attributes,
    element types, which inputs and outputs it has, the opset), so nodes with equal forms
    share one function. Earlier ``dml_onnx`` functions are replaced. ``model``: a path,
    serialized bytes or a ModelProto.
    """
    model = load_model(model)
    opset = default_opset(model)  # before the nodes: they follow it
    check_structure(model, "the standard forms")
    types = element_types(model)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    kept = [f for f in result.functions if f.domain != DOMAIN]
    del result.functions[:]
    result.functions.extend(kept)
    bodies: dict[str, onnx.FunctionProto] = {}
    for node in result.graph.node:
        if node.domain != DOMAIN:
            continue
        definition = OPERATORS_BY_NAME[node.op_type]
        function = _function(definition, node, types, opset)
        node.overload = function.overload
        bodies.setdefault(function.overload, function)
    result.functions.extend(bodies[key] for key in sorted(bodies))
    return result


def _function(definition: OpDefinition, node: onnx.NodeProto, types: dict[str, int],
              opset: int) -> onnx.FunctionProto:
    """The node's form as a function over the operator's parameter names (an absent input
    is never read; an absent output is an empty placeholder)."""
    formal_inputs = [p.name for p in definition.inputs]
    formal_outputs = [p.name for p in definition.outputs[:len(node.output)]]
    used_inputs = [p if i < len(node.input) and node.input[i] else ""
                   for i, p in enumerate(formal_inputs)]
    used_outputs = [p if node.output[k] else "" for k, p in enumerate(formal_outputs)]
    formal_types = {formal: types[actual] for formal, actual in zip(used_inputs, node.input)
                    if formal and actual in types}
    local = helper.make_node(node.op_type, used_inputs, used_outputs, domain=DOMAIN,
                             name=node_label(node))
    local.attribute.extend(node.attribute)
    nodes = standard_nodes(definition, local, formal_types, opset, "_f")
    for name, used in zip(formal_outputs, used_outputs):
        if not used:
            nodes.append(helper.make_node("Constant", [], [name], value=helper.make_tensor(
                name, TensorProto.FLOAT, [0], [])))
    for emitted in nodes:
        emitted.name = ""
    attributes = definition.check_node(node)
    key = json.dumps({"attributes": attributes, "opset": opset, "outputs": used_outputs,
                      "types": [formal_types.get(f) for f in used_inputs]}, sort_keys=True)
    return helper.make_function(
        DOMAIN, node.op_type, formal_inputs, formal_outputs, nodes,
        [helper.make_opsetid("", opset)],
        overload=hashlib.sha256(key.encode()).hexdigest()[:16],
        doc_string=f"Standard-op form of {DOMAIN}::{node.op_type} ({_describe(attributes)}).")


def _describe(attributes: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in attributes.items())


def _drop_domain(model: onnx.ModelProto) -> None:
    """Remove the ``dml_onnx`` opset import and functions once no node uses the domain."""
    if any(n.domain == DOMAIN for n in model.graph.node):
        return
    kept = [o for o in model.opset_import if o.domain != DOMAIN]
    del model.opset_import[:]
    model.opset_import.extend(kept)
    functions = [f for f in model.functions if f.domain != DOMAIN]
    del model.functions[:]
    model.functions.extend(functions)


__all__ = ["MINIMUM_OPSET", "NotEquivalent", "default_opset", "lower_model", "standard_nodes",
           "with_functions"]
