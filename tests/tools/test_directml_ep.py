"""The suite on onnxruntime's DirectML execution provider: every model whose ``_expanded`` twin
the provider was measured to refuse or compute wrong has a ``_decomposed`` twin where a
decomposition can avoid the native op, the decomposed twins use only ops the provider registers
at their opset and agree with the expected outputs, ``conformance run`` takes the providers and
names each run's form and provider, and the probes carry the provider's measured readings."""

from __future__ import annotations

import json

import onnx
import pytest

from dml_onnx import cli, conformance
from dml_onnx.conformance import directml_ep, points, probes
from dml_onnx.form import DIRECTML_MAX_RANK, NATIVE_VERSIONS
from dml_onnx.standard import lower_model
from tests._support.ranks import ranks


@pytest.fixture(scope="module")
def suite() -> dict[str, conformance.Case]:
    return {case.name: case for case in conformance.all_cases()}


def _natives(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in model.graph.node} & set(NATIVE_VERSIONS)


def test_a_decomposed_twin_exactly_where_the_expanded_twin_has_a_native_op(suite):
    models = [c for c in suite.values() if c.form == "dml_onnx"]
    with_twin = {c.name for c in models if f"{c.name}_decomposed" in suite}
    assert with_twin == {c.name for c in models if _natives(suite[f"{c.name}_expanded"].model)}
    assert with_twin == directml_ep.DECOMPOSED_GOOD  # every one measured to load and agree
    for name in with_twin:
        assert not _natives(suite[f"{name}_decomposed"].model), name


def test_every_expanded_twin_the_provider_refused_or_got_wrong_has_a_form_or_is_open(suite):
    """Where the expanded twin has a native op, the decomposed twin replaces it; elsewhere the
    expanded twin is already the decomposition (no form of ours avoids what the provider did:
    a non-finite rounding onnxruntime 1.24's CPU provider shows too). Every refusal and the
    zero-ROI scatter have a form apart from the one measured."""
    assert set(directml_ep.EXPANDED_NOT_GOOD) <= {c.name for c in suite.values()
                                                  if c.form == "dml_onnx"}
    open_models = []
    for name in directml_ep.EXPANDED_NOT_GOOD:
        if f"{name}_decomposed" in suite:
            assert name in directml_ep.DECOMPOSED_GOOD
            assert "_decomposed twin loads and agrees" in directml_ep.measured(name)
        else:
            decomposed = lower_model(suite[name].model, native=False)
            assert decomposed == suite[f"{name}_expanded"].model, name
            assert "no form of it is known good" in directml_ep.measured(name)
            open_models.append(name)
    assert open_models == ["test_roi_align1_non_finite_average"]
    assert len(directml_ep.EXPANDED_NOT_GOOD) == 20
    assert directml_ep.FUSION not in directml_ep.EXPANDED_NOT_GOOD.values()


MAX_MODELS = {*directml_ep.MAX_ROI_ALIGN1, *directml_ep.MAX_ROI_ALIGN_GRAD}


def _changed(case: conformance.Case) -> bool:
    """Whether the twin of ``case`` holds a change made since the measurements: the 6-D
    Unfold's flat positions, the rank-3 max of RoiAlign1 / RoiAlignGrad, RoiAlignGrad's dX
    selecting zeros without regions."""
    node = next(n for n in case.model.graph.node if n.domain == "dml_onnx")
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return (case.name.startswith("test_unfold_6d")
            or attributes.get("reduction_function") == b"max"
            or (node.op_type == "RoiAlignGrad" and node.output[0] != ""))


