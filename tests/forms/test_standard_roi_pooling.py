"""RoiPooling's standard-op forms against its kernel, bit for bit, in plain onnxruntime.

- The decomposition (``lower_model(native=False)``) on every example and on generated inputs:
  every element type, ROIs on exact .5 products, inverted and outside ROIs, NaN and infinities.
- The native form (``MaxRoiPool``) where onnxruntime's CPU kernel computes the spec: no NaN,
  no -inf, and only the ROIs whose float32 bin edges equal the spec's integer ones (see
  ``test_roi_pooling``).
- Model-local functions (``with_functions``), which plain onnxruntime inlines.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dml_onnx
from dml_onnx.builders import single_node_model
from dml_onnx.ops.roi_pooling import DEFINITION
from tests.kernels._roi_pooling import spec_agrees_with_ort

EXAMPLES = [e for e in DEFINITION.examples() if not e.error]
NEWEST_OPSET = 26  # the newest default-domain opset onnxruntime 1.31 loads
FLOAT_TYPES = (np.float16, np.float32, np.float64)


def kernel(X: np.ndarray, rois: np.ndarray, attributes: dict) -> np.ndarray:
    """The kernel's Y; ``attributes`` as the kernel receives them (float32 values)."""
    return DEFINITION.compute(X, rois, node="node", **attributes)


