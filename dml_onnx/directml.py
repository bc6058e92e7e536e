"""What the real DirectML computed, as a test oracle: measured cases, run here and compared.

A measurement file is JSON (the project's own are in ``tests/directml/``)::

    {"set": ..., "cases": [{"id", "source", "operator" (a dml_onnx op type), "attributes"
       (dml_onnx names; RoiAlignGrad also "outputs": the outputs requested),
       "inputs": {name: tensor}, "directml": {"status": "ok", "outputs": {name: tensor}}
                                           | {"status": "failed", ...}}]}
    tensor = {"shape": [...], "float32_hex": "<little-endian float32 bytes>"}
           | {"shape": [...], "int64": [...]}

Each case with DirectML outputs becomes a one-node model run by
:class:`dml_onnx.InferenceSession` (or the reference evaluator); an output agrees when every
element is within ``2e-6 + 1e-4 * max(|directml|, |ours|)``, NaN equal to NaN and infinities
equal by sign.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ABSOLUTE, RELATIVE = 2e-6, 1e-4
"""The agreement tolerance: ``ABSOLUTE + RELATIVE * max(|directml|, |ours|)``."""


@dataclass(frozen=True)
class Outcome:
    """One case: its id, operator, whether every output agreed, and what differed."""

    id: str
    operator: str
    agreed: bool
    detail: str = ""


def tensor(value: dict[str, Any]) -> np.ndarray:
    """A tensor of a measurement file as a numpy array (float32 or int64)."""
    if "float32_hex" in value:
        data = np.frombuffer(bytes.fromhex(value["float32_hex"]), "<f4")
    else:
        data = np.asarray(value["int64"], np.int64)
    return data.reshape(value["shape"]).copy()


def load_cases(path: str | Path) -> list[dict[str, Any]]:
    """The cases of one measurement file that have DirectML outputs."""
    cases = json.loads(Path(path).read_text())["cases"]
    return [case for case in cases if case["directml"]["status"] == "ok"]


def agrees(ours: np.ndarray, directml: np.ndarray) -> bool:
    """Whether ``ours`` equals ``directml`` within the tolerance, element by element."""
    a, b = np.asarray(ours, np.float64), np.asarray(directml, np.float64)
    if a.shape != b.shape:
        return False
    with np.errstate(invalid="ignore"):
        close = np.abs(a - b) <= ABSOLUTE + RELATIVE * np.maximum(np.abs(a), np.abs(b))
    special = np.isnan(a) | np.isnan(b) | np.isinf(a) | np.isinf(b)
    same_special = (np.isnan(a) & np.isnan(b)) | (a == b)
    return bool(np.where(special, same_special, close).all())


def run_case(case: dict[str, Any], runtime: str = "onnxruntime") -> dict[str, np.ndarray]:
    """Our outputs for ``case``, by the dml_onnx kernels in onnxruntime (``runtime``
    ``"onnxruntime"``) or by the reference evaluator (``"reference"``)."""
    from dml_onnx.builders import single_node_model
    from dml_onnx.ops import OPERATORS_BY_NAME

    definition = OPERATORS_BY_NAME[case["operator"]]
    attributes = dict(case["attributes"])
    requested = attributes.pop("outputs", [p.name for p in definition.outputs])
    given = {name: tensor(value) for name, value in case["inputs"].items()}
    inputs = tuple(given.get(p.name) for p in definition.inputs)
    outputs = tuple(p.name in requested for p in definition.outputs)
    model = single_node_model(definition, inputs, attributes, outputs)
    names = [o.name for o in model.graph.output]
    if runtime == "reference":
        from dml_onnx.reference import ReferenceEvaluator
        results = ReferenceEvaluator(model).run(names, given)
    else:
        from dml_onnx.runtime import InferenceSession
        results = InferenceSession(model).run(names, given)
    return dict(zip(names, results))


def check_case(case: dict[str, Any], runtime: str = "onnxruntime") -> Outcome:
    """Run ``case`` and compare every DirectML output with ours."""
    try:
        ours = run_case(case, runtime)
    except Exception as error:  # a case we cannot run is a disagreement, named
        return Outcome(case["id"], case["operator"], False, f"{type(error).__name__}: {error}")
    differing = []
    for name, value in case["directml"]["outputs"].items():
        theirs = tensor(value)
        if not agrees(ours[name], theirs):
            worst = np.nanmax(np.abs(ours[name].astype(np.float64) - theirs))
            differing.append(f"{name} (largest difference {worst:.3g})")
    return Outcome(case["id"], case["operator"], not differing, ", ".join(differing))


def check_files(paths: Iterable[str | Path], runtime: str = "onnxruntime") -> list[Outcome]:
    """:func:`check_case` on every measured case of every file."""
    return [check_case(case, runtime) for path in paths for case in load_cases(path)]


def summary(outcomes: Iterable[Outcome]) -> dict[str, tuple[int, int]]:
    """``{operator: (agreeing, cases)}``, operators in name order."""
    table: dict[str, list[int]] = {}
    for outcome in outcomes:
        counts = table.setdefault(outcome.operator, [0, 0])
        counts[0] += outcome.agreed
        counts[1] += 1
    return {op: (agreed, total) for op, (agreed, total) in sorted(table.items())}
