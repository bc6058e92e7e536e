"""Raising rules: what each standard ``MaxRoiPool``, ``RoiAlign``, ``LpPool`` and ``Col2Im``
node becomes (a :class:`Raise`), or why it stays (:class:`Kept`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import onnx

from dml_onnx._kernels._checks import UINT32_MAX
from dml_onnx.definition import node_label
from dml_onnx.form import StandardNode
from dml_onnx.ops._roi_edges import edge_regions, replace_regions

EDGE_REGIONS = "dml_onnx: the regions of a raised RoiAlign with a sample on an image edge"
"""The ``doc_string`` of the ``RoiAlign`` that computes those regions (see :func:`_roi_align`);
raising leaves it as it is."""


class Kept(Exception):
    """A standard node that stays: its reason."""


@dataclass(frozen=True)
class RuleNode:
    """A standard node as the rules see it: attributes, version, constant inputs, types."""

    proto: onnx.NodeProto
    version: int
    attributes: dict[str, Any]
    constants: dict[str, Any]
    types: dict[str, int]
    opset: int
    prefix: str  # of the names of the standard nodes a rule adds
    positive_rois: bool  # the caller vouches every ROI has a positive width and height

    def get(self, name: str, default: Any) -> Any:
        return self.attributes.get(name, default)

    def require(self, condition: bool, reason: str) -> None:
        if not condition:
            raise Kept(reason)

    def known_type(self, name: str, what: str) -> int:
        """The element type of ``name``; the node stays where it is unknown."""
        elem = self.types.get(name)
        if elem is None:
            raise Kept(f"the element type of {what} is unknown")
        return elem

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
class Raise:
    """What a rule makes of a standard node: the ``dml_onnx`` node (op type, inputs,
    attributes; ``outputs`` when standard nodes ``after`` it finish the node's outputs), and
    the standard nodes that compute its inputs (``before``)."""

    op_type: str
    inputs: list[str]
    attributes: dict[str, Any]
    before: list[onnx.NodeProto] = field(default_factory=list)
    outputs: list[str] | None = None
    after: list[onnx.NodeProto] = field(default_factory=list)


def _max_roi_pool(node: RuleNode) -> Raise:
    """``MaxRoiPool`` rounds the scaled corners half away from zero, ``RoiPooling`` half to
    even: the raised node reads corners scaled and rounded as ``MaxRoiPool`` does (in float32
    for float16) with ``spatial_scale`` 1."""
    image, rois = node.proto.input
    elem = node.known_type(rois, "the ROIs")
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
    return Raise("RoiPooling", [image, before.cast(rows, elem) if ctype != elem else rows], {
        "pooled_size": node.get("pooled_shape", None), "spatial_scale": 1.0},
        before=before.nodes)


def _roi_align(node: RuleNode) -> Raise:
    """``RoiAlign`` (avg) as ``RoiAlign1``, with the standard nodes for what ONNX does and
    no attribute does: ``output_half_pixel``'s one-pixel clamp, ``sampling_ratio=0``'s empty
    regions, and its closed bounds: a region with a sample on (or within rounding of) -1 or
    H (W) (:func:`~dml_onnx.ops._roi_edges.edge_regions`) takes its outputs from the
    ``RoiAlign`` itself, run on those regions alone (none, in a detector)."""
    node.require(node.version >= 16, f"RoiAlign-{node.version} has no half_pixel mode")
    mode = node.get("mode", "avg")
    node.require(mode == "avg", f"mode {mode!r}: onnx takes the max of weighted corner "
                                "terms, not of the samples")
    transform = node.get("coordinate_transformation_mode", "half_pixel")
    node.require(transform in ("half_pixel", "output_half_pixel"),
                 f"coordinate_transformation_mode {transform!r} is not an onnx mode")
    image, rois, batch = node.proto.input
    elem = node.known_type(rois, "the ROIs")
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
    if transform == "half_pixel" and ratio == 0 and not node.positive_rois:
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
    return Raise("RoiAlign1", inputs, attributes, before=before.nodes, outputs=[raw],
                  after=after.nodes)


def _lp_pool(node: RuleNode) -> Raise:
    node.require(node.version >= 11, f"LpPool-{node.version} is not raised")
    auto_pad = node.get("auto_pad", "NOTSET")
    node.require(auto_pad in ("NOTSET", "VALID"), f"auto_pad {auto_pad!r} depends on sizes")
    node.require(not node.get("ceil_mode", 0), "ceil_mode 1 rounds output sizes up")
    window = node.get("kernel_shape", [])
    k = len(window)
    pads = [0] * (2 * k) if auto_pad == "VALID" else node.get("pads", [0] * (2 * k))
    return Raise("LpPooling", list(node.proto.input), {
        "window_size": window, "strides": node.get("strides", [1] * k),
        "dilations": node.get("dilations", [1] * k), "start_padding": pads[:k],
        "end_padding": pads[k:], "p": node.get("p", 2)})


def _col2im(node: RuleNode) -> Raise:
    output_size = node.constant(1, "image_shape")
    window = node.constant(2, "block_shape")
    k = len(window)
    pads = node.get("pads", [0] * (2 * k))
    dilations = node.get("dilations", [1] * k)
    node.require(min(dilations, default=1) >= 1, f"dilations {dilations}: Col2Im sums every tap "
                 "at one position, where DirectML's Fold of dilation 0 gives zeros")
    return Raise("Fold", [node.proto.input[0]], {
        "window_sizes": window, "output_size": output_size,
        "strides": node.get("strides", [1] * k), "dilations": dilations,
        "start_padding": pads[:k], "end_padding": pads[k:]})


RULES: dict[str, Callable[[RuleNode], Raise]] = {
    "MaxRoiPool": _max_roi_pool, "RoiAlign": _roi_align, "LpPool": _lp_pool,
    "Col2Im": _col2im}
"""Standard op type -> the rule giving its :class:`Raise` or raising :class:`Kept`."""
