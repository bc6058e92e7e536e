"""What the real DirectML computed, as a test oracle: measured cases, run here and compared.

A measurement file is JSON (the project's own are in ``tests/directml/``: the older build's
files at the top, the same cases measured again on DirectML 1.15.4 in ``directml_1_15_4/``)::

    {"set": ..., "directml_version" (absent for the older build), "cases": [{"id", "source",
       "operator" (a dml_onnx op type), "attributes" (dml_onnx names; RoiAlignGrad also
       "outputs": the outputs requested), "inputs": {name: tensor},
       "directml": {"status": "ok", "outputs": {name: tensor}, "version" (optional)}
                 | {"status": "failed", ...}}]}
    tensor = {"shape": [...], "float32_hex": "<little-endian float32 bytes>"}
           | {"shape": [...], "float16_hex": "<little-endian float16 bytes>"}
           | {"shape": [...], "int64": [...]}

Each case with DirectML outputs becomes a one-node model of its inputs' types run by
:class:`dml_onnx.InferenceSession` (or the reference evaluator); an output agrees when every
element is within ``2e-6 + 1e-4 * max(|directml|, |ours|)`` (DirectML itself varies by about
1e-4 relative across drivers), a float16 one also within one float16 ulp, NaN equal to NaN and
infinities equal by sign. Where a case was measured on two builds that disagree, the older
build's output is the oracle (:func:`prefer_older_build`); :func:`open_reason` names the
measurements that judge nothing.
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
    """A tensor of a measurement file as a numpy array (float32, float16 or int64)."""
    if "float32_hex" in value:
        data = np.frombuffer(bytes.fromhex(value["float32_hex"]), "<f4")
    elif "float16_hex" in value:
        data = np.frombuffer(bytes.fromhex(value["float16_hex"]), "<f2")
    else:
        data = np.asarray(value["int64"], np.int64)
    return data.reshape(value["shape"]).copy()


def measurement_files(paths: Iterable[str | Path]) -> list[Path]:
    """Each path that is a file, and every ``*.json`` under each folder, subfolders included
    (a build's re-measurement such as ``directml_1_15_4/``), each folder's in name order."""
    files: list[Path] = []
    for path in map(Path, paths):
        files += sorted(path.rglob("*.json")) if path.is_dir() else [path]
    return files


def load_cases(path: str | Path) -> list[dict[str, Any]]:
    """The cases of one measurement file that have DirectML outputs (cases not measured, such
    as those of ``tests/directml/pending/``, have none; a file without ``"cases"``, such as the
    execution provider's measurements, has no operator case), each with ``"build"``: the
    DirectML version that measured it (the case's ``directml.version`` or the file's
    ``directml_version``), ``None`` for the older build, which recorded none."""
    data = json.loads(Path(path).read_text())
    return [{**case, "build": case["directml"].get("version", data.get("directml_version"))}
            for case in data.get("cases", []) if case.get("directml", {}).get("status") == "ok"]


def prefer_older_build(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``cases`` where every output that a newer build measured beyond the tolerance from the
    older build's measurement of the same case (same id, operator, attributes and inputs) is
    replaced by the older one (named in ``directml["older_build"]``): DirectML 1.15.4 on a CPU
    driver gave -1/2 of the older build's GPU value for a few corner-aligned or
    outside-the-image ``drois``, and which of build and driver causes that is not decided, so
    the older values stay the oracle there (the measurements' README)."""
    older = {identity(case): case["directml"]["outputs"] for case in cases
             if case["build"] is None}
    chosen = []
    for case in cases:
        reference = older.get(identity(case), {}) if case["build"] is not None else {}
        outputs = case["directml"]["outputs"]
        replaced = sorted(name for name, value in reference.items() if name in outputs
                          and not agrees(tensor(outputs[name]), tensor(value)))
        if replaced:
            case = {**case, "directml": {**case["directml"], "older_build": replaced,
                                         "outputs": {**outputs, **{n: reference[n]
                                                                   for n in replaced}}}}
        chosen.append(case)
    return chosen


def identity(case: dict[str, Any]) -> str:
    """What makes two measurements the same case: id, operator, attributes and inputs."""
    return json.dumps([case["id"], case["operator"], case["attributes"], case["inputs"]],
                      sort_keys=True)


def measured_cases(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every case with a DirectML output of the files and folders ``paths``
    (:func:`measurement_files`), the older build the oracle where builds disagree."""
    return prefer_older_build([case for path in measurement_files(paths)
                               for case in load_cases(path)])


def open_reason(case: dict[str, Any]) -> str | None:
    """Why the measurement of ``case`` judges nothing, or ``None`` when it judges:

    - a Fold with a dilation of 0 whose DirectML output is not all zeros: DirectML's undefined
      behaviour (it wrote values at positions the formula never reaches; specification section
      6: Fold with a dilation of 0 gives zeros);
    - a decisive case (one with the ``rule_prediction`` it was measured to decide) whose output
      disagrees with that prediction beyond the tolerance: the measurement contradicts the rule
      the case was made to decide between it and an alternative, so the case stays open until
      more data decide it.
    """
    outputs = {name: tensor(value) for name, value in case["directml"]["outputs"].items()}
    if (case["operator"] == "Fold" and 0 in case["attributes"].get("dilations", ())
            and any(np.any(value != 0) for value in outputs.values())):
        return ("undefined behaviour: DirectML's Fold with a dilation of 0 wrote non-zero "
                "values (specification section 6: zeros)")
    predicted = case.get("rule_prediction", {})
    differing = sorted(name for name, value in predicted.items() if name in outputs
                       and not agrees(np.asarray(value, np.float64), outputs[name]))
    if differing:
        return (f"open: DirectML's {', '.join(differing)} contradict the rule's prediction this "
                f"case was measured to decide (alternative: {case.get('alternative', '?')})")
    return None


def identical(ours: np.ndarray, directml: np.ndarray) -> bool:
    """Whether ``ours`` equals ``directml`` bit for bit (type, shape and every byte)."""
    return (ours.dtype == directml.dtype and ours.shape == directml.shape
            and ours.tobytes() == directml.tobytes())


def agrees(ours: np.ndarray, directml: np.ndarray) -> bool:
    """Whether ``ours`` equals ``directml`` within the tolerance, element by element; a
    float16 ``directml`` also within one float16 ulp of the larger magnitude (its resolution:
    DirectML's float16 rounding is the driver's, truncating on the measured CPU driver)."""
    a, b = np.asarray(ours, np.float64), np.asarray(directml, np.float64)
    if a.shape != b.shape:
        return False
    with np.errstate(invalid="ignore", over="ignore"):
        larger = np.maximum(np.abs(a), np.abs(b))
        bound = ABSOLUTE + RELATIVE * larger
        if np.asarray(directml).dtype == np.float16:
            bound = np.maximum(bound, np.spacing(larger.astype(np.float16)).astype(np.float64))
        close = np.abs(a - b) <= bound
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


def compare(case: dict[str, Any], ours: dict[str, np.ndarray]) -> Outcome:
    """Compare every DirectML output of ``case`` with ``ours`` (:func:`run_case`)."""
    differing = []
    for name, value in case["directml"]["outputs"].items():
        theirs = tensor(value)
        if not agrees(ours[name], theirs):
            with np.errstate(invalid="ignore"):
                worst = np.nanmax(np.abs(ours[name].astype(np.float64) - theirs))
            differing.append(f"{name} (largest difference {worst:.3g})")
    return Outcome(case["id"], case["operator"], not differing, ", ".join(differing))


def check_case(case: dict[str, Any], runtime: str = "onnxruntime") -> Outcome:
    """Run ``case`` and compare every DirectML output with ours."""
    try:
        ours = run_case(case, runtime)
    except Exception as error:  # a case we cannot run is a disagreement, named
        return Outcome(case["id"], case["operator"], False, f"{type(error).__name__}: {error}")
    return compare(case, ours)


def check_files(paths: Iterable[str | Path], runtime: str = "onnxruntime") -> list[Outcome]:
    """:func:`check_case` on every case of :func:`measured_cases` of ``paths`` (files and
    folders) that judges (those with an :func:`open_reason` are left out)."""
    return [check_case(case, runtime) for case in measured_cases(paths)
            if open_reason(case) is None]


def summary(outcomes: Iterable[Outcome]) -> dict[str, tuple[int, int]]:
    """``{operator: (agreeing, cases)}``, operators in name order."""
    table: dict[str, list[int]] = {}
    for outcome in outcomes:
        counts = table.setdefault(outcome.operator, [0, 0])
        counts[0] += outcome.agreed
        counts[1] += 1
    return {op: (agreed, total) for op, (agreed, total) in sorted(table.items())}
