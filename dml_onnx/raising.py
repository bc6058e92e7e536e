"""Raising: standard ``MaxRoiPool``, ``RoiAlign``, ``LpPool`` and ``Col2Im`` nodes into the
``dml_onnx`` node that computes exactly the same, wherever one does.

A node is raised only when the two agree for every input. Where ONNX does what no attribute
of the ``dml_onnx`` operator does, the raised node comes with the few standard nodes that do it:
``RoiAlign`` with ``output_half_pixel`` clamps each scaled ROI's width and height to at least 1
(the raised node reads ROIs scaled and clamped by ``Mul``, ``Sub``, ``Max``, ``Add``), and with
``sampling_ratio=0`` and ``half_pixel`` it gives 0 for an empty or inverted ROI (a ``Where``
zeroes those outputs, unless the caller vouches that every ROI has a positive width and
height). The chain torch's exporters write for ``F.lp_pool*d`` (:class:`_Chain`) becomes one
``LpPooling`` where p is an even integer, and the ``Pad``, ``Gather``, ``Gather``,
``Transpose``, ``Reshape`` chain they write for ``F.unfold`` (:class:`_UnfoldChain`) one
``Unfold``. ``RoiAlign`` with ``mode="max"`` (the max of weighted
corner terms), ``LpPool`` with
``ceil_mode`` or ``SAME`` padding and ``Col2Im`` with non-constant sizes stay standard. Each
node left standard comes with the reason.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from custom_ops._checks import UINT32_MAX
from dml_onnx.definition import (
    DOMAIN,
    OPSET_VERSION,
    attribute_value,
    element_type,
    node_label,
)
from dml_onnx.form import StandardNode, op_version
from dml_onnx.graphs import (
    check_structure,
    element_types,
    load_model,
    static_dims,
    subgraphs,
    unused_prefix,
)
from dml_onnx.ops import OPERATORS_BY_NAME
from dml_onnx.ops._roi_sampling import edge_regions, replace_regions
from dml_onnx.standard import default_opset, with_functions

EDGE_REGIONS = "dml_onnx: the regions of a raised RoiAlign with a sample on an image edge"
"""The ``doc_string`` of the ``RoiAlign`` that computes those regions (see :func:`_roi_align`);
raising leaves it as it is."""


class _Kept(Exception):
    """A standard node that stays: its reason."""


@dataclass(frozen=True)
class Raised:
    """The result of :func:`raise_model`: the model, the raised nodes' names, and the
    standard nodes of the four kinds that were left, with the reason for each."""

    model: onnx.ModelProto
    raised: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Node:
    """A standard node as the rules see it: attributes, version, constant inputs, types."""

    proto: onnx.NodeProto
    version: int
    attributes: dict[str, Any]
    constants: dict[str, Any]
    types: dict[str, int]
    opset: int
    prefix: str  # of the names of the standard nodes a rule adds

    def get(self, name: str, default: Any) -> Any:
        return self.attributes.get(name, default)

    def require(self, condition: bool, reason: str) -> None:
        if not condition:
            raise _Kept(reason)

    def constant(self, index: int, what: str) -> list[int]:
        """The values of an integer constant input (a float one makes the node invalid:
        onnxruntime refuses it, and so it stays)."""
        name = self.proto.input[index] if index < len(self.proto.input) else ""
        self.require(name in self.constants, f"{what} is not a constant")
        values = self.constants[name]
        self.require(values.dtype.kind in "iu", f"{what} is {values.dtype.name}, not an "
                                                "integer tensor")
        return [int(v) for v in values.ravel()]

    def emitter(self, part: str) -> StandardNode:
        """Where a rule writes standard nodes (``part``: ``"before"`` or ``"after"`` the
        raised node), their names starting with this node's prefix."""
        return StandardNode(node_label(self.proto), list(self.proto.input),
                            list(self.proto.output), self.attributes,
                            [self.types.get(name) for name in self.proto.input], self.opset,
                            f"{self.prefix}{part}")


