"""Every tensor of every standard-op form has at most :data:`~dml_onnx.form.DIRECTML_MAX_RANK`
dimensions, the most a DirectML tensor has (its execution provider refuses a larger one when
it creates the session): every example of every operator, lowered with native ops preferred
and with decompositions only, with static and symbolic input shapes, and drawn Unfold and Fold
geometries up to six spatial axes. Ranks are read after ONNX shape inference, which must know
the rank of every value."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import dml_onnx
from dml_onnx.builders import single_node_model, snake
from dml_onnx.conformance import example_case
from dml_onnx.form import DIRECTML_MAX_RANK
from tests._support.ranks import ranks
from tests.forms._window_draws import SETTINGS, cases

EXAMPLES = [(d, e) for d in dml_onnx.OPERATORS for e in d.examples() if not e.error]


def ranks_by_op(model: onnx.ModelProto) -> list[dict[str, int]]:
    """For ``model`` lowered with native ops preferred and with decompositions only, the
    highest rank of the outputs of each op type (``input`` for the graph's inputs)."""
    forms = []
    for native in (True, False):
        lowered = dml_onnx.lower_model(model, native=native)
        made_by = {o: n.op_type for n in lowered.graph.node for o in n.output}
        highest: dict[str, int] = {}
        for name, rank in ranks(lowered).items():
            op = made_by.get(name, "input")
            highest[op] = max(highest.get(op, 0), rank)
        forms.append(highest)
    return forms


def assert_directml_ranks(model: onnx.ModelProto) -> int:
    """Raise unless every tensor of both forms of ``model`` fits DirectML; returns the
    highest rank seen."""
    forms = ranks_by_op(model)
    for native, highest in zip((True, False), forms):
        too_high = {op: rank for op, rank in highest.items() if rank > DIRECTML_MAX_RANK}
        assert not too_high, f"native={native}: ranks above {DIRECTML_MAX_RANK}: {too_high}"
    return max(max(highest.values()) for highest in forms)


@pytest.mark.parametrize(("definition", "example"), EXAMPLES,
                         ids=[f"{snake(d.name)}_{e.name}" for d, e in EXAMPLES])
def test_every_example_lowers_to_tensors_directml_holds(definition, example):
    assert_directml_ranks(example_case(definition, example).model)
    assert_directml_ranks(single_node_model(definition, example.inputs, example.attributes,
                                            example.outputs, symbolic=True))


@pytest.mark.parametrize("name", ["Unfold", "Fold"])
def test_drawn_windows_up_to_six_axes_lower_to_tensors_directml_holds(name):
    """Beyond the data's own rank, the index arithmetic of Unfold's gathers and Fold's
    scatter-add (its ``Constant`` and ``Add`` nodes) stays within rank 2."""
    definition = dml_onnx.OPERATORS_BY_NAME[name]

    @SETTINGS
    @given(case=cases(definition), symbolic=st.booleans())
    def check(case, symbolic):
        inputs, attributes, opset = case
        model = single_node_model(definition, inputs, attributes, opset=opset,
                                  symbolic=symbolic)
        assert_directml_ranks(model)
        for highest in ranks_by_op(model):
            assert max(highest["Constant"], highest.get("Add", 0)) <= 2, highest
    check()


@pytest.mark.parametrize("k", range(1, 7))
@pytest.mark.parametrize("symbolic", [False, True])
def test_unfold_of_k_axes_stays_within_its_input_rank(k, symbolic):
    """The input has rank k + 2 <= 8; the widest tensor of the form is no wider (the per-axis
    gathers, rank 2 + 2k, only while they fit)."""
    x = np.zeros((1, 2, *[3] * k), np.float32)
    model = single_node_model(dml_onnx.OPERATORS_BY_NAME["Unfold"], (x,),
                              {"window_sizes": [2] * k, "start_padding": [1] * k},
                              symbolic=symbolic)
    per_axis = 2 + 2 * k
    assert assert_directml_ranks(model) == (per_axis if per_axis <= DIRECTML_MAX_RANK
                                            else k + 2)
