"""Raising: standard ``MaxRoiPool``, ``RoiAlign``, ``LpPool`` and ``Col2Im`` nodes into the
``dml_onnx`` node that computes exactly the same, wherever one does.

A node is raised only when the two agree for every input. Where ONNX does what no attribute of
the ``dml_onnx`` operator does, the raised node comes with the few standard nodes that do it:
``RoiAlign`` with ``output_half_pixel`` clamps each scaled ROI's width and height to at least 1
(the raised node reads ROIs scaled and clamped by ``Mul``, ``Sub``, ``Max``, ``Add``), and with
``sampling_ratio=0`` and ``half_pixel`` it gives 0 for an empty or inverted ROI (a ``Where``
zeroes those outputs, unless the caller vouches that every ROI has a positive width and
height). The chain torch's exporters write for ``F.lp_pool*d`` becomes one ``LpPooling`` where
p is an even integer, and the ``Pad``, ``Gather``, ``Gather``, ``Transpose``, ``Reshape`` chain
they write for ``F.unfold`` one ``Unfold`` (:mod:`dml_onnx.raising.chains`). ``RoiAlign`` with
``mode="max"`` (the max of weighted corner terms), ``LpPool`` with ``ceil_mode`` or ``SAME``
padding and ``Col2Im`` with non-constant sizes stay standard. Each node left standard comes
with the reason (the per-node rules: :mod:`dml_onnx.raising.rules`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import onnx
from onnx import helper

from dml_onnx._wiring import constant_values, prune_unread
from dml_onnx.definition import (
    DOMAIN,
    DOMAIN_VERSION,
    attribute_value,
    element_type,
    node_label,
)
from dml_onnx.form import NotEquivalent, op_version
from dml_onnx.graphs import check_structure, element_types, unused_prefix
from dml_onnx.model_files import load_model
from dml_onnx.ops import OPERATORS_BY_NAME
from dml_onnx.raising.chains import chains
from dml_onnx.raising.rules import EDGE_REGIONS, RULES, Kept, Raise, RuleNode
from dml_onnx.standard import default_opset, with_functions


class NotRaisable(ValueError):
    """A model that raising cannot take at all (a default-domain opset below
    :data:`~dml_onnx.form.MINIMUM_OPSET`); a node it cannot raise is reported instead."""


@dataclass(frozen=True)
class Raised:
    """The result of :func:`raise_model`: the model, the raised nodes' names, and the
    standard nodes of the four kinds that were left, with the reason for each."""

    model: onnx.ModelProto
    raised: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)


def raise_model(model: str | os.PathLike | bytes | onnx.ModelProto, *,
                positive_rois: bool = False, functions: bool = True) -> Raised:
    """Rewrite the standard nodes that have an exact ``dml_onnx`` equivalent.

    ``positive_rois=True`` vouches that every ROI of every ``RoiAlign`` has a positive width
    and height, which makes ``sampling_ratio=0`` exact too. With ``functions`` (the default)
    the result carries each new node's standard form as a model-local function, so it still
    runs where the domain's kernels are not installed. ``model``: a path, serialized bytes
    or a ModelProto (:func:`dml_onnx.model_files.load_model`). Raises :class:`NotRaisable` for a
    default-domain opset below :data:`~dml_onnx.form.MINIMUM_OPSET`.
    """
    model = load_model(model)
    opset = _opset(model)  # before the nodes: they follow it
    check_structure(model, "raising")
    types = element_types(model)
    constants = constant_values(model.graph)
    base = unused_prefix(model.graph, "_dml_onnx_raise")
    raised: list[str] = []
    kept: dict[str, str] = {}
    replacements, chained, freed = {}, set(), set()
    for chain in chains(model, constants):
        try:
            replacements[chain.nodes[-1]] = chain.replacement(
                model.graph.node[chain.nodes[-1]].output[0], types)
        except Kept as reason:
            kept[chain.label] = str(reason)
            continue
        chained.update(chain.nodes)
        freed.update(chain.freed(model.graph))
        raised.append(chain.label)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    for index, node in enumerate(model.graph.node):
        if index in chained:
            if index in replacements:
                result.graph.node.append(replacements[index])
            continue
        rule = (RULES.get(node.op_type) if node.domain in ("", "ai.onnx")
                and node.doc_string != EDGE_REGIONS else None)
        if rule is None:
            result.graph.node.append(node)
            continue
        label = node_label(node)
        view = RuleNode(node, op_version(node.op_type, opset),
                     {a.name: attribute_value(a) for a in node.attribute}, constants, types,
                     opset, f"{base}{index}_", positive_rois)
        try:
            result.graph.node.extend(_raised_nodes(view, rule))
        except Kept as reason:
            kept[label] = str(reason)
            result.graph.node.append(node)
            continue
        raised.append(label)
    if raised:
        prune_unread(result, freed | {name for node in model.graph.node
                                      if node_label(node) in raised for name in node.input})
        if all(o.domain != DOMAIN for o in result.opset_import):
            result.opset_import.append(helper.make_opsetid(DOMAIN, DOMAIN_VERSION))
        if functions:
            result = with_functions(result)
    return Raised(result, raised, kept)


def _opset(model: onnx.ModelProto) -> int:
    """The model's default-domain opset; :class:`NotRaisable` below the minimum."""
    try:
        return default_opset(model)
    except NotEquivalent as error:
        raise NotRaisable(f"raising: {error}") from None


def _raised_nodes(view: RuleNode, rule: Callable[[RuleNode], Raise]) -> list[onnx.NodeProto]:
    raised = rule(view)
    definition = OPERATORS_BY_NAME[raised.op_type]
    allowed = {element_type(t) for t in definition.type_constraints["T"]}
    elem = view.types.get(view.proto.input[0])
    view.require(elem in allowed, "element type "
                 f"{onnx.TensorProto.DataType.Name(elem) if elem else 'unknown'} is not one "
                 f"{raised.op_type} takes")
    try:
        node = definition.make_node(raised.inputs, raised.outputs or list(view.proto.output),
                                    name=view.proto.name or None, **raised.attributes)
    except (TypeError, ValueError) as error:
        raise Kept(f"attributes outside {raised.op_type}'s range: {error}") from None
    for k, helper_node in enumerate(raised.before + raised.after):
        helper_node.name = f"{view.prefix}{k}"
    return [*raised.before, node, *raised.after]


__all__ = ["EDGE_REGIONS", "RULES", "NotRaisable", "Raised", "raise_model"]
