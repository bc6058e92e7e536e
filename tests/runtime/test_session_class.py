"""``dml_onnx.InferenceSession`` is an ``onnxruntime.InferenceSession``: code that takes a
model or a session and dispatches on ``isinstance`` takes it as a session, and every public
method it inherits answers as plain onnxruntime's does, in each way the session runs a model."""

from __future__ import annotations

import onnxruntime as ort
import pytest

import dml_onnx
from tests.runtime.test_session_compatibility import LAYOUTS, X, _chain, _same, _sessions, _value


def _infer(model_or_session, feeds):
    """What code that takes a model or a session does."""
    session = model_or_session if isinstance(model_or_session, ort.InferenceSession) else \
        ort.InferenceSession(model_or_session, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_session_is_an_onnxruntime_session_and_answers_as_one(layout):
    model = dml_onnx.make_model(_chain(layout), [_value("X", shape=[1, 3, 5, 5])],
                                [_value("C")])
    plain, ours = _sessions(model)
    assert isinstance(ours, ort.InferenceSession)
    assert (ours._split is not None) == (layout != "standard")  # "at the ends": its node alone
    _same(_infer(ours, {"X": X}), plain.run(None, {"X": X}))
    for getter in ("get_providers", "get_provider_options"):
        assert getattr(ours, getter)() == getattr(plain, getter)()
    for getter in ("get_inputs", "get_outputs"):
        assert [(v.name, v.type) for v in getattr(ours, getter)()] == \
            [(v.name, v.type) for v in getattr(plain, getter)()]
    assert isinstance(ours.get_session_options(), ort.SessionOptions)
    assert isinstance(ours.get_modelmeta(), type(plain.get_modelmeta()))
    assert ours.get_profiling_start_time_ns() == plain.get_profiling_start_time_ns()  # 0: off
    ours.set_providers(["CPUExecutionProvider"])
    _same(ours.run(None, {"X": X}), plain.run(None, {"X": X}))
