"""Raising chains: the standard-node chains torch's exporters write for ``F.lp_pool*d``
(:class:`_LpPoolChain`, one ``LpPooling``) and ``F.unfold`` (:class:`_UnfoldChain`, one
``Unfold``), found where their intermediate values nothing else reads."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import onnx

from dml_onnx._wiring import Wiring, arg
from dml_onnx.definition import attribute_value, element_type, node_label
from dml_onnx.graphs import static_dims
from dml_onnx.ops import OPERATORS_BY_NAME
from dml_onnx.raising.rules import Kept


class Chain(Protocol):
    """A chain of standard nodes that one ``dml_onnx`` node replaces."""

    nodes: list[int]  # the chain's node indices in the graph, the one making the output last
    label: str  # the name the report gives the chain

    def replacement(self, output: str, types: dict[str, int]) -> onnx.NodeProto:
        """The ``dml_onnx`` node computing the chain into ``output``, or :class:`Kept`."""
        ...

    def freed(self, graph: onnx.GraphProto) -> set[str]:
        """The values the chain read that may be unread once it is replaced."""
        ...


@dataclass
class _LpPoolChain:
    """A decomposed Lp pooling that torch's exporters write for ``F.lp_pool*d``:
    ``Pow(Mul(Mul(Sign(a), Relu(Abs(a))), count), 1/p)`` of ``a = AveragePool(Pow(x, p))``."""

    nodes: list[int]  # the chain's node indices in the graph, the final Pow last
    label: str  # the AveragePool's
    source: str  # x
    p: float
    pool: dict[str, Any]  # the AveragePool's attributes
    constants: list[str]  # the chain's constant inputs

    def replacement(self, output: str, types: dict[str, int]) -> onnx.NodeProto:
        """The ``LpPooling`` node computing the chain, or :class:`Kept` with the reason."""
        p, a = self.p, self.pool
        if not (p.is_integer() and p >= 2 and int(p) % 2 == 0):
            raise Kept(f"an exported lp_pool with p {p:g}: it sums x^p, LpPooling |x|^p "
                        "(equal for an even integer p only)")
        k = len(a.get("kernel_shape", []))
        if a.get("ceil_mode", 0) or any(a.get("pads", [0] * 2 * k)) \
                or any(d != 1 for d in a.get("dilations", [1] * k)) \
                or a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            raise Kept("an exported lp_pool with ceil_mode, padding or dilation")
        definition = OPERATORS_BY_NAME["LpPooling"]
        if types.get(self.source) not in {element_type(t) for t in
                                          definition.type_constraints["T"]}:
            raise Kept("an exported lp_pool of an element type LpPooling does not take")
        return definition.make_node([self.source], [output], name=self.label or None,
                                    window_size=a["kernel_shape"],
                                    strides=a.get("strides", [1] * k), p=int(p))

    def freed(self, graph: onnx.GraphProto) -> set[str]:
        return set(self.constants)


def _lp_pool_chains(graph: onnx.GraphProto, constants: dict[str, Any]) -> list[_LpPoolChain]:
    """Every decomposed Lp pooling in ``graph`` whose intermediate values nothing else reads."""
    wiring = Wiring(graph)
    only_reader, readers = wiring.only_reader, wiring.readers

    def scalar(name: str) -> float | None:
        value = constants.get(name)
        return float(value) if value is not None and value.size == 1 else None

    chains = []
    for a, pool in enumerate(graph.node):
        if pool.op_type != "AveragePool" or pool.domain not in ("", "ai.onnx"):
            continue
        first = wiring.producer.get(pool.input[0])
        if first is None or graph.node[first].op_type != "Pow" \
                or only_reader(pool.input[0], "AveragePool") is None:
            continue
        power = graph.node[first]
        p = scalar(power.input[1])
        pooled = pool.output[0]
        kinds = sorted(graph.node[i].op_type for i in readers.get(pooled, []))
        if p is None or kinds != ["Abs", "Sign"] or pooled in wiring.outputs:
            continue
        sign, absolute = sorted(readers[pooled], key=lambda i: graph.node[i].op_type != "Sign")
        relu = only_reader(graph.node[absolute].output[0], "Relu")
        product = None if relu is None else only_reader(graph.node[relu].output[0], "Mul")
        if relu is None or product is None \
                or only_reader(graph.node[sign].output[0], "Mul") != product:
            continue
        scaled = only_reader(graph.node[product].output[0], "Mul")
        if scaled is None:
            continue
        count = next((scalar(n) for n in graph.node[scaled].input
                      if n != graph.node[product].output[0]), None)
        root = only_reader(graph.node[scaled].output[0], "Pow")
        if root is None or graph.node[root].input[0] != graph.node[scaled].output[0]:
            continue
        inverse = scalar(graph.node[root].input[1])
        attributes = {x.name: attribute_value(x) for x in pool.attribute}
        if count != math.prod(attributes.get("kernel_shape", [])) or inverse is None \
                or np.float32(inverse) != np.float32(1.0 / p):
            continue
        chains.append(_LpPoolChain([first, a, sign, absolute, relu, product, scaled, root],
                                   node_label(pool), power.input[0], p, attributes,
                                   [power.input[1], *graph.node[scaled].input,
                                    graph.node[root].input[1]]))
    return chains


@dataclass
class _UnfoldChain:
    """The ``Pad``, ``Gather`` (axis 2), ``Gather`` (axis 4), ``Transpose``, ``Reshape`` chain
    torch's exporters write for ``F.unfold`` (index tensors as constants, or as
    ``Range`` + constant offsets computed from the input's size)."""

    nodes: list[int]  # Pad, Gather, Gather, Transpose, Reshape
    label: str  # the Reshape's
    source: str
    attributes: dict[str, list[int]]

    def replacement(self, output: str, types: dict[str, int]) -> onnx.NodeProto:
        """The ``Unfold`` node computing the chain, or :class:`Kept` with the reason."""
        try:
            return OPERATORS_BY_NAME["Unfold"].make_node(
                [self.source], [output], name=self.label or None, **self.attributes)
        except (TypeError, ValueError) as error:
            raise Kept(f"attributes outside Unfold's range: {error}") from None

    def freed(self, graph: onnx.GraphProto) -> set[str]:
        return {name for i in self.nodes for name in graph.node[i].input}


