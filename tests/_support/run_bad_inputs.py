"""Child process of test_robustness: every runtime case of the catalogue, one after the other,
through ``dml_onnx.InferenceSession`` and through a plain onnxruntime session over
``dml_onnx.to_runtime_model`` (the README's two paths).

Run as ``python -m tests._support.run_bad_inputs`` from the repository root. Prints one JSON
line per case, as soon as it is done (so that a crash still shows which case it was in)::

    {"case": ..., "session": {"type": ..., "message": ...}, "session_recovered": true,
     "plain": {"type": ..., "message": ..., "logged": ...}, "plain_recovered": true}

``*_recovered`` says whether the same session then ran the case's valid inputs to the
reference evaluator's outputs, within the conformance tolerance (``null`` when no input is
valid for the case's attributes).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import onnxruntime as ort
from onnxruntime_extensions import get_library_path

import dml_onnx
from tests._support.bad_input_cases import CASES
from tests._support.bad_inputs import RUN, BadInput, limited
from tests._support.native import assert_matches_reference


class _Reasons(logging.Handler):
    """Keeps what the ``dml_onnx`` logger reports (the reason of a failed plain run)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _failure(run: Callable[[], Any]) -> dict[str, Any]:
    try:
        run()
    except Exception as error:  # noqa: BLE001 - reported to the parent, which judges it
        return {"type": type(error).__name__, "message": str(error)}
    return {"type": None, "message": ""}


def _recovered(run: Callable[[dict], list], case: BadInput) -> bool | None:
    valid = case.valid_feeds()
    if valid is None:
        return None
    want = dml_onnx.ReferenceEvaluator(case.runtime_model()).run(None, valid)
    try:
        assert_matches_reference(run(valid), want)
    except AssertionError:
        return False
    return True


def _plain_session(case: BadInput) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    options.log_severity_level = 4
    model = dml_onnx.to_runtime_model(case.runtime_model())
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def run_case(case: BadInput, reasons: _Reasons) -> dict[str, Any]:
    with limited(case):
        session = dml_onnx.InferenceSession(case.runtime_model())
        outcome: dict[str, Any] = {"case": case.name,
                                   "session": _failure(lambda: session.run(None, case.feeds()))}
        outcome["session_recovered"] = _recovered(lambda f: session.run(None, f), case)
        plain = _plain_session(case)
        reasons.messages.clear()
        outcome["plain"] = {**_failure(lambda: plain.run(None, case.feeds())),
                            "logged": "\n".join(reasons.messages)}
        outcome["plain_recovered"] = _recovered(lambda f: plain.run(None, f), case)
    return outcome


def main() -> None:
    reasons = _Reasons()
    logger = logging.getLogger("dml_onnx")
    logger.addHandler(reasons)
    logger.propagate = False
    for case in CASES:
        if RUN in case.layers:
            print(json.dumps(run_case(case, reasons)), flush=True)


if __name__ == "__main__":
    main()
