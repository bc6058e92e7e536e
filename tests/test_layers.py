"""Every layer over every operator example of the table: schema, shape inference, onnxruntime
binding, reference evaluator, builders. Numeric oracles per operator are in test_<op>.py."""

from __future__ import annotations

import inspect
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
from dml_onnx.builders import single_node_model, snake
from dml_onnx.conformance import CONFORMANCE_OPSETS, example_case
from dml_onnx.runtime import RUNTIME_DOMAIN
from tests._support.native import assert_matches_reference

EXAMPLES = [(d, e) for d in dml_onnx.OPERATORS for e in d.examples() if not e.error]
ERROR_EXAMPLES = [(d, e) for d in dml_onnx.OPERATORS for e in d.examples() if e.error]


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


@pytest.fixture(scope="module", autouse=True)
def schemas():
    dml_onnx.register_schemas()


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


@pytest.mark.parametrize("definition", dml_onnx.OPERATORS, ids=lambda d: d.name)
def test_kernel_signature_matches_the_definition(definition):
    parameters = definition.kernel.prepare.attributes  # the keywords prepare takes but node
    options = list(definition.kernel_options([True] * len(definition.outputs)))
    declared = {*definition.attribute_names, *options}
    assert set(parameters) >= declared
    # beyond the definition only options with a default, which the graph never sets (the
    # exact ROI gradient of RoiAlignGrad, for autograd)
    extras = set(parameters) - declared
    assert extras <= {"exact_roi_gradient"}
    assert all(parameters[n].default is False for n in extras)
    call = inspect.signature(definition.compute).parameters
    positional = [n for n, p in call.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == [p.name for p in definition.inputs]
    assert call["node"].kind is inspect.Parameter.KEYWORD_ONLY
    assert [p.kind for p in call.values()][-1] is inspect.Parameter.VAR_KEYWORD
    for attribute in definition.attributes:  # a kernel default must be the spec default
        default = parameters[attribute.name].default
        if default is not inspect.Parameter.empty:
            wanted = attribute.kernel_default
            assert (list(default) if attribute.type == "ints" else default) == wanted


@pytest.mark.parametrize("definition", dml_onnx.OPERATORS, ids=lambda d: d.name)
def test_builder_signature_matches_the_definition(definition):
    builder = getattr(dml_onnx, snake(definition.name))
    parameters = inspect.signature(builder).parameters
    keyword_only = {n for n, p in parameters.items() if p.kind is p.KEYWORD_ONLY}
    assert keyword_only == {*definition.attribute_names, "name"}
    for attribute in definition.attributes:
        default = parameters[attribute.name].default
        assert default is (inspect.Parameter.empty if attribute.required else None)


@pytest.mark.parametrize("definition", dml_onnx.OPERATORS, ids=lambda d: d.name)
def test_checker_rejects_wrong_attributes(definition):
    example = next(e for e in definition.examples() if not e.error)
    model = single_node_model(definition, example.inputs, example.attributes, example.outputs)
    node = model.graph.node[0]
    bad_models = []

    wrong_type = onnx.ModelProto()
    wrong_type.CopyFrom(model)
    attribute = wrong_type.graph.node[0].attribute[0]
    attribute.CopyFrom(helper.make_attribute(
        attribute.name, [1] if attribute.type == onnx.AttributeProto.STRING else "text"))
    unknown = onnx.ModelProto()
    unknown.CopyFrom(model)
    unknown.graph.node[0].attribute.append(helper.make_attribute("no_such_attribute", 1))
    bad_models += [wrong_type, unknown]
    for required in (a for a in definition.attributes if a.required):
        missing = onnx.ModelProto()
        missing.CopyFrom(model)
        kept = [a for a in node.attribute if a.name != required.name]
        del missing.graph.node[0].attribute[:]
        missing.graph.node[0].attribute.extend(kept)
        bad_models.append(missing)
    for bad in bad_models:
        with pytest.raises((onnx.checker.ValidationError, onnx.shape_inference.InferenceError)):
            onnx.checker.check_model(bad, full_check=True)
        with pytest.raises(ValueError, match=definition.name):
            dml_onnx.InferenceSession(bad)


def test_register_schemas_is_idempotent_and_reversible():
    dml_onnx.register_schemas()
    dml_onnx.register_schemas()
    for definition in dml_onnx.OPERATORS:
        assert onnx.defs.has(definition.name, 1, dml_onnx.DOMAIN)
    dml_onnx.deregister_schemas()
    assert not any(onnx.defs.has(d.name, 1, dml_onnx.DOMAIN) for d in dml_onnx.OPERATORS)
    dml_onnx.register_schemas()
    assert all(onnx.defs.has(d.name, 1, dml_onnx.DOMAIN) for d in dml_onnx.OPERATORS)


def test_make_model_pins_ir_version_and_opsets():
    definition, example = EXAMPLES[0]
    model = example_case(definition, example).model
    assert model.ir_version == dml_onnx.IR_VERSION <= 13
    imports = {o.domain: o.version for o in model.opset_import}
    assert imports.keys() == {"", dml_onnx.DOMAIN}
    assert imports[""] in CONFORMANCE_OPSETS
    assert imports[dml_onnx.DOMAIN] == dml_onnx.OPSET_VERSION


def test_session_takes_path_bytes_and_modelproto(tmp_path):
    definition, example = EXAMPLES[0]
    case = example_case(definition, example)
    path = tmp_path / "model.onnx"
    onnx.save(case.model, path)
    want = dml_onnx.ReferenceEvaluator(case.model).run(None, case.feeds)
    for source in (case.model, case.model.SerializeToString(), str(path), path):
        session = dml_onnx.InferenceSession(source, providers=["CPUExecutionProvider"])
        assert [i.name for i in session.get_inputs()] == list(case.feeds)
        assert_matches_reference(session.run(None, case.feeds), want)
    options = ort.SessionOptions()
    for _ in range(2):  # the same options object may serve several sessions
        session = dml_onnx.InferenceSession(case.model, options)
        assert_matches_reference(session.run(None, case.feeds), want)


def test_other_pyops_still_run_through_the_extension_hook():
    from onnxruntime_extensions import PyCustomOpDef, onnx_op

    dml_onnx.register_runtime_ops()

    @onnx_op(op_type="test.other::AddOne", inputs=[PyCustomOpDef.dt_float],
             outputs=[PyCustomOpDef.dt_float])
    def add_one(x):
        return x + 1

    node = helper.make_node("AddOne", ["x"], ["y"], domain="test.other")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [2])],
                              [helper.make_tensor_value_info("y", 1, [2])])
    model = helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 18), helper.make_opsetid("test.other", 1)])
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(None, {"x": np.array([1, 2], np.float32)})[0],
                                  [2, 3])


