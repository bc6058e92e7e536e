"""A model's checked types and steps are kept for the next session of the same graph
(dml_onnx.runtime.prepare.PREPARED_MODELS): prepared once, never changed by a session, the
weights always the session's own, at most PREPARED_MODELS graphs and PREPARED_BYTES kept,
sessions created on several threads at once each right."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dml_onnx
from dml_onnx.reference import ReferenceEvaluator
from dml_onnx.runtime import prepare, weights

FLOAT = TensorProto.FLOAT


def _model(weight: np.ndarray, bias: float = 0.5):
    """Conv (a weight large enough to be split off) -> RoiAlign1 -> Add: segment, kernel,
    segment."""
    nodes = [helper.make_node("Conv", ["X", "W"], ["F"], pads=[1, 1, 1, 1]),
             dml_onnx.roi_align1("F", "rois", "batch", "A", name="align", output_size=[2, 2],
                                 spatial_scale_x=1.0, spatial_scale_y=1.0),
             helper.make_node("Add", ["A", "bias"], ["Z"])]
    initializers = [numpy_helper.from_array(weight, "W"),
                    numpy_helper.from_array(np.array([[0, 0, 5, 5], [1.5, 2, 7, 6]],
                                                     np.float32), "rois"),
                    numpy_helper.from_array(np.zeros(2, np.int64), "batch"),
                    numpy_helper.from_array(np.array([bias], np.float32), "bias")]
    return dml_onnx.make_model(nodes, [helper.make_tensor_value_info("X", FLOAT, [1, 8, 8, 8])],
                               [helper.make_tensor_value_info("Z", FLOAT, None)],
                               initializers=initializers)


def _weight(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((72, 8, 3, 3)).astype(np.float32)


FEEDS = {"X": np.random.default_rng(0).standard_normal((1, 8, 8, 8)).astype(np.float32)}


@pytest.fixture
def counted(monkeypatch):
    """An empty store of prepared models, and how often types were checked and steps made."""
    calls = {"checked_types": 0, "split": 0}
    for name in calls:
        original = getattr(prepare, name)

        def counting(*arguments, _name=name, _original=original, **keywords):
            calls[_name] += 1
            return _original(*arguments, **keywords)

        monkeypatch.setattr(prepare, name, counting)
    monkeypatch.setattr(prepare, "_prepared_models", OrderedDict())
    return calls


def _check(session, model):
    (got,) = session.run(None, FEEDS)
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, FEEDS)[0], rtol=1e-5,
                               atol=1e-5)
    return got


@pytest.mark.parametrize("options", [False, True])
def test_a_model_created_again_is_prepared_once_and_its_steps_never_change(counted, options):
    model = _model(_weight(1))
    serialized = model.SerializeToString()
    sessions = [dml_onnx.InferenceSession(serialized, ort.SessionOptions() if options else None)
                for _ in range(3)]
    assert counted == {"checked_types": 1, "split": 1}
    ((_, (_, _, steps)),) = prepare._prepared_models.values()
    assert steps is not None and all(session._split is not None for session in sessions)
    kept = [step.model.SerializeToString() for step in steps if hasattr(step, "model")]
    more = dml_onnx.InferenceSession(serialized, ort.SessionOptions() if options else None)
    assert kept == [step.model.SerializeToString() for step in steps if hasattr(step, "model")]
    outputs = [_check(session, model) for session in (*sessions, more)]
    for got in outputs[1:]:
        np.testing.assert_array_equal(got, outputs[0])


def test_the_same_graph_with_other_weights_gives_each_session_its_own_values(counted):
    first, second = _model(_weight(1)), _model(_weight(2))
    got = [_check(dml_onnx.InferenceSession(m.SerializeToString()), m) for m in (first, second)]
    assert counted == {"checked_types": 1, "split": 1}
    assert not np.allclose(got[0], got[1])


def test_a_model_given_as_a_proto_or_for_an_optimized_file_is_prepared_apart(counted, tmp_path):
    """Strings of a ModelProto are checked by the session (a file's or bytes' by the
    loader), and a session that writes the optimized model runs unsplit: neither reuses the
    other's preparation."""
    model = _model(_weight(1))
    dml_onnx.InferenceSession(model.SerializeToString())
    _check(dml_onnx.InferenceSession(model), model)
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    optimized = dml_onnx.InferenceSession(model.SerializeToString(), options)
    assert optimized._split is None
    _check(optimized, model)
    assert counted == {"checked_types": 3, "split": 2}


