"""Standard-op forms of RoiAlign1 and RoiAlignGrad against their kernels.

Every case of the two operators' tables and hypothesis-drawn inputs (every attribute
combination, element type, index type and rank) run in plain onnxruntime as lowered models
(``native=False`` and ``True``) and as model-local functions, and must equal the kernel's
output within a few units in the last place of the output's largest magnitude.
The native ``RoiAlign`` must appear exactly where ``native_sampling_ratio`` finds one.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dml_onnx
from dml_onnx import calls
from dml_onnx._kernels._checks import UINT32_MAX
from dml_onnx.builders import single_node_model
from dml_onnx.form import NATIVE_VERSIONS, op_version
from dml_onnx.ops import OPERATORS_BY_NAME
from dml_onnx.ops.roi_align1 import native_sampling_ratio
from tests._support.native import run_native

FORWARD = OPERATORS_BY_NAME["RoiAlign1"]
GRADIENT = OPERATORS_BY_NAME["RoiAlignGrad"]
DECOMPOSITION_ULPS = 16
"""Tolerance of the decompositions' ``Y``, in ``eps(T) * max |expected|``: they compute the
coordinates exactly as the kernel does, only sums run in another order."""
NATIVE_ULPS = 64
"""Tolerance of native ``RoiAlign``: it rounds the sample positions in another operation
order, and a position error moves the value by up to the pixel differences."""
GRADIENT_ULPS = 64
"""Tolerance of ``dX`` and ``drois``: sums of many terms of both signs, whose rounding
(kernel and form alike) is large against the largest result."""


def _feeds(definition, inputs) -> dict[str, np.ndarray]:
    return {p.name: a for p, a in zip(definition.inputs, inputs) if a is not None}


def _kernel(definition, model, inputs, outputs) -> list[np.ndarray]:
    attributes = definition.node_attributes(model.graph.node[0])
    results = calls.run_kernel(definition, list(inputs), attributes, "kernel", outputs)
    return [r for r, wanted in zip(results, outputs) if wanted]


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Plain onnxruntime on the CPU: no ``dml_onnx`` kernels registered."""
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_close(got: np.ndarray, want: np.ndarray, ulps: float) -> float:
    """Same dtype, shape, NaN and infinity pattern; finite values within ``ulps`` units of
    ``eps * max |want|``. Returns the error in those units."""
    assert got.dtype == want.dtype and got.shape == want.shape
    wide, expected = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(np.isnan(wide), np.isnan(expected))
    np.testing.assert_array_equal(wide[~finite & ~np.isnan(expected)],
                                  expected[~finite & ~np.isnan(expected)])
    eps = float(np.finfo(want.dtype).eps)
    scale = float(np.max(np.abs(expected[finite]), initial=0.0)) * eps
    error = float(np.max(np.abs(wide[finite] - expected[finite]), initial=0.0))
    assert error <= ulps * scale, f"error {error:.3g} is {error / scale:.1f} ulps"
    return error / scale if scale else 0.0


def _uses_native(model: onnx.ModelProto) -> bool:
    return any(n.op_type == "RoiAlign" for n in model.graph.node)


def check_forms(definition, inputs, attributes, outputs=(True,), *, symbolic: bool = False,
                native: bool = True, functions: bool = False, opset: int = 16) -> None:
    """Against the kernel: the model lowered with ``native=False``; with ``native``, lowered
    with ``native=True`` where that uses native RoiAlign; with ``functions``, the model with
    all-symbolic input shapes carrying its form as a model-local function. Native RoiAlign
    must be used exactly where :func:`native_sampling_ratio` finds one."""
    model = single_node_model(definition, inputs, attributes, outputs, opset=opset,
                              symbolic=symbolic)
    feeds = _feeds(definition, inputs)
    want = _kernel(definition, model, inputs, outputs)
    expect_native = definition is FORWARD and native_sampling_ratio(
        definition.node_attributes(model.graph.node[0])) is not None \
        and op_version("RoiAlign", opset) in NATIVE_VERSIONS["RoiAlign"]
    variants = [(dml_onnx.lower_model(model, native=False), DECOMPOSITION_ULPS)]
    lowered = dml_onnx.lower_model(model)
    assert not _uses_native(variants[0][0]) and _uses_native(lowered) == expect_native
    if native and expect_native:
        variants.append((lowered, NATIVE_ULPS))
    for lowered, _ in variants:
        assert all(n.domain in ("", "ai.onnx") for n in lowered.graph.node)
    if functions:
        generic = single_node_model(definition, inputs, attributes, outputs, opset=opset,
                                    symbolic=True)
        with_function = dml_onnx.with_functions(generic)
        assert [f.name for f in with_function.functions] == [definition.name]
        variants.append((with_function, NATIVE_ULPS if expect_native else DECOMPOSITION_ULPS))
    for candidate, ulps in variants:
        for got, expected in zip(_run(candidate, feeds), want):
            assert_close(got, expected, GRADIENT_ULPS if definition is GRADIENT else ulps)


