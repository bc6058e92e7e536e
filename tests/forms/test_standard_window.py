"""Standard-op forms of the sliding-window operators (Unfold, Fold, LpPooling) against their
kernels: hypothesis-drawn shapes, attributes, element types and opsets
(:mod:`tests.forms._window_draws`), lowered with native ops preferred and with decompositions
only (static and symbolic input shapes), and as model-local functions, run in plain
onnxruntime.

Integer outputs, Unfold (data movement) and Fold's scatter-add (DirectML's order of the sum,
spec section 6) must equal the kernel bit for bit; float outputs of ``Col2Im`` and LpPooling
agree to :data:`ULPS` units in the last place of the largest |value|.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dml_onnx
from dml_onnx import calls
from dml_onnx._kernels._window import sliding_block_counts
from dml_onnx.builders import single_node_model, snake
from dml_onnx.definition import OpDefinition
from dml_onnx.form import op_version
from tests.forms._window_draws import (
    NATIVE_TYPES,
    SETTINGS,
    SPATIAL_AXES,
    TYPES,
    WINDOW_NAME,
    WINDOW_OPERATORS,
    cases,
)

ULPS = 8
"""Float tolerance, in units in the last place of the output's largest finite |value| (sums
in another order than the kernel's; onnxruntime's ``Pow`` by 3 multiplies)."""
NATIVE_OPS = {"LpPooling": "LpPool", "Fold": "Col2Im"}


# ----------------------------------------------------------------------------------------------
# Running and comparing

def _kernel(definition: OpDefinition, inputs: tuple[np.ndarray], model: onnx.ModelProto
            ) -> np.ndarray:
    attributes = definition.node_attributes(model.graph.node[0])
    return calls.run_kernel(definition, list(inputs), attributes, "node", (True,))[0]


def _run(model: onnx.ModelProto, inputs: tuple[np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": inputs[0]})[0]


def assert_agrees(got: np.ndarray, want: np.ndarray, *, exact: bool) -> float:
    """Raise unless ``got`` equals the kernel's ``want`` (bit for bit when ``exact`` or an
    integer type); returns the float error in ulps of the largest finite |value| (0 for exact
    comparisons)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind != "f" or exact:
        bits = f"u{want.itemsize}" if want.dtype.kind == "f" else want.dtype
        np.testing.assert_array_equal(got.view(bits), want.view(bits))
        return 0.0
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    wide, expected = got[finite].astype(np.float64), want[finite].astype(np.float64)
    info = np.finfo(want.dtype)
    scale = max(float(np.max(np.abs(expected), initial=0.0)), float(info.tiny)) * float(info.eps)
    error = float(np.max(np.abs(wide - expected), initial=0.0)) / scale
    assert error <= ULPS, f"{error:.2f} ulps"
    return error


def expected_native(definition: OpDefinition, dtype: np.dtype, attributes: dict, opset: int,
                    native: bool) -> str | None:
    """The native op the rules of the forms choose, or ``None``."""
    op = NATIVE_OPS.get(definition.name)
    if op is None or not native or dtype not in NATIVE_TYPES:
        return None
    window = attributes[WINDOW_NAME[definition.name]]
    k = len(window)
    dilations = attributes.get("dilations", [1] * k)
    if op == "LpPool":
        start, end = (attributes.get(side, [0] * k) for side in ("start_padding", "end_padding"))
        fits = all(a < w and b < w for w, a, b in zip(window, start, end))
        return op if fits and (opset >= 18 or max(dilations) == 1) else None
    fits = min(dilations) >= 1 and (k == 2 or (k > 2 and max(dilations) == 1))
    return op if fits and opset >= 18 and min(attributes["output_size"]) >= 1 else None


def check_lowered(definition: OpDefinition, inputs: tuple[np.ndarray], attributes: dict,
                  opset: int, native: bool, symbolic: bool) -> float:
    model = single_node_model(definition, inputs, attributes, opset=opset, symbolic=symbolic)
    lowered = dml_onnx.lower_model(model, native=native)
    onnx.checker.check_model(lowered, full_check=True)
    assert all(n.domain in ("", "ai.onnx") for n in lowered.graph.node)
    used = {n.op_type for n in lowered.graph.node} & {"LpPool", "Col2Im"}
    op = expected_native(definition, inputs[0].dtype, attributes, opset, native)
    assert used == ({op} if op else set())
    if op == "LpPool":  # LpPool-11 below opset 18 has no dilations attribute
        (pool,) = [n for n in lowered.graph.node if n.op_type == "LpPool"]
        has_dilations = any(a.name == "dilations" for a in pool.attribute)
        assert has_dilations == (op_version("LpPool", opset) >= 18)
    return run_and_compare(definition, lowered, inputs, _kernel(definition, inputs, model),
                           native_op=op)


