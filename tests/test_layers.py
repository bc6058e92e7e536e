"""Every layer over every operator example of the table: schema, shape inference, onnxruntime
binding, reference evaluator, and the runtime model's configuration. The public entry points
and the builders', kernels' and checker's contract with the table are in ``test_layers_api``.
Numeric oracles per operator are in test_<op>.py."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnxruntime_extensions import get_library_path

import dml_onnx
from dml_onnx import calls
from dml_onnx.builders import single_node_model
from dml_onnx.conformance import example_case
from dml_onnx.runtime import RUNTIME_DOMAIN
from tests._examples import ERROR_EXAMPLES, EXAMPLES
from tests._support.native import assert_matches_reference

pytestmark = pytest.mark.usefixtures("schemas")


def _id(pair) -> str:
    return f"{pair[0].name}-{pair[1].name}"


def _feeds(definition, example) -> dict[str, np.ndarray]:
    return {p.name: a for p, a in zip(definition.inputs, example.inputs) if a is not None}


def _twin(definition, error_example):
    """The valid example with the error example's attributes and element types."""
    def signature(example):
        return example.attributes, [getattr(a, "dtype", None) for a in example.inputs]
    return next(e for e in definition.examples()
                if not e.error and signature(e) == signature(error_example))


def _kernel_outputs(definition, example, node) -> list[np.ndarray]:
    """The kernel called directly with the node's attributes (floats as float32 values)."""
    outputs = calls.run_kernel(definition, list(example.inputs), definition.node_attributes(node),
                                    "direct", example.outputs)
    return [o for o, wanted in zip(outputs, example.outputs) if wanted]


def test_every_operator_has_examples_and_an_error_example():
    for definition in dml_onnx.OPERATORS:
        examples = definition.examples()
        assert any(not e.error for e in examples), definition.name
        assert any(e.error for e in examples), definition.name


@pytest.mark.parametrize("pair", EXAMPLES, ids=_id)
def test_checker_accepts_and_strict_inference_gives_runtime_shapes(pair):
    definition, example = pair
    case = example_case(definition, example)
    onnx.checker.check_model(case.model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(case.model, strict_mode=True)
    session = dml_onnx.InferenceSession(case.model)
    names = [o.name for o in case.model.graph.output]
    for value, output in zip(inferred.graph.output, session.run(names, case.feeds)):
        tensor = value.type.tensor_type
        assert tensor.elem_type == helper.np_dtype_to_tensor_dtype(output.dtype)
        assert [d.dim_value for d in tensor.shape.dim] == list(output.shape)


@pytest.mark.parametrize("pair", EXAMPLES, ids=_id)
def test_symbolic_dims_infer_and_run(pair):
    definition, example = pair
    model = single_node_model(definition, example.inputs, example.attributes, example.outputs,
                              symbolic=True)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    symbols = {i.name: [d.dim_param for d in i.type.tensor_type.shape.dim]
               for i in model.graph.input}
    outputs = dml_onnx.InferenceSession(model).run(None, _feeds(definition, example))
    for value, output in zip(inferred.graph.output, outputs):
        dims = value.type.tensor_type.shape.dim
        assert len(dims) == output.ndim
        for dim, size in zip(dims, output.shape):
            assert not dim.HasField("dim_value") or dim.dim_value == size
            if dim.dim_param.startswith("unk__"):  # onnx's name for a size it cannot know
                continue
            if dim.dim_param:  # a symbol passed through from an input dim of the same size
                owner, axis = dim.dim_param.rsplit("_", 1)
                assert dim.dim_param in symbols[owner]
                assert _feeds(definition, example)[owner].shape[int(axis)] == size


@pytest.mark.parametrize("pair", EXAMPLES, ids=_id)
def test_sessions_run_the_kernel_exactly_and_agree_with_the_reference(pair):
    definition, example = pair
    case = example_case(definition, example)
    names = list(case.expected)
    from_ort = dml_onnx.InferenceSession(case.model).run(names, case.feeds)
    from_reference = dml_onnx.ReferenceEvaluator(case.model).run(names, case.feeds)
    direct = _kernel_outputs(definition, example, case.model.graph.node[0])
    for a, c in zip(from_ort, direct):
        assert a.dtype == c.dtype
        np.testing.assert_array_equal(a, c)
    assert_matches_reference(from_ort, from_reference)
    for got, want in zip(from_ort, example.expected):
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-6)
    for got, want in zip(from_reference, example.expected):
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-6)