@dataclass
class _Raise:
    """What a rule makes of a standard node: the ``dml_onnx`` node (op type, inputs,
    attributes; ``outputs`` when standard nodes ``after`` it finish the node's outputs), and
    the standard nodes that compute its inputs (``before``)."""

    op_type: str
    inputs: list[str]
    attributes: dict[str, Any]
    before: list[onnx.NodeProto] = field(default_factory=list)
    outputs: list[str] | None = None
    after: list[onnx.NodeProto] = field(default_factory=list)


def _max_roi_pool(node: _Node, positive_rois: bool) -> _Raise:
    """``MaxRoiPool`` rounds the scaled corners half away from zero, ``RoiPooling`` half to
    even: the raised node reads corners scaled and rounded as ``MaxRoiPool`` does (in float32
    for float16) with ``spatial_scale`` 1."""
    image, rois = node.proto.input
    elem = node.types.get(rois)
    node.require(elem is not None, "the element type of the ROIs is unknown")
    before = node.emitter("before")
    ctype = onnx.TensorProto.FLOAT if elem == onnx.TensorProto.FLOAT16 else elem
    ids, corners = before.op("Split", before.cast(rois, ctype) if ctype != elem else rois,
                             before.constant([1, 4]), axis=1, outputs=2)
    scaled = before.op("Mul", corners, before.constant(node.get("spatial_scale", 1.0), ctype))
    magnitude = before.op("Abs", scaled)
    whole = before.op("Floor", magnitude)
    half_up = before.op("GreaterOrEqual", before.op("Sub", magnitude, whole),
                        before.constant(0.5, ctype))
    rounded = before.op("Mul", before.op("Add", whole, before.cast(half_up, ctype)),
                        before.op("Sign", scaled))  # round_half_away, exact
    rows = before.op("Concat", ids, rounded, axis=1)
    return _Raise("RoiPooling", [image, before.cast(rows, elem) if ctype != elem else rows], {
        "pooled_size": node.get("pooled_shape", None), "spatial_scale": 1.0},
        before=before.nodes)