def _attribute(node: onnx.NodeProto, name: str, default: Any) -> Any:
    return next((attribute_value(a) for a in node.attribute if a.name == name), default)


class _UnfoldMatcher:
    """Finds the ``F.unfold`` chains of one model that compute exactly what ``Unfold``
    computes: all the blocks, in its layout (:meth:`match`, one ``Pad`` at a time)."""

    def __init__(self, model: onnx.ModelProto, constants: dict[str, Any]):
        self.model = model
        self.graph = model.graph
        self.constants = constants
        self.wiring = Wiring(model.graph)
        self.dims: dict[str, list[int | None]] | None = None  # static_dims, when first needed

    def ints(self, name: str) -> list[int] | None:
        value = self.constants.get(name)
        if value is None or value.dtype.kind not in "iu":
            return None
        return [int(v) for v in np.ravel(value)]

    def static(self, source: str) -> list[int | None]:
        self.dims = static_dims(self.model) if self.dims is None else self.dims
        found = self.dims.get(source)
        return found if found is not None and len(found) == 4 else [None] * 4

    def dimension_of(self, name: str) -> tuple[str, int] | None:
        """``(x, axis)`` where ``name`` is ``Gather(Shape(x), axis)``, a scalar or one index."""
        made_by = self.wiring.made_by
        size = made_by(name, "Gather")
        shape = size and made_by(arg(size, 0), "Shape")
        index = size and self.ints(arg(size, 1))
        if not (size and shape and index and len(index) == 1 and _attribute(size, "axis", 0) == 0
                and _attribute(shape, "start", 0) == 0
                and _attribute(shape, "end", None) is None):
            return None
        return arg(shape, 0), index[0]

    def window(self, name: str, source: str, axis: int, padding: int) -> tuple[int, ...] | None:
        """(taps, dilation, stride) of one axis' index tensor ``[taps, blocks]`` reading every
        block of the padded axis, or None."""
        value = self.constants.get(name)
        if value is None:
            return self.ranged_window(name, source, axis, padding)
        if value.ndim != 2 or value.dtype.kind not in "iu" or not value.size:
            return None
        taps, blocks = value.shape
        dilation = int(value[1, 0] - value[0, 0]) if taps > 1 else 1
        stride = int(value[0, 1] - value[0, 0]) if blocks > 1 else 1
        size = self.static(source)[axis]
        if dilation < 1 or stride < 1 or size is None:
            return None
        span = dilation * (taps - 1) + 1
        expected = np.arange(taps)[:, None] * dilation + np.arange(blocks) * stride
        every = size + padding >= span and blocks == (size + padding - span) // stride + 1
        return (taps, dilation, stride) if every and np.array_equal(value, expected) else None

    def ranged_window(self, name: str, source: str, axis: int,
                      padding: int) -> tuple[int, ...] | None:
        """:meth:`window` of an index tensor computed from the axis' size:
        ``Unsqueeze(Range(0, size + pads - span, stride)) + offsets``."""
        made_by, constants, ints = self.wiring.made_by, self.constants, self.ints
        add = made_by(name, "Add")
        if add is None:
            return None
        offsets = next((constants[n] for n in add.input if n in constants), None)
        other = next((n for n in add.input if n not in constants), "")
        unsqueeze = made_by(other, "Unsqueeze")
        if offsets is None or offsets.ndim != 2 or offsets.shape[1] != 1 \
                or offsets.dtype.kind not in "iu" or not offsets.size or unsqueeze is None \
                or ints(arg(unsqueeze, 1)) != [0]:
            return None
        taps = offsets.shape[0]
        dilation = int(offsets[1, 0] - offsets[0, 0]) if taps > 1 else 1
        ranged = made_by(arg(unsqueeze, 0), "Range")
        step = ranged and ints(arg(ranged, 2))
        if dilation < 1 or not ranged or ints(arg(ranged, 0)) != [0] or not step \
                or step[0] < 1 or not np.array_equal(offsets[:, 0], np.arange(taps) * dilation):
            return None
        sub = made_by(arg(ranged, 1), "Sub")
        grown = sub and made_by(arg(sub, 0), "Add")
        if not (sub and grown and self.dimension_of(arg(grown, 0)) == (source, axis)
                and ints(arg(grown, 1)) == [padding]
                and ints(arg(sub, 1)) == [dilation * (taps - 1)]):
            return None
        return taps, dilation, step[0]

    def flattens(self, reshape: onnx.NodeProto, source: str, taps: int) -> bool:
        """Whether the Reshape makes ``[N, C * taps, L]`` of ``source``: a constant shape
        where N and C are known, or what TorchScript computes from ``source``'s shape."""
        made_by, ints = self.wiring.made_by, self.ints
        value = ints(arg(reshape, 1))
        if value is not None:
            n, c = self.static(source)[:2]
            zero = [0] if not _attribute(reshape, "allowzero", 0) else []
            return n is not None and c is not None and len(value) == 3 and value[0] in [n, *zero] \
                and value[1:] == [c * taps, -1]
        concat = made_by(arg(reshape, 1), "Concat")
        if concat is None or len(concat.input) != 3 or ints(concat.input[2]) != [-1]:
            return False
        batch, channels = (made_by(n, "Unsqueeze") for n in concat.input[:2])
        scaled = channels and made_by(arg(channels, 0), "Mul")
        return bool(batch and channels and scaled and ints(arg(scaled, 1)) == [taps]
                    and ints(arg(batch, 1)) == ints(arg(channels, 1)) == [0]
                    and self.dimension_of(arg(batch, 0)) == (source, 0)
                    and self.dimension_of(arg(scaled, 0)) == (source, 1))

    def padding(self, pad: onnx.NodeProto) -> list[int] | None:
        """The pads of a constant zero ``Pad`` of H and W only, or None."""
        if pad.op_type != "Pad" or pad.domain not in ("", "ai.onnx") or len(pad.input) < 2 \
                or arg(pad, 3) or _attribute(pad, "mode", "constant") != "constant":
            return None  # Pad's axes input would reorder the pads
        pads = self.ints(pad.input[1])
        fill = self.constants.get(arg(pad, 2)) if arg(pad, 2) else np.zeros(1)
        if pads is None or fill is None or len(pads) != 8 or pads[:2] != [0, 0] \
                or pads[4:6] != [0, 0] or min(pads) < 0 or np.any(fill != 0):
            return None
        return pads

    def match(self, p: int) -> _UnfoldChain | None:
        """The chain starting at node ``p``, a ``Pad``, or None."""
        graph, only_reader = self.graph, self.wiring.only_reader
        pad = graph.node[p]
        pads = self.padding(pad)
        if pads is None:
            return None
        rows = only_reader(pad.output[0], "Gather")
        columns = None if rows is None else only_reader(graph.node[rows].output[0], "Gather")
        swap = None if columns is None else \
            only_reader(graph.node[columns].output[0], "Transpose")
        flat = None if swap is None else only_reader(graph.node[swap].output[0], "Reshape")
        if rows is None or columns is None or swap is None or flat is None \
                or _attribute(graph.node[rows], "axis", 0) != 2 \
                or _attribute(graph.node[columns], "axis", 0) != 4 \
                or _attribute(graph.node[swap], "perm", None) != [0, 1, 2, 4, 3, 5] \
                or arg(graph.node[rows], 0) != pad.output[0]:
            return None
        source = pad.input[0]
        height = self.window(arg(graph.node[rows], 1), source, 2, pads[2] + pads[6])
        width = self.window(arg(graph.node[columns], 1), source, 3, pads[3] + pads[7])
        if height is None or width is None \
                or not self.flattens(graph.node[flat], source, height[0] * width[0]):
            return None
        return _UnfoldChain(
            [p, rows, columns, swap, flat], node_label(graph.node[flat]), source,
            {"window_sizes": [height[0], width[0]], "dilations": [height[1], width[1]],
             "strides": [height[2], width[2]], "start_padding": pads[2:4],
             "end_padding": pads[6:8]})


def _unfold_chains(model: onnx.ModelProto, constants: dict[str, Any]) -> list[_UnfoldChain]:
    """Every ``F.unfold`` chain in the model whose intermediate values nothing else reads and
    that computes exactly what ``Unfold`` computes: all the blocks, in its layout."""
    matcher = _UnfoldMatcher(model, constants)
    found = (matcher.match(p) for p in range(len(model.graph.node)))
    return [chain for chain in found if chain is not None]


def chains(model: onnx.ModelProto, constants: dict[str, Any]) -> list[Chain]:
    """Every chain of either kind in the model's main graph, the Lp poolings first."""
    return [*_lp_pool_chains(model.graph, constants), *_unfold_chains(model, constants)]