BAD_ATTRIBUTES = {
    "RoiPooling": ("pooled_size", [0, 2], "pooled_size[0] 0 is below 1"),
    "RoiAlign1": ("minimum_samples_per_output", 0, "minimum_samples_per_output 0 is below 1"),
    "RoiAlignGrad": ("interpolation_mode", "cubic", "interpolation_mode 'cubic' is not one of"),
    "LpPooling": ("p", 0, "p 0 is below 1"),
    "Unfold": ("window_sizes", [3, 0], "window_sizes[1] 0 is below 1"),
    "Fold": ("strides", [1], "strides [1] must have 2 values, not 1"),
}


@pytest.mark.parametrize("definition", dml_onnx.OPERATORS, ids=lambda d: d.name)
def test_builder_rejects_bad_attribute_values_with_a_clear_message(definition):
    builder = getattr(dml_onnx, snake(definition.name))
    example = next(e for e in definition.examples() if not e.error)
    names = [p.name for p in definition.inputs] + [p.name for p in definition.outputs]
    attribute, value, message = BAD_ATTRIBUTES[definition.name]
    with pytest.raises(ValueError) as info:
        builder(*names, name="n1", **{**example.attributes, attribute: value})
    assert str(info.value) == f"{definition.name} 'n1': {message}" or \
        str(info.value).startswith(f"{definition.name} 'n1': {message}")