def test_the_candidates_are_apart_from_the_measured_forms_awaiting_measurement(suite):
    """Every twin changed since the measurements is a candidate: the measured 6-D Unfold twins
    the provider's registry refused, the max RoiAlign1 / RoiAlignGrad twins its graph fusion
    refused (and the float64 ones it loaded), the zero-ROI dX where it returned unwritten
    memory, and the other dX twins (loaded) that the same change reaches. They stay apart from
    the measured forms, neither known good nor known bad, until they are measured."""
    assert len(MAX_MODELS) == 17
    assert set(directml_ep.CANDIDATES) == {
        c.name for c in suite.values() if c.form == "dml_onnx" and _changed(c)}
    assert len(directml_ep.CANDIDATES) == 45
    measured_forms = set(directml_ep.EXPANDED_NOT_GOOD) | directml_ep.DECOMPOSED_GOOD
    for name in directml_ep.CANDIDATES:
        assert name not in measured_forms and f"{name}_decomposed" not in suite
        twin = suite[f"{name}_expanded"].model
        assert twin == lower_model(suite[name].model, native=False)
        assert directml_ep.unregistered(twin) == []
        assert max(ranks(twin).values()) <= DIRECTML_MAX_RANK
        outcome = (directml_ep.FUSION if name in MAX_MODELS
                   else directml_ep.REGISTRY if name.startswith("test_unfold")
                   else "memory it never wrote" if name.endswith("zero_rois")
                   else directml_ep.LOADED)
        for form in (name, f"{name}_expanded"):
            reading = directml_ep.measured(form)
            assert "unmeasured" in reading and "candidate awaiting measurement" in reading
            assert outcome in reading and "known good" not in reading


COMPARISONS = {"Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"}


def test_the_max_twins_compare_and_reduce_at_rank_3_over_one_axis(suite):
    """What only the refused max twins held: comparisons and ReduceMax / ReduceMin of rank-6
    tensors over two axes, and a Squeeze of rank 6. Now every comparison, ReduceMax,
    ReduceMin and Squeeze reads tensors of rank at most 3, and each reduction one axis."""
    for name in sorted(MAX_MODELS):
        twin = suite[f"{name}_expanded"].model
        rank = ranks(twin)
        values = {t.name: onnx.numpy_helper.to_array(t) for t in twin.graph.initializer}
        values |= {n.output[0]: onnx.numpy_helper.to_array(n.attribute[0].t)
                   for n in twin.graph.node if n.op_type == "Constant"}
        watched = [n for n in twin.graph.node
                   if n.op_type in COMPARISONS | {"ReduceMax", "ReduceMin", "Squeeze"}]
        assert {n.op_type for n in watched} >= {"GreaterOrEqual", "ReduceMax"}, name
        for node in watched:
            assert max(rank[i] for i in node.input if i in rank) <= 3, (name, node.name)
            if node.op_type.startswith("Reduce"):
                axes = [a.ints for a in node.attribute if a.name == "axes"] or [
                    values[node.input[1]]]
                assert len(axes[0]) == 1, (name, node.name)


def test_the_zero_roi_grad_twin_selects_zeros_where_there_are_no_regions(suite):
    """dX does not depend on what a provider's scatter does with no updates: it is the
    selection, on a 0-d condition, of 0 or the scatters' sum."""
    twin = suite["test_roi_align_grad_zero_rois_expanded"].model
    rank = ranks(twin)
    made_by = {o: n for n in twin.graph.node for o in n.output}
    node = made_by[twin.graph.output[0].name]
    while node.op_type in ("Transpose", "Reshape", "Identity", "Cast"):
        node = made_by[node.input[0]]
    assert node.op_type == "Where" and rank[node.input[0]] == 0
    assert made_by[node.input[2]].op_type == "ScatterND"
    assert made_by[node.input[0]].op_type == "Equal"


def test_the_decomposed_forms_use_only_ops_the_provider_registers_at_their_opset(suite):
    primitive = [c for c in suite.values() if c.form == "decomposed"
                 or (c.form == "expanded" and not _natives(c.model))]
    assert len(primitive) == 189
    for case in primitive:
        assert directml_ep.unregistered(case.model) == [], case.name
        assert {n.op_type for n in case.model.graph.node} <= (
            set(directml_ep.REGISTERED) | directml_ep.AT_LOAD), case.name


def test_a_fold_decomposed_twin_imports_the_opset_whose_scatter_the_provider_registers(suite):
    """Fold's cases import opset 18 for Col2Im-18; ScatterElements-18 is not the provider's,
    ScatterElements-16 is."""
    case = suite["test_fold_defaults"]
    assert case.model.opset_import[0].version == 18
    assert directml_ep.unregistered(lower_model(case.model, native=False)) == [
        "ScatterElements-18"]
    assert suite["test_fold_defaults_decomposed"].model.opset_import[0].version == 16
    assert directml_ep.unregistered(suite["test_fold_defaults_expanded"].model) == [
        "Col2Im-18"]


