"""RoiPooling: max pooling over regions of interest (DML_ROI_POOLING_OPERATOR_DESC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import NodeProto, TensorProto

from dml_onnx._kernels import roi_pooling as kernel
from dml_onnx.definition import FLOAT_TYPES, Attribute, OpDefinition, Parameter, Shape
from dml_onnx.form import StandardNode
from dml_onnx.ops._roi import lowest, roi_count, spatial_image
from dml_onnx.ops._roi_cases import roi_pooling_examples
from dml_onnx.reference_ops import roi_pooling as reference


def _infer_shapes(shapes: list[Shape], attributes: dict[str, Any], node: str) -> list[Shape]:
    n, c, _, _ = spatial_image(kernel.OP, node, shapes[0])
    r = roi_count(kernel.OP, node, "rois", shapes[1], row=5)
    return [[r, c, *attributes["pooled_size"]]]


def _standard_form(node: StandardNode) -> None:
    """``MaxRoiPool`` for float32 (float16 through float32) over rois whose corners are
    scaled and rounded half to even in the graph (``Mul``, ``Round``), with ``spatial_scale``
    1: ``MaxRoiPool`` rounds half away from zero, which leaves integers as they are. Else (or
    with ``node.native = False``) the exact decomposition of :func:`_decomposition`.

    ``MaxRoiPool`` means the spec's integer bin edges (what DirectML computes). onnxruntime's
    CPU kernel differs from it: its edges are computed in float32 and differ for some region
    sizes (57 rows in 7 bins), and it keeps a NaN when NaN is the last value of a bin, where
    DirectML ignores NaN. The decomposition matches the kernel bit for bit (up to the
    coordinate bound stated there).
    """
    rows = node.op("Reshape", node.inputs[1], node.constant([-1, 5]))
    if node.elem_type == TensorProto.DOUBLE or not node.uses_native("MaxRoiPool"):
        _decomposition(node, rows)
        return
    # float16 in float32 (max of float16 values in float32 is exact)
    x, rows = node.to_compute(node.inputs[0]), node.to_compute(rows)
    ids, corners = node.op("Split", rows, node.constant([1, 4]), axis=1, outputs=2)
    scaled = node.op("Mul", corners, node.constant(node.attributes["spatial_scale"],
                                                   TensorProto.FLOAT))
    rounded = node.op("Concat", ids, node.op("Round", scaled), axis=1)
    pooled_shape = node.attributes["pooled_size"]
    if node.elem_type == TensorProto.FLOAT:
        node.finish("MaxRoiPool", x, rounded, pooled_shape=pooled_shape, spatial_scale=1.0)
        return
    # float16: a bin of only -inf gives lowest(float16), not float32's lowest cast to -inf
    pooled = node.op("MaxRoiPool", x, rounded, pooled_shape=pooled_shape, spatial_scale=1.0)
    node.finish("Max", pooled, node.constant(lowest(node.elem_type), TensorProto.FLOAT))


def _decomposition(node: StandardNode, rows: str) -> None:
    """The spec's formulas on rois rows ``[R, 5]``, in float32 (float64 for double).

    Per ROI: the batch index and the four corners rounded half to even (``Round``, int64),
    then per axis the bins' pixel membership (:func:`_bin_members`). The maximum is
    separable: over the columns of each column bin of the gathered image ``[R, C, H, W]``
    (giving ``[R, C, H, PW]``), then over the rows of each row bin (:func:`_bin_maxima`).
    NaN and values below ``lowest(T)`` (-inf) read ``lowest(T)`` first, as do pixels outside
    a bin, so a bin's maximum is ``maxnum(lowest(T), ...)``; an empty bin becomes 0.

    Invalid rows (batch id NaN or outside ``[0, N)``, a scaled corner not finite) gather
    batch ``N``, which ``Gather`` rejects. So do rows whose scaled corner exceeds
    ``2 ** (60 - bit_length(max(PH, PW)))`` in magnitude (``2 ** 57`` for 7x7, far outside
    any image), where the int64 bin arithmetic could overflow: the kernel computes those
    exactly with Python integers, the form refuses them rather than compute a wrong value.
    """
    ctype = node.compute_type
    ph_count, pw_count = node.attributes["pooled_size"]
    x = node.to_compute(node.inputs[0])
    rows = node.to_compute(rows)
    ids, coordinates = node.op("Split", rows, node.constant([1, 4]), axis=1, outputs=2)
    scaled = node.op("Mul", coordinates, node.constant(node.attributes["spatial_scale"], ctype))
    corners = node.cast(node.op("Round", scaled), TensorProto.INT64)
    x1, y1, x2, y2 = node.op("Split", corners, node.constant([1, 1, 1, 1]), axis=1, outputs=4)

    bound = 2.0 ** (60 - max(ph_count, pw_count).bit_length())
    fits = node.cast(node.op("LessOrEqual", node.op("Abs", scaled), node.constant(bound, ctype)),
                     TensorProto.INT64)
    fits = node.cast(node.reduce("ReduceMin", fits, [1], keepdims=0), TensorProto.BOOL)
    start = node.constant(lowest(node.elem_type), ctype)
    x = node.op("Where", node.op("GreaterOrEqual", x, start), x, start)  # NaN, -inf: lowest
    image = node.op("Gather", x, _batch_index(node, node.squeeze(ids, [1]), x, fits, ctype),
                    axis=0)                                                   # [R, C, H, W]

    height, width = (node.squeeze(node.op("Shape", x, start=axis, end=axis + 1), [0])
                     for axis in (2, 3))
    row_members, row_empty = _bin_members(node, y1, y2, ph_count, height)   # [R, PH, H]
    col_members, col_empty = _bin_members(node, x1, x2, pw_count, width)    # [R, PW, W]

    y = _bin_maxima(node, image, node.unsqueeze(col_members, [2, 3]), pw_count, 3,
                    start)                                                   # [R, C, H, PW]
    y = _bin_maxima(node, y, node.unsqueeze(row_members, [2, 4]), ph_count, 2,
                    start)                                                   # [R, C, PH, PW]
    empty = node.op("Or", node.unsqueeze(row_empty, [1, 3]), node.unsqueeze(col_empty, [1, 2]))
    node.finish("Where", empty, node.constant(0, ctype), y)


def _bin_maxima(node: StandardNode, x: str, members: str, pooled: int, axis: int,
                lowest: str) -> str:
    """The maximum over ``axis`` of ``x`` within each bin (``lowest`` where a bin has no
    pixel), the bins concatenated along ``axis``. ``members[:, p]`` is bin ``p``'s mask,
    broadcastable to ``x`` once indexed.

    One ``Where`` and ``ReduceMax`` per bin (the bin count is an attribute), so that no
    temporary is larger than ``x``.
    """
    maxima = [node.reduce("ReduceMax", node.op("Where", node.op(
        "Gather", members, node.constant(p), axis=1), x, lowest), [axis]) for p in range(pooled)]
    return node.op("Concat", *maxima, axis=axis)


def _batch_index(node: StandardNode, ids: str, x: str, fits: str, ctype: int) -> str:
    """``trunc(batch_id)`` as int64 ``[R]`` where valid, else ``N`` (out of ``Gather``'s range).

    Valid: not NaN, ``trunc`` in ``[0, N)``, and ``fits`` (the row's corners). The id is
    clipped to ``[-1, 2**62]`` first so that the int64 cast (a truncation) is defined.
    """
    clipped = node.op("Min", node.op("Max", ids, node.constant(-1, ctype)),
                      node.constant(2.0 ** 62, ctype))
    batch = node.cast(clipped, TensorProto.INT64)
    n = node.op("Shape", x, start=0, end=1)
    valid = node.op("And", node.op("GreaterOrEqual", batch, node.constant(0)),
                    node.op("Less", batch, n))
    valid = node.op("And", valid, node.op("And", node.op("Not", node.op("IsNaN", ids)), fits))
    return node.op("Where", valid, batch, n)


def _bin_members(node: StandardNode, lo: str, hi: str, pooled: int,
                 limit: str) -> tuple[str, str]:
    """Which pixels of an axis lie in which bin: ``[R, P, L]`` bool, and the empty bins
    ``[R, P]`` bool, from the region's rounded ends ``lo``, ``hi`` (int64 ``[R, 1]``).

    ``start = p * size / P + lo`` and ``end = ceil_div((p + 1) * size, P) + lo`` with
    ``size = max(hi - lo + 1, 1)`` (int64 ``Div`` of non-negative values is floor
    division), clamped to ``[0, L]`` (``limit``, a scalar) through ``Where``, not int64
    ``Max``/``Min`` (see :meth:`StandardNode.maximum`).
    """
    size = node.maximum(node.op("Add", node.op("Sub", hi, lo), node.constant(1)),
                        node.constant(1))
    p = np.arange(pooled)[None]
    count = node.constant(pooled)
    start = node.op("Add", node.op("Div", node.op("Mul", node.constant(p), size), count), lo)
    end = node.op("Add", node.op("Div", node.op("Add", node.op("Mul", node.constant(p + 1), size),
                                                node.constant(pooled - 1)), count), lo)
    start = node.maximum(start, node.constant(0))
    end = node.minimum(end, limit)
    pixels = node.op("Range", node.constant(0), limit, node.constant(1))
    members = node.op("And", node.op("LessOrEqual", node.unsqueeze(start, [2]), pixels),
                      node.op("Less", pixels, node.unsqueeze(end, [2])))
    return members, node.op("LessOrEqual", end, start)


DEFINITION = OpDefinition(
    name="RoiPooling",
    summary="Max pooling over regions of interest (Fast R-CNN ROI pooling). As DirectML "
            "measures: scaled corners rounded half to even, each bin's maximum from lowest(T) "
            "ignoring NaN, 0 for an empty bin.",
    dml_name="DML_ROI_POOLING_OPERATOR_DESC",
    spec_section="1",
    inputs=(
        Parameter("X", "T", "[N, C, H, W]."),
        Parameter("rois", "T", "[R, 5], or with leading 1s up to rank 4; rows "
                               "[batch_id, x1, y1, x2, y2]."),
    ),
    outputs=(Parameter("Y", "T", "[R, C, PH, PW]."),),
    type_constraints={"T": FLOAT_TYPES},
    attributes=(
        Attribute("pooled_size", "ints", "Output [PH, PW]."),
        Attribute("spatial_scale", "float", "Multiplier of the ROI coordinates.", 1.0),
    ),
    kernel=kernel,
    reference=reference,
    infer_shapes=_infer_shapes,
    standard_form=_standard_form,
    examples=roi_pooling_examples,
)


def roi_pooling(X: str, rois: str, Y: str, *, pooled_size: Sequence[int],
                spatial_scale: float | None = None, name: str | None = None) -> NodeProto:
    """A ``RoiPooling`` node (the full docstring, written from ``DEFINITION``: see
    :func:`~dml_onnx.builder_docs.builder_doc`)."""
    return DEFINITION.build(locals())
