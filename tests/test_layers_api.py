"""The layers' contract with the operator table: kernel and builder signatures match each
definition, onnx.checker and the session refuse wrong attributes, the builders name bad
values, RoiAlignGrad's optional inputs and outputs are checked everywhere; and the public
entry points: schema registration, make_model's versions, the session's sources, other
PyOps beside ours, a kernel's unexpected failure, the reference evaluator's arguments."""

from __future__ import annotations

import inspect
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper
from onnxruntime_extensions import get_library_path

import dml_onnx
from dml_onnx.builders import single_node_model, snake
from dml_onnx.conformance import CONFORMANCE_OPSETS, example_case
from tests._examples import EXAMPLES
from tests._support.native import assert_matches_reference

pytestmark = pytest.mark.usefixtures("schemas")


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
    assert imports[dml_onnx.DOMAIN] == dml_onnx.DOMAIN_VERSION


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

    monkeypatch.setattr(dml_onnx.runtime.hook, "_computed", broken)  # one session or split
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
