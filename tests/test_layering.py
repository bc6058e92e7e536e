"""The layers import downward only: the kernels (the folder ``custom_ops/``, loaded as
``dml_onnx._kernels``) < ``dml_onnx.ops`` and ``dml_onnx.reference_ops`` < the rest of
``dml_onnx``; no operator's module imports another operator's module in the same layer (what
operators share lives in the layer's ``_``-prefixed modules); and nothing imports the kernels
by the folder's name, so that they load once, under the package's name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import dml_onnx
from dml_onnx.builders import snake

ROOT = Path(__file__).resolve().parent.parent
OPERATOR_MODULES = {snake(d.name) for d in dml_onnx.OPERATORS}
LAYERS = {"custom_ops": "dml_onnx._kernels", "dml_onnx/ops": "dml_onnx.ops",
          "dml_onnx/reference_ops": "dml_onnx.reference_ops"}


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code (``from a import b``: ``a``
    and ``a.b``, since ``b`` may be a module)."""
    folder = path.parent.relative_to(ROOT).as_posix()
    package = LAYERS.get(folder, folder.replace("/", "."))
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package
                base = ".".join([*package.split(".")[:len(package.split(".")) - node.level + 1],
                                 *([base] if base else [])])
            modules.add(base)
            modules.update(f"{base}.{alias.name}" for alias in node.names)
    return modules


@pytest.mark.parametrize("folder", sorted(LAYERS))
def test_no_operator_module_imports_another_operators_module(folder):
    package = LAYERS[folder]
    paths = sorted((ROOT / folder).glob("*.py"))
    assert {p.stem for p in paths} >= OPERATOR_MODULES
    for path in paths:  # the package's __init__ is the table: it imports every operator
        if path.stem == "__init__":
            continue
        siblings = {f"{package}.{m}" for m in OPERATOR_MODULES - {path.stem}}
        assert not imported(path) & siblings, (folder, path.name)


def test_the_kernels_import_nothing_of_the_domain_but_themselves_and_no_onnx():
    for path in sorted((ROOT / "custom_ops").glob("*.py")):
        found = {m for m in imported(path)
                 if m.split(".")[0] in ("onnx", "onnxruntime", "onnxruntime_extensions")
                 or m.split(".")[0] == "dml_onnx" and not m.startswith("dml_onnx._kernels")}
        assert not found, (path.name, found)


def test_the_references_import_no_other_part_of_the_domain():
    for path in sorted((ROOT / "dml_onnx" / "reference_ops").glob("*.py")):
        upward = {m for m in imported(path) if m.split(".")[0] == "dml_onnx"
                  and not m.startswith(("dml_onnx.reference_ops", "dml_onnx._kernels"))}
        assert not upward, (path.name, upward)


def test_the_operator_definitions_import_nothing_above_their_layer():
    """``dml_onnx.ops`` reads the table's building blocks (definition, forms, schemas of
    the standard ops), never the binding, conversion or tools built on the table."""
    above = ("dml_onnx.runtime", "dml_onnx.raising", "dml_onnx.standard", "dml_onnx.check",
             "dml_onnx.conformance", "dml_onnx.reference", "dml_onnx.commands", "dml_onnx.cli",
             "dml_onnx.torch", "dml_onnx.calls")
    for path in sorted((ROOT / "dml_onnx" / "ops").glob("*.py")):
        found = {m for m in imported(path) if m.startswith(above)
                 and not m.startswith("dml_onnx.reference_ops")}
        assert not found, (path.name, found)


def test_nothing_imports_the_kernels_by_their_folders_name():
    """``custom_ops`` is the kernels' folder in the repository, not a module: a user's own
    ``custom_ops`` must shadow nothing, and the kernels must not load twice."""
    for folder in ("custom_ops", "dml_onnx", "tests", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            found = {m for m in imported(path) if m.split(".")[0] == "custom_ops"}
            assert not found, (path.relative_to(ROOT).as_posix(), found)
