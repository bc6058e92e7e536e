"""Where onnxruntime's API goes beyond tensors in and out: each case runs on plain onnxruntime
and on ``dml_onnx.InferenceSession``, with and without a ``dml_onnx`` node between standard
nodes (which the session runs split, where split execution applies), and requires the same
results and the same error types."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dml_onnx
from dml_onnx.runtime import hook, segments

POOL = {"window_size": [3, 3], "start_padding": [1, 1], "end_padding": [1, 1]}
X = np.arange(75, dtype=np.float32).reshape(1, 3, 5, 5) / 7


def _value(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


LAYOUTS = ["standard", "between", "at the ends"]
"""Where a chain has its ``dml_onnx`` node: none, between standard nodes (split execution),
reading the graph input (one session, the kernel reads the caller's array)."""


def _chain(layout: str) -> list[onnx.NodeProto]:
    """Nodes from ``X`` to ``C`` with a ``dml_onnx`` node as ``layout`` (:data:`LAYOUTS`)
    says."""
    if layout == "at the ends":
        return [dml_onnx.lp_pooling("X", "C", **POOL)]
    return [helper.make_node("Neg", ["X"], ["A"]),
            dml_onnx.lp_pooling("A", "B", **POOL) if layout == "between" else
            helper.make_node("Relu", ["A"], ["B"]), helper.make_node("Relu", ["B"], ["C"])]


def _sessions(model: onnx.ModelProto, options=None):
    """The plain onnxruntime session (of the model with its nodes' standard forms as
    functions) and ours."""
    plain = ort.InferenceSession(dml_onnx.with_functions(model).SerializeToString(), options,
                                 providers=["CPUExecutionProvider"])
    return plain, dml_onnx.InferenceSession(model, options)


def _same(got, want):
    assert type(got) is type(want)
    if isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("layout", LAYOUTS[:2])
def test_sequence_and_optional_graph_outputs(layout):
    sequence = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT,
                                                                             None))
    optional = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT,
                                                                             None))
    model = dml_onnx.make_model(
        [*_chain(layout), helper.make_node("SequenceConstruct", ["C", "X"], ["S"]),
         helper.make_node("Optional", ["C"], ["O"])],
        [_value("X", shape=[1, 3, 5, 5])],
        [helper.make_value_info("S", sequence), helper.make_value_info("O", optional),
         _value("C")])
    plain, ours = _sessions(model)
    assert ours._split is None  # split execution takes tensors alone
    assert [(o.name, o.type) for o in ours.get_outputs()] == \
        [(o.name, o.type) for o in plain.get_outputs()]
    for names in (None, ["O", "S"]):
        _same(ours.run(names, {"X": X}), plain.run(names, {"X": X}))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_missing_inputs_raise_value_error_naming_them_before_anything_runs(layout, monkeypatch):
    model = dml_onnx.make_model(
        [*_chain(layout), helper.make_node("Neg", ["Y"], ["Z"])],
        [_value("X", shape=[1, 3, 5, 5]), _value("Y", shape=[1])], [_value("C"), _value("Z")])
    plain, ours = _sessions(model)
    assert (ours._split is not None) == (layout == "between")
    monkeypatch.setattr(hook, "run_call", lambda *a: pytest.fail("a kernel ran"))
    monkeypatch.setattr(segments, "run_fetching", lambda *a: pytest.fail("a kernel ran"))
    for feeds in ({}, {"Y": np.ones(1, np.float32)}, {"X": X}):
        with pytest.raises(ValueError) as expected:
            plain.run(None, feeds)
        with pytest.raises(ValueError) as got:
            ours.run(None, feeds)
        assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_string_graph_input_runs_as_in_onnxruntime(layout):
    model = dml_onnx.make_model(
        [*_chain(layout), helper.make_node("Identity", ["T"], ["U"]),
         helper.make_node("Size", ["T"], ["N"])],
        [_value("X", shape=[1, 3, 5, 5]), _value("T", TensorProto.STRING, [None])],
        [_value("C"), _value("U", TensorProto.STRING), _value("N", TensorProto.INT64)])
    plain, ours = _sessions(model)
    for text in (np.array(["a", "bc"]), np.array(["a", "bc"], object), ["a", "bc"]):
        got, want = ours.run(None, {"X": X, "T": text}), plain.run(None, {"X": X, "T": text})
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            (np.testing.assert_array_equal if w.dtype == object else _same)(g, w)


