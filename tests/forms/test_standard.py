"""Standard-op forms across the operator table: every example of every operator, lowered with
native ops preferred and with decompositions only, at the opsets the forms support, runs in
plain onnxruntime and agrees with the kernels; plus the emitter the forms use.

Each operator's form is tested in depth (hypothesis over shapes, attributes and types) in
``test_standard_<family>.py``."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

import dml_onnx
from dml_onnx.builders import snake
from dml_onnx.conformance import Tolerance, compare, example_case
from dml_onnx.form import DIRECTML_VERSIONS, NATIVE_VERSIONS, StandardNode, op_version

EXAMPLES = [(d, e) for d in dml_onnx.OPERATORS for e in d.examples() if not e.error]


@pytest.mark.parametrize(("opset", "native"), [(16, False), (18, True), (22, True)])
@pytest.mark.parametrize(("definition", "example"), EXAMPLES,
                         ids=[f"{snake(d.name)}_{e.name}" for d, e in EXAMPLES])
def test_every_example_lowers_to_standard_ops_that_agree(definition, example, opset, native):
    case = example_case(definition, example)
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    del model.functions[:]
    model.opset_import[0].version = opset
    lowered = dml_onnx.lower_model(model, native=native)
    onnx.checker.check_model(lowered, full_check=True)
    used = {n.op_type for n in lowered.graph.node}
    if not native:
        assert not used & set(NATIVE_VERSIONS)
    for op in used & set(NATIVE_VERSIONS):
        assert op_version(op, opset) in NATIVE_VERSIONS[op]
    session = ort.InferenceSession(lowered.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = list(case.expected)
    outcome = compare(case, dict(zip(names, session.run(names, case.feeds))))
    assert outcome.passed, outcome.problems


def test_conformance_cases_use_the_versions_directml_registers():
    """Where a case's expanded twin has a native op, its opset resolves it to the version the
    DirectML execution provider registers."""
    seen = set()
    for definition, example in EXAMPLES:
        case = example_case(definition, example)
        opset = case.model.opset_import[0].version
        lowered = dml_onnx.lower_model(case.model)
        for op in {n.op_type for n in lowered.graph.node} & set(DIRECTML_VERSIONS):
            assert op_version(op, opset) == DIRECTML_VERSIONS[op], (case.name, op, opset)
            seen.add(op)
    assert seen == set(DIRECTML_VERSIONS)


def _node(opset: int) -> StandardNode:
    return StandardNode("n", ["x"], ["y"], {}, [TensorProto.FLOAT], opset, "p")


@pytest.mark.parametrize("opset", [16, 17, 18, 22])
def test_emitter_reductions_follow_the_opset(opset):
    node = _node(opset)
    node.op("Identity", node.reduce("ReduceMax", node.reduce("ReduceSum", "x", [1]), [2],
                                    keepdims=0), outputs=["y"])
    model = onnx.helper.make_model(
        onnx.helper.make_graph(
            node.nodes, "g", [onnx.helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                 [2, 3, 4])],
            [onnx.helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])]),
        ir_version=dml_onnx.IR_VERSION, opset_imports=[onnx.helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (y,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_array_equal(y, x.sum(1, keepdims=True).max(2))
    names = [o for n in node.nodes for o in n.output]
    assert len(names) == len(set(names)) and all(n.startswith("p_") for n in names[:-1])


@pytest.mark.parametrize(("opset", "native", "expected"), [
    (16, True, {"MaxRoiPool": True, "RoiAlign": True, "LpPool": True, "Col2Im": False}),
    (18, True, {"MaxRoiPool": True, "RoiAlign": True, "LpPool": True, "Col2Im": True}),
    (22, True, {"MaxRoiPool": False, "RoiAlign": False, "LpPool": True, "Col2Im": True}),
    (18, False, {"MaxRoiPool": False, "RoiAlign": False, "LpPool": False, "Col2Im": False}),
])
def test_native_ops_only_where_the_opset_has_a_known_version(opset, native, expected):
    node = StandardNode("n", ["x"], ["y"], {}, [TensorProto.FLOAT], opset, "p", native=native)
    assert {op: node.uses_native(op) for op in expected} == expected
    assert node.uses_native("LpPool", minimum_version=18) == (native and opset >= 18)


def test_tolerance_is_zero_for_exact_outputs_and_a_few_ulps_for_floats():
    assert Tolerance.for_outputs([np.arange(4)]) == Tolerance()
    tolerance = Tolerance.for_outputs([np.array([1.0, -8.0, np.inf], np.float32)])
    assert tolerance.relative == pytest.approx(16 * np.finfo(np.float32).eps)
    assert tolerance.absolute == pytest.approx(8 * tolerance.relative)
