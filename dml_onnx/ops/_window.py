"""Attributes and shape rule shared by the sliding-window operators (LpPooling, Unfold, Fold)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from custom_ops._common import filled, sliding_block_counts
from dml_onnx.definition import Attribute, Dim, Shape

WINDOW_ATTRIBUTES = (
    Attribute("strides", "ints", "Step of the window along each spatial axis.", None, "all 1"),
    Attribute("dilations", "ints", "Spacing between window taps along each spatial axis.", None,
              "all 1"),
    Attribute("start_padding", "ints", "Zero padding before each spatial axis.", None, "all 0"),
    Attribute("end_padding", "ints", "Zero padding after each spatial axis.", None, "all 0"),
)


def block_counts(op: str, node: str, spatial: Sequence[Dim], window: Sequence[int],
                 attributes: dict[str, Any], *, what: str = "output size") -> list[Dim]:
    """``B_d`` per spatial axis (``None`` where the input size is not known)."""
    k = len(window)
    strides = filled(attributes["strides"], k, 1)
    dilations = filled(attributes["dilations"], k, 1)
    start = filled(attributes["start_padding"], k, 0)
    end = filled(attributes["end_padding"], k, 0)
    counts: list[Dim] = []
    for axis, size in enumerate(spatial):
        if isinstance(size, int):
            counts.extend(sliding_block_counts(
                op, node, [size], [window[axis]], [strides[axis]], [dilations[axis]],
                [start[axis]], [end[axis]], what=what, first_axis=axis))
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