def _external(name: str, dims: list[int]) -> TensorProto:
    """An initializer whose values are external data in ``<name>.bin``, a file never written."""
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims,
                         data_location=TensorProto.EXTERNAL)
    tensor.external_data.add(key="location", value=f"{name}.bin")
    return tensor


def _supplying(how: str, values: dict[str, np.ndarray]) -> ort.SessionOptions:
    """Options that hand ``values`` over as external initializers or as files in memory."""
    options = ort.SessionOptions()
    if how == "initializers":
        options.add_external_initializers(
            list(values), [ort.OrtValue.ortvalue_from_numpy(a) for a in values.values()])
    elif how == "files in memory":
        options.add_external_initializers_from_files_in_memory(
            [f"{name}.bin" for name in values], [a.view(np.uint8) for a in values.values()],
            [a.nbytes for a in values.values()])
    return options


def _from_options_agree(model, values, how, source, tmp_path):
    """Plain onnxruntime and our session on ``model`` as ``source`` with ``values`` handed over
    as ``how`` says: the same outputs, or the same error type; our session (``None`` where it
    failed)."""
    path = tmp_path / "model.onnx"
    onnx.save(model, path)  # no .bin beside it
    try:
        ours = dml_onnx.InferenceSession({"path": path, "proto": model}[source],
                                         _supplying(how, values))
    except Exception as error:  # noqa: BLE001 - the same type as onnxruntime's, checked here
        with pytest.raises(type(error)):
            ort.InferenceSession(dml_onnx.with_functions(model).SerializeToString(),
                                 _supplying(how, values), providers=["CPUExecutionProvider"])
        return None
    plain = ort.InferenceSession(dml_onnx.with_functions(model).SerializeToString(),
                                 _supplying(how, values), providers=["CPUExecutionProvider"])
    for got, want in zip(ours.run(None, {"X": X, "I": X}), plain.run(None, {"X": X, "I": X})):
        _same(got, want)
    return ours


@pytest.mark.parametrize("source", ["path", "proto"])
@pytest.mark.parametrize("how", ["initializers", "files in memory"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_weights_from_the_session_options_are_used(layout, how, source, tmp_path):
    weight = np.arange(75, dtype=np.float32).reshape(1, 3, 5, 5) / 3
    model = dml_onnx.make_model(
        [helper.make_node("Add", ["I", "W"], ["D"]), *_chain(layout)],
        [_value("X", shape=[1, 3, 5, 5]), _value("I", shape=[1, 3, 5, 5])],
        [_value("C"), _value("D")], initializers=[_external("W", [1, 3, 5, 5])])
    ours = _from_options_agree(model, {"W": weight}, how, source, tmp_path)
    assert ours is not None and ours._split is None  # every segment would need them


@pytest.mark.parametrize("how", ["initializers", "files in memory"])
def test_a_kernel_reads_weights_from_the_session_options(how, tmp_path):
    rois = np.array([[0, 0, 3, 3], [1, 1, 4, 4], [0.5, 0, 4, 2]], np.float32)
    model = dml_onnx.make_model(
        [helper.make_node("Neg", ["X"], ["A"]),
         dml_onnx.roi_align1("A", "rois", "batch", "B", output_size=[2, 2],
                             spatial_scale_x=1.0, spatial_scale_y=1.0),
         helper.make_node("Relu", ["B"], ["C"]), helper.make_node("Neg", ["I"], ["D"])],
        [_value("X", shape=[1, 3, 5, 5]), _value("I", shape=[1, 3, 5, 5])],
        [_value("C"), _value("D")],
        initializers=[_external("rois", [3, 4]),
                      helper.make_tensor("batch", TensorProto.INT64, [3], [0, 0, 0])])
    ours = _from_options_agree(model, {"rois": rois}, how, "path", tmp_path)
    assert ours is not None


@pytest.mark.parametrize("layout", LAYOUTS)
def test_weights_neither_on_disk_nor_in_the_options_fail_as_in_onnxruntime(layout, tmp_path):
    model = dml_onnx.make_model(
        [helper.make_node("Add", ["I", "W"], ["D"]), *_chain(layout)],
        [_value("X", shape=[1, 3, 5, 5]), _value("I", shape=[1, 3, 5, 5])],
        [_value("C"), _value("D")], initializers=[_external("W", [1, 3, 5, 5])])
    assert _from_options_agree(model, {"W": X}, "neither", "path", tmp_path) is None