# ---------------------------------------------------------------------------------------------
# the case tables

CASES = [(d, e) for d in (FORWARD, GRADIENT) for e in d.examples() if not e.error]


@pytest.mark.parametrize("pair", CASES, ids=lambda p: f"{p[0].name}-{p[1].name}")
def test_every_case_by_lowering_and_by_function(pair):
    definition, example = pair
    finite = all(a is None or np.isfinite(a).all() for a in example.inputs)
    check_forms(definition, example.inputs, example.attributes, example.outputs,
                native=finite, functions=True)


def test_native_roi_align_is_chosen_exactly_where_it_computes_the_same():
    chosen = {e.name for e in FORWARD.examples() if not e.error and _uses_native(
        dml_onnx.lower_model(single_node_model(FORWARD, e.inputs, e.attributes, opset=16)))}
    assert chosen == {"average_sampling_2_scaled", "fixed_samples_3_one_scale", "samples_1",
                      "float64_int64_fixed_samples"}


@pytest.mark.parametrize("opset", [18, 21, 24])
def test_forms_at_later_opsets(opset):
    """Reductions take their axes as an input from opset 18; RoiAlign-22 has no onnxruntime
    CPU kernel, so only the decompositions run at 24."""
    for definition, name in ((FORWARD, "fixed_samples_3_one_scale"), (FORWARD, "max_nearest"),
                             (GRADIENT, "max")):
        example = next(e for e in definition.examples() if e.name == name)
        check_forms(definition, example.inputs, example.attributes, example.outputs,
                    native=opset < 22, functions=opset < 22, opset=opset)


def _native_and_decomposed(inputs, attributes):
    model = single_node_model(FORWARD, inputs, attributes, opset=16)
    feeds = _feeds(FORWARD, inputs)
    want = _kernel(FORWARD, model, inputs, (True,))[0]
    native = _run(dml_onnx.lower_model(model), feeds)[0]
    np.testing.assert_array_equal(_run(dml_onnx.lower_model(model, native=False), feeds)[0],
                                  want)
    return native, want


def test_native_roi_align_spreads_a_non_finite_pixel_0_0_from_out_of_bounds_samples():
    """A known limit (see ``native_sampling_ratio``): RoiAlign weighs an out-of-bounds
    sample's pixel (0, 0) by 0, the spec reads the out-of-bounds value."""
    image = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    image[0, 0, 0, 0] = np.inf
    native, want = _native_and_decomposed(
        (image, np.array([[-5, -5, 3, 3]], np.float32), np.zeros(1, np.int64)),
        {"output_size": [2, 2], "minimum_samples_per_output": 2,
         "maximum_samples_per_output": 2})
    assert np.isnan(native[0, 0, 0, 0]) and want[0, 0, 0, 0] == 0