@pytest.mark.parametrize("pair", ERROR_EXAMPLES, ids=_id)
def test_kernel_error_is_raised_and_session_keeps_working(pair):
    definition, example = pair
    model = single_node_model(definition, example.inputs, example.attributes, example.outputs,
                              node_name="bad_node", symbolic=True)
    session = dml_onnx.InferenceSession(model)
    with pytest.raises(dml_onnx.KernelError) as info:
        session.run(None, _feeds(definition, example))
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert message.startswith(f"{definition.name} 'bad_node': ")
    assert example.error in message
    with pytest.raises(dml_onnx.KernelError, match=re.escape(example.error)):
        dml_onnx.ReferenceEvaluator(model).run(None, _feeds(definition, example))
    good = _twin(definition, example)  # the same session then runs valid input
    want = dml_onnx.ReferenceEvaluator(model).run(None, _feeds(definition, good))
    assert_matches_reference(session.run(None, _feeds(definition, good)), want)


@pytest.mark.parametrize("pair", ERROR_EXAMPLES, ids=_id)
def test_plain_onnxruntime_session_fails_cleanly(pair):
    definition, example = pair
    model = single_node_model(definition, example.inputs, example.attributes, example.outputs,
                              symbolic=True)
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    options.log_severity_level = 4
    session = ort.InferenceSession(dml_onnx.to_runtime_model(model).SerializeToString(),
                                   options, providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="fails when the kernel failed"):
        session.run(None, _feeds(definition, example))


@pytest.mark.parametrize("pair", EXAMPLES, ids=_id)
def test_plain_onnxruntime_session_runs_the_runtime_model(pair):
    definition, example = pair
    case = example_case(definition, example)
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    session = ort.InferenceSession(dml_onnx.to_runtime_model(case.model).SerializeToString(),
                                   options, providers=["CPUExecutionProvider"])
    got = session.run(list(case.expected), case.feeds)
    assert_matches_reference(got, list(case.expected.values()))


def _config(runtime: onnx.ModelProto, pyop: onnx.NodeProto) -> dict:
    """The configuration a runtime node reads: its last input, a uint8 Constant of JSON (a
    string attribute would reach onnxruntime-extensions' C++ conversion)."""
    assert not pyop.attribute
    (constant,) = [n for n in runtime.graph.node if n.output == [pyop.input[-1]]]
    return json.loads(numpy_helper.to_array(constant.attribute[0].t).tobytes().decode())


@pytest.mark.parametrize("definition", dml_onnx.OPERATORS, ids=lambda d: d.name)
def test_runtime_model_carries_every_attribute_exactly(definition):
    for example in definition.examples():
        model = single_node_model(definition, example.inputs, example.attributes,
                                  example.outputs, symbolic=True)
        node = model.graph.node[0]
        runtime = dml_onnx.to_runtime_model(model)
        (pyop,) = [n for n in runtime.graph.node if n.domain == RUNTIME_DOMAIN]
        config = _config(runtime, pyop)
        expected = definition.node_attributes(node)
        assert config["attributes"] == expected
        for name, value in expected.items():  # floats: the exact float32 value of the node
            if isinstance(value, float):
                proto = next((a for a in node.attribute if a.name == name), None)
                if proto is not None:
                    assert np.float32(config["attributes"][name]) == np.float32(proto.f)
                    assert config["attributes"][name] == float(np.float32(proto.f))


def test_float_attribute_that_six_digits_would_change_arrives_exactly():
    float_attributes = [a for d in dml_onnx.OPERATORS for a in d.attributes if a.type == "float"]
    third = float(np.float32(1 / 3))
    assert f"{third:.6g}" != repr(third)  # what onnxruntime-extensions would pass
    for attribute in float_attributes:
        owner = next(d for d in dml_onnx.OPERATORS if attribute in d.attributes)
        example = next(e for e in owner.examples() if not e.error)
        model = single_node_model(owner, example.inputs, {**example.attributes,
                                                          attribute.name: third},
                                  example.outputs, symbolic=True)
        runtime = dml_onnx.to_runtime_model(model)
        (pyop,) = [n for n in runtime.graph.node if n.domain == RUNTIME_DOMAIN]
        config = _config(runtime, pyop)
        assert config["attributes"][attribute.name] == third
