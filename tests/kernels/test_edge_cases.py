"""Edge cases against the plain references of each operator (:mod:`dml_onnx.reference_ops`,
or the operator's test module): one-pixel images, windows as large as the padded input, no
regions (R = 0) and single images (N = 1), ROIs on exact .5 and integer coordinates, extreme
spatial scales, every element type.

The kernels run through ``OpDefinition.run_kernel`` (defaults filled in, the memory limit
checked), as every session does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import dml_onnx
from dml_onnx import calls
from dml_onnx._kernels._checks import UINT32_MAX
from dml_onnx.reference_ops.fold import fold as fold_reference
from dml_onnx.reference_ops.lp_pooling import lp_pooling as lp_pooling_reference
from dml_onnx.reference_ops.unfold import unfold as unfold_reference
from tests.kernels._roi_align import ref_backward, ref_forward
from tests.kernels._roi_pooling import reference as roi_pooling_reference
from tests.kernels._unfold_fold import assert_fold_matches, random_array

FLOAT_TYPES = [np.float16, np.float32, np.float64]
INDEX_TYPES = [np.int64, np.int32, np.uint32, np.uint64]
INT_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]

SIZES = st.sampled_from([1, 1, 2, 5])  # one-pixel images often
HALF_OR_WHOLE = st.integers(-6, 14).map(lambda v: v / 2)  # integers and exact .5 values
EXTREME_SCALES = [1e-30, 1e-6, 0.5, 1.0, 2.0, 1e6, 1e30]
EDGES = settings(max_examples=100, deadline=None, derandomize=True)


def run(op: str, inputs: list[np.ndarray | None], outputs: tuple[bool, ...] = (True,),
        **attributes: Any) -> tuple[np.ndarray | None, ...]:
    definition = dml_onnx.OPERATORS_BY_NAME[op]
    values = {a.name: a.kernel_default for a in definition.attributes if not a.required}
    return calls.run_kernel(definition, inputs, {**values, **attributes}, "edge", outputs)


def close(got: np.ndarray, want: np.ndarray) -> None:
    """Equal up to the rounding of the element type (summation order may differ)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    tolerance = {np.float16: 2e-3, np.float32: 2e-5, np.float64: 1e-10}[want.dtype.type]
    scale = 1 + np.nanmax(np.abs(want.astype(np.float64)), initial=0)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               rtol=tolerance, atol=tolerance * scale)


# ----------------------------------------------------------------------------- ROI operators
@st.composite
def images(draw, dtype) -> np.ndarray:
    shape = (draw(st.sampled_from([1, 1, 2])), draw(st.integers(1, 2)), draw(SIZES), draw(SIZES))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@st.composite
def roi_pooling_cases(draw):
    dtype = draw(st.sampled_from(FLOAT_TYPES))
    X = draw(images(dtype))
    r = draw(st.sampled_from([0, 0, 1, 3]))
    rows = [[draw(st.integers(0, X.shape[0] - 1)) + draw(st.sampled_from([0, 0.5, 0.75])),
             *(draw(HALF_OR_WHOLE) for _ in range(4))] for _ in range(r)]
    rois = np.array(rows, dtype).reshape(r, 5)
    pooled = [draw(st.sampled_from([1, 2, 7])), draw(st.sampled_from([1, 3]))]
    return X, rois, pooled, draw(st.sampled_from(EXTREME_SCALES))


@EDGES
@given(roi_pooling_cases())
def test_roi_pooling_edges(case):
    X, rois, pooled, scale = case
    (Y,) = run("RoiPooling", [X, rois], pooled_size=pooled, spatial_scale=scale)
    want = roi_pooling_reference(X, rois, pooled, scale)
    assert Y.dtype == want.dtype
    np.testing.assert_array_equal(Y, want)  # a max picks an input value: exact


@st.composite
def roi_align_cases(draw):
    dtype = draw(st.sampled_from(FLOAT_TYPES))
    X = draw(images(dtype))
    r = draw(st.sampled_from([0, 0, 1, 3]))
    rois = np.array([[draw(HALF_OR_WHOLE) for _ in range(4)] for _ in range(r)],
                    dtype).reshape(r, 4)
    batch = np.array([draw(st.integers(0, X.shape[0] - 1)) for _ in range(r)],
                     draw(st.sampled_from(INDEX_TYPES)))
    scales = [draw(st.sampled_from([1e-30, 1e-3, 0.5, 1.0, 3.0, 1e3])) for _ in range(2)]
    low, high = draw(st.sampled_from([(1, 1), (2, 2), (1, 3)] + (
        [(1, UINT32_MAX)] if max(scales) <= 3 else [])))  # adaptive: bounded region sizes
    attributes = {
        "spatial_scale_x": scales[0], "spatial_scale_y": scales[1],
        "minimum_samples_per_output": low, "maximum_samples_per_output": high,
        "reduction_function": draw(st.sampled_from(["average", "max"])),
        "interpolation_mode": draw(st.sampled_from(["linear", "nearest_neighbor"])),
        "input_pixel_offset": draw(st.sampled_from([0.5, 0.0])),
        "output_pixel_offset": draw(st.sampled_from([-0.5, 0.0])),
        "align_regions_to_corners": draw(st.sampled_from([0, 1])),
    }
    size = (draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 3])))
    return X, rois, batch, size, attributes


