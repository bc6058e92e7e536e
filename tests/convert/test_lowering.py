"""Lowering dml_onnx nodes into standard ones, model-local functions, the CLI commands behind
conversion, and the names conversion generates, on multi-node models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import dml_onnx
from dml_onnx import graphs
from dml_onnx.raising import raise_model
from tests._support.native import unraised_roi_aligns
from tests.convert import _models as models

ROOT = Path(__file__).resolve().parents[2]


def _dml_model() -> onnx.ModelProto:
    """Conv -> RoiAlign1 -> LpPooling, Conv -> RoiPooling, Unfold -> Fold: a dml_onnx model."""
    raised = raise_model(models.standard_model(), functions=False).model
    unfold = dml_onnx.unfold("image", "patches", window_sizes=[3, 3], strides=[2, 2],
                             start_padding=[1, 0], name="unfold")
    fold = dml_onnx.fold("patches", "refolded", window_sizes=[3, 3], strides=[2, 2],
                         start_padding=[1, 0], output_size=[12, 12], name="fold")
    raised.graph.node.extend([unfold, fold])
    raised.graph.output.append(models.value_info("refolded", TensorProto.FLOAT, [2, 3, 12, 12]))
    return raised


@pytest.mark.parametrize("native", [True, False])
def test_lower_gives_standard_ops_with_the_same_outputs(native):
    model = _dml_model()
    want = dml_onnx.InferenceSession(model).run(None, models.feeds_for(model))
    lowered = dml_onnx.lower_model(model, native=native)
    assert all(n.domain in ("", "ai.onnx") for n in lowered.graph.node)
    assert [o.domain for o in lowered.opset_import] == [""]
    assert lowered.opset_import[0].version == model.opset_import[0].version
    onnx.checker.check_model(lowered, full_check=True)
    names = [o for n in lowered.graph.node for o in n.output]
    assert len(names) == len(set(names))
    natives = {"LpPool", "MaxRoiPool", "Col2Im"} & set(models.op_types(lowered))
    assert natives == ({"LpPool", "MaxRoiPool", "Col2Im"} if native else set())
    assert bool(unraised_roi_aligns(lowered)) == native
    models.assert_same(models.plain_outputs(lowered), want)


def test_raising_a_lowered_model_gives_back_the_native_nodes():
    model = _dml_model()
    again = raise_model(dml_onnx.lower_model(model), functions=False).model
    # Unfold has no native op: its decomposition stays standard
    assert [t for t in models.op_types(again) if t in dml_onnx.OPERATORS_BY_NAME] == [
        "RoiAlign1", "LpPooling", "RoiPooling", "Fold", "Fold"]


def test_lowering_needs_known_types_and_a_recent_opset():
    model = _dml_model()
    old = onnx.ModelProto()
    old.CopyFrom(model)
    old.opset_import[0].version = 13
    with pytest.raises(dml_onnx.NotEquivalent, match="default opset >= 16, the model imports 13"):
        dml_onnx.lower_model(old)
    untyped = onnx.ModelProto()
    untyped.CopyFrom(model)
    untyped.graph.input[0].type.tensor_type.elem_type = 0
    with pytest.raises(dml_onnx.NotEquivalent, match="element type of input 'features' is unknown"):
        dml_onnx.lower_model(untyped)


# ----------------------------------------------------------------------------- functions
def test_functions_make_a_dml_onnx_model_portable():
    model = dml_onnx.with_functions(_dml_model())
    overloads = [n.overload for n in model.graph.node if n.domain == dml_onnx.DOMAIN]
    assert all(overloads)
    # the two Fold nodes differ in their attributes: two functions; every node has its own
    assert sorted((f.name, f.overload) for f in model.functions) == sorted(
        (n.op_type, n.overload) for n in model.graph.node if n.domain == dml_onnx.DOMAIN)
    onnx.checker.check_model(model, full_check=True)
    want = dml_onnx.InferenceSession(model).run(None, models.feeds_for(model))
    models.assert_same(models.plain_outputs(model), want)  # plain onnxruntime inlines the functions
    assert dml_onnx.with_functions(model).SerializeToString(deterministic=True) == \
        model.SerializeToString(deterministic=True)


def test_nodes_with_equal_forms_share_one_function():
    model = _dml_model()
    twin = onnx.NodeProto()
    twin.CopyFrom(next(n for n in model.graph.node if n.op_type == "Unfold"))
    twin.name, twin.output[0] = "unfold_twin", "patches_twin"
    model.graph.node.append(twin)
    model.graph.output.append(models.value_info("patches_twin", TensorProto.FLOAT, [2, 27, 30]))
    with_functions = dml_onnx.with_functions(model)
    assert sum(f.name == "Unfold" for f in with_functions.functions) == 1
    outputs = models.plain_outputs(with_functions)
    twin = dml_onnx.InferenceSession(model).run(["patches_twin"], models.feeds_for(model))[0]
    np.testing.assert_array_equal(outputs[-1], twin)


# ----------------------------------------------------------------------------- CLI

def test_cli_raise_then_lower(tmp_path, cli):
    source, raised, lowered = (tmp_path / f"{n}.onnx" for n in ("source", "raised", "lowered"))
    onnx.save(models.standard_model(roi_align={"mode": "max"}), source)
    result = cli("raise", str(source), str(raised))
    assert result.returncode == 0, result.stderr
    assert "raised lp" in result.stdout and "kept align: mode 'max'" in result.stdout
    assert "3 raised, 1 kept" in result.stdout
    result = cli("lower", str(raised), str(lowered), "--decompose")
    assert result.returncode == 0, result.stderr
    model = onnx.load(lowered)
    assert not {"LpPool", "MaxRoiPool", "Col2Im"} & set(models.op_types(model))
    models.assert_same(models.plain_outputs(model), models.plain_outputs(onnx.load(source)))


def test_cli_check_of_a_standard_model_lists_what_raise_would_convert(tmp_path, cli):
    source = tmp_path / "standard.onnx"
    onnx.save(models.standard_model(roi_align={"mode": "max"}), source)
    result = cli("check", str(source))
    assert result.returncode == 0, result.stderr
    assert "0 problem(s)" in result.stdout
    assert "has no dml_onnx nodes; dml-onnx raise would convert 3 and keep 1" in result.stdout
    assert "would raise col2im" in result.stdout
    assert "would keep align: mode 'max'" in result.stdout
    onnx.save(_dml_model(), source)  # a dml_onnx model: nothing about raising
    result = cli("check", str(source))
    assert result.returncode == 0 and "raise" not in result.stdout


def test_cli_reports_a_model_it_cannot_convert(tmp_path, cli):
    source = tmp_path / "old.onnx"
    model = _dml_model()
    model.opset_import[0].version = 13
    onnx.save(model, source)
    result = cli("lower", str(source), str(tmp_path / "out.onnx"))
    assert result.returncode == 1
    assert "dml-onnx lower: the standard forms need the default opset >= 16" in result.stderr


def test_generated_names_are_new_in_every_scope():
    """A branch of an If that defines a value named like one lowering or raising generates:
    the generated names avoid it (both results pass onnx's full check, whose single static
    assignment spans the scopes, and run in onnxruntime)."""
    from onnx import TensorProto

    from dml_onnx.raising import raise_model

    def model_with(branch_value: str) -> onnx.ModelProto:
        unfold = dml_onnx.unfold("X", "Y", window_sizes=[2, 2], start_padding=[1, 1],
                                 end_padding=[1, 1], name="unfold")
        branch = helper.make_graph(
            [helper.make_node("Identity", ["X"], [branch_value]),
             helper.make_node("Neg", [branch_value], ["branch_out"])], "then", [],
            [helper.make_tensor_value_info("branch_out", TensorProto.FLOAT, [1, 2, 4, 4])])
        choose = helper.make_node("If", ["flag"], ["Z"], then_branch=branch, else_branch=branch)
        return dml_onnx.make_model(
            [unfold, choose],
            [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 2, 4, 4]),
             helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 8, 25]),
             helper.make_tensor_value_info("Z", TensorProto.FLOAT, [1, 2, 4, 4])])

    plain = dml_onnx.lower_model(model_with("unrelated"))
    generated = [o for n in plain.graph.node if n.op_type != "If" for o in n.output
                 if o.startswith("_dml_onnx")]
    assert generated
    model = model_with(generated[0])
    feeds = {"X": np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4),
             "flag": np.array(True)}
    want = dml_onnx.InferenceSession(model).run(None, feeds)
    lowered = dml_onnx.lower_model(model)
    onnx.checker.check_model(lowered, full_check=True)
    session = ort.InferenceSession(lowered.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for got, value in zip(session.run(None, feeds), want, strict=True):
        np.testing.assert_array_equal(got, value)
    # raising the lowered model again: its generated names avoid the branch's too
    branch_names = {o for n in lowered.graph.node if n.op_type == "If"
                    for a in n.attribute for b in [a.g] for m in b.node for o in m.output}
    raised = raise_model(lowered).model
    dml_onnx.register_schemas()
    onnx.checker.check_model(raised, full_check=True)
    top = {o for n in raised.graph.node for o in n.output}
    assert not top & branch_names


def test_model_functions_take_a_path_bytes_or_a_model_proto(tmp_path):
    """lower_model, raise_model (exported beside it, with its frozen report), with_functions
    and to_runtime_model read a model however it is given."""
    import dataclasses

    model = _dml_model()
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    for call in (dml_onnx.lower_model, dml_onnx.with_functions, dml_onnx.to_runtime_model):
        want = call(model).SerializeToString(deterministic=True)
        for source in (path, str(path), path.read_bytes()):
            assert call(source).SerializeToString(deterministic=True) == want, call
    lowered = dml_onnx.lower_model(model)
    onnx.save(lowered, path)
    raised = dml_onnx.raise_model(path)
    assert isinstance(raised, dml_onnx.Raised) and raised.raised
    assert raised == dml_onnx.raise_model(lowered.SerializeToString())
    with pytest.raises(dataclasses.FrozenInstanceError):
        raised.model = lowered


_NAME_PARTS = ("_dml_onnx", "_", "x", "é")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_NAME_PARTS), max_size=4).map("".join),
                min_size=6, max_size=6))
def test_unused_prefix_starts_no_name_at_any_depth(names):
    """Names at every place a graph holds one (a node, its inputs and outputs, a value info,
    a large initializer of the main graph, a subgraph's values and initializers): the prefix
    starts none of them, and it is ``base`` lengthened by underscores alone (not always the
    shortest: the base's text inside another name lengthens it too)."""
    node, value, initializer, inner_value, inner_initializer, inner_node = names
    branch = helper.make_graph(
        [helper.make_node("Identity", [inner_initializer], [inner_value], name=inner_node)],
        "branch", [], [helper.make_tensor_value_info(inner_value, TensorProto.FLOAT, [1])],
        [helper.make_tensor(inner_initializer, TensorProto.FLOAT, [1], [1.0])])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], [value], name=node, then_branch=branch,
                          else_branch=branch)],
        "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info(value, TensorProto.FLOAT, [1])],
        [onnx.numpy_helper.from_array(np.zeros(5000, np.float32), initializer)])
    prefix = graphs.unused_prefix(graph, "_dml_onnx")
    assert prefix.rstrip("_") == "_dml_onnx".rstrip("_")
    every = [*names, "c", "g"]
    assert not any(name.startswith(prefix) for name in every)
