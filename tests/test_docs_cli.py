"""The README (its operator reference and its code), the command line and the committed
conformance models."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from dml_onnx import conformance, docs

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_readme_operator_reference_is_current():
    assert docs.with_reference(README) == README, "run: dml-onnx operators --update README.md"


def test_readme_python_examples_run_and_print_what_they_say(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert len(blocks) >= 4
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    printed = capsys.readouterr().out
    for comment in re.findall(r"print\(.*\)\s+# (.*)", "\n".join(blocks)):
        assert " ".join(comment.split()) in " ".join(printed.replace("\n", " ").split())


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_console_script_and_module_are_the_same_command():
    script = shutil.which("dml-onnx")
    assert script, "the console script dml-onnx is not installed"
    by_script = _cli(script, "operators")
    by_module = _cli(sys.executable, "-m", "dml_onnx", "operators")
    assert by_script.returncode == by_module.returncode == 0
    assert by_script.stdout == by_module.stdout == docs.operator_reference() + "\n"


def test_committed_conformance_models_are_current_and_pass(tmp_path):
    committed = sorted(p.name for p in (ROOT / "models").glob("test_*"))
    cases = conformance.all_cases()
    assert committed == sorted(c.name for c in cases), "run: dml-onnx write-conformance models"
    for case in cases:
        stored = conformance.load_case(ROOT / "models" / case.name)
        assert stored.model.graph == case.model.graph
        assert stored.model.ir_version == case.model.ir_version
        assert list(stored.model.opset_import) == list(case.model.opset_import)
        assert list(stored.feeds) == list(case.feeds)
        for name in case.feeds:
            np.testing.assert_array_equal(stored.feeds[name], case.feeds[name])
        assert conformance.compare(stored, case.expected) == []
    result = _cli(sys.executable, "-m", "dml_onnx", "check-conformance", "models")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"conformance: {len(cases)} passed, 0 failed" in result.stdout


def test_check_conformance_reports_a_wrong_stored_output(tmp_path):
    conformance.write_suite(tmp_path)
    victim = sorted(tmp_path.glob("test_*"))[0] / "test_data_set_0" / "output_0.pb"
    tensor = onnx.load_tensor(victim)
    array = onnx.numpy_helper.to_array(tensor).copy()
    array.flat[0] = array.flat[0] + 1
    onnx.save_tensor(onnx.numpy_helper.from_array(array, tensor.name), victim)
    result = _cli(sys.executable, "-m", "dml_onnx", "check-conformance", str(tmp_path),
                  "--runtime", "reference")
    assert result.returncode == 1
    assert "1 failed" in result.stdout and "differs in 1 of" in result.stdout


@pytest.mark.parametrize("args", [("check-conformance", "no_such_folder"), ("bogus",)])
def test_cli_rejects_bad_use(args):
    result = _cli(sys.executable, "-m", "dml_onnx", *args)
    assert result.returncode == 2