@EDGES
@given(roi_align_cases())
def test_roi_align_edges(case):
    X, rois, batch, size, attributes = case
    (Y,) = run("RoiAlign1", [X, rois, batch], output_size=list(size), **attributes)
    close(Y, ref_forward(X, rois, batch, size, **attributes))


@EDGES
@given(roi_align_cases(), st.integers(0, 2 ** 32 - 1))
def test_roi_align_grad_edges(case, seed):
    X, rois, batch, size, attributes = case
    dY = np.random.default_rng(seed).standard_normal(
        (len(batch), X.shape[1], *size)).astype(X.dtype)
    dX, drois = run("RoiAlignGrad", [X, dY, rois, batch], (True, True), **attributes)
    want_dx, want_drois = ref_backward(X, dY, rois, batch, **attributes)
    close(dX, want_dx)
    close(drois, want_drois)


# ----------------------------------------------------------------------------- window operators
@st.composite
def windows(draw, max_k: int = 3, full: bool | None = None):
    """``(spatial, window, strides, dilations, start, end)``: sizes down to 0 (read only
    padding) and 1, and often the largest window the padded input holds."""
    k = draw(st.integers(1, max_k))
    spatial, window, strides, dilations, start, end = [], [], [], [], [], []
    for _ in range(k):
        size, a, b = draw(st.sampled_from([0, 1, 1, 3])), draw(st.integers(0, 2)), \
            draw(st.integers(0, 2))
        if size + a + b == 0:
            a = 1
        d = draw(st.sampled_from([1, 1, 2]))
        largest = (size + a + b - 1) // d + 1
        w = largest if (draw(st.booleans()) if full is None else full) else \
            draw(st.integers(1, largest))
        for values, value in ((spatial, size), (window, w), (strides, draw(st.integers(1, 3))),
                              (dilations, d), (start, a), (end, b)):
            values.append(value)
    return tuple(spatial), tuple(window), tuple(strides), tuple(dilations), tuple(start), \
        tuple(end)


def window_attributes(window, strides, dilations, start, end) -> dict[str, list[int]]:
    return {"strides": list(strides), "dilations": list(dilations),
            "start_padding": list(start), "end_padding": list(end)}


@EDGES
@given(windows(), st.sampled_from(FLOAT_TYPES), st.integers(1, 4), st.integers(0, 2 ** 16))
def test_lp_pooling_edges(geometry, dtype, p, seed):
    spatial, window, strides, dilations, start, end = geometry
    X = np.random.default_rng(seed).standard_normal((1, 2, *spatial)).astype(dtype)
    attributes = window_attributes(*geometry[1:])
    (Y,) = run("LpPooling", [X], window_size=list(window), p=p, **attributes)
    close(Y, lp_pooling_reference(X, window_size=list(window), p=p, **attributes))


@EDGES
@given(windows(), st.sampled_from([*INT_TYPES, *FLOAT_TYPES, np.bool_]),
       st.integers(0, 2 ** 16))
def test_unfold_edges(geometry, dtype, seed):
    spatial, window, strides, dilations, start, end = geometry
    X = random_array(np.random.default_rng(seed), (1, 2, *spatial), dtype)
    attributes = window_attributes(*geometry[1:])
    (Y,) = run("Unfold", [X], window_sizes=list(window), **attributes)
    want = unfold_reference(X, window_sizes=list(window), **attributes)
    assert Y.dtype == want.dtype
    np.testing.assert_array_equal(Y, want)


@EDGES
@given(windows(), st.sampled_from([*INT_TYPES, *FLOAT_TYPES]), st.integers(0, 2 ** 16))
def test_fold_edges(geometry, dtype, seed):
    spatial, window, strides, dilations, start, end = geometry
    blocks = [(o + a + b - d * (w - 1) - 1) // s + 1
              for o, w, s, d, a, b in zip(spatial, window, strides, dilations, start, end)]
    X = random_array(np.random.default_rng(seed),
                     (1, 2 * int(np.prod(window)), int(np.prod(blocks))), dtype)
    attributes = window_attributes(*geometry[1:])
    (Y,) = run("Fold", [X], window_sizes=list(window), output_size=list(spatial), **attributes)
    assert_fold_matches(Y, fold_reference(X, window_sizes=list(window), output_size=list(spatial),
                                          **attributes))


def test_the_strategies_reach_the_edges():
    """The named edges are drawn: full windows, one-pixel and empty axes, R = 0, N = 1."""
    seen: set[str] = set()

    @settings(max_examples=200, deadline=None, derandomize=True)
    @given(windows(), roi_align_cases())
    def look(geometry, case):
        spatial, window, strides, dilations, start, end = geometry
        X, rois, *_ = case
        for axis, size in enumerate(spatial):
            padded = size + start[axis] + end[axis]
            if dilations[axis] * (window[axis] - 1) + 1 > padded - dilations[axis]:
                seen.add("largest window")
            seen.add({0: "empty axis", 1: "one-pixel axis"}.get(size, "axis"))
        seen.update({"R = 0"} if len(rois) == 0 else set())
        seen.update({"N = 1"} if X.shape[0] == 1 else set())
        seen.update({"one-pixel image"} if X.shape[2:] == (1, 1) else set())
        seen.update({".5 coordinate"} if np.any(rois % 1 == 0.5) else set())

    look()
    assert seen >= {"largest window", "empty axis", "one-pixel axis", "R = 0", "N = 1",
                    "one-pixel image", ".5 coordinate"}