def run_and_compare(definition: OpDefinition, model: onnx.ModelProto, inputs: tuple[np.ndarray],
                    want: np.ndarray, *, native_op: str | None) -> float:
    """Run ``model`` in onnxruntime and compare with the kernel's ``want`` (the error in ulps);
    an input that onnxruntime's native op refuses must fail (empty channel or spatial axes).
    Unfold and Fold without ``Col2Im`` are exact."""
    if native_op and 0 in inputs[0].shape[1:]:
        with pytest.raises(Exception, match="Only N can be zero|positive multiple"):
            _run(model, inputs)
        return 0.0
    return assert_agrees(_run(model, inputs), want,
                         exact=definition.name in ("Unfold", "Fold") and native_op is None)


# ----------------------------------------------------------------------------------------------
# Tests

@pytest.mark.parametrize("definition", WINDOW_OPERATORS, ids=lambda d: d.name)
def test_lowered_forms_equal_the_kernel(definition):
    @SETTINGS
    @given(case=cases(definition), native=st.booleans(), symbolic=st.booleans())
    def check(case, native, symbolic):
        inputs, attributes, opset = case
        check_lowered(definition, inputs, attributes, opset, native, symbolic)
    check()


@pytest.mark.parametrize("definition", WINDOW_OPERATORS, ids=lambda d: d.name)
def test_model_local_function_runs_in_plain_onnxruntime(definition):
    @settings(SETTINGS, max_examples=30)
    @given(case=cases(definition))
    def check(case):
        inputs, attributes, opset = case
        model = single_node_model(definition, inputs, attributes, opset=opset, symbolic=True)
        functions = dml_onnx.with_functions(model)
        assert [f.name for f in functions.functions] == [definition.name]
        run_and_compare(definition, functions, inputs, _kernel(definition, inputs, model),
                        native_op=expected_native(definition, inputs[0].dtype, attributes,
                                                  opset, True))
    check()


@pytest.mark.parametrize("k", [3, 4, 5, 6])
@pytest.mark.parametrize("dilated", [False, True])
def test_fold_takes_col2im_in_n_d_only_without_dilations(k, dilated):
    """onnxruntime's Col2Im is right for k >= 3 without dilations and wrong with them."""
    rng = np.random.default_rng(k)
    attributes = {"window_sizes": [2] * k, "strides": [1, 2] * (k // 2) + [1] * (k % 2),
                  "dilations": [2] + [1] * (k - 1) if dilated else [1] * k,
                  "start_padding": [1] + [0] * (k - 1), "end_padding": [0] * (k - 1) + [1],
                  "output_size": [3] * k}
    blocks = sliding_block_counts("Fold", "node", [3] * k, *(
        attributes[name] for name in ("window_sizes", "strides", "dilations", "start_padding",
                                      "end_padding")))
    x = rng.standard_normal((1, 2 ** k, math.prod(blocks))).astype(np.float32)
    check_lowered(dml_onnx.OPERATORS_BY_NAME["Fold"], (x,), attributes, 18, True, True)


TABLE = [(d, e) for d in WINDOW_OPERATORS for e in d.examples() if not e.error]


@pytest.mark.parametrize(("definition", "example"), TABLE,
                         ids=[f"{snake(d.name)}_{e.name}" for d, e in TABLE])
def test_case_table_lowers_exactly(definition, example):
    for native in (True, False):
        check_lowered(definition, example.inputs, example.attributes, 18, native, False)


def test_case_tables_cover_types_edges_and_the_most_axes():
    for definition in WINDOW_OPERATORS:
        examples = [e for e in definition.examples() if not e.error]
        assert {e.inputs[0].dtype for e in examples} == set(TYPES[definition.name])
        window = WINDOW_NAME[definition.name]
        assert max(len(e.attributes[window]) for e in examples) == SPATIAL_AXES[definition.name]
        assert all(e.inputs[0].size <= 1000 for e in examples)