def test_an_unexpected_failure_inside_a_kernel_becomes_a_kernel_error(monkeypatch):
    definition, example = EXAMPLES[0]
    case = example_case(definition, example)
    session = dml_onnx.InferenceSession(case.model)

    def broken(*args, **kwargs):
        raise MemoryError("no room")

    monkeypatch.setattr(dml_onnx.runtime.hook, "_run_call", broken)
    with pytest.raises(dml_onnx.KernelError) as info:
        session.run(None, case.feeds)
    assert str(info.value) == (f"{definition.name} '{case.model.graph.node[0].name}': kernel "
                               "'MemoryError' raised: no room")
    assert isinstance(info.value.__cause__, MemoryError)
    monkeypatch.undo()
    for got, want in zip(session.run(None, case.feeds), case.expected.values()):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("X, dX, drois, attributes, message", [
    ("X", None, None, {}, "requested outputs [] must include dX or drois"),
    (None, None, "drois", {"input_shape": [1, 1, 4, 4]}, "X None is required when drois"),
    (None, "dX", None, {"input_shape": [1, 1, 4, 4], "reduction_function": "max"},
     "X None is required when drois is requested or reduction_function is 'max'"),
    (None, "dX", None, {}, "input_shape [] is required when X is omitted"),
])
def test_roi_align_grad_optional_inputs_and_outputs_are_checked_everywhere(X, dX, drois,
                                                                          attributes, message):
    with pytest.raises(ValueError, match=re.escape(f"RoiAlignGrad 'g': {message}")):
        dml_onnx.roi_align_grad(X, "dY", "rois", "batch_indices", dX, drois, name="g",
                                **attributes)
    # the same node written by hand reaches the checker and the session
    node = helper.make_node("RoiAlignGrad", [X or "", "dY", "rois", "batch_indices"],
                            [dX or "", drois or ""], name="g", domain=dml_onnx.DOMAIN,
                            **attributes)
    float4 = [helper.make_tensor_value_info(n, 1, [None] * 4) for n in ("X", "dY")]
    model = dml_onnx.make_model(
        [node], [*float4, helper.make_tensor_value_info("rois", 1, [None, 4]),
                 helper.make_tensor_value_info("batch_indices", 7, [None])],
        [helper.make_tensor_value_info(n, 1, None) for n in (dX, drois) if n])
    with pytest.raises((ValueError, onnx.shape_inference.InferenceError), match="RoiAlignGrad"):
        onnx.shape_inference.infer_shapes(model, strict_mode=True)
    with pytest.raises(ValueError, match=re.escape(message)):
        dml_onnx.InferenceSession(model)


def test_reference_evaluator_takes_onnx_arguments_by_position():
    """``new_ops`` given by position (onnx's fifth parameter) joins the domain's operators; it
    once reached onnx's evaluator twice ("got multiple values for argument 'new_ops'")."""
    from onnx.reference.op_run import OpRun

    class Twice(OpRun):
        op_domain = "test.twice"

        def _run(self, x):
            return (2 * x,)

    graph = helper.make_graph(
        [helper.make_node("Twice", ["x"], ["t"], domain="test.twice"),
         helper.make_node("Relu", ["t"], ["y"])], "twice",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("test.twice", 1)])
    x = np.array([-1.0, 3.0], np.float32)
    for evaluator in (dml_onnx.ReferenceEvaluator(model, None, None, 0, [Twice]),
                      dml_onnx.ReferenceEvaluator(model, new_ops=[Twice])):
        np.testing.assert_array_equal(evaluator.run(None, {"x": x})[0], [0.0, 6.0])