def _roi_align(node: _Node, positive_rois: bool) -> _Raise:
    """``RoiAlign`` (avg) as ``RoiAlign1``, with the standard nodes for what ONNX does and
    no attribute does: ``output_half_pixel``'s one-pixel clamp, ``sampling_ratio=0``'s empty
    regions, and its closed bounds: a region with a sample on (or within rounding of) -1 or
    H (W) (:func:`~dml_onnx.ops._roi_sampling.edge_regions`) takes its outputs from the
    ``RoiAlign`` itself, run on those regions alone (none, in a detector)."""
    node.require(node.version >= 16, f"RoiAlign-{node.version} has no half_pixel mode")
    mode = node.get("mode", "avg")
    node.require(mode == "avg", f"mode {mode!r}: onnx takes the max of weighted corner "
                                "terms, not of the samples")
    transform = node.get("coordinate_transformation_mode", "half_pixel")
    node.require(transform in ("half_pixel", "output_half_pixel"),
                 f"coordinate_transformation_mode {transform!r} is not an onnx mode")
    image, rois, batch = node.proto.input
    elem = node.types.get(rois)
    node.require(elem is not None, "the element type of the ROIs is unknown")
    ratio = node.get("sampling_ratio", 0)
    scale = node.get("spatial_scale", 1.0)
    output_size = [node.get("output_height", 1), node.get("output_width", 1)]
    minimum, maximum = (ratio, ratio) if ratio > 0 else (1, UINT32_MAX)
    attributes = {"output_size": output_size,
                  "spatial_scale_x": scale, "spatial_scale_y": scale,
                  "minimum_samples_per_output": minimum, "maximum_samples_per_output": maximum}
    before, after = node.emitter("before"), node.emitter("after")
    inputs = list(node.proto.input)
    scaled = before.op("Mul", rois, before.constant(scale, elem))  # as onnx scales, in T
    starts, ends = (before.op("Slice", scaled, before.constant([first]),
                              before.constant([first + 2]), before.constant([1]))
                    for first in (0, 2))
    if transform == "output_half_pixel":
        # onnx: width and height max(end - start, 1), from the unshifted start
        sizes = before.op("Max", before.op("Sub", ends, starts), before.constant(1.0, elem))
        inputs[1] = before.op("Concat", starts, before.op("Add", starts, sizes), axis=1)
        attributes |= {"spatial_scale_x": 1.0, "spatial_scale_y": 1.0,
                       "input_pixel_offset": 0.0}
    aligned = raw = after.fresh("aligned")
    if transform == "half_pixel" and ratio == 0 and not positive_rois:
        # sampling_ratio 0: onnx takes ceil(size / output size) samples per bin, none (output
        # 0) for a width or height <= 0, which RoiAlign1 still samples once: zero those.
        half = before.constant(0.5, elem)
        sizes = before.op("Sub", before.op("Sub", ends, half), before.op("Sub", starts, half))
        sampled = before.op("Greater", before.reduce("ReduceMin", sizes, [1]),
                            before.constant(0.0, elem))
        mask = before.op("Reshape", sampled, before.constant([-1, 1, 1, 1]))
        aligned = after.op("Where", mask, raw, after.constant(0.0, elem))
    ct = onnx.TensorProto.FLOAT if elem == onnx.TensorProto.FLOAT16 else elem
    height, width = (after.squeeze(after.op("Shape", image, start=k, end=k + 1), [0])
                     for k in (2, 3))
    edges = edge_regions(after, after.cast(rois, ct) if ct != elem else rois, (height, width),
                         (output_size[0], output_size[1]), scale=scale,
                         offset=0.5 if transform == "half_pixel" else 0.0,
                         clamp_small=transform == "output_half_pixel", ratio=ratio)

    def stock(rois_k: str, batch_k: str) -> str:
        output = after.op("RoiAlign", image, rois_k, batch_k, **node.attributes)
        after.nodes[-1].doc_string = EDGE_REGIONS  # not raised again
        return output

    replace_regions(after, aligned, edges, stock, rois, batch, node.proto.output[0])
    return _Raise("RoiAlign1", inputs, attributes, before=before.nodes, outputs=[raw],
                  after=after.nodes)


def _lp_pool(node: _Node, positive_rois: bool) -> _Raise:
    node.require(node.version >= 11, f"LpPool-{node.version} is not raised")
    auto_pad = node.get("auto_pad", "NOTSET")
    node.require(auto_pad in ("NOTSET", "VALID"), f"auto_pad {auto_pad!r} depends on sizes")
    node.require(not node.get("ceil_mode", 0), "ceil_mode 1 rounds output sizes up")
    window = node.get("kernel_shape", [])
    k = len(window)
    pads = [0] * (2 * k) if auto_pad == "VALID" else node.get("pads", [0] * (2 * k))
    return _Raise("LpPooling", list(node.proto.input), {
        "window_size": window, "strides": node.get("strides", [1] * k),
        "dilations": node.get("dilations", [1] * k), "start_padding": pads[:k],
        "end_padding": pads[k:], "p": node.get("p", 2)})


def _col2im(node: _Node, positive_rois: bool) -> _Raise:
    output_size = node.constant(1, "image_shape")
    window = node.constant(2, "block_shape")
    k = len(window)
    pads = node.get("pads", [0] * (2 * k))
    return _Raise("Fold", [node.proto.input[0]], {
        "window_sizes": window, "output_size": output_size,
        "strides": node.get("strides", [1] * k), "dilations": node.get("dilations", [1] * k),
        "start_padding": pads[:k], "end_padding": pads[k:]})


