"""Conformance probes: which reading an execution provider follows on each point that DirectML
leaves open.

Each point is probed through the native op that the DirectML execution provider maps onto the
DirectML operator (at the opset it registers: RoiAlign-16 -> ROI_ALIGN1, MaxRoiPool-1 ->
ROI_POOLING, LpPool-11 -> LP_POOLING, Col2Im-18 -> FOLD), with inputs for which every candidate
reading gives a different output. A reading is a small plain implementation of one way to read
the op (loops over outputs, float64); ``spec`` is the reading of ``OPERATORS.md`` under the
provider's attribute mapping, the others are the named alternatives that onnxruntime, the ONNX
reference or the DirectML documentation follow. The provider being probed never computes an
expected output. The points are :data:`~dml_onnx.conformance.points.POINTS`, the readings
:mod:`dml_onnx.conformance.readings`; this module exports, runs and reports them.

``probe.json`` names the point and the reading onnxruntime's DirectML execution provider was
measured to follow on it (:attr:`~dml_onnx.conformance.points.Point.directml_ep`).

Layout, next to the suite (``dml-onnx conformance export`` writes it)::

    models/probes/test_probe_<point>_<case>/model.onnx
    models/probes/test_probe_<point>_<case>/test_data_set_0/input_<i>.pb, output_0.pb  (spec)
    models/probes/test_probe_<point>_<case>/readings/<reading>/output_0.pb
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort
from onnx import numpy_helper

from dml_onnx.conformance.files import PROBE_FILE_BYTES, check_replaceable
from dml_onnx.conformance.metric import difference
from dml_onnx.conformance.points import ERROR, POINTS, SPEC
from dml_onnx.model_files import load_model, read_regular

NO_READING = "none of the known readings"
TOLERANCE = 1e-5
"""A provider's output matches a reading when it is within this share of the reading's largest
magnitude (NaN where the reading has NaN); the readings of a case differ by far more."""


def export_probes(directory: str | Path) -> list[Path]:
    """Write every probe case under ``directory`` (replacing the probes written there before;
    anything else there is refused, see
    :func:`~dml_onnx.conformance.files.check_replaceable`): the model, its inputs,
    the spec reading as the expected output, and every reading under ``readings/``."""
    root = Path(directory)
    check_replaceable(root)
    if root.exists():
        shutil.rmtree(root)
    written = []
    for point in POINTS:
        for case in point.cases:
            folder = root / f"test_probe_{point.name}_{case.name}"
            data = folder / "test_data_set_0"
            data.mkdir(parents=True)
            _write(folder / "model.onnx", case.model())
            for i, (name, array) in enumerate(case.feeds().items()):
                _write(data / f"input_{i}.pb", numpy_helper.from_array(array, name))
            for reading, compute in point.readings.items():
                tensor = numpy_helper.from_array(compute(case), "Y")
                if reading == SPEC:
                    _write(data / "output_0.pb", tensor)
                (folder / "readings" / reading).mkdir(parents=True)
                _write(folder / "readings" / reading / "output_0.pb", tensor)
            (folder / "probe.json").write_text(json.dumps(
                {"point": point.name, "question": point.question,
                 "directml_ep": point.directml_ep}, indent=1) + "\n")
            written.append(folder)
    return written


def _write(path: Path, proto: Any) -> None:
    path.write_bytes(proto.SerializeToString(deterministic=True))


@dataclass(frozen=True)
class Finding:
    """What one provider does on one point: the reading it follows (:data:`SPEC`, a named
    alternative, :data:`NO_READING` or :data:`ERROR`), over how many cases, how many of them
    matched that reading, and the worst difference from it (relative to its largest value)."""

    point: str
    provider: str
    reading: str
    cases: int
    matched: int
    max_diff: float
    message: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"reading": self.reading, "cases": self.cases, "matched": self.matched,
                "max_diff": self.max_diff}


def run_probes(directory: str | Path, provider: str = "CPUExecutionProvider") -> list[Finding]:
    """Run every probe case under ``directory`` on ``provider``; one finding per point."""
    by_point: dict[str, list[dict[str, float] | str]] = {p.name: [] for p in POINTS}
    for folder in sorted(Path(directory).glob("test_probe_*")):
        try:
            point = json.loads(read_regular(folder / "probe.json", PROBE_FILE_BYTES))["point"]
            if not isinstance(point, str):
                raise ValueError(f"its point {point!r} is not a name")
        except (OSError, ValueError, KeyError, TypeError) as error:  # that probe alone fails
            by_point.setdefault(folder.name, []).append(
                f"{folder / 'probe.json'} is not a probe description ({error!r})")
            continue
        by_point.setdefault(point, []).append(_probe(folder, provider))
    return [_finding(point, provider, outcomes) for point, outcomes in by_point.items()
            if outcomes]


def _probe(folder: Path, provider: str) -> dict[str, float] | str:
    """The difference of the provider's output from each reading, or why it has none (the
    case cannot be read, the session or the run fails)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3  # onnxruntime's own warning on RoiAlign max is measured here
    try:
        model = load_model(folder / "model.onnx")
        feeds = {}
        for path in sorted((folder / "test_data_set_0").glob("input_*.pb")):
            tensor = _tensor(path)
            feeds[tensor.name] = numpy_helper.to_array(tensor)
        wanted = {reading.name: numpy_helper.to_array(_tensor(reading / "output_0.pb"))
                  for reading in sorted((folder / "readings").iterdir())}
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=[provider])
        (got,) = session.run(None, feeds)
    except Exception as error:  # noqa: BLE001 - a provider that fails is measured too
        return f"{type(error).__name__}: {error}"
    return {name: difference(got, want) for name, want in wanted.items()}


def _tensor(path: Path) -> onnx.TensorProto:
    """The tensor of a probe's ``.pb`` file (a regular file, never a FIFO or a device)."""
    return onnx.load_tensor_from_string(read_regular(path, 1 << 31))


def _finding(point: str, provider: str, outcomes: list[dict[str, float] | str]) -> Finding:
    errors = [o for o in outcomes if isinstance(o, str)]
    if errors:
        return Finding(point, provider, ERROR, len(outcomes), len(errors), math.inf, errors[0])
    measured = [o for o in outcomes if not isinstance(o, str)]  # all of them
    readings = list(measured[0])
    matched = {r: sum(o[r] <= TOLERANCE for o in measured) for r in readings}
    worst = {r: max(o[r] for o in measured) for r in readings}
    full = [r for r in readings if matched[r] == len(outcomes)]
    if full:
        reading = SPEC if SPEC in full else full[0]
        return Finding(point, provider, reading, len(outcomes), matched[reading], worst[reading])
    closest = min(readings, key=lambda r: worst[r])
    return Finding(point, provider, NO_READING, len(outcomes), matched[closest], worst[closest],
                   f"closest: {closest}")


def report(findings: Sequence[Finding]) -> str:
    """A Markdown table: point, provider, reading, cases matched, worst difference, and beside
    them the reading the DirectML execution provider was measured to follow on that point
    (:attr:`~dml_onnx.conformance.points.Point.directml_ep`; ``-`` for a point not probed
    here)."""
    measured = {p.name: p.directml_ep for p in POINTS}
    rows = ["| point | provider | reading | matched | max diff | DirectML EP (measured) |",
            "|---|---|---|---:|---:|---|"]
    for f in findings:
        note = f" ({f.message})" if f.message else ""
        rows.append(f"| {f.point} | {f.provider} | {f.reading}{note} | {f.matched}/{f.cases} | "
                    f"{f.max_diff:.3g} | {measured.get(f.point, '-')} |")
    return "\n".join(rows)
