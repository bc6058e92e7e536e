"""Layer rules, held by test: every operator of the table has its module in each layer, the
kernels never import the domain package, and every list a new operator needs elsewhere
(native-op versions, raising rules) follows the table."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import dml_onnx
from dml_onnx import raising
from dml_onnx.builders import snake
from dml_onnx.conformance import example_case
from dml_onnx.form import DIRECTML_VERSIONS, NATIVE_VERSIONS

ROOT = Path(__file__).resolve().parent.parent


def _imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
    return modules


def test_custom_ops_never_imports_dml_onnx():
    sources = sorted((ROOT / "custom_ops").glob("*.py"))
    assert sources
    for path in sources:
        modules = _imported_modules(path)
        assert not {m for m in modules if m.split(".")[0] in ("dml_onnx", "onnx")}, path.name
    names = ", ".join(f"custom_ops.{p.stem}" for p in sources if p.stem != "__init__")
    code = f"import sys, {names}\nassert not [m for m in sys.modules if m.startswith('dml_onnx')]"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_every_operator_has_one_module_per_layer_with_one_signature():
    for definition in dml_onnx.OPERATORS:
        module = snake(definition.name)
        for layer in ("custom_ops", "dml_onnx/ops", "dml_onnx/reference_ops"):
            assert (ROOT / layer / f"{module}.py").is_file(), (layer, module)
        assert definition.kernel.__module__ == f"custom_ops.{module}"
        assert definition.kernel.__name__ == module
        assert definition.reference.__module__ == f"dml_onnx.reference_ops.{module}"
        assert definition.reference.__name__ == module
        assert dml_onnx.BUILDERS[module].__module__ == f"dml_onnx.ops.{module}"
        kernel, reference = (inspect.signature(f) for f in (definition.kernel,
                                                              definition.reference))
        assert list(reference.parameters) == list(kernel.parameters), module
        attributes = set(definition.attribute_names)
        assert attributes <= set(kernel.parameters), module
        assert "dml_onnx.reference_ops" not in _imported_modules(
            ROOT / "custom_ops" / f"{module}.py")


def test_native_forms_and_raising_rules_follow_the_table():
    """Each native op a form emits has its versions, the DirectML version and a raising rule,
    and raising a lowered example gives the operator back; no list names an op no form uses."""
    emitted: dict[str, set[str]] = {}  # native op -> the operators whose forms emit it
    raised_back = set()  # native ops that a raising rule turns back into their operator
    for definition in dml_onnx.OPERATORS:
        for example in definition.examples():
            if example.error:
                continue
            lowered = dml_onnx.lower_model(example_case(definition, example).model)
            for op in {n.op_type for n in lowered.graph.node} & set(NATIVE_VERSIONS):
                emitted.setdefault(op, set()).add(definition.name)
                raised = raising.raise_model(lowered, positive_rois=True).model
                if [n.op_type for n in raised.graph.node if n.domain == dml_onnx.DOMAIN] == [
                        definition.name]:
                    raised_back.add(op)
    assert set(emitted) == set(NATIVE_VERSIONS) == set(DIRECTML_VERSIONS) == set(raising.RULES)
    assert raised_back == set(emitted)
    assert all(len(owners) == 1 for owners in emitted.values()), emitted
