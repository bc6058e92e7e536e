"""What dml_onnx.InferenceSession sets on the session options it is given: no spinning of
onnxruntime's idle workers unless asked for, and its intra-op thread count as our kernels'
thread limit."""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dml_onnx
from custom_ops import _common
from dml_onnx.graphs import WEIGHT_ELEMENTS

MODEL = dml_onnx.make_model(
    [dml_onnx.unfold("X", "Y", window_sizes=[2, 2], name="u")],
    [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 64, 8, 8])],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
FEEDS = {"X": np.ones((1, 64, 8, 8), np.float32)}
SPINNING = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")


def test_idle_workers_do_not_spin_unless_the_caller_says_so():
    options = ort.SessionOptions()
    dml_onnx.InferenceSession(MODEL, options)
    assert [options.get_session_config_entry(k) for k in SPINNING] == ["0", "0"]
    mine = ort.SessionOptions()
    mine.add_session_config_entry(SPINNING[0], "1")
    dml_onnx.InferenceSession(MODEL, mine)
    assert [mine.get_session_config_entry(k) for k in SPINNING] == ["1", "0"]


@pytest.mark.parametrize("threads", [0, 1, 2])
def test_kernels_see_the_sessions_intra_op_thread_count(threads):
    definition = dml_onnx.OPERATORS_BY_NAME["Unfold"]
    kernel, seen = definition.kernel, []

    def recording(*args, **kwargs):
        seen.append(_common.thread_limit.get())
        return kernel(*args, **kwargs)
    object.__setattr__(definition, "kernel", recording)
    try:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        node = dml_onnx.unfold("X", "Y", window_sizes=[2, 2], name=f"threads_{threads}")
        model = dml_onnx.make_model([node], list(MODEL.graph.input), list(MODEL.graph.output))
        dml_onnx.InferenceSession(model, options).run(None, FEEDS)
    finally:
        object.__setattr__(definition, "kernel", kernel)
    assert seen == [threads]
    assert _common.thread_limit.get() == 0  # set for the run only


@pytest.mark.parametrize("limit", [1, 2])
def test_run_parallel_uses_at_most_the_thread_limit(limit, monkeypatch):
    monkeypatch.setattr(_common, "THREADS", 4)
    threads: set[int] = set()
    token = _common.thread_limit.set(limit)
    try:
        _common.run_parallel([lambda: threads.add(threading.get_ident()) for _ in range(64)])
    finally:
        _common.thread_limit.reset(token)
    assert 1 <= len(threads) <= limit


def test_large_initializers_reach_onnxruntime_as_values_with_the_same_result():
    """Weights above dml_onnx.graphs.WEIGHT_ELEMENTS are handed over as OrtValues (the
    serialized model keeps stubs); on options of the caller's they stay in the model."""
    rng = np.random.default_rng(4)
    weight = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    assert weight.size > WEIGHT_ELEMENTS
    model = dml_onnx.make_model(
        [helper.make_node("Conv", ["X", "W"], ["F"], pads=[1, 1, 1, 1]),
         dml_onnx.unfold("F", "Y", window_sizes=[2, 2], name="u")],
        list(MODEL.graph.input), list(MODEL.graph.output))
    model.graph.initializer.append(numpy_helper.from_array(weight, "W"))
    feeds = {"X": rng.standard_normal((1, 64, 8, 8)).astype(np.float32)}
    handed = dml_onnx.InferenceSession(model)
    assert len(handed._weights) == 1
    options = ort.SessionOptions()
    kept = dml_onnx.InferenceSession(model, options)
    assert kept._weights == []
    (want,) = kept.run(None, feeds)
    np.testing.assert_array_equal(handed.run(None, feeds)[0], want)
    assert model.graph.initializer[0].raw_data  # the caller's model keeps its weights