def test_a_bad_model_is_refused_every_time(counted):
    model = _model(_weight(1))
    model.graph.node[1].attribute.append(helper.make_attribute("unknown", 1))
    for _ in range(2):
        with pytest.raises(Exception, match="unknown"):
            dml_onnx.InferenceSession(model.SerializeToString())
    assert counted["checked_types"] == 2 and not prepare._prepared_models


def test_only_the_latest_graphs_are_kept(counted):
    models = [_model(_weight(1), bias=float(k))
              for k in range(prepare.PREPARED_MODELS + 1)]
    for model in models:
        dml_onnx.InferenceSession(model.SerializeToString())
    assert len(prepare._prepared_models) == prepare.PREPARED_MODELS
    _check(dml_onnx.InferenceSession(models[-1].SerializeToString()), models[-1])
    assert counted["split"] == len(models)
    _check(dml_onnx.InferenceSession(models[0].SerializeToString()), models[0])  # dropped
    assert counted["split"] == len(models) + 1


def test_no_more_than_the_byte_budget_is_kept(counted, monkeypatch):
    models = [_model(_weight(1), bias=float(k)) for k in range(3)]
    size = len(weights.read_without_weights(
        models[0].SerializeToString(), lambda light: light.SerializeToString())[2])
    monkeypatch.setattr(prepare, "PREPARED_BYTES", 2 * size)
    for model in models:
        dml_onnx.InferenceSession(model.SerializeToString())
    assert len(prepare._prepared_models) == 2
    prepare._prepared_models.clear()
    monkeypatch.setattr(prepare, "PREPARED_BYTES", size - 1)  # a larger one: not kept
    _check(dml_onnx.InferenceSession(models[0].SerializeToString()), models[0])
    assert not prepare._prepared_models


def test_sessions_created_on_several_threads_at_once_each_compute_their_model(counted):
    from concurrent.futures import ThreadPoolExecutor

    models = [_model(_weight(k % 2 + 1), bias=float(k % 3)) for k in range(12)]
    with ThreadPoolExecutor(6) as pool:
        sessions = list(pool.map(
            lambda m: dml_onnx.InferenceSession(m.SerializeToString()), models))
    for session, model in zip(sessions, models, strict=True):
        _check(session, model)
    assert len(prepare._prepared_models) == 3


def test_the_callers_later_edits_of_a_model_reach_no_kept_step(counted):
    """Kept steps are made from the session's own copy of a ModelProto: renaming the
    kernel's input in the caller's model after creation changes neither that session nor
    the next one of the same graph."""
    import onnx

    model = _model(_weight(1))
    model.graph.initializer.pop(0)  # no weight to split off: the proto itself is the graph
    model.graph.input.append(helper.make_tensor_value_info("W", FLOAT, [72, 8, 3, 3]))
    feeds = {**FEEDS, "W": _weight(1)}
    original = model.SerializeToString()
    first = dml_onnx.InferenceSession(model)
    model.graph.node[1].input[0] = "renamed"
    again = dml_onnx.InferenceSession(onnx.ModelProto.FromString(original))
    assert counted["split"] == 1
    want = ReferenceEvaluator(onnx.ModelProto.FromString(original)).run(None, feeds)[0]
    for session in (first, again):
        np.testing.assert_allclose(session.run(None, feeds)[0], want, rtol=1e-5, atol=1e-5)
