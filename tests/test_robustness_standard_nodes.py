"""Failure behaviour of models whose standard (non-dml_onnx) nodes contradict their schema or
their file's name: raising, lowering and checking each end in one line naming the node (on
the command line and in Python), a binary model named .json reads as onnxruntime reads it,
and a Col2Im that onnxruntime refuses stays as it is."""

from __future__ import annotations

import subprocess
import sys

import onnx
import pytest

import dml_onnx
from dml_onnx import cli
from tests._support import ROOT


def _standard_model(nodes, inputs, initializers=()) -> onnx.ModelProto:
    from onnx import TensorProto, helper
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(
        "Y", TensorProto.FLOAT, None)], initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def _malformed() -> dict[str, tuple[onnx.ModelProto, str]]:
    """Models whose one standard node contradicts its schema (onnxruntime refuses each), and
    what the one-line message says."""
    from onnx import TensorProto, helper
    X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1, 8, 8])
    R = helper.make_tensor_value_info("R", TensorProto.FLOAT, [2, 5])
    node = helper.make_node
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    return {
        "AveragePool without kernel_shape": (_standard_model(
            [node("AveragePool", ["X"], ["Y"], name="pool")], [X]),
            "AveragePool 'pool': attribute 'kernel_shape' is required by AveragePool-"),
        "an LpPool chain without kernel_shape": (_standard_model(
            [node("Pow", ["X", "two"], ["p"]), node("AveragePool", ["p"], ["a"], name="avg"),
             node("Pow", ["a", "two"], ["Y"])], [X], [two]),
            "AveragePool 'avg': attribute 'kernel_shape' is required"),
        "Pow with one input": (_standard_model([node("Pow", ["X"], ["Y"], name="pow")], [X]),
                               "Pow 'pow': 1 inputs where Pow-15 takes 2"),
        "RoiAlign with two inputs": (_standard_model(
            [node("RoiAlign", ["X", "R"], ["Y"], name="align")], [X, R]),
            "RoiAlign 'align': 2 inputs where RoiAlign-16 takes 3"),
        "MaxRoiPool without inputs": (_standard_model(
            [node("MaxRoiPool", [], ["Y"], name="pool", pooled_shape=[2, 2])], [X]),
            "MaxRoiPool 'pool': 0 inputs where MaxRoiPool-1 takes 2"),
        "an attribute of another type": (_standard_model(
            [node("MaxRoiPool", ["X", "R"], ["Y"], name="pool", pooled_shape=2)], [X, R]),
            "MaxRoiPool 'pool': attribute 'pooled_shape' is INT where MaxRoiPool-1 takes INTS"),
    }


@pytest.mark.parametrize("name", list(_malformed()))
def test_malformed_standard_nodes_end_raise_lower_and_check_in_one_line(name, tmp_path):
    model, message = _malformed()[name]
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    for command in (["raise", str(path), str(tmp_path / "out.onnx")],
                    ["lower", str(path), str(tmp_path / "out.onnx")], ["check", str(path)]):
        done = subprocess.run([sys.executable, "-m", "dml_onnx", *command], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, (command, done.stderr)
        assert "Traceback" not in done.stderr and message in done.stdout + done.stderr, \
            (command, done.stdout, done.stderr)
        assert not (tmp_path / "out.onnx").exists()
    from dml_onnx.raising import raise_model
    for call in (raise_model, dml_onnx.lower_model):
        with pytest.raises(ValueError, match=message.split(": ", 1)[1].split("'")[0]):
            call(model)


def test_a_binary_model_named_json_reads_as_onnxruntime_reads_it(tmp_path):
    from onnx import TensorProto, helper
    X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1, 8, 8])
    model = _standard_model([helper.make_node("LpPool", ["X"], ["Y"], kernel_shape=[2, 2])],
                            [X])
    onnx.save(model, tmp_path / "model.json", format="protobuf")
    assert dml_onnx.model_problems(tmp_path / "model.json") == []
    assert cli.main(["raise", str(tmp_path / "model.json"), str(tmp_path / "raised.onnx")]) == 0
    assert [n.op_type for n in onnx.load(tmp_path / "raised.onnx").graph.node] == ["LpPooling"]
    (tmp_path / "broken.json").write_bytes(b'{"ir_version": ')
    (problem,) = dml_onnx.model_problems(tmp_path / "broken.json")
    assert "broken.json is not an ONNX model (neither the format its name says" in problem


def test_a_col2im_with_float_sizes_stays_as_onnxruntime_refuses_it():
    from onnx import TensorProto, helper
    model = _standard_model(
        [helper.make_node("Col2Im", ["C", "size", "block"], ["Y"], name="col2im")],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, [1, 9, 16])],
        [helper.make_tensor("size", TensorProto.FLOAT, [2], [6.0, 6.0]),
         helper.make_tensor("block", TensorProto.INT64, [2], [3, 3])])
    from dml_onnx.raising import raise_model
    raised = raise_model(model)
    assert raised.raised == [] and "image_shape is float32" in raised.kept["col2im"]
    assert [n.op_type for n in raised.model.graph.node] == ["Col2Im"]