def example_model(example, **options) -> tuple[onnx.ModelProto, np.ndarray]:
    """The example's single-node model and the kernel's Y for its node's attributes."""
    model = single_node_model(DEFINITION, example.inputs, example.attributes, **options)
    return model, kernel(*example.inputs, DEFINITION.node_attributes(model.graph.node[0]))


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bits, except that any NaN equals any NaN."""
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    bits = np.dtype(f"u{want.dtype.itemsize}")
    np.testing.assert_array_equal(got[~nan].view(bits), want[~nan].view(bits))


def op_types(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in model.graph.node}


@functools.cache
def form_session(kind: str, dtype: type, pooled: tuple[int, int],
                 scale: float) -> ort.InferenceSession:
    """A session of the form with symbolic X dims and rois of any rank, so that one session
    serves every size: ``kind`` is ``decomposition``, ``native`` or ``functions``."""
    dummy = (np.zeros((1, 1, 1, 1), dtype), np.zeros((1, 5), dtype))
    model = single_node_model(DEFINITION, dummy, {"pooled_size": list(pooled),
                                                  "spatial_scale": scale},
                              symbolic=True, opset=16)
    model = (dml_onnx.with_functions(model) if kind == "functions"
             else dml_onnx.lower_model(model, native=kind == "native"))
    model.graph.input[1].type.tensor_type.ClearField("shape")
    return session(model)


def run_form(kind: str, X: np.ndarray, rois: np.ndarray, attributes: dict) -> np.ndarray:
    runner = form_session(kind, X.dtype.type, tuple(attributes["pooled_size"]),
                          attributes["spatial_scale"])
    return runner.run(None, {"X": X, "rois": rois})[0]


# ---------------------------------------------------------------------------------------------
# The examples


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_decomposition_of_every_example(example):
    X, rois = example.inputs
    for symbolic in (False, True):
        model, want = example_model(example, symbolic=symbolic, opset=16)
        lowered = dml_onnx.lower_model(model, native=False)
        assert "MaxRoiPool" not in op_types(lowered)
        assert_same(session(lowered).run(None, {"X": X, "rois": rois})[0], want)


def test_the_form_reads_no_static_shape():
    example = next(e for e in EXAMPLES if e.name == "float64_nan_and_infinities")
    static, symbolic = (dml_onnx.lower_model(example_model(example, symbolic=s)[0],
                                             native=False) for s in (False, True))
    assert list(static.graph.node) == list(symbolic.graph.node)


@pytest.mark.parametrize("opset", range(16, NEWEST_OPSET + 1))
def test_decomposition_in_every_opset(opset):
    for name in ("float64_nan_and_infinities", "float16_half_coordinates", "float64_outside"):
        example = next(e for e in EXAMPLES if e.name == name)
        model, want = example_model(example, opset=opset)
        lowered = dml_onnx.lower_model(model, native=False)
        onnx.checker.check_model(lowered, full_check=True)
        assert all(n.domain in ("", "ai.onnx") for n in lowered.graph.node)
        assert [o.name for o in lowered.graph.output] == ["Y"]
        X, rois = example.inputs
        assert_same(session(lowered).run(None, {"X": X, "rois": rois})[0], want)


ROUNDED_ROIS = {"Constant", "Reshape", "Split", "Mul", "Round", "Concat"}
"""The nodes that scale and round the corners half to even before MaxRoiPool."""


@pytest.mark.parametrize(("dtype", "scale", "native"), [
    (np.float32, 1.0, {"MaxRoiPool"}), (np.float16, 0.5, {"MaxRoiPool", "Cast", "Max"}),
    (np.float32, 0.0, {"MaxRoiPool"}), (np.float32, -0.5, {"MaxRoiPool"}),
    (np.float64, 1.0, set())])
def test_native_form_where_max_roi_pool_fits(dtype, scale, native):
    example = (np.zeros((1, 2, 3, 4), dtype), np.zeros((3, 5), dtype))
    model = single_node_model(DEFINITION, example, {"pooled_size": [2, 2],
                                                    "spatial_scale": scale}, opset=16)
    lowered = dml_onnx.lower_model(model)
    if native:
        assert op_types(lowered) == ROUNDED_ROIS | native
        (pool,) = [n for n in lowered.graph.node if n.op_type == "MaxRoiPool"]
        assert {a.name: onnx.helper.get_attribute_value(a) for a in pool.attribute} == {
            "pooled_shape": [2, 2], "spatial_scale": 1.0}
    else:
        assert "MaxRoiPool" not in op_types(lowered) and "ReduceMax" in op_types(lowered)
    assert op_types(dml_onnx.lower_model(model, native=False)) >= {"Gather", "ReduceMax"}


def test_native_form_differs_where_onnxruntime_does():
    # onnxruntime's MaxRoiPool: float32 edges (57 rows in 7 bins end at 58), a NaN kept when
    # last in its bin. The decomposition follows the spec; both give -3.4e38 for -inf only.
    X = np.zeros((1, 1, 64, 64), np.float32)
    X[0, 0, 57, 0] = 100
    X[0, 0, 0, 0], X[0, 0, 0, 1:3] = np.nan, 1   # a NaN first in its bin
    X[0, 0, 1, 4:8] = -np.inf
    X[0, 0, 2, 2], X[0, 0, 2, 3] = 1, np.nan   # a NaN last in its bin (columns 2, 3)
    rois = np.array([[0, 0, 0, 56, 56], [0, 0, 0, 20, 0], [0, 4, 1, 7, 1], [0, 0, 2, 13, 2]],
                    np.float32)
    attributes = {"pooled_size": [7, 7], "spatial_scale": 1.0}
    want = kernel(X, rois, attributes)
    assert_same(run_form("decomposition", X, rois, attributes), want)
    native = run_form("native", X, rois, attributes)
    assert native[0, 0, 6, 0] == 100 and want[0, 0, 6, 0] == 0
    assert native[1, 0, 0, 0] == 1 and want[1, 0, 0, 0] == 1
    assert native[2, 0, 0, 0] == want[2, 0, 0, 0] == np.finfo(np.float32).min
    assert np.isnan(native[3, 0, 0, 1]) and want[3, 0, 0, 1] == 1


# ---------------------------------------------------------------------------------------------
# Generated inputs

POOLED = ((1, 1), (2, 3), (3, 2), (4, 4), (7, 5), (1, 6))
SCALES = (1.0, 0.5, 0.25, 1 / 3, 2.0, 1 / 16, 0.0, -0.5)


@st.composite
def cases(draw, *, dtypes=FLOAT_TYPES, scales=SCALES, specials=True):
    """``(attributes, [(X, rois), ...])``: one attribute set and element type, and 1 to 4
    inputs for it (see :func:`inputs`)."""
    dtype = draw(st.sampled_from(dtypes))
    pooled = draw(st.sampled_from(POOLED))
    scale = float(np.float32(draw(st.sampled_from(scales))))  # the attribute's float32 value
    pairs = [draw(inputs(dtype, scale, specials)) for _ in range(draw(st.integers(1, 4)))]
    return {"pooled_size": list(pooled), "spatial_scale": scale}, pairs


@st.composite
def inputs(draw, dtype: type, scale: float, specials: bool):
    """``(X, rois)``: random sizes (R may be 0), rois of rank 2 to 4 with exact .5 products,
    inverted and outside ROIs, fractional batch ids; X with NaN and infinities when
    ``specials``."""
    n, c, h, w, r = (draw(st.integers(1, hi)) for hi in (3, 3, 9, 9, 6))
    r -= draw(st.sampled_from((0, 0, 0, r)))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    X = rng.standard_normal((n, c, h, w))
    if specials:
        for value in draw(st.lists(st.sampled_from((np.nan, np.inf, -np.inf)), max_size=6)):
            X[tuple(rng.integers(0, X.shape))] = value
        if draw(st.booleans()):  # a whole row of -inf
            X[rng.integers(0, n), rng.integers(0, c), rng.integers(0, h)] = -np.inf
    unit = 1 / abs(scale) if scale else 1.0
    corners = rng.uniform(-0.3, 1.3, (r, 4)) * max(h, w) * unit
    corners = np.round(corners * 2 / unit) * unit / 2  # products on (or next to) .5
    if draw(st.booleans()):  # mostly x1 <= x2, y1 <= y2; otherwise about half inverted
        corners = np.concatenate([np.minimum(corners[:, :2], corners[:, 2:]),
                                  np.maximum(corners[:, :2], corners[:, 2:])], axis=1)
    batch = rng.integers(0, n, (r, 1)) + rng.uniform(-0.99, 0.99, (r, 1))  # trunc: in range
    rois = np.concatenate([batch, corners], axis=1).astype(dtype)
    rois = rois.reshape((1,) * draw(st.integers(0, 2)) + rois.shape)
    return X.astype(dtype), rois


@settings(max_examples=80, deadline=None, derandomize=True)
@given(cases())
def test_decomposition_equals_the_kernel(case):
    attributes, pairs = case
    for X, rois in pairs:
        assert_same(run_form("decomposition", X, rois, attributes), kernel(X, rois, attributes))


def agreeing_rows(X: np.ndarray, rois: np.ndarray, attributes: dict) -> np.ndarray:
    """The ROIs whose bin edges onnxruntime's MaxRoiPool computes as the spec does."""
    return spec_agrees_with_ort(rois, attributes["pooled_size"], attributes["spatial_scale"],
                                X.shape[2], X.shape[3])


