"""Attributes, shape rule, standard-op pieces and case table shared by the sliding-window
operators (LpPooling, Unfold, Fold)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
from onnx import TensorProto, helper

from custom_ops._common import sliding_block_counts
from custom_ops._window import Window
from dml_onnx.definition import Attribute, Dim, Shape, known
from dml_onnx.form import StandardNode

WINDOW_ATTRIBUTES = (
    Attribute("strides", "ints", "Step of the window along each spatial axis.", None, "all 1"),
    Attribute("dilations", "ints", "Spacing between window taps along each spatial axis.", None,
              "all 1"),
    Attribute("start_padding", "ints", "Zero padding before each spatial axis.", None, "all 0"),
    Attribute("end_padding", "ints", "Zero padding after each spatial axis.", None, "all 0"),
)


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
        raise ValueError(f"{op} '{node}': {name} rank {len(shape)} is not {k + 2} "
                         f"(the attributes have {k} spatial values)")
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


def gather_windows(node: StandardNode, x: str, elem_type: int, window: Window, *,
                   sum_taps: bool = False) -> str:
    """The window taps of ``x [N, C, D1..Dk]`` (element type ``elem_type``), shape-generic.

    ``Pad``, then along each spatial axis d one ``Gather`` of the ``[w_d, B_d]`` indices
    ``i * dilation_d + b * stride_d`` (built with ``Range`` from the padded size in the graph):
    ``[N, C, w1, B1, ..., wk, Bk]`` holding ``Xpad[n, c, b_1*s_1 + i_1*d_1, ...]``. With
    ``sum_taps`` each window axis is summed (``ReduceSum``, taps in order) right after its
    gather, axis 1 first, giving ``[N, C, B1..Bk]``.
    """
    padded = pad_spatial(node, x, elem_type, window)
    # P_d - dilation_d * (w_d - 1) = (B_d - 1) * s_d + 1: Range(0, that, s_d) has B_d values
    reach = node.op("Sub", node.op("Shape", padded, start=2), node.constant(window.spans))
    current, zero = padded, node.constant(0)
    for d, (w, s, dilation) in enumerate(zip(window.sizes, window.strides, window.dilations)):
        starts = node.op("Range", zero, node.op("Gather", reach, node.constant(d)),
                         node.constant(s))
        index = node.op("Add", node.constant(np.arange(w)[:, None] * dilation), starts)
        axis = 2 + d if sum_taps else 2 + 2 * d
        current = node.op("Gather", current, index, axis=axis)
        if sum_taps:
            current = node.reduce("ReduceSum", current, [axis], keepdims=0)
    return current


# --------------------------------------------------------------------- case table
class WindowCase(NamedTuple):
    """One geometry of the shared case table: spatial input sizes and window attributes."""

    name: str
    spatial: tuple[int, ...]
    attributes: dict[str, list[int]]  # "window" stands for the operator's window attribute

    def for_op(self, sizes: str) -> dict[str, list[int]]:
        """The attributes with the window under the operator's name ``sizes``."""
        return {(sizes if key == "window" else key): value
                for key, value in self.attributes.items()}


def _case(name: str, spatial: Sequence[int], window: Sequence[int], **others: Sequence[int]
          ) -> WindowCase:
    return WindowCase(name, tuple(spatial), {"window": list(window),
                                             **{k: list(v) for k, v in others.items()}})


DEFAULTS = _case("defaults", (5, 4), (2, 3))
"""Every attribute but the window at its default."""
EVERYTHING = _case("everything", (6, 5), (3, 2), strides=(2, 3), dilations=(2, 2),
                   start_padding=(2, 1), end_padding=(1, 3))
"""Every attribute away from its default; the element-type cases use it."""

