"""Shape rules and values shared by the region-of-interest operators."""

from __future__ import annotations

import numpy as np
from onnx import helper

from dml_onnx.definition import Dim, Shape


def lowest(elem_type: int) -> float:
    """``lowest(T)`` of the spec for an onnx element type: its lowest finite value, where a
    maximum starts."""
    return float(np.finfo(helper.tensor_dtype_to_np_dtype(elem_type)).min)


def spatial_image(op: str, node: str, shape: Shape, name: str = "X") -> list[Dim]:
    """``[N, C, H, W]`` of a 4-D image input (unknown dims when the shape is not known)."""
    if shape is None:
        return [None] * 4
    if len(shape) != 4:
        raise ValueError(f"{op} '{node}': {name} rank {len(shape)} is not 4")
    return list(shape)


def roi_count(op: str, node: str, name: str, shape: Shape, *, row: int | None) -> Dim:
    """R of ``[R, row]`` with leading 1s up to rank 4 (``row=None``: ``[R]`` up to rank 4)."""
    if shape is None:
        return None
    lead = len(shape) - (1 if row is None else 2)
    if not 0 <= lead <= (3 if row is None else 2):
        expected = "[R] with leading 1s up to rank 4" if row is None else \
            f"[R, {row}] with leading 1s up to rank 4"
        raise ValueError(f"{op} '{node}': {name} rank {len(shape)} does not fit {expected}")
    for axis in range(lead):
        if isinstance(shape[axis], int) and shape[axis] != 1:
            raise ValueError(f"{op} '{node}': {name} dim {axis} {shape[axis]} is not 1")
    if row is not None and isinstance(shape[-1], int) and shape[-1] != row:
        raise ValueError(f"{op} '{node}': {name} last dim {shape[-1]} is not {row}")
    return shape[lead]


def same_dim(op: str, node: str, what: str, a: Dim, b: Dim) -> Dim:
    """Two dims that must agree: the known one, and an error when both are known and differ."""
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise ValueError(f"{op} '{node}': {what} disagree: {a} vs {b}")
    return a if a is not None else b
