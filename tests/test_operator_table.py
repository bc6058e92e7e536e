"""Layer rules, held by test: every operator of the table has its module in each layer, the
kernels never import the domain package, and every list a new operator needs elsewhere
(native-op versions, raising rules) follows the table."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import dml_onnx
from dml_onnx import raising
from dml_onnx._kernels import KernelError
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


def test_the_kernels_never_import_the_domain_package_or_onnx():
    """The kernels (``custom_ops/``, loaded as ``dml_onnx._kernels``) import one another
    relatively, and loading them all loads no other module of ``dml_onnx`` than a bare
    ``import dml_onnx`` does (their parent package), nor onnx."""
    sources = sorted((ROOT / "custom_ops").glob("*.py"))
    assert sources
    for path in sources:
        modules = _imported_modules(path)
        assert not {m for m in modules if m.split(".")[0] in ("dml_onnx", "onnx", "custom_ops")
                    }, path.name
        assert all(node.level <= 1 for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.ImportFrom)), path.name  # nothing above the package
    names = ", ".join(f"dml_onnx._kernels.{p.stem}" for p in sources if p.stem != "__init__")
    code = ("import sys, dml_onnx\nbare = set(sys.modules)\n"
            f"import {names}\n"
            "assert 'onnx' not in sys.modules\n"
            "assert not [m for m in set(sys.modules) - bare if m.startswith('dml_onnx')"
            " and not (m + '.').startswith('dml_onnx._kernels.')]")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_every_operator_has_one_module_per_layer_with_one_signature():
    for definition in dml_onnx.OPERATORS:
        module = snake(definition.name)
        for layer in ("custom_ops", "dml_onnx/_kernels", "dml_onnx/ops",
                      "dml_onnx/reference_ops"):
            assert (ROOT / layer / f"{module}.py").is_file(), (layer, module)
        assert definition.kernel.__name__ == f"dml_onnx._kernels.{module}"
        assert definition.reference.__name__ == f"dml_onnx.reference_ops.{module}"
        for function, layer in ((definition.compute, "dml_onnx._kernels"),
                                (definition.compute_reference, "dml_onnx.reference_ops")):
            assert function.__module__ == f"{layer}.{module}"
            assert function.__name__ == module
        assert definition.prepare is definition.kernel.prepare
        assert dml_onnx.BUILDERS[module].__module__ == f"dml_onnx.ops.{module}"
        kernel, reference = (inspect.signature(f).parameters for f in (
            definition.compute, definition.compute_reference))
        inputs = [p.name for p in definition.inputs]
        for parameters in (kernel, reference):  # the inputs, then node and the attributes
            assert [n for n, p in parameters.items()
                    if p.kind is p.POSITIONAL_OR_KEYWORD] == inputs, module
            assert parameters["node"].kind is inspect.Parameter.KEYWORD_ONLY, module
        assert list(kernel.values())[-1].kind is inspect.Parameter.VAR_KEYWORD, module
        # the reference names no keyword that the kernel does not take
        named = {n for n, p in reference.items() if p.kind is p.KEYWORD_ONLY} - {"node"}
        assert named <= set(definition.kernel.prepare.attributes), module
        assert "dml_onnx.reference_ops" not in _imported_modules(
            ROOT / "custom_ops" / f"{module}.py")


def _base_attributes(definition) -> dict:
    """Every attribute of the first valid example, defaults filled in, and the kernel
    options of a node that requests every output."""
    example = next(e for e in definition.examples() if not e.error)
    attributes = {a.name: a.kernel_default for a in definition.attributes if not a.required}
    return {**attributes, **example.attributes,
            **definition.kernel_options([True] * len(definition.outputs))}


def test_every_kernel_prepares_exactly_the_tables_attributes():
    """``dml_onnx._kernels.<op>.prepare`` takes the table's attributes (and the kernel options) by
    name, every one of them, and refuses a name the table lacks or a required one missing
    with a KernelError."""
    for definition in dml_onnx.OPERATORS:
        module = importlib.import_module(f"dml_onnx._kernels.{snake(definition.name)}")
        assert callable(module.prepare), definition.name
        attributes = _base_attributes(definition)
        assert set(definition.attribute_names) <= set(attributes)
        run = module.prepare(node="n", **attributes)
        assert callable(run), definition.name
        known = set(attributes) | {"exact_roi_gradient"} & set(module.prepare.attributes)
        assert set(module.prepare.attributes) == known, definition.name
        with pytest.raises(KernelError) as error:
            module.prepare(node="n", **attributes, not_an_attribute=1)
        assert (error.value.op, error.value.node, error.value.field, error.value.value) == (
            definition.name, "n", "attribute", "not_an_attribute")
        listed = error.value.rule.removeprefix("is unknown (known: ").removesuffix(")")
        assert set(listed.split(", ")) == known, definition.name
        for attribute in definition.attributes:
            if attribute.required:
                with pytest.raises(KernelError, match=f"attribute '{attribute.name}' is "
                                                      "required but missing"):
                    module.prepare(node="n", **{k: v for k, v in attributes.items()
                                                if k != attribute.name})


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
