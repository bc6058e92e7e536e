"""The dependency contract: declared ranges are the tested ones, private hooks stay in one
adapter module and fail early and clearly when a release drops them."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from dml_onnx.runtime import private_api

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
OLDEST = ROOT / ".ci" / "oldest.txt"
PRIVATE = ("_ocos", "_sess", "_get_c_value", "install_hooker", "_on_pyop_invocation")
"""Names of private parts of onnxruntime-extensions and onnxruntime."""


def _requirements() -> dict[str, str]:
    """Every requirement of the project and its extras: name -> version specifier."""
    project = PYPROJECT["project"]
    found = {}
    extras = project["optional-dependencies"]
    for line in (*project["dependencies"], *(line for e in extras.values() for line in e)):
        name, specifier = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(.*)", line).groups()
        found[name.lower()] = specifier.replace(" ", "")
    return found


def test_oldest_leg_pins_every_lower_bound():
    """CI's oldest leg installs exactly the lowest version each requirement allows."""
    pins = dict(line.strip().split("==") for line in OLDEST.read_text().splitlines()
                if line.strip() and not line.startswith("#"))
    lower = {name: re.search(r">=([\w.]+)", specifier).group(1)
             for name, specifier in _requirements().items()}
    assert pins == lower


def test_extensions_range_is_bounded_at_the_newest_tested_release():
    assert _requirements()["onnxruntime-extensions"] == private_api.SUPPORTED_EXTENSIONS
    assert "<=" in private_api.SUPPORTED_EXTENSIONS


def _names(tree: ast.AST) -> set[str]:
    """Every attribute, variable, imported and string-constant name of a module."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.update(node.name.split("."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    return names


def test_private_parts_are_used_only_by_the_adapter_module():
    sources = [path for package in ("dml_onnx", "custom_ops")
               for path in sorted((ROOT / package).rglob("*.py"))]
    users = [path.relative_to(ROOT).as_posix() for path in sources
             if _names(ast.parse(path.read_text())) & set(PRIVATE)]
    assert users == ["dml_onnx/runtime/private_api.py"]


def test_a_missing_private_hook_fails_at_the_runtime_import_naming_the_supported_versions():
    for hook in ("_on_pyop_invocation", "Opdef"):
        code = ("from onnxruntime_extensions import _ocos\n"
                f"del _ocos.{hook}\n"
                "from dml_onnx import InferenceSession\n")
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                cwd=ROOT, timeout=120)
        assert result.returncode == 1
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("ImportError: dml_onnx needs onnxruntime-extensions"
                               f"{private_api.SUPPORTED_EXTENSIONS}; the installed ")
        assert hook in last


def test_readme_states_the_tested_ranges():
    readme = (ROOT / "README.md").read_text()
    for name, specifier in _requirements().items():
        assert f"`{name}{specifier}`" in readme, name