RULES: dict[str, Callable[[_Node, bool], _Raise]] = {
    "MaxRoiPool": _max_roi_pool, "RoiAlign": _roi_align, "LpPool": _lp_pool,
    "Col2Im": _col2im}
"""Standard op type -> the rule giving its :class:`_Raise` or raising :class:`_Kept`."""


def _subgraph_reads(nodes: Iterable[onnx.NodeProto]) -> set[str]:
    """Every name that a node inside the subgraphs of ``nodes`` (at any depth) reads: values
    of the outer graph an ``If`` or ``Loop`` body may use by name."""
    names: set[str] = set()
    for node in nodes:
        for graph in subgraphs(node):
            names.update(name for inner in graph.node for name in inner.input)
            names.update(o.name for o in graph.output)
            names |= _subgraph_reads(graph.node)
    return names


def _arg(node: onnx.NodeProto, k: int) -> str:
    """Input ``k`` of ``node``, or ``""`` where it has none (a malformed model)."""
    return node.input[k] if k < len(node.input) else ""


class _Wiring:
    """Who makes and who reads each value of a graph: what the chain finders walk. Values
    that a subgraph reads by name count as read from outside, like the graph's outputs."""

    def __init__(self, graph: onnx.GraphProto):
        self.graph = graph
        self.producer = {name: i for i, node in enumerate(graph.node) for name in node.output}
        self.readers: dict[str, list[int]] = {}
        for i, node in enumerate(graph.node):
            for name in node.input:
                self.readers.setdefault(name, []).append(i)
        self.outputs = {o.name for o in graph.output} | _subgraph_reads(graph.node)

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


@dataclass
class _Chain:
    """A decomposed Lp pooling that torch's exporters write for ``F.lp_pool*d``:
    ``Pow(Mul(Mul(Sign(a), Relu(Abs(a))), count), 1/p)`` of ``a = AveragePool(Pow(x, p))``."""

    nodes: list[int]  # the chain's node indices in the graph, the final Pow last
    label: str  # the AveragePool's
    source: str  # x
    p: float
    pool: dict[str, Any]  # the AveragePool's attributes
    constants: list[str]  # the chain's constant inputs