WINDOW_CASES = (
    DEFAULTS,
    _case("strides", (5, 4), (2, 3), strides=(2, 3)),
    _case("dilations", (5, 4), (2, 3), dilations=(2, 1)),
    _case("start_padding", (5, 4), (2, 3), start_padding=(1, 2)),
    _case("end_padding", (5, 4), (2, 3), end_padding=(2, 1)),
    EVERYTHING,
    _case("window_fills_padded_input", (3, 2), (4, 4), start_padding=(1, 1),
          end_padding=(0, 1)),
    _case("dilated_window_fills_input", (4, 5), (2, 3), dilations=(3, 2)),
    _case("one_pixel", (1, 1), (1, 1)),
    _case("one_pixel_padded", (1, 1), (2, 3), start_padding=(1, 1), end_padding=(0, 1)),
    _case("stride_beyond_window", (7, 6), (2, 1), strides=(3, 4)),
    _case("padding_beyond_window", (3, 2), (1, 2), start_padding=(2, 0), end_padding=(1, 3)),
    _case("1d", (9,), (3,), strides=(2,), dilations=(2,), start_padding=(1,)),
    _case("3d", (4, 3, 5), (2, 2, 3), strides=(1, 2, 1), dilations=(2, 1, 1),
          start_padding=(0, 1, 0), end_padding=(1, 0, 2)),
    _case("3d_undilated", (3, 4, 3), (2, 3, 2), strides=(2, 1, 1), start_padding=(1, 0, 1),
          end_padding=(0, 2, 0)),
    _case("6d", (2, 3, 2, 2, 3, 2), (1, 2, 2, 1, 2, 2), strides=(1, 1, 2, 1, 2, 1),
          dilations=(1, 2, 1, 1, 1, 1), start_padding=(0, 0, 1, 0, 0, 1),
          end_padding=(1, 0, 0, 0, 1, 0)),
)
"""The geometries every sliding-window operator runs: each attribute varied on its own, edge
cases (window as large as the padded input, one-pixel inputs, stride or padding beyond the
window), 1 to 3 spatial axes (3-D with and without dilations: onnxruntime's Col2Im takes
only the latter) and the most (6)."""


def case_table(max_k: int, types: Sequence[str]) -> Iterator[tuple[str, WindowCase, np.dtype]]:
    """``(name, geometry, element type)``: the shared geometries with at most ``max_k``
    spatial axes in float32, then each other of ``types`` (type-constraint entries) on
    :data:`EVERYTHING`, named ``type_<dtype>``."""
    for case in WINDOW_CASES:
        if len(case.spatial) <= max_k:
            yield case.name, case, np.dtype(np.float32)
    for dtype in element_dtypes(types):
        if dtype != np.float32:
            yield f"type_{dtype.name}", EVERYTHING, dtype


def case_blocks(case: WindowCase) -> tuple[int, ...]:
    """``B_d`` of a case's geometry."""
    return sliding_block_counts("case", case.name, case.spatial,
                                *Window.of(case.attributes["window"], case.attributes))


def case_shape(case: WindowCase) -> tuple[int, ...]:
    """``[N, C, D1..Dk]`` of a case: two images of two channels up to 2-D, one of one above."""
    return (*((2, 2) if len(case.spatial) <= 2 else (1, 1)), *case.spatial)


def element_dtypes(types: Sequence[str]) -> tuple[np.dtype, ...]:
    """The numpy dtypes of type-constraint entries (``"tensor(float)"`` ...)."""
    return tuple(helper.tensor_dtype_to_np_dtype(TensorProto.DataType.Value(t[7:-1].upper()))
                 for t in types)


def sample(rng: np.random.Generator, shape: Sequence[int], dtype: Any) -> np.ndarray:
    """Small random values of ``dtype``: normal floats, random booleans, integers in [-9, 9]
    ([0, 9] unsigned), so that Fold's sums over the few taps that overlap in a case stay
    within int8 (the cases pin no wrap-around)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(0 if dtype.kind == "u" else -9, 10, shape).astype(dtype)
