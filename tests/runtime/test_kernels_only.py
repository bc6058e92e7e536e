"""A model of ``dml_onnx`` nodes alone (the conformance models, a single operator under test)
runs split with no onnxruntime call for a feed of arrays of the declared types and shapes:
its first segment, one ``Size`` node, only checks the feed, and :class:`SplitRun` checks
such a feed itself. Every other feed goes through that segment, so the session must still
take and refuse feeds as plain onnxruntime does: the mirror's cases, on this model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

import dml_onnx
from tests.runtime.test_onnxruntime_api import (
    FEED,
    POOL,
    RUN_ERRORS,
    X,
    _feeds,
    _plain,
    _raises_as,
    _same,
    _value,
    ort_values_raise_as,
)


def _model(elem: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """``C = LpPooling1(LpPooling(X))`` (``A`` between them), ``D = Unfold(X)``; ``Y`` (int64
    ``[2]``) is declared and read by no node, as the mirror's feeds give it."""
    return dml_onnx.make_model(
        [dml_onnx.lp_pooling("X", "A", name="pool", **POOL),
         dml_onnx.lp_pooling("A", "C", name="pool1", p=1, **POOL),
         dml_onnx.unfold("X", "D", name="im2col", window_sizes=[2, 2])],
        [_value("X", elem, ["N", 3, 5, 5]), _value("Y", TensorProto.INT64, [2])],
        [_value("C", elem), _value("D", elem)])


_SESSIONS: dict[str, tuple[dml_onnx.InferenceSession, ort.InferenceSession]] = {}


def _pair() -> tuple[dml_onnx.InferenceSession, ort.InferenceSession]:
    if not _SESSIONS:
        model = _model()
        _SESSIONS["pair"] = (dml_onnx.InferenceSession(model), ort.InferenceSession(
            _plain(model).SerializeToString(), providers=["CPUExecutionProvider"]))
    return _SESSIONS["pair"]


def test_a_plain_feed_runs_no_onnxruntime_call():
    session, reference = dml_onnx.InferenceSession(_model()), _pair()[1]
    split = session._split
    assert split is not None and split.steps[0][0].checks_only
    assert [n.op_type for n in split.steps[0][0].model.graph.node] == ["Size"]
    segment, inner, run_values = split.steps[0]
    checked: list[int] = []

    def counting(*args):
        checked.append(1)
        return run_values(*args)
    split.steps[0] = segment, inner, counting
    _same(session.run(None, FEED), reference.run(None, FEED))
    _same(session.run(["D"], {"X": X[:1], "Y": FEED["Y"]}),
          reference.run(["D"], {"X": X[:1], "Y": FEED["Y"]}))  # "N" is free
    session.run(None, {"X": X.tolist(), "Y": FEED["Y"]})  # converted as onnxruntime
    session.run(None, {"X": X.astype(">f4"), "Y": FEED["Y"]})  # converts, then checked here
    assert checked == []
    session.run(None, {"X": ort.OrtValue.ortvalue_from_numpy(X), "Y": FEED["Y"]})
    with pytest.raises(InvalidArgument):
        session.run(None, {"X": X[:, :2], "Y": FEED["Y"]})
    assert checked == [1, 1]  # onnxruntime's run checked those


@pytest.mark.parametrize("feed", list(_feeds()))
def test_feeds_are_taken_as_onnxruntime_takes_them(feed):
    session, reference = _pair()
    _same(session.run(None, _feeds()[feed]), reference.run(None, _feeds()[feed]))


@pytest.mark.parametrize("case", list(RUN_ERRORS))
def test_run_errors_are_onnxruntimes(case):
    session, reference = _pair()
    names, feed = RUN_ERRORS[case]
    try:
        want = reference.run(names, feed)
    except Exception:  # noqa: BLE001 - the type is compared below
        _raises_as(lambda: session.run(names, feed), lambda: reference.run(names, feed))
    else:  # a None for Y, which no node reads here
        _same(session.run(names, feed), want)
    ort_values_raise_as(session, reference, names, feed)
    _same(session.run(None, FEED), reference.run(None, FEED))  # and it goes on


def test_the_terminate_flag_stops_the_run_as_in_onnxruntime():
    session, reference = _pair()
    options = ort.RunOptions()
    options.terminate = True
    _raises_as(lambda: session.run(None, FEED, options),
               lambda: reference.run(None, FEED, options))
    options.terminate = False
    _same(session.run(None, FEED, options), reference.run(None, FEED, options))
    for not_options in ({}, "terminate"):  # onnxruntime's TypeError, not an AttributeError
        _raises_as(lambda: session.run(None, FEED, not_options),  # noqa: B023 - at once
                   lambda: reference.run(None, FEED, not_options))  # noqa: B023


def test_a_float16_model():
    model = _model(TensorProto.FLOAT16)
    session = dml_onnx.InferenceSession(model)
    reference = ort.InferenceSession(_plain(model).SerializeToString(),
                                     providers=["CPUExecutionProvider"])
    feed = {"X": X.astype(np.float16), "Y": FEED["Y"]}
    _same(session.run(None, feed), reference.run(None, feed))
    _raises_as(lambda: session.run(None, FEED), lambda: reference.run(None, FEED))


def test_what_the_session_says_about_itself():
    session, reference = _pair()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 3  # its checking segment runs on one
    assert dml_onnx.InferenceSession(_model(), options).get_session_options(
        ).intra_op_num_threads == 3
    for getter in ("get_inputs", "get_overridable_initializers"):
        assert [(v.name, v.type, v.shape) for v in getattr(session, getter)()] == \
            [(v.name, v.type, v.shape) for v in getattr(reference, getter)()], getter
    assert [(v.name, v.type) for v in session.get_outputs()] == \
        [(v.name, v.type) for v in reference.get_outputs()]  # the shapes: ours are inferred


def test_profiling_traces_every_run_with_its_kernels(tmp_path):
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "kernels")
    session = dml_onnx.InferenceSession(_model(), options)
    for _ in range(2):
        session.run(None, FEED)
    events = json.loads(Path(session.end_profiling()).read_text())
    names = [event["name"] for event in events]
    assert names.count("model_run") == 2 and names.count("segment_run") == 2
    for node in ("pool", "pool1", "im2col"):
        assert names.count(f"{node}_kernel_time") == 2


def test_a_failed_kernel_raises_kernel_error_and_the_session_goes_on():
    model = dml_onnx.make_model([dml_onnx.unfold("X", "D", name="im2col", window_sizes=[6, 2])],
                                [_value("X", shape=["N", 3, "H", "W"])], [_value("D")])
    session = dml_onnx.InferenceSession(model)
    assert session._split is not None
    with pytest.raises(dml_onnx.KernelError, match="Unfold 'im2col'"):
        session.run(None, {"X": X})  # 5x5 planes: a block count below 1
    (got,) = session.run(None, {"X": np.ones((1, 3, 6, 6), np.float32)})
    assert got.shape == (1, 36, 5)