native_cases = cases(dtypes=(np.float16, np.float32), scales=[s for s in SCALES if s > 0],
                     specials=False)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(native_cases, st.sampled_from(("native", "functions")))
def test_native_form_and_functions_equal_the_kernel_where_onnxruntime_agrees(case, kind):
    attributes, pairs = case
    for X, rois in pairs:
        X = np.where(X < -1.5, np.inf, X).astype(X.dtype)  # MaxRoiPool takes +inf, not -inf
        keep = agreeing_rows(X, rois, attributes)
        got, want = run_form(kind, X, rois, attributes), kernel(X, rois, attributes)
        assert_same(got[keep], want[keep])


@settings(max_examples=20, deadline=None, derandomize=True)
@given(cases(dtypes=(np.float64,)))
def test_functions_for_double_are_the_decomposition(case):
    attributes, pairs = case
    for X, rois in pairs:
        assert_same(run_form("functions", X, rois, attributes), kernel(X, rois, attributes))


@pytest.mark.parametrize("shape", [(2, 0, 4, 4), (2, 3, 0, 4), (2, 3, 4, 0), (0, 3, 4, 4)])
def test_empty_image_axes(shape):
    X = np.ones(shape, np.float32)
    rois = np.array([[0, 0, 0, 3, 3], [1, -2, 1, 5, 2]] if shape[0] else np.zeros((0, 5)),
                    np.float32)
    attributes = {"pooled_size": [2, 3], "spatial_scale": 1.0}
    assert_same(run_form("decomposition", X, rois, attributes), kernel(X, rois, attributes))


# ---------------------------------------------------------------------------------------------
# Large coordinates and invalid rows


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_coordinates_within_the_int64_bound_are_exact(dtype):
    # 7x7: the bound is 2**57. The kernel computes these with Python integers.
    rng = np.random.default_rng(3)
    X = rng.standard_normal((1, 2, 6, 7)).astype(dtype)
    big = 2.0 ** 56
    rois = np.array([[0, -big, 1, 5, 4], [0, 2, -big, 3, big], [0, -big, -big, big, big],
                     [0, 3, 2, big, 3], [0, -big / 3, 0, big / 5, 5]], dtype)
    extra = rng.uniform(-1, 1, (20, 4)) * 2.0 ** rng.integers(20, 56, (20, 4))
    rois = np.concatenate([rois, np.concatenate([np.zeros((20, 1)), extra], axis=1)])
    rois = rois.astype(dtype)
    for pooled in ([7, 7], [3, 5]):
        attributes = {"pooled_size": pooled, "spatial_scale": 1.0}
        assert_same(run_form("decomposition", X, rois, attributes), kernel(X, rois, attributes))


@pytest.mark.parametrize(("row", "scale", "dtype"), [
    ([2, 0, 0, 1, 1], 1.0, np.float32),           # batch index N
    ([-1, 0, 0, 1, 1], 1.0, np.float64),          # -1: not Gather's "from the end"
    ([np.nan, 0, 0, 1, 1], 1.0, np.float16),
    ([0, 0, np.inf, 1, 1], 1.0, np.float32),
    ([0, 0, 0, np.nan, 1], 0.0, np.float64),      # NaN * 0
    ([0, 0, 0, 1, 1e38], 16.0, np.float32),       # the product overflows float32
    ([0, 0, 0, 1, 2.0 ** 58], 1.0, np.float64),   # valid, beyond the form's int64 bound
])
def test_invalid_rows_fail_in_the_decomposition(row, scale, dtype):
    X = np.ones((2, 1, 3, 3), dtype)
    rois = np.array([[0, 0, 0, 2, 2], row], dtype)
    attributes = {"pooled_size": [7, 7], "spatial_scale": float(np.float32(scale))}
    with pytest.raises(Exception, match="indices element out of data bounds"):
        run_form("decomposition", X, rois, attributes)
