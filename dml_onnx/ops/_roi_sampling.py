"""The sample grid of RoiAlign1 and RoiAlignGrad in standard ONNX ops (spec sections 2, 3).

Shapes: ``R`` regions; per axis ``O`` outputs (``OH``, ``OW``) and ``M`` = the largest sample
count ``n`` over the regions (``MY``, ``MX``), computed in the graph. Per-axis values are
``[R, O, M]``: sample ``j`` of output ``o`` of region ``r`` is ``s = o * n[r] + j``, valid
where ``j < n[r]``. Per-sample values combine both axes as ``[R, OH, MY, OW, MX, C]``: y
values are placed ``[R, OH, MY, 1, 1, 1]``, x values ``[R, 1, 1, OW, MX, 1]``. The image is
read as rows ``[N * H * W, C]`` (pixel ``(b, y, x)`` at row ``(b * H + y) * W + x``).

Everything is computed in the compute type (float32 for float16 and float, float64 for
double), coordinates operation for operation as ``dml_onnx._kernels.roi_align1`` computes them, so
that floor, clamping and the out-of-bounds test decide exactly as the kernel does. Every
coordinate is clamped into the image and an out-of-bounds one replaced by 0 before reading, so
every read (samples that are not valid included) is in range.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from onnx import TensorProto

from dml_onnx.form import NotEquivalent, StandardNode

FLOAT_ELEMENTS = (TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE)
"""The element types ``T`` of the region-of-interest operators: the only ones the grid takes."""

Y_PLACE, X_PLACE = (3, 4, 5), (1, 2, 5)
"""Unsqueeze axes taking ``[R, O, M]`` y or x values to the per-sample layout."""

BY_OUTPUT = (0, 1, 3, 5, 2, 4)
"""The permutation taking the per-sample layout to ``[R, OH, OW, C, MY, MX]``."""


def float_compute_type(node: StandardNode) -> int:
    """The node's compute type (:attr:`StandardNode.compute_type`); raises
    :class:`NotEquivalent` for an element type ``T`` other than :data:`FLOAT_ELEMENTS`."""
    if node.elem_type not in FLOAT_ELEMENTS:
        raise NotEquivalent(f"'{node.label}': no standard form for element type "
                            f"{TensorProto.DataType.Name(node.elem_type)}")
    return node.compute_type


def dims(node: StandardNode, tensor: str) -> list[str]:
    """The four sizes of the 4-D ``tensor`` as 0-d int64 values."""
    shape = node.op("Shape", tensor)
    return [node.op("Gather", shape, node.constant(k)) for k in range(4)]


def regions(node: StandardNode, rois: str, batch_indices: str) -> tuple[str, str]:
    """``rois`` as compute-type ``[R, 4]`` and ``batch_indices`` as int64 ``[R]``."""
    boxes = node.to_compute(node.op("Reshape", rois, node.constant([-1, 4])))
    batch = node.op("Reshape", batch_indices, node.constant([-1]))
    if node.input_types[-1] != TensorProto.INT64:
        batch = node.cast(batch, TensorProto.INT64)
    return boxes, batch


def image_rows(node: StandardNode, image: str, sizes: list[str]) -> str:
    """``image [N, C, H, W]`` (type ``T``, ``sizes`` its four sizes) as compute-type rows
    ``[N * H * W, C]``."""
    n, c, h, w = sizes
    count = node.op("Mul", node.op("Mul", n, h), w)
    shape = node.op("Concat", node.unsqueeze(count, [0]), node.unsqueeze(c, [0]), axis=0)
    nhwc = node.op("Transpose", node.to_compute(image), perm=[0, 2, 3, 1])
    return node.op("Reshape", nhwc, shape, allowzero=1)


def rows_to_image(node: StandardNode, rows: str, sizes: list[str], output: str) -> None:
    """Rows ``[N * H * W, C]`` back to ``output [N, C, H, W]`` of type ``T``."""
    n, c, h, w = sizes
    shape = node.op("Concat", *(node.unsqueeze(d, [0]) for d in (n, h, w, c)), axis=0)
    node.finish("Transpose", node.op("Reshape", rows, shape, allowzero=1), output=output,
                perm=[0, 3, 1, 2])


@dataclass(frozen=True)
class Axis:
    """The samples of every region along one axis. ``valid``, ``t``, ``inside``,
    ``unclamped`` and ``frac`` are placed in the per-sample layout (``valid`` from
    ``[R, 1, M]``, the others from ``[R, O, M]``); ``lo`` and ``hi`` are ``[R, O, M]``.
    ``hi`` and ``frac`` exist with linear interpolation only (``""`` otherwise)."""

    n: str  # [R] int64: samples per output
    most: str  # 0-d int64: M, the largest n
    valid: str  # bool: j < n
    t: str  # compute type: t(s), the relative position in the region
    inside: str  # bool: not out of bounds
    unclamped: str  # bool: inside, and needing no clamping
    lo: str  # int64: the first corner, or the nearest pixel (0 outside)
    hi: str  # int64: min(lo + 1, L - 1)
    frac: str  # compute type: the clamped coordinate minus lo (0 outside)


class RoiGrid:
    """The sample grid of spec section 2 for the node's regions.

    ``rois`` and ``batch_indices`` are the node's inputs (any allowed rank and types);
    ``image_size`` the 0-d int64 ``H, W``; ``output_size`` the 0-d int64 ``OH, OW``;
    ``linear`` the interpolation (by default the node's ``interpolation_mode``).
    """

    def __init__(self, node: StandardNode, rois: str, batch_indices: str,
                 image_size: tuple[str, str], output_size: tuple[str, str],
                 linear: bool | None = None):
        self.node, self.ct = node, float_compute_type(node)
        a = node.attributes
        self.linear = a["interpolation_mode"] == "linear" if linear is None else linear
        self.outputs = output_size
        boxes, batch = regions(node, rois, batch_indices)
        x1, y1, x2, y2 = (node.op("Gather", boxes, node.constant(k), axis=1) for k in range(4))
        self.height, self.width = image_size
        self.y = self._axis(y1, y2, a["spatial_scale_y"], output_size[0], self.height, Y_PLACE)
        self.x = self._axis(x1, x2, a["spatial_scale_x"], output_size[1], self.width, X_PLACE)
        plane = node.op("Mul", self.height, self.width)
        self.base = node.unsqueeze(node.op("Mul", batch, plane), [1, 2, 3, 4])
        self.valid = node.op("And", self.y.valid, self.x.valid)
        self.inside = node.op("And", self.y.inside, self.x.inside)
        self.count = node.cast(node.op("Mul", self.y.n, self.x.n), self.ct)
        self._corners: dict[str, list[str]] = {}

    # ------------------------------------------------------------------ one axis
    def _scalar(self, value: float) -> str:
        return self.node.constant(value, self.ct)

    def _axis(self, first: str, last: str, scale: float, outputs: str, length: str,
              place: tuple[int, ...]) -> Axis:
        node, a, ct = self.node, self.node.attributes, self.ct
        scaled_first = node.op("Mul", first, self._scalar(scale))
        size = self._fused_difference(last, scale, scaled_first)
        quotient = node.op("Ceil", node.op("Div", node.op("Abs", size), node.cast(outputs, ct)))
        n = node.cast(node.op("Clip", node.cast(quotient, TensorProto.DOUBLE),
                              node.constant(a["minimum_samples_per_output"], TensorProto.DOUBLE),
                              node.constant(a["maximum_samples_per_output"], TensorProto.DOUBLE)),
                      TensorProto.INT64)
        # M: the largest n (the minimum stands in for it when there are no regions)
        most = node.reduce("ReduceMax", node.op("Concat", n, node.constant(
            [a["minimum_samples_per_output"]]), axis=0), [0], keepdims=0)
        j = node.op("Range", node.constant(0), most, node.constant(1))  # [M]
        o = node.op("Range", node.constant(0), outputs, node.constant(1))  # [O]
        n3 = node.unsqueeze(n, [1, 2])
        s = node.op("Add", node.op("Mul", node.unsqueeze(o, [0, 2]), n3),
                    node.unsqueeze(j, [0, 1]))
        valid = node.op("Less", node.unsqueeze(j, [0, 1]), n3)
        total = node.op("Mul", n3, outputs)
        shifted = node.op("Sub", node.cast(s, ct), self._scalar(a["output_pixel_offset"]))
        if a["align_regions_to_corners"]:
            one = node.constant(1)
            t = node.op("Where", node.op("Equal", total, one), self._scalar(0.5),
                        node.op("Div", shifted, node.cast(
                            node.maximum(node.op("Sub", total, one), one), ct)))
        else:
            t = node.op("Div", shifted, node.cast(total, ct))
        coord = node.op("Sub", node.op("Add", node.unsqueeze(scaled_first, [1, 2]),
                                       node.op("Mul", t, node.unsqueeze(size, [1, 2]))),
                        self._scalar(a["input_pixel_offset"]))
        last_pixel = node.op("Sub", length, node.constant(1))
        last_f = node.cast(last_pixel, ct)
        if a["align_regions_to_corners"]:
            inside = node.op("And", node.op("GreaterOrEqual", coord, self._scalar(0)),
                             node.op("LessOrEqual", coord, last_f))
        else:
            inside = node.op("And", node.op("Greater", coord, self._scalar(-1)),
                             node.op("Less", coord, node.cast(length, ct)))
        clamped = node.op("Clip", coord, self._scalar(0), last_f)
        unclamped = node.op("And", inside, node.op("Equal", coord, clamped))
        safe = node.op("Where", inside, clamped, self._scalar(0))
        if self.linear:
            floor = node.op("Floor", safe)
            frac = node.op("Sub", safe, floor)
            lo = node.cast(floor, TensorProto.INT64)
            hi = node.minimum(node.op("Add", lo, node.constant(1)), last_pixel)
        else:
            nearest = node.op("Floor", node.op("Add", safe, self._scalar(0.5)))
            lo = node.cast(node.op("Min", nearest, last_f), TensorProto.INT64)
            hi = frac = ""
        return Axis(n, most, node.unsqueeze(valid, place), node.unsqueeze(t, place),
                    node.unsqueeze(inside, place), node.unsqueeze(unclamped, place), lo, hi,
                    node.unsqueeze(frac, place) if frac else "")

    def _fused_difference(self, last: str, scale: float, scaled_first: str) -> str:
        """``last * scale - scaled_first`` rounded once (a fused multiply-add), as
        ``dml_onnx._kernels._roi_loops.fused_difference`` computes it: in double, with Dekker's
        error-free product (exact, error 0, for float32 values); where it is not finite
        (an overflow in the split) the plain difference stands in."""
        node, double = self.node, TensorProto.DOUBLE
        a, b, c = (node.cast(v, double) if self.ct != double else v
                   for v in (last, self._scalar(scale), scaled_first))
        product = node.op("Mul", a, b)
        split = node.constant(134217729.0, double)  # 2 ** 27 + 1

        def halves(v: str) -> tuple[str, str]:
            scaled = node.op("Mul", v, split)
            high = node.op("Sub", scaled, node.op("Sub", scaled, v))
            return high, node.op("Sub", v, high)

        (a_hi, a_lo), (b_hi, b_lo) = halves(a), halves(b)
        error = node.op("Add", node.op("Add", node.op("Add", node.op(
            "Sub", node.op("Mul", a_hi, b_hi), product), node.op("Mul", a_hi, b_lo)),
            node.op("Mul", a_lo, b_hi)), node.op("Mul", a_lo, b_lo))
        difference = node.op("Sub", product, c)
        shift = node.op("Sub", difference, product)
        rest = node.op("Add", node.op("Sub", product, node.op("Sub", difference, shift)),
                       node.op("Sub", node.op("Neg", c), shift))
        fused = node.op("Add", difference, node.op("Add", rest, error))
        fused = node.cast(fused, self.ct) if self.ct != double else fused
        plain = node.op("Sub", node.op("Mul", last, self._scalar(scale)), scaled_first)
        return node.op("Where", node.op("IsInf", fused), plain,
                       node.op("Where", node.op("IsNaN", fused), plain, fused))

    # ------------------------------------------------------------------ reading samples
    def rows(self, ys: str, xs: str) -> str:
        """Row indices ``[R, OH, MY, OW, MX]`` into the image rows of the pixels at
        ``ys``, ``xs`` (``[R, O, M]`` int64 of each axis)."""
        node = self.node
        y_rows = node.op("Mul", node.unsqueeze(ys, [3, 4]), self.width)
        return node.op("Add", node.op("Add", self.base, y_rows), node.unsqueeze(xs, [1, 2]))

    def read(self, image: str, ys: str, xs: str) -> str:
        """The pixels at ``ys``, ``xs`` of every sample: ``[R, OH, MY, OW, MX, C]``."""
        return self.node.op("Gather", image, self.rows(ys, xs), axis=0)

    def corners(self, image: str) -> list[str]:
        """The four corner pixels ``P[y0,x0], P[y0,x1], P[y1,x0], P[y1,x1]`` of every sample
        (linear; ``y1 = min(y0 + 1, H - 1)``)."""
        if image not in self._corners:
            y, x = self.y, self.x
            self._corners[image] = [self.read(image, ys, xs)
                                    for ys in (y.lo, y.hi) for xs in (x.lo, x.hi)]
        return self._corners[image]

    @cached_property
    def complements(self) -> tuple[str, str]:
        """``1 - ly`` and ``1 - lx`` (linear)."""
        one = self._scalar(1)
        return (self.node.op("Sub", one, self.y.frac), self.node.op("Sub", one, self.x.frac))

    @cached_property
    def corner_weights(self) -> list[str]:
        """``(1-ly)(1-lx), (1-ly) lx, ly (1-lx), ly lx`` (linear), in :meth:`corners` order."""
        wy, wx = self.complements
        return [self.node.op("Mul", a, b) for a in (wy, self.y.frac) for b in (wx, self.x.frac)]

    def values(self, image: str, out_of_bounds: float) -> str:
        """Every sample's value ``[R, OH, MY, OW, MX, C]``, the spec's nested linear
        interpolations (x first) operation by operation; out-of-bounds samples read
        ``out_of_bounds``."""
        node = self.node
        if self.linear:
            p00, p01, p10, p11 = self.corners(image)

            def lerp(a: str, b: str, fraction: str) -> str:
                return node.op("Add", a, node.op("Mul", node.op("Sub", b, a), fraction))

            value = lerp(lerp(p00, p01, self.x.frac), lerp(p10, p11, self.x.frac), self.y.frac)
        else:
            value = self.read(image, self.y.lo, self.x.lo)
        return node.op("Where", self.inside, value, self._scalar(out_of_bounds))

    # ------------------------------------------------------------------ reductions
    def average(self, values: str) -> str:
        """``[R, OH, OW, C]``: the sum of the valid samples over ``n_y * n_x``."""
        node = self.node
        kept = node.op("Where", self.valid, values, self._scalar(0))
        total = node.reduce("ReduceSum", kept, [2, 4], keepdims=0)
        return node.op("Div", total, node.unsqueeze(self.count, [1, 2, 3]))

    @cached_property
    def region_count(self) -> str:
        """``R`` as a 0-d int64 value."""
        node = self.node
        return node.op("Gather", node.op("Shape", self.y.n), node.constant(0))

    @cached_property
    def _sample_count(self) -> str:
        """``MY * MX`` as a 0-d int64 value: the samples of one output in a row."""
        return self.node.op("Mul", self.y.most, self.x.most)

    def _shape(self, *sizes: str) -> str:
        """The 1-D int64 shape of the 0-d ``sizes``."""
        return self.node.op("Concat", *(self.node.unsqueeze(d, [0]) for d in sizes), axis=0)

    @cached_property
    def _valid_rows(self) -> str:
        """``[R, 1, MY * MX]`` bool: :attr:`valid` in the layout of :meth:`_by_output`."""
        node = self.node
        shape = self._shape(self.region_count, node.constant(1), self._sample_count)
        return node.op("Reshape", self.valid, shape, allowzero=1)

    def _by_output(self, values: str) -> tuple[str, list[str]]:
        """``values [R, OH, MY, OW, MX, C]`` as ``[R, OH * OW * C, MY * MX]`` (each output's
        samples in a row, row-major over ``MY x MX``) and ``R, OH, OW, C`` (0-d int64).

        The max is taken in this layout so that every comparison, ``Where`` and reduction of
        it has rank at most 3 and one reduced axis: onnxruntime's DirectML execution provider
        refused the same at rank 6 (a ``ReduceMax`` over axes 2 and 4) in its graph fusion."""
        node = self.node
        channels = node.op("Gather", node.op("Shape", values), node.constant(5))
        oh, ow = self.outputs
        outputs = node.op("Mul", node.op("Mul", oh, ow), channels)
        rows = node.op("Reshape", node.op("Transpose", values, perm=list(BY_OUTPUT)),
                       self._shape(self.region_count, outputs, self._sample_count),
                       allowzero=1)
        return rows, [self.region_count, oh, ow, channels]

    def _maxnum(self, rows: str, lowest: float) -> str:
        """``[R, OH * OW * C]``: ``maxnum`` of ``lowest`` and the valid samples of each row of
        ``rows`` (:meth:`_by_output`); NaN (and -inf) samples read ``lowest``."""
        node = self.node
        start = self._scalar(lowest)
        kept = node.op("Where", node.op("And", self._valid_rows, node.op(
            "GreaterOrEqual", rows, start)), rows, start)
        return node.reduce("ReduceMax", kept, [2], keepdims=0)

    def maximum(self, values: str, lowest: float) -> str:
        """``[R, OH, OW, C]``: ``maxnum`` of ``lowest`` and the valid samples of each output
        (``values [R, OH, MY, OW, MX, C]``); NaN (and -inf) samples read ``lowest``."""
        rows, sizes = self._by_output(values)
        return self.node.op("Reshape", self._maxnum(rows, lowest), self._shape(*sizes),
                            allowzero=1)

    def first_maximum(self, values: str, lowest: float) -> str:
        """``[R, OH, MY, OW, MX, C]`` bool: the first valid sample (row-major over the
        ``n_y x n_x`` samples of its output) holding the maximum, where it is above
        ``lowest`` (none where every sample is NaN, -inf or ``lowest``)."""
        node = self.node
        rows, sizes = self._by_output(values)
        largest = node.unsqueeze(self._maxnum(rows, lowest), [2])
        hit = node.op("And", node.op("And", node.op("Equal", rows, largest), self._valid_rows),
                      node.op("Greater", rows, self._scalar(lowest)))
        rank = node.op("Range", node.constant(0), self._sample_count, node.constant(1))
        first = node.reduce("ReduceMin", node.op("Where", hit, rank, self._sample_count), [2],
                            keepdims=0)
        taken = node.op("Equal", rank, node.unsqueeze(first, [2]))  # [R, OH * OW * C, MY * MX]
        shape = self._shape(*sizes, self.y.most, self.x.most)
        return node.op("Transpose", node.op("Reshape", taken, shape, allowzero=1),
                       perm=[BY_OUTPUT.index(k) for k in range(6)])


__all__ = ["FLOAT_ELEMENTS", "Axis", "RoiGrid", "dims", "float_compute_type", "image_rows",
           "regions", "rows_to_image"]
