"""No import circle in the package, static or by name: a module that imports another (an
``import`` or ``from`` statement anywhere in it, or ``importlib.import_module`` of a literal
name) never ends up imported by it again. The kernels' modules (``custom_ops/``, the package
``dml_onnx._kernels``) count under that name."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in (("dml_onnx", ROOT / "dml_onnx"),
                            ("dml_onnx._kernels", ROOT / "custom_ops")):
        for path in folder.rglob("*.py"):
            relative = path.relative_to(folder).with_suffix("").parts
            if relative[0] == "_kernels":  # the link to custom_ops/: counted above
                continue
            parts = (package, *relative[:-1], *([] if relative[-1] == "__init__" else
                                                 [relative[-1]]))
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` (at ``path``) imports, statically or by a literal
    name given to ``import_module``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            targets += [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                        for a in node.names]
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"):
            targets.append(node.args[0].value)
    return {target for target in targets if target in modules and target != name}


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(edges[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                other = stack.pop()
                group.append(other)
                if other == module:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return circles


def test_no_module_of_the_package_imports_itself_through_others():
    modules = _modules()
    assert {"dml_onnx", "dml_onnx.runtime.session", "dml_onnx._kernels._threads"} <= set(modules)
    edges = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _circles(edges) == []


def test_the_circle_finder_sees_a_circle_by_name(tmp_path):
    """The check can fail: a circle through ``import_module`` of a literal name is found."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    module = tmp_path / "x.py"
    module.write_text('import importlib\nimportlib.import_module("dml_onnx.y")\n',
                      encoding="utf-8")
    modules = {"dml_onnx.x": module, "dml_onnx.y": tmp_path / "y.py"}
    assert _imports("dml_onnx.x", module, modules) == {"dml_onnx.y"}