@pytest.mark.parametrize("box", [[-1.0, 0, 3, 1], [1.0, 0, 5, 1], [-1.0, -1.0, 3, 3]])
def test_native_form_takes_regions_on_an_edge_from_the_decomposition(box):
    """RoiAlign's bounds are closed: a sample exactly on x = -1 (or W) reads pixel 0 (W - 1)
    there, where DirectML's open bounds read the out-of-bounds value. The lowered graph takes
    such a region's outputs from the decomposition; the others stay RoiAlign's."""
    image = np.arange(1, 17, dtype=np.float64).reshape(1, 1, 4, 4)
    rois = np.array([box, [0.3, 0.2, 2.9, 3.1]])
    attributes = {"output_size": [1, 4], "minimum_samples_per_output": 1,
                  "maximum_samples_per_output": 1}
    native, want = _native_and_decomposed((image, rois, np.zeros(2, np.int64)), attributes)
    np.testing.assert_allclose(native, want, rtol=1e-15)
    (stock,) = run_native("RoiAlign", [image, rois, np.zeros(2, np.int64)], opset=16,
                          output_height=1, output_width=4, sampling_ratio=1)
    assert not np.array_equal(stock[0], want[0])  # the edge sample: the form's fallback
    np.testing.assert_allclose(stock[1], want[1], rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# hypothesis: every attribute combination and type

SAMPLE_COUNTS = ((1, UINT32_MAX), (1, 1), (2, 2), (3, 3), (2, 3), (1, 2))
FLOAT_TYPES = (np.float16, np.float32, np.float64)
INDEX_TYPES = (np.int64, np.int32, np.uint32, np.uint64)


@st.composite
def sampling_attributes(draw, forward: bool) -> dict:
    """RoiAlign1's (``forward``) or RoiAlignGrad's attributes; a third of the draws keep
    the ones native RoiAlign needs, so that it is chosen often."""
    minimum, maximum = draw(st.sampled_from(SAMPLE_COUNTS))
    scale_x = draw(st.sampled_from([1.0, 0.5, 0.75, 1.25]))
    attributes = {"minimum_samples_per_output": minimum, "maximum_samples_per_output": maximum,
                  "spatial_scale_x": scale_x}
    if draw(st.integers(0, 2)) == 0:
        return {**attributes, "spatial_scale_y": scale_x}
    attributes.update(
        reduction_function=draw(st.sampled_from(["average", "max"])),
        interpolation_mode=draw(st.sampled_from(["linear", "nearest_neighbor"])),
        spatial_scale_y=draw(st.sampled_from([scale_x, 0.5, 1.5])),
        input_pixel_offset=draw(st.sampled_from([0.5, 0.0, 0.25])),
        output_pixel_offset=draw(st.sampled_from([-0.5, 0.0, 0.375])),
        align_regions_to_corners=draw(st.integers(0, 1)))
    if forward:
        attributes["out_of_bounds_input_value"] = draw(
            st.sampled_from([0.0, -1.5, 2.0, float("nan"), float("-inf")]))
    return attributes


@st.composite
def region_inputs(draw) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """``(X, rois, batch_indices, plain)``: small shapes, every type and rank; ``plain``
    where X is finite and the corners are not on a half-pixel grid (native RoiAlign rounds
    sample positions on that grid's edges differently)."""
    dtype, index_type = draw(st.sampled_from(FLOAT_TYPES)), draw(st.sampled_from(INDEX_TYPES))
    n, c, h, w = (draw(st.integers(1, top)) for top in (2, 2, 5, 5))
    r = draw(st.integers(0, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    image = rng.standard_normal((n, c, h, w))
    rois = rng.uniform(-3, max(h, w) + 3, (r, 4))
    halves, non_finite = draw(st.booleans()), draw(st.integers(0, 4)) == 0
    if halves:
        rois = np.round(rois * 2) / 2
    if non_finite:
        image.reshape(-1)[rng.integers(0, image.size, 2)] = [np.nan, np.inf]
    rois_rank, batch_rank = draw(st.integers(2, 4)), draw(st.integers(1, 4))
    return (image.astype(dtype), rois.astype(dtype).reshape((1,) * (rois_rank - 2) + (r, 4)),
            rng.integers(0, n, r).astype(index_type).reshape((1,) * (batch_rank - 1) + (r,)),
            not (halves or non_finite))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(region_inputs(), sampling_attributes(forward=True),
       st.tuples(st.integers(1, 3), st.integers(1, 3)), st.booleans())
def test_roi_align1_forms_equal_the_kernel(inputs, attributes, output_size, symbolic):
    image, rois, batch, plain = inputs
    check_forms(FORWARD, (image, rois, batch), {**attributes, "output_size": list(output_size)},
                symbolic=symbolic, native=plain)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(region_inputs(), sampling_attributes(forward=False),
       st.tuples(st.integers(1, 3), st.integers(1, 3)),
       st.sampled_from([(True, True), (True, False), (False, True)]), st.booleans(),
       st.booleans(), st.integers(0, 2**32 - 1), st.integers(0, 4))
def test_roi_align_grad_forms_equal_the_kernel(inputs, attributes, output_size, outputs,
                                               omit_x, symbolic, seed, infinite):
    image, rois, batch, _ = inputs
    dy = np.random.default_rng(seed).standard_normal((batch.size, image.shape[1],
                                                      *output_size))
    if infinite == 0 and dy.size:
        dy.reshape(-1)[seed % dy.size] = np.inf
    dy = dy.astype(image.dtype)
    if omit_x and outputs == (True, False) and attributes.get("reduction_function") != "max":
        attributes = {**attributes, "input_shape": list(image.shape)}
        image = None
    check_forms(GRADIENT, (image, dy, rois, batch), attributes, outputs, symbolic=symbolic,
                native=False)
