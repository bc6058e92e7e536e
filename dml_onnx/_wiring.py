"""Who makes and who reads each value of a graph: the index the raising chain finders walk,
the constant values of the main graph, and dropping what nothing reads any more."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from dml_onnx.graphs import nested_graphs


def constant_values(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """The value of every initializer and standard ``Constant`` (given by ``value``) of
    ``graph``, by name."""
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.attribute \
                and node.attribute[0].name == "value":
            constants[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return constants


def subgraph_reads(graph: onnx.GraphProto) -> set[str]:
    """Every name that a node inside the subgraphs of ``graph`` (at any depth) reads: values
    of the outer graph an ``If`` or ``Loop`` body may use by name."""
    names: set[str] = set()
    for inner in nested_graphs(graph):
        names.update(name for node in inner.node for name in node.input)
        names.update(o.name for o in inner.output)
    return names


def arg(node: onnx.NodeProto, k: int) -> str:
    """Input ``k`` of ``node``, or ``""`` where it has none (a malformed model)."""
    return node.input[k] if k < len(node.input) else ""


class Wiring:
    """Who makes and who reads each value of a graph: what the chain finders walk. Values
    that a subgraph reads by name count as read from outside, like the graph's outputs."""

    def __init__(self, graph: onnx.GraphProto):
        self.graph = graph
        self.producer = {name: i for i, node in enumerate(graph.node) for name in node.output}
        self.readers: dict[str, list[int]] = {}
        for i, node in enumerate(graph.node):
            for name in node.input:
                self.readers.setdefault(name, []).append(i)
        self.outputs = {o.name for o in graph.output} | subgraph_reads(graph)

    def only_reader(self, name: str, op_type: str) -> int | None:
        """The one node reading ``name``, if it is an ``op_type`` and ``name`` is not a graph
        output."""
        found = self.readers.get(name, [])
        if len(found) != 1 or name in self.outputs \
                or self.graph.node[found[0]].op_type != op_type:
            return None
        return found[0]

    def made_by(self, name: str, op_type: str) -> onnx.NodeProto | None:
        """The node making ``name``, if it is an ``op_type``."""
        index = self.producer.get(name)
        node = None if index is None else self.graph.node[index]
        return node if node is not None and node.op_type == op_type else None


def prune_unread(model: onnx.ModelProto, freed: set[str]) -> None:
    """Drop the initializers among ``freed`` (what the replaced nodes read) and the nodes
    making them that nothing reads any more (Col2Im's sizes, the index arithmetic of a raised
    ``F.unfold`` chain), and in turn what only those read. An initializer that is also a graph
    input (a default the caller may override) goes from the inputs too, so that feeding it is
    an error rather than silently ignored; IR versions before 4 need the two listed alike."""
    graph = model.graph
    overridable = {t.name for t in graph.initializer} if model.ir_version >= 4 else set()
    kept = {o.name for o in graph.output} | {i.name for i in graph.input} - overridable
    kept |= subgraph_reads(graph)
    nodes = list(graph.node)
    while True:
        read = {name for node in nodes for name in node.input} | kept
        dead = {i for i, n in enumerate(nodes) if set(n.output) <= freed
                and not set(n.output) & read}
        if not dead:
            break
        freed |= {name for i in dead for name in nodes[i].input}
        nodes = [n for i, n in enumerate(nodes) if i not in dead]
    unread = freed - {name for node in nodes for name in node.input} - kept
    del graph.node[:]
    graph.node.extend(nodes)
    for values in (graph.initializer, graph.input):
        remaining = [v for v in values if v.name not in unread]
        del values[:]
        values.extend(remaining)