def _lp_pool_chains(graph: onnx.GraphProto, constants: dict[str, Any]) -> list[_Chain]:
    """Every decomposed Lp pooling in ``graph`` whose intermediate values nothing else reads."""
    wiring = _Wiring(graph)
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
        if product is None or only_reader(graph.node[sign].output[0], "Mul") != product:
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
        chains.append(_Chain([first, a, sign, absolute, relu, product, scaled, root],
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


def _unfold_chains(model: onnx.ModelProto, constants: dict[str, Any]) -> list[_UnfoldChain]:
    """Every ``F.unfold`` chain in the model whose intermediate values nothing else reads and
    that computes exactly what ``Unfold`` computes: all the blocks, in its layout."""
    graph = model.graph
    dims: dict[str, list[int | None]] | None = None
    wiring = _Wiring(graph)
    only_reader, made_by = wiring.only_reader, wiring.made_by

    def attribute(node: onnx.NodeProto, name: str, default: Any) -> Any:
        return next((attribute_value(a) for a in node.attribute if a.name == name), default)

    def ints(name: str) -> list[int] | None:
        value = constants.get(name)
        if value is None or value.dtype.kind not in "iu":
            return None
        return [int(v) for v in np.ravel(value)]

    def static(source: str) -> list[int | None]:
        nonlocal dims
        dims = static_dims(model) if dims is None else dims
        found = dims.get(source)
        return found if found is not None and len(found) == 4 else [None] * 4

    def dimension_of(name: str) -> tuple[str, int] | None:
        """``(x, axis)`` where ``name`` is ``Gather(Shape(x), axis)``, a scalar or one index."""
        size = made_by(name, "Gather")
        shape = size and made_by(_arg(size, 0), "Shape")
        index = size and ints(_arg(size, 1))
        if not (shape and index and len(index) == 1 and attribute(size, "axis", 0) == 0
                and attribute(shape, "start", 0) == 0 and attribute(shape, "end", None) is None):
            return None
        return _arg(shape, 0), index[0]

    def window(name: str, source: str, axis: int, padding: int) -> tuple[int, ...] | None:
        """(taps, dilation, stride) of one axis' index tensor ``[taps, blocks]`` reading every
        block of the padded axis, or None."""
        value = constants.get(name)
        if value is not None:
            if value.ndim != 2 or value.dtype.kind not in "iu" or not value.size:
                return None
            taps, blocks = value.shape
            dilation = int(value[1, 0] - value[0, 0]) if taps > 1 else 1
            stride = int(value[0, 1] - value[0, 0]) if blocks > 1 else 1
            size = static(source)[axis]
            if dilation < 1 or stride < 1 or size is None:
                return None
            span = dilation * (taps - 1) + 1
            expected = np.arange(taps)[:, None] * dilation + np.arange(blocks) * stride
            every = size + padding >= span and blocks == (size + padding - span) // stride + 1
            return (taps, dilation, stride) if every and np.array_equal(value, expected) \
                else None
        add = made_by(name, "Add")  # Unsqueeze(Range(0, size + pads - span, stride)) + offsets
        if add is None:
            return None
        offsets = next((constants[n] for n in add.input if n in constants), None)
        other = next((n for n in add.input if n not in constants), "")
        unsqueeze = made_by(other, "Unsqueeze")
        if offsets is None or offsets.ndim != 2 or offsets.shape[1] != 1 \
                or offsets.dtype.kind not in "iu" or not offsets.size or unsqueeze is None \
                or ints(_arg(unsqueeze, 1)) != [0]:
            return None
        taps = offsets.shape[0]
        dilation = int(offsets[1, 0] - offsets[0, 0]) if taps > 1 else 1
        ranged = made_by(_arg(unsqueeze, 0), "Range")
        step = ranged and ints(_arg(ranged, 2))
        if dilation < 1 or not ranged or ints(_arg(ranged, 0)) != [0] or not step \
                or step[0] < 1 or not np.array_equal(offsets[:, 0], np.arange(taps) * dilation):
            return None
        sub = made_by(_arg(ranged, 1), "Sub")
        grown = sub and made_by(_arg(sub, 0), "Add")
        if not (grown and dimension_of(_arg(grown, 0)) == (source, axis)
                and ints(_arg(grown, 1)) == [padding]
                and ints(_arg(sub, 1)) == [dilation * (taps - 1)]):
            return None
        return taps, dilation, step[0]

    def flattens(reshape: onnx.NodeProto, source: str, taps: int) -> bool:
        """Whether the Reshape makes ``[N, C * taps, L]`` of ``source``: a constant shape
        where N and C are known, or what TorchScript computes from ``source``'s shape."""
        value = ints(_arg(reshape, 1))
        if value is not None:
            n, c = static(source)[:2]
            zero = [0] if not attribute(reshape, "allowzero", 0) else []
            return None not in (n, c) and len(value) == 3 and value[0] in [n, *zero] \
                and value[1:] == [c * taps, -1]
        concat = made_by(_arg(reshape, 1), "Concat")
        if concat is None or len(concat.input) != 3 or ints(concat.input[2]) != [-1]:
            return False
        batch, channels = (made_by(n, "Unsqueeze") for n in concat.input[:2])
        scaled = channels and made_by(_arg(channels, 0), "Mul")
        return bool(batch and scaled and ints(_arg(scaled, 1)) == [taps]
                    and ints(_arg(batch, 1)) == ints(_arg(channels, 1)) == [0]
                    and dimension_of(_arg(batch, 0)) == (source, 0)
                    and dimension_of(_arg(scaled, 0)) == (source, 1))

    chains = []
    for p, pad in enumerate(graph.node):
        if pad.op_type != "Pad" or pad.domain not in ("", "ai.onnx") or len(pad.input) < 2 \
                or _arg(pad, 3) or attribute(pad, "mode", "constant") != "constant":
            continue  # Pad's axes input would reorder the pads
        pads = ints(pad.input[1])
        fill = constants.get(_arg(pad, 2)) if _arg(pad, 2) else np.zeros(1)
        if pads is None or fill is None or len(pads) != 8 or pads[:2] != [0, 0] \
                or pads[4:6] != [0, 0] or min(pads) < 0 or np.any(fill != 0):
            continue
        rows = only_reader(pad.output[0], "Gather")
        columns = None if rows is None else only_reader(graph.node[rows].output[0], "Gather")
        swap = None if columns is None else \
            only_reader(graph.node[columns].output[0], "Transpose")
        flat = None if swap is None else only_reader(graph.node[swap].output[0], "Reshape")
        if flat is None or attribute(graph.node[rows], "axis", 0) != 2 \
                or attribute(graph.node[columns], "axis", 0) != 4 \
                or attribute(graph.node[swap], "perm", None) != [0, 1, 2, 4, 3, 5] \
                or _arg(graph.node[rows], 0) != pad.output[0]:
            continue
        source = pad.input[0]
        height = window(_arg(graph.node[rows], 1), source, 2, pads[2] + pads[6])
        width = window(_arg(graph.node[columns], 1), source, 3, pads[3] + pads[7])
        if height is None or width is None \
                or not flattens(graph.node[flat], source, height[0] * width[0]):
            continue
        chains.append(_UnfoldChain(
            [p, rows, columns, swap, flat], node_label(graph.node[flat]), source,
            {"window_sizes": [height[0], width[0]], "dilations": [height[1], width[1]],
             "strides": [height[2], width[2]], "start_padding": pads[2:4],
             "end_padding": pads[6:8]}))
    return chains


def _lp_pool_node(chain: _Chain, output: str, types: dict[str, int]) -> onnx.NodeProto:
    """The ``LpPooling`` node computing a chain, or :class:`_Kept` with the reason."""
    p, a = chain.p, chain.pool
    if not (p.is_integer() and p >= 2 and int(p) % 2 == 0):
        raise _Kept(f"an exported lp_pool with p {p:g}: it sums x^p, LpPooling |x|^p "
                    "(equal for an even integer p only)")
    k = len(a.get("kernel_shape", []))
    if a.get("ceil_mode", 0) or any(a.get("pads", [0] * 2 * k)) \
            or any(d != 1 for d in a.get("dilations", [1] * k)) \
            or a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise _Kept("an exported lp_pool with ceil_mode, padding or dilation")
    definition = OPERATORS_BY_NAME["LpPooling"]
    if types.get(chain.source) not in {element_type(t) for t in
                                       definition.type_constraints["T"]}:
        raise _Kept("an exported lp_pool of an element type LpPooling does not take")
    return definition.make_node([chain.source], [output], name=chain.label or None,
                                window_size=a["kernel_shape"],
                                strides=a.get("strides", [1] * k), p=int(p))


def raise_model(model: str | os.PathLike | bytes | onnx.ModelProto, *,
                positive_rois: bool = False, functions: bool = True) -> Raised:
    """Rewrite the standard nodes that have an exact ``dml_onnx`` equivalent.

    ``positive_rois=True`` vouches that every ROI of every ``RoiAlign`` has a positive width
    and height, which makes ``sampling_ratio=0`` exact too. With ``functions`` (the default)
    the result carries each new node's standard form as a model-local function, so it still
    runs where the domain's kernels are not installed. ``model``: a path, serialized bytes
    or a ModelProto (:func:`dml_onnx.graphs.load_model`).
    """
    model = load_model(model)
    opset = default_opset(model)  # before the nodes: they follow it
    check_structure(model, "raising")
    types = element_types(model)
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.attribute \
                and node.attribute[0].name == "value":
            constants[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    base = unused_prefix(model.graph, "_dml_onnx_raise")
    result = Raised(onnx.ModelProto())
    result.model.CopyFrom(model)
    del result.model.graph.node[:]
    replacements, chained, freed = {}, set(), set()
    for chain in _lp_pool_chains(model.graph, constants):
        try:
            replacements[chain.nodes[-1]] = _lp_pool_node(
                chain, model.graph.node[chain.nodes[-1]].output[0], types)
        except _Kept as reason:
            result.kept[chain.label] = str(reason)
            continue
        chained.update(chain.nodes)
        freed.update(chain.constants)
        result.raised.append(chain.label)
    for unfold in _unfold_chains(model, constants):
        try:
            replacements[unfold.nodes[-1]] = OPERATORS_BY_NAME["Unfold"].make_node(
                [unfold.source], [model.graph.node[unfold.nodes[-1]].output[0]],
                name=unfold.label or None, **unfold.attributes)
        except (TypeError, ValueError) as error:
            result.kept[unfold.label] = f"attributes outside Unfold's range: {error}"
            continue
        chained.update(unfold.nodes)
        freed.update(name for i in unfold.nodes for name in model.graph.node[i].input)
        result.raised.append(unfold.label)
    for index, node in enumerate(model.graph.node):
        if index in chained:
            if index in replacements:
                result.model.graph.node.append(replacements[index])
            continue
        rule = (RULES.get(node.op_type) if node.domain in ("", "ai.onnx")
                and node.doc_string != EDGE_REGIONS else None)
        if rule is None:
            result.model.graph.node.append(node)
            continue
        label = node_label(node)
        view = _Node(node, op_version(node.op_type, opset),
                     {a.name: attribute_value(a) for a in node.attribute}, constants, types,
                     opset, f"{base}{index}_")
        try:
            raised = _raised_nodes(view, rule, positive_rois)
        except _Kept as reason:
            result.kept[label] = str(reason)
            result.model.graph.node.append(node)
            continue
        result.model.graph.node.extend(raised)
        result.raised.append(label)
    if result.raised:
        _prune_unread(result.model, freed | {name for node in model.graph.node
                                             if node_label(node) in result.raised
                                             for name in node.input})
        if all(o.domain != DOMAIN for o in result.model.opset_import):
            result.model.opset_import.append(helper.make_opsetid(DOMAIN, OPSET_VERSION))
        if functions:
            result.model.CopyFrom(with_functions(result.model))
    return result


def _raised_nodes(view: _Node, rule: Callable[[_Node, bool], _Raise],
                  positive_rois: bool) -> list[onnx.NodeProto]:
    raised = rule(view, positive_rois)
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
        raise _Kept(f"attributes outside {raised.op_type}'s range: {error}") from None
    for k, helper_node in enumerate(raised.before + raised.after):
        helper_node.name = f"{view.prefix}{k}"
    return [*raised.before, node, *raised.after]


def _prune_unread(model: onnx.ModelProto, freed: set[str]) -> None:
    """Drop the initializers among ``freed`` (what the replaced nodes read) and the nodes
    making them that nothing reads any more (Col2Im's sizes, the index arithmetic of a raised
    ``F.unfold`` chain), and in turn what only those read. An initializer that is also a graph
    input (a default the caller may override) goes from the inputs too, so that feeding it is
    an error rather than silently ignored; IR versions before 4 need the two listed alike."""
    graph = model.graph
    overridable = {t.name for t in graph.initializer} if model.ir_version >= 4 else set()
    kept = {o.name for o in graph.output} | {i.name for i in graph.input} - overridable
    kept |= _subgraph_reads(graph.node)
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


__all__ = ["Raised", "raise_model"]