def test_the_decomposed_twins_agree_with_the_expected_outputs_on_the_cpu(suite):
    outcomes = [conformance.run_case(c) for c in suite.values() if c.form == "decomposed"]
    assert len(outcomes) == 60
    assert [o for o in outcomes if not o.passed] == []
    assert {(o.form, o.provider) for o in outcomes} == {("decomposed", "CPUExecutionProvider")}


def _three_forms(suite, folder) -> None:
    for form, suffix in conformance.FORMS.items():
        conformance.write_case(suite[f"test_lp_pooling_p3{suffix}"],
                               folder / f"test_lp_pooling_p3{suffix}")
        assert conformance.load_case(folder / f"test_lp_pooling_p3{suffix}").form == form


def test_run_names_the_form_and_provider_of_every_run(suite, tmp_path, capsys):
    _three_forms(suite, tmp_path)
    assert cli.main(["conformance", "run", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    for line in ("[1/3] test_lp_pooling_p3 ok (dml_onnx on dml_onnx.InferenceSession)",
                 "[2/3] test_lp_pooling_p3_decomposed ok (decomposed on CPUExecutionProvider)",
                 "[3/3] test_lp_pooling_p3_expanded ok (expanded on CPUExecutionProvider)"):
        assert line in captured.err
    for row in ("| dml_onnx | dml_onnx.InferenceSession | 1 | 1 |",
                "| decomposed | CPUExecutionProvider | 1 | 1 |",
                "| expanded | CPUExecutionProvider | 1 | 1 |", "| LpPooling | 3 | 3 |"):
        assert row in captured.out
    assert "conformance: 3 passed, 0 failed" in captured.out


def test_each_standard_model_runs_on_each_provider_named(suite, tmp_path):
    _three_forms(suite, tmp_path)
    outcomes = conformance.run_suite(tmp_path, providers=["CPUExecutionProvider"] * 2)
    assert [(o.case, o.provider) for o in outcomes] == [
        ("test_lp_pooling_p3", "dml_onnx.InferenceSession"),
        *[(f"test_lp_pooling_p3_{form}", "CPUExecutionProvider")
          for form in ("decomposed", "decomposed", "expanded", "expanded")]]


@pytest.mark.parametrize("command", ["run", "probe"])
def test_a_provider_onnxruntime_does_not_offer_is_a_clear_error(command, suite, tmp_path,
                                                              capsys):
    conformance.write_case(suite["test_lp_pooling_p3_expanded"], tmp_path / "test_x")
    probes.export_probes(tmp_path / conformance.PROBES)
    status = cli.main(["conformance", command, str(tmp_path), "--providers",
                       directml_ep.PROVIDER, "CPUExecutionProvider"])
    message = capsys.readouterr().err
    assert status == 1
    assert "execution provider DmlExecutionProvider is not available in the installed " \
           "onnxruntime" in message and "CPUExecutionProvider" in message
    with pytest.raises(ValueError, match="not available"):
        conformance.run_suite(tmp_path, providers=["NoSuchExecutionProvider"])


def test_the_probes_carry_the_providers_measured_readings(tmp_path, capsys):
    measured = {p.name: p.directml_ep for p in points.POINTS}
    for point in points.POINTS:
        assert point.directml_ep in {*point.readings, points.ERROR}, point.name
    assert measured["col2im_asymmetric_pads"] == "begin_pads_at_end"
    assert measured["max_roi_pool_bin_edges"] == measured["max_roi_pool_rounding"] == "error"
    assert measured["roi_align_boundary"] == measured["max_roi_pool_nan"] == points.SPEC
    probes.export_probes(tmp_path)
    for folder in tmp_path.iterdir():
        data = json.loads((folder / "probe.json").read_text())
        assert data["directml_ep"] == measured[data["point"]]
    assert cli.main(["conformance", "probe", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    assert "| DirectML EP (measured) |" in table.splitlines()[0]
    assert "| col2im_asymmetric_pads | CPUExecutionProvider | spec | 1/1 | 0 | " \
           "begin_pads_at_end |" in table
