"""The conformance probes (dml_onnx.conformance.probes): every reading of a case differs from
every other, the spec reading equals the reference implementations under the DirectML execution
provider's attribute mapping, onnxruntime's CPU provider is named with its known readings, and
the committed probes are current."""

from __future__ import annotations

import json
import math
from pathlib import Path

import onnx
import pytest
from onnx import numpy_helper

from dml_onnx import calls, cli, conformance
from dml_onnx._kernels._checks import UINT32_MAX
from dml_onnx.conformance import points, probes
from dml_onnx.conformance.metric import difference
from dml_onnx.ops import OPERATORS_BY_NAME

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "models" / conformance.PROBES
CASES = [pytest.param(point, case, id=f"{point.name}-{case.name}")
         for point in points.POINTS for case in point.cases]


@pytest.mark.parametrize("point, case", CASES)
def test_every_reading_of_a_case_gives_a_different_output(point, case):
    outputs = {name: compute(case) for name, compute in point.readings.items()}
    assert points.SPEC in outputs and len(outputs) >= 2
    names = list(outputs)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert difference(outputs[a], outputs[b]) > 100 * probes.TOLERANCE, (a, b)


def _directml(case: points.ProbeCase) -> tuple[str, list, dict]:
    """The DirectML operator, inputs and attributes the execution provider maps the native
    node onto (research: DmlOperatorRoiAlign/RoiPooling/Pooling/Col2Im.cpp)."""
    a, inputs = case.attributes, list(case.inputs.values())
    if case.op == "RoiAlign":
        ratio = a["sampling_ratio"]
        return "RoiAlign1", inputs, {
            "output_size": [a["output_height"], a["output_width"]],
            "reduction_function": {"avg": "average", "max": "max"}[a["mode"]],
            "interpolation_mode": "linear", "spatial_scale_x": a["spatial_scale"],
            "spatial_scale_y": a["spatial_scale"],
            "input_pixel_offset": 0.5 if a["coordinate_transformation_mode"] == "half_pixel"
            else 0.0, "output_pixel_offset": -0.5, "out_of_bounds_input_value": 0.0,
            "minimum_samples_per_output": ratio or 1,
            "maximum_samples_per_output": ratio or UINT32_MAX, "align_regions_to_corners": 0}
    if case.op == "MaxRoiPool":
        return "RoiPooling", inputs, {"pooled_size": a["pooled_shape"],
                                      "spatial_scale": a["spatial_scale"]}
    if case.op == "LpPool":
        k = len(a["kernel_shape"])
        return "LpPooling", inputs, {"window_size": a["kernel_shape"], "strides": a["strides"],
                                     "start_padding": a["pads"][:k],
                                     "end_padding": a["pads"][k:], "dilations": [], "p": a["p"]}
    columns, image, block = inputs
    k = len(block)
    return "Fold", [columns], {"window_sizes": block.tolist(), "output_size": image.tolist(),
                               "strides": a["strides"], "dilations": a["dilations"],
                               "start_padding": a["pads"][:k], "end_padding": a["pads"][k:]}


@pytest.mark.parametrize("point, case", CASES)
def test_the_spec_reading_is_the_reference_under_the_providers_mapping(point, case):
    op, inputs, attributes = _directml(case)
    (want,) = calls.run_reference(OPERATORS_BY_NAME[op],
        inputs, OPERATORS_BY_NAME[op].node_attributes(
            OPERATORS_BY_NAME[op].make_node([f"in{i}" for i in range(len(inputs))], ["Y"],
                                            **attributes)), case.name, [True])
    assert difference(point.readings[points.SPEC](case), want) <= 1e-6


def test_onnxruntime_cpu_is_named_with_its_known_readings(tmp_path):
    folder = tmp_path / "probes"
    probes.export_probes(folder)
    findings = probes.run_probes(folder)
    assert [f.point for f in findings] == [p.name for p in points.POINTS]
    for point, finding in zip(points.POINTS, findings):
        assert (finding.reading, finding.matched) == (point.onnxruntime, finding.cases), point
        assert finding.max_diff <= probes.TOLERANCE
    named = {p.onnxruntime for p in points.POINTS} - {points.SPEC}
    assert named >= {"weighted_corner_max", "float32_edges", "dilated_window"}


def test_probe_command_prints_the_table_and_writes_the_json(tmp_path, capsys):
    data = tmp_path / "probes.json"
    assert cli.main(["conformance", "probe", str(ROOT / "models"), "--json", str(data)]) == 0
    table = capsys.readouterr().out
    assert "| roi_align_max | CPUExecutionProvider | weighted_corner_max | 1/1 |" in table
    report = json.loads(data.read_text())
    assert set(report) == {p.name for p in points.POINTS}
    for finding in report.values():
        assert set(finding) == {"reading", "cases", "matched", "max_diff"}
    assert cli.main(["conformance", "probe", str(tmp_path)]) == 2


def test_a_provider_that_fails_or_follows_no_known_reading_is_reported(tmp_path):
    folder = tmp_path / "probes"
    probes.export_probes(folder)
    case = next(folder.glob("test_probe_roi_align_max_*"))
    for reading in (case / "readings").iterdir():  # no reading matches what CPU computes
        path = reading / "output_0.pb"
        array = numpy_helper.to_array(onnx.load_tensor(path))
        path.write_bytes(numpy_helper.from_array(array + 7, "Y").SerializeToString())
    finding = next(f for f in probes.run_probes(folder) if f.point == "roi_align_max")
    assert finding.reading == probes.NO_READING and finding.max_diff > 0.1
    (case / "model.onnx").write_bytes(b"")
    finding = next(f for f in probes.run_probes(folder) if f.point == "roi_align_max")
    assert finding.reading == probes.ERROR and math.isinf(finding.max_diff)


def test_committed_probes_are_current(tmp_path):
    probes.export_probes(tmp_path)
    fresh = {str(p.relative_to(tmp_path)): p for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    committed = {str(p.relative_to(COMMITTED)): p for p in sorted(COMMITTED.rglob("*"))
                 if p.is_file()}
    assert sorted(fresh) == sorted(committed), "run: dml-onnx conformance export"
    for name, path in fresh.items():
        if Path(name).name.startswith("output_"):  # float64 loops rounded to float32
            old, new = (numpy_helper.to_array(onnx.load_tensor(p))
                        for p in (committed[name], path))
            assert difference(new, old) <= 1e-6, name
        else:
            assert path.read_bytes() == committed[name].read_bytes(), name


def test_probes_are_not_cases_of_the_suite():
    """The suite's runner reads the top-level test_* folders; the probes live below."""
    top = {p.name for p in (ROOT / "models").glob("test_*")}
    assert top and not any(name.startswith("test_probe_") for name in top)
    assert len(list(COMMITTED.glob("test_probe_*"))) == sum(len(p.cases) for p in points.POINTS)
