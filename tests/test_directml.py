"""The real DirectML as the oracle: every measured case with a DirectML output (the files in
``tests/directml/``, see :mod:`dml_onnx.directml`) runs through ``dml_onnx.InferenceSession``
and through the reference evaluator, and must agree within
``2e-6 + 1e-4 * max(|directml|, |ours|)`` per element. ``DML_ONNX_DIRECTML_DATA`` may name a
folder of more measurement files (a held-out set)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from dml_onnx import directml

FILES = sorted(Path(__file__).with_name("directml").glob("*.json"))
if os.environ.get("DML_ONNX_DIRECTML_DATA"):
    FILES += sorted(Path(os.environ["DML_ONNX_DIRECTML_DATA"]).glob("*.json"))
CASES = [case for path in FILES for case in directml.load_cases(path)]


def test_every_operator_has_measurements():
    counts = {op: total for op, (_, total) in directml.summary(
        directml.Outcome(c["id"], c["operator"], True) for c in CASES).items()}
    assert counts.keys() == {"LpPooling", "RoiAlign1", "RoiAlignGrad", "RoiPooling"}
    assert min(counts.values()) > 300


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_kernels_agree_with_directml(case):
    outcome = directml.check_case(case)
    assert outcome.agreed, outcome.detail


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_references_agree_with_directml(case):
    outcome = directml.check_case(case, runtime="reference")
    assert outcome.agreed, outcome.detail


def test_agreement_rule():
    assert directml.agrees(np.float32([1, np.nan, np.inf]), np.float32([1.00009, np.nan, np.inf]))
    assert directml.agrees(np.float32([0.0]), np.float32([1.9e-6]))
    assert not directml.agrees(np.float32([0.0]), np.float32([3e-6]))
    assert not directml.agrees(np.float32([1.0]), np.float32([1.00011]))
    assert not directml.agrees(np.float32([np.inf]), np.float32([-np.inf]))
    assert not directml.agrees(np.float32([np.nan]), np.float32([0.0]))
    assert not directml.agrees(np.float32([1.0, 2.0]), np.float32([1.0]))
