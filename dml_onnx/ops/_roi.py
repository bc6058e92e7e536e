"""Declarations and shape rules shared by the region-of-interest operators (RoiPooling,
RoiAlign1, RoiAlignGrad): the sampling attributes, the ``rois``/``batch_indices`` inputs and
their types, and the checks of image and region shapes."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper

from dml_onnx._kernels._checks import UINT32_MAX, KernelError
from dml_onnx.definition import FLOAT_TYPES, INDEX_TYPES, Attribute, Dim, Parameter, Shape

SAMPLING_ATTRIBUTES = (
    Attribute("reduction_function", "string", "How the samples of one output combine: "
              "'average' or 'max'.", "average"),
    Attribute("interpolation_mode", "string", "How one sample reads the image: 'linear' or "
              "'nearest_neighbor'.", "linear"),
    Attribute("spatial_scale_x", "float", "Multiplier of the ROI x coordinates.", 1.0),
    Attribute("spatial_scale_y", "float", "Multiplier of the ROI y coordinates.", 1.0),
    Attribute("input_pixel_offset", "float", "Offset from (0,0) of the input coordinates to "
              "the top-left pixel centre.", 0.5),
    Attribute("output_pixel_offset", "float", "Offset from the top-left pixel centre to (0,0) "
              "of the output coordinates.", -0.5),
    Attribute("out_of_bounds_input_value", "float", "The value a sample outside the "
              "image reads.", 0.0),
    Attribute("minimum_samples_per_output", "int", "Least samples per output and axis, >= 1.",
              1),
    Attribute("maximum_samples_per_output", "int", "Most samples per output and axis, "
              ">= minimum.", UINT32_MAX),
    Attribute("align_regions_to_corners", "int", "1: stretch the sample points to the "
              "region's corners.", 0),
)
"""The sampling attributes of RoiAlign1, in its order; RoiAlignGrad takes them all but
``out_of_bounds_input_value`` (:func:`sampling_attributes`)."""


def sampling_attributes(*left_out: str) -> tuple[Attribute, ...]:
    """:data:`SAMPLING_ATTRIBUTES` in their order, without those named in ``left_out``."""
    unknown = set(left_out) - {a.name for a in SAMPLING_ATTRIBUTES}
    if unknown:
        raise KeyError(sorted(unknown)[0])
    return tuple(a for a in SAMPLING_ATTRIBUTES if a.name not in left_out)


ROI_INPUTS = (
    Parameter("rois", "T", "[R, 4], [1, R, 4] or [1, 1, R, 4]; rows [x1, y1, x2, y2]."),
    Parameter("batch_indices", "TI", "[R], or with leading 1s up to rank 4; values in [0, N)."),
)
ROI_TYPES = {"T": FLOAT_TYPES, "TI": INDEX_TYPES}


def lowest(elem_type: int) -> float:
    """``lowest(T)`` of the spec for an onnx element type: its lowest finite value, where a
    maximum starts."""
    return float(np.finfo(helper.tensor_dtype_to_np_dtype(elem_type)).min)


def spatial_image(op: str, node: str, shape: Shape, name: str = "X") -> list[Dim]:
    """``[N, C, H, W]`` of a 4-D image input (unknown dims when the shape is not known)."""
    if shape is None:
        return [None] * 4
    if len(shape) != 4:
        raise KernelError(op, node, f"{name} rank", len(shape), "is not 4")
    return list(shape)


def roi_count(op: str, node: str, name: str, shape: Shape, *, row: int | None) -> Dim:
    """R of ``[R, row]`` with leading 1s up to rank 4 (``row=None``: ``[R]`` up to rank 4)."""
    if shape is None:
        return None
    lead = len(shape) - (1 if row is None else 2)
    if not 0 <= lead <= (3 if row is None else 2):
        expected = "[R] with leading 1s up to rank 4" if row is None else \
            f"[R, {row}] with leading 1s up to rank 4"
        raise KernelError(op, node, f"{name} rank", len(shape), f"does not fit {expected}")
    for axis in range(lead):
        if isinstance(shape[axis], int) and shape[axis] != 1:
            raise KernelError(op, node, f"{name} dim {axis}", shape[axis], "is not 1")
    if row is not None and isinstance(shape[-1], int) and shape[-1] != row:
        raise KernelError(op, node, f"{name} last dim", shape[-1], f"is not {row}")
    return shape[lead]


def same_dim(op: str, node: str, what: str, a: Dim, b: Dim) -> Dim:
    """Two dims that must agree: the known one, and an error when both are known and differ."""
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise KernelError(op, node, f"{what} disagree:", a, f"vs {b}")
    return a if a is not None else b


def roi_rows(op: str, node: str, shapes: list[Shape]) -> Any:
    """R from ``rois`` and ``batch_indices`` (the last two inputs), which must agree."""
    r = roi_count(op, node, "rois", shapes[-2], row=4)
    return same_dim(op, node, "R of rois and batch_indices",
                    r, roi_count(op, node, "batch_indices", shapes[-1], row=None))
