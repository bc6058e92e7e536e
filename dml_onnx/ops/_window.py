"""Attributes, shape rule and standard-op pieces shared by the sliding-window operators
(LpPooling, Unfold, Fold); their case tables are in :mod:`dml_onnx.ops._window_cases`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from onnx import TensorProto

from dml_onnx._kernels._checks import KernelError
from dml_onnx._kernels._window import Window, sliding_block_counts
from dml_onnx.definition import Attribute, Dim, Shape, known
from dml_onnx.form import StandardNode

WINDOW_SIZES = Attribute("window_sizes", "ints", "Window size along each spatial axis "
                                                 "(k values, k = 1..6).")
"""The window attribute of Unfold and Fold (LpPooling's ``window_size`` is its own)."""



def _window_attributes(dilations: str) -> tuple[Attribute, ...]:
    """The attributes after the window size, with the meaning of ``dilations`` given."""
    return (
        Attribute("strides", "ints", "Step of the window along each spatial axis.", None,
                  "all 1"),
        Attribute("dilations", "ints", dilations, None, "all 1"),
        Attribute("start_padding", "ints", "Zero padding before each spatial axis.", None,
                  "all 0"),
        Attribute("end_padding", "ints", "Zero padding after each spatial axis.", None, "all 0"),
    )


WINDOW_ATTRIBUTES = _window_attributes("Spacing between window taps along each spatial axis, "
                                       ">= 1.")
"""LpPooling's attributes after ``window_size``."""
BLOCK_ATTRIBUTES = _window_attributes(
    "Spacing between window taps along each spatial axis, >= 0: with 0 every tap of the axis "
    "reads one position, as DirectML accepts it.")
"""Unfold's and Fold's attributes after ``window_sizes`` (a dilation of 0 is DirectML's)."""


def block_counts(op: str, node: str, spatial: Sequence[Dim], window: Sequence[int],
                 attributes: dict[str, Any], *, what: str = "output size") -> list[Dim]:
    """``B_d`` per spatial axis: checked for an int size, computed unchecked for a symbolic
    size (torch's SymInt: the kernel checks the value), ``None`` where the size is unknown."""
    geometry = Window.of(window, attributes)
    counts: list[Dim] = []
    for axis, size in enumerate(spatial):
        if isinstance(size, int):
            counts.extend(sliding_block_counts(op, node, [size], *([v[axis]] for v in geometry),
                                               what=what, first_axis=axis))
        elif known(size):
            g = geometry
            counts.append((size + g.start[axis] + g.end[axis] - g.spans[axis] - 1)
                          // g.strides[axis] + 1)
        else:
            counts.append(None)
    return counts


def spatial_input(op: str, node: str, shape: Shape, k: int, name: str = "X") -> list[Dim]:
    """The batch, channel and k spatial dims of an input of rank k + 2 (unknown if no shape)."""
    if shape is None:
        return [None] * (k + 2)
    if len(shape) != k + 2:
        raise KernelError(op, node, f"{name} rank", len(shape),
                          f"is not {k + 2} (the attributes have {k} spatial values)")
    return list(shape)


# --------------------------------------------------------------------- standard-op pieces
_PAD_AS_INT32 = (TensorProto.INT16, TensorProto.UINT16)
"""Element types onnxruntime's CPU ``Pad`` lacks; they pad as int32, which holds every value."""


def pad_spatial(node: StandardNode, x: str, elem_type: int, window: Window) -> str:
    """``x [N, C, D1..Dk]`` zero-padded (False for bool) by ``window.start`` / ``window.end``.

    int16 and uint16 pad as int32 and are cast back (exact: int32 holds every value).
    """
    if not window.padded:
        return x
    widen = elem_type in _PAD_AS_INT32
    source = node.cast(x, TensorProto.INT32) if widen else x
    padded = node.op("Pad", source, node.constant([0, 0, *window.start, 0, 0, *window.end]))
    return node.cast(padded, elem_type) if widen else padded


def block_starts(node: StandardNode, padded: str, window: Window) -> Iterator[str]:
    """Per spatial axis d of ``padded [N, C, P1..Pk]``, the ``[B_d]`` first positions
    ``b * stride_d`` of the blocks, built with ``Range`` from the padded size in the graph;
    each axis's nodes are emitted as it is drawn (the per-axis gathers interleave them)."""
    # P_d - dilation_d * (w_d - 1) = (B_d - 1) * s_d + 1: Range(0, that, s_d) has B_d values
    reach = node.op("Sub", node.op("Shape", padded, start=2), node.constant(window.spans))
    zero = node.constant(0)
    for d, s in enumerate(window.strides):
        yield node.op("Range", zero, node.op("Gather", reach, node.constant(d)),
                      node.constant(s))


def gather_windows(node: StandardNode, x: str, elem_type: int, window: Window, *,
                   sum_taps: bool = False) -> str:
    """The window taps of ``x [N, C, D1..Dk]`` (element type ``elem_type``), shape-generic.

    ``Pad``, then along each spatial axis d one ``Gather`` of the ``[w_d, B_d]`` indices
    ``i * dilation_d + b * stride_d`` (:func:`block_starts`):
    ``[N, C, w1, B1, ..., wk, Bk]`` holding ``Xpad[n, c, b_1*s_1 + i_1*d_1, ...]``, of rank
    2 + 2k. With ``sum_taps`` each window axis is summed (``ReduceSum``, taps in order) right
    after its gather, axis 1 first, giving ``[N, C, B1..Bk]``.
    """
    padded = pad_spatial(node, x, elem_type, window)
    current = padded
    for d, (w, dilation, starts) in enumerate(zip(window.sizes, window.dilations,
                                                  block_starts(node, padded, window))):
        index = node.op("Add", node.constant(np.arange(w)[:, None] * dilation), starts)
        axis = 2 + d if sum_taps else 2 + 2 * d
        current = node.op("Gather", current, index, axis=axis)
        if sum_taps:
            current = node.reduce("ReduceSum", current, [axis], keepdims=0)
    return current
