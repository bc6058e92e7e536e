"""Failure behaviour: the catalogue of bad inputs (``tests/_support/bad_inputs.py``, its rows in
``bad_input_cases.py``) through every layer a user meets, a child process that must survive
every runtime case on both session paths, the memory limit, and concurrent mixed valid and
invalid runs on one session. Malformed standard nodes are in
``test_robustness_standard_nodes``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest

import dml_onnx
from dml_onnx import calls, cli
from dml_onnx._kernels import limits
from tests._support import bad_inputs
from tests._support.bad_input_cases import CASES
from tests._support.bad_inputs import (
    BUILD,
    CHECK,
    CHECKER,
    LAYERS,
    LOAD,
    RUN,
    BadInput,
    limited,
)
from tests._support.native import assert_matches_reference

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module", autouse=True)
def schemas():
    dml_onnx.register_schemas()


def cases(layer: str) -> list:
    return [pytest.param(c, id=c.name) for c in CASES if layer in c.layers]


def assert_names_everything(case: BadInput, layer: str, message: str) -> None:
    for part in case.expected(layer):
        assert part in message, f"{part!r} missing from {layer} message {message!r}"


def raised(case: BadInput, layer: str, call, error: type[BaseException]) -> BaseException:
    with limited(case), pytest.raises(error) as info:
        call()
    assert_names_everything(case, layer, str(info.value))
    return info.value


@pytest.fixture
def restore_limit():
    previous = dml_onnx.set_memory_limit(None)
    yield
    dml_onnx.set_memory_limit(previous)


# --------------------------------------------------------------------------------- catalogue
def test_catalogue_covers_every_listed_error_operator_and_layer():
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES)
    assert {c.spec for c in CASES} - {""} == set(bad_inputs.SPEC_ERRORS)
    assert {c.op for c in CASES} == set(dml_onnx.OPERATORS_BY_NAME)
    for layer in LAYERS:
        assert {c.op for c in CASES if layer in c.layers} == set(dml_onnx.OPERATORS_BY_NAME), \
            layer
    assert all(c.layers and c.layers <= set(LAYERS) for c in CASES)


@pytest.mark.parametrize("case", cases(BUILD))
def test_builder(case):
    raised(case, BUILD, case.build, case.error)


@pytest.mark.parametrize("case", cases(CHECKER))
def test_onnx_checker(case):
    raised(case, CHECKER, lambda: onnx.checker.check_model(case.static_model(), full_check=True),
           (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError))


@pytest.mark.parametrize("case", cases(CHECK))
def test_check_model_and_command(case, tmp_path, capsys):
    model = case.static_model()
    with limited(case):
        problems = dml_onnx.model_problems(model)
        with pytest.warns(DeprecationWarning, match="use dml_onnx.model_problems"):
            assert dml_onnx.check_model(model) == problems  # the earlier name
        assert any(all(part in p for part in case.expected(CHECK)) for p in problems), problems
        path = tmp_path / "model.onnx"
        onnx.save(model, path)
        assert cli.main(["check", str(path)]) == 1
    printed = capsys.readouterr().out
    assert all(problem in printed for problem in problems)


@pytest.mark.parametrize("case", cases(LOAD))
def test_session_refuses_the_model(case):
    raised(case, LOAD, lambda: dml_onnx.InferenceSession(case.static_model()), case.error)


@pytest.mark.parametrize("case", cases(RUN))
def test_session_run_raises_then_keeps_working(case):
    session = dml_onnx.InferenceSession(case.runtime_model())
    error = raised(case, RUN, lambda: session.run(None, case.feeds()), dml_onnx.KernelError)
    assert str(error).startswith(f"{case.op} '{case.name}': ")
    valid = case.valid_feeds()
    if valid is not None:
        with limited(case):
            got = session.run(None, valid)
            want = dml_onnx.ReferenceEvaluator(case.runtime_model()).run(None, valid)
        assert_matches_reference(got, want)


def test_valid_models_have_no_problems(tmp_path, capsys):
    for definition in dml_onnx.OPERATORS:
        example = next(e for e in definition.examples() if not e.error)
        case = BadInput("valid", definition.name, "", "", frozenset(),
                        attributes=example.attributes, outputs=example.outputs,
                        inputs=dict(zip((p.name for p in definition.inputs), example.inputs)))
        assert dml_onnx.model_problems(case.static_model()) == []
        path = tmp_path / f"{definition.name}.onnx"
        onnx.save(case.static_model(), path)
        assert cli.main(["check", str(path)]) == 0
    assert "0 problem(s)" in capsys.readouterr().out


def test_dml_onnx_check_command_exit_status(tmp_path):
    bad = next(c for c in CASES if c.name == "roi_align_reduction_sum")
    onnx.save(bad.static_model(), tmp_path / "bad.onnx")
    result = subprocess.run([sys.executable, "-m", "dml_onnx", "check", str(tmp_path / "bad.onnx")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr
    assert ("RoiAlign1 'roi_align_reduction_sum': reduction_function 'sum' is not one of "
            "'average', 'max'") in result.stdout


def test_check_follows_shapes_through_the_graph_and_reports_every_node(restore_limit):
    dml_onnx.set_memory_limit(1 << 30)
    helper = onnx.helper
    nodes = [dml_onnx.roi_pooling("X", "rois", "pooled", pooled_size=[1000, 1000], name="pool"),
             helper.make_node("Identity", ["pooled"], ["same"]),
             dml_onnx.unfold("same", "columns", window_sizes=[100, 100], name="im2col"),
             helper.make_node("Unfold", ["X"], ["bad"], domain=dml_onnx.DOMAIN,
                              window_sizes=[0, 2]),
             helper.make_node("LpPooling", ["X3"], ["pooled3"], domain=dml_onnx.DOMAIN,
                              window_size=[2, 2])]
    model = dml_onnx.make_model(
        nodes, [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, 1, 4, 4]),
                helper.make_tensor_value_info("X3", onnx.TensorProto.FLOAT, [1, 1, 4]),
                helper.make_tensor_value_info("rois", onnx.TensorProto.FLOAT, ["R", 5])],
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
         for n in ("columns", "bad", "pooled3")])
    assert dml_onnx.model_problems(model) == [  # R is not known: im2col's size is not either
        "Unfold '<producing bad>': window_sizes[0] 0 is below 1",
        "LpPooling '<producing pooled3>': X rank 3 is not 4 (the attributes have 2 spatial "
        "values)"]
    model.graph.input[2].type.tensor_type.shape.dim[0].dim_value = 3  # now R is known
    problems = dml_onnx.model_problems(model)
    assert len(problems) == 3
    assert problems[0].startswith("Unfold 'im2col': output Y [3, 10000, 811801] of float32 "
                                  "needs 97416120000 bytes, above the memory limit of "
                                  "1073741824 bytes")


def test_check_reports_the_opset_and_nodes_in_subgraphs():
    helper = onnx.helper
    case = next(c for c in CASES if c.name == "roi_pooling_pooled_size_0")
    model = case.static_model()
    del model.opset_import[:]
    model.opset_import.extend([helper.make_opsetid("", 18), helper.make_opsetid("dml_onnx", 2)])
    assert dml_onnx.model_problems(model)[0] == \
        "model: opset import dml_onnx version 2 is not 1"
    branch = helper.make_graph([dml_onnx.unfold("X", "Y", window_sizes=[1], name="inner")],
                               "branch", [], [helper.make_tensor_value_info("Y", 1, None)])
    model = dml_onnx.make_model(
        [helper.make_node("If", ["c"], ["Y"], then_branch=branch, else_branch=branch,
                          name="if")],
        [helper.make_tensor_value_info(n, t, [1, 1, 2]) for n, t in (("X", 1), ("c", 9))],
        [helper.make_tensor_value_info("Y", 1, None)])
    assert dml_onnx.model_problems(model) == [
        "Unfold 'inner': dml_onnx nodes inside a subgraph (If node 'if') are not supported "
        "by dml_onnx"]


def test_check_reports_an_unreadable_model(tmp_path):
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"not a model")
    (problem,) = dml_onnx.model_problems(path)
    assert problem.startswith("model: cannot be read as ONNX")
    assert dml_onnx.model_problems(tmp_path / "missing.onnx")[0].startswith("model: cannot be read")


# --------------------------------------------------------------------------------- child process
def test_a_child_process_survives_every_runtime_case_on_both_paths():
    result = subprocess.run([sys.executable, "-m", "tests._support.run_bad_inputs"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    outcomes = {o["case"]: o for o in map(json.loads, result.stdout.splitlines())}
    runtime_cases = [c for c in CASES if RUN in c.layers]
    assert sorted(outcomes) == sorted(c.name for c in runtime_cases)
    for case in runtime_cases:
        outcome = outcomes[case.name]
        assert outcome["session"]["type"] == "KernelError", outcome
        assert_names_everything(case, RUN, outcome["session"]["message"])
        # the plain session fails in the guard node named after op and node; the reason is logged
        plain = outcome["plain"]
        assert plain["type"] is not None, outcome
        assert f"{case.op} '{case.name}'" in plain["message"], outcome
        assert_names_everything(case, RUN, plain["logged"])
        wanted = None if case.valid_feeds() is None else True
        assert outcome["session_recovered"] is wanted, outcome
        assert outcome["plain_recovered"] is wanted, outcome


# --------------------------------------------------------------------------------- memory limit
def test_default_limit_is_a_share_of_available_memory(restore_limit, monkeypatch):
    monkeypatch.setattr(limits, "_default_limit", None)
    monkeypatch.setattr(limits, "available_memory", lambda: 8000)
    assert dml_onnx.memory_limit() == 8000 * limits.MEMORY_FRACTION
    monkeypatch.undo()
    assert 0 < dml_onnx.memory_limit() <= limits.available_memory()


def test_available_memory_without_proc_meminfo_or_sysconf(monkeypatch):
    def unavailable(*args):
        raise OSError("not here")

    monkeypatch.setattr(limits, "open", unavailable, raising=False)
    pages = limits.available_memory()
    assert pages > 0  # from os.sysconf
    monkeypatch.setattr(limits.os, "sysconf", lambda name: unavailable())
    assert limits.available_memory() == 8 << 30


def test_set_memory_limit_returns_the_previous_setting(restore_limit):
    assert dml_onnx.set_memory_limit(1000) is None
    assert dml_onnx.memory_limit() == 1000
    assert dml_onnx.set_memory_limit(None) == 1000
    assert dml_onnx.memory_limit() > 1000
    for bad in (-1, 1.5, "1GB", True):
        with pytest.raises(ValueError, match="memory limit"):
            dml_onnx.set_memory_limit(bad)


def test_limit_applies_to_the_reference_evaluator_and_leaves_small_outputs(restore_limit):
    case = next(c for c in CASES if c.name == "lp_pooling_output_above_limit")
    model = case.runtime_model()
    dml_onnx.set_memory_limit(127)
    with pytest.raises(dml_onnx.KernelError, match=r"output Y \[1, 2, 4, 4\] of float32 needs "
                                                   r"128 bytes, above the memory limit of 127"):
        dml_onnx.ReferenceEvaluator(model).run(None, case.feeds())
    dml_onnx.set_memory_limit(200)  # the output (128 bytes) and every temporary fit
    (y,) = dml_onnx.InferenceSession(model).run(None, case.feeds())
    assert y.shape == (1, 2, 4, 4)


# --------------------------------------------------------------------------------- no hang
def test_huge_but_empty_work_finishes(restore_limit):
    """Attributes asking for astronomically many taps build, check and run at once when the
    data is empty (nothing is planned or looped over per tap)."""
    dml_onnx.set_memory_limit(1 << 62)  # no array here is allocated at the size it asks for
    window = [10 ** 4] * 3
    node = dml_onnx.fold("X", "Y", window_sizes=window, output_size=window, name="huge")
    model = dml_onnx.make_model(
        [node], [onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, None)],
        [onnx.helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)])
    assert dml_onnx.model_problems(model) == []
    (Y,) = dml_onnx.InferenceSession(model).run(None, {"X": np.zeros((0, 10 ** 12, 1),
                                                                     np.float32)})
    assert Y.shape == (0, 1, *window)
    (Y,) = calls.run_kernel(dml_onnx.OPERATORS_BY_NAME["LpPooling"],
        [np.zeros((0, 3, 1), np.float32)],
        {"window_size": [10 ** 12], "strides": [], "dilations": [], "start_padding": [10 ** 12],
         "end_padding": [], "p": 2}, "lp", [True])
    assert Y.shape == (0, 3, 2)


# --------------------------------------------------------------------------------- concurrency
@pytest.mark.parametrize("op", list(bad_inputs.BASE))
def test_eight_threads_mixed_valid_and_invalid_runs_on_one_session(op):
    base = bad_inputs.BASE[op]
    model = BadInput("shared", op, "", "", frozenset()).runtime_model()
    session = dml_onnx.InferenceSession(model)
    reference = dml_onnx.ReferenceEvaluator(model)
    alone = dml_onnx.InferenceSession(model)
    invalid = [c for c in CASES if c.op == op and RUN in c.layers and c.memory_limit is None
               and c.all_attributes() == base.attributes and c.outputs == (True,)
               and all(a.dtype == base.inputs[n].dtype for n, a in c.feeds().items())]
    assert len(invalid) >= 2, op
    rng = np.random.default_rng(7)
    valid = [{n: (a * rng.uniform(0.5, 2)).astype(a.dtype) if a.dtype.kind == "f" else a
              for n, a in base.inputs.items()} for _ in range(8)]
    wants = [alone.run(None, feeds) for feeds in valid]  # threads must not change a bit
    for feeds, want in zip(valid, wants):
        assert_matches_reference(want, reference.run(None, feeds))
    failures: list[str] = []

    def work(index: int) -> None:
        for round_ in range(200):
            step = index + round_
            if step % 3 == 0:
                case = invalid[step % len(invalid)]
                try:
                    session.run(None, case.feeds())
                    failures.append(f"{case.name}: no error")
                except dml_onnx.KernelError as error:
                    op_type, _, field, value = case.expected(RUN)
                    if not all(p in str(error) for p in (op_type, "'shared'", field, value)):
                        failures.append(f"{case.name}: {error}")
                continue
            got = session.run(None, valid[step % len(valid)])
            if not all(np.array_equal(a, b) for a, b in zip(got, wants[step % len(valid)])):
                failures.append(f"thread {index} round {round_}: wrong result")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
