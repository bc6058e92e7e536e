"""The documentation (the operator reference and every code example of README.md and docs/),
the command line and the committed conformance models."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import numpy as np
import onnx
import pytest

import dml_onnx
from dml_onnx import conformance, docs
from dml_onnx.builders import snake
from dml_onnx.conformance import directml_ep

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *(ROOT / name for name in ("CONTRIBUTING.md", "benchmarks/README.md"))]
"""Every page whose code examples the tests run."""
FENCES = {"python", "sh", "console", "text", "{eval-rst}", "{toctree}"}
"""The code-fence languages the pages use: ``python`` blocks run, the others are shown (or,
the last two, are Sphinx directives)."""


def _blocks(page: Path) -> list[tuple[str, str]]:
    """``(language, code)`` of each fenced block of ``page``."""
    return re.findall(r"^```([^`\n]*)\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)


def test_operator_reference_is_current():
    page = (ROOT / "docs" / "operators.md").read_text(encoding="utf-8")
    assert docs.with_reference(page) == page, \
        "run: dml-onnx operators --update docs/operators.md"


def test_every_code_block_names_its_language():
    for page in PAGES:
        languages = {language for language, _ in _blocks(page)}
        assert languages <= FENCES, f"{page.relative_to(ROOT)}: {languages - FENCES}"


def test_every_python_example_runs_as_written():
    """Each page's ``python`` blocks, in order, as one script in a fresh process (a later
    block uses what an earlier one defined); each ``print(...)  # text`` prints ``text``.
    The pages run side by side."""
    scripts = {page: [code for language, code in _blocks(page) if language == "python"]
               for page in PAGES}
    scripts = {page: blocks for page, blocks in scripts.items() if blocks}
    assert {ROOT / "README.md", ROOT / "docs" / "operators.md"} <= set(scripts)
    children = {page: subprocess.Popen([sys.executable, "-c", "\n".join(blocks)], cwd=ROOT,
                                       text=True, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE)
                for page, blocks in scripts.items()}
    failures = []
    for page, child in children.items():
        out, err = child.communicate(timeout=600)
        name = page.relative_to(ROOT)
        if child.returncode != 0:
            failures.append(f"{name}:\n{err}")
            continue
        printed = " ".join(out.split())
        failures += [f"{name}: printed no {comment!r}"
                     for comment in re.findall(r"print\(.*\)\s+# (.*)", "\n".join(scripts[page]))
                     if " ".join(comment.split()) not in printed]
    assert failures == [], "\n".join(failures)


def test_the_api_reference_documents_every_public_name():
    """``docs/api.md`` has a directive for every name of ``dml_onnx.__all__`` and
    ``dml_onnx.torch.__all__``, and for nothing else."""
    torch_api = pytest.importorskip("dml_onnx.torch")
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    documented = re.findall(r"^\.\. auto(?:function|class|exception|data):: (\S+)$", page, re.M)
    public = [f"dml_onnx.{name}" for name in dml_onnx.__all__]
    public += [f"dml_onnx.torch.{name}" for name in torch_api.__all__]
    assert sorted(documented) == sorted(public)


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, list[str]]:
    """Every command of ``parser`` (``"conformance run"`` ...) -> its option strings."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= _commands(sub, f"{prefix} {name}".strip())
    if prefix and not found:
        found[prefix] = [option for action in parser._actions for option in
                         action.option_strings if option.startswith("--") and option != "--help"]
    return found


def test_the_command_line_page_describes_every_command_and_option():
    from dml_onnx import cli

    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    commands = _commands(cli._parser())
    assert "conformance run" in commands
    for command, options in commands.items():
        assert f"dml-onnx {command}" in page, command
        for option in options:
            assert option in page, f"{command} {option}"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300)


def _console_script() -> Path:
    """The installed ``dml-onnx`` script, found from this interpreter's install scheme (a
    venv need not be activated, nor the script be on ``PATH``)."""
    name = "dml-onnx.exe" if os.name == "nt" else "dml-onnx"
    places = [Path(sys.executable).parent, Path(sysconfig.get_path("scripts")),
              Path(sysconfig.get_path("scripts", f"{os.name}_user"))]
    found = [place / name for place in places if (place / name).is_file()]
    assert found, f"the console script {name} is not installed in any of {places}"
    return found[0]


def test_console_script_and_module_are_the_same_command(cli):
    (entry,) = metadata.entry_points(group="console_scripts", name="dml-onnx")
    assert entry.value == "dml_onnx.cli:main"
    by_script = _run(str(_console_script()), "operators")
    by_module = cli("operators")
    assert by_script.returncode == by_module.returncode == 0
    assert by_script.stdout == by_module.stdout == docs.operator_reference() + "\n"


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.glob("test_*/**/*"))
            if p.is_file()}


def test_committed_conformance_suite_is_current(tmp_path):
    """A fresh export equals the committed suite: the same cases and files, byte-identical
    models and inputs, the same output names, types and shapes, tolerances equal to a few
    float32 units and output values within each case's own tolerance (the reference's float
    arithmetic may round differently on another machine or library version)."""
    conformance.export_suite(tmp_path)
    committed, fresh = _tree(ROOT / "models"), _tree(tmp_path)
    assert sorted(committed) == sorted(fresh), "run: dml-onnx conformance export"
    exact = [name for name in fresh if not Path(name).name.startswith(("output_", "config"))]
    assert [name for name in exact if committed[name] != fresh[name]] == [], \
        "run: dml-onnx conformance export"
    stale = []
    for folder in sorted({Path(name).parts[0] for name in fresh}):
        old, new = (conformance.load_case(root / folder) for root in (ROOT / "models", tmp_path))
        assert np.allclose([new.tolerance.absolute, new.tolerance.relative],
                           [old.tolerance.absolute, old.tolerance.relative], rtol=2 ** -20,
                           atol=0), f"{folder}: tolerance changed; run: dml-onnx conformance export"
        outcome = conformance.compare(old, new.expected)
        stale += [f"{folder}: {problem}" for problem in outcome.problems]
    assert stale == [], "run: dml-onnx conformance export"


def test_conformance_suite_covers_every_operator_with_expanded_twins():
    names = [p.name for p in (ROOT / "models").glob("test_*")]
    twins = ("_expanded", "_decomposed")
    for definition in dml_onnx.OPERATORS:
        prefix = f"test_{snake(definition.name)}_"
        mine = [n for n in names if n.startswith(prefix)]
        assert len(mine) >= 10, definition.name
        assert all(f"{n}_expanded" in names for n in mine if not n.endswith(twins))
    assert {n.removesuffix("_decomposed") for n in names if n.endswith("_decomposed")} == \
        directml_ep.DECOMPOSED_GOOD
    for name in names:
        model = onnx.load(ROOT / "models" / name / "model.onnx")
        domains = {n.domain for n in model.graph.node}
        assert domains == ({""} if name.endswith(twins) else {dml_onnx.DOMAIN})
        assert model.ir_version == dml_onnx.IR_VERSION
        assert {o.domain for o in model.opset_import} <= {"", dml_onnx.DOMAIN}


def test_conformance_run_passes_on_the_committed_suite(cli):
    result = cli("conformance", "run", "models", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    count = len(list((ROOT / "models").glob("test_*")))
    assert f"conformance: {count} passed, 0 failed" in result.stdout
    for definition in dml_onnx.OPERATORS:
        assert f"| {definition.name} |" in result.stdout


def test_the_cli_imports_neither_torch_nor_the_extension_before_it_needs_them(tmp_path,
                                                                            python_child):
    """``--help`` imports none of onnxruntime-extensions, torch, numpy and onnx (``import
    dml_onnx`` loads nothing); ``conformance run`` imports the extension (its sessions need
    it) with torch hidden, and torch imports normally after."""
    shutil.copytree(ROOT / "models" / "test_unfold_seed_1", tmp_path / "test_unfold_seed_1")
    code = (
        "import contextlib, importlib.util, io, sys\n"
        "from dml_onnx.cli import main\n"
        "loaded = lambda: [m for m in ('torch', 'onnxruntime_extensions', 'numpy', 'onnx')\n"
        "                  if m in sys.modules]\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "print(loaded())\n"
        f"assert main(['conformance', 'run', {str(tmp_path)!r}, '--quiet']) == 0\n"
        "print(loaded())\n"
        "if importlib.util.find_spec('torch'):\n"
        "    import torch\n"
        "    assert torch.ones(2).sum().item() == 2\n")
    done = python_child(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "[]"
    assert done.stdout.splitlines()[-1] == "['onnxruntime_extensions', 'numpy', 'onnx']"


def test_every_name_of_the_package_loads_on_first_use(python_child):
    code = ("import sys, dml_onnx\n"
            "assert [m for m in sys.modules"
            " if m.startswith(('numpy', 'onnx', 'dml_onnx._kernels'))] == []\n"
            "names = dml_onnx.__all__\n"
            "assert set(names) <= set(dir(dml_onnx)) and len(set(names)) == len(names)\n"
            "namespace = {}\n"
            "exec('from dml_onnx import *', namespace)\n"
            "assert all(namespace[n] is getattr(dml_onnx, n) for n in names)\n"
            "print(len(names))\n")
    done = python_child(code)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == 24 + len(dml_onnx.OPERATORS)  # the user API: see test_public_api
    assert not hasattr(dml_onnx, "no_such_name")


def test_conformance_run_reports_a_wrong_stored_output(tmp_path, cli):
    for name in ("test_unfold_seed_1", "test_unfold_seed_1_expanded"):
        shutil.copytree(ROOT / "models" / name, tmp_path / name)
    victim = tmp_path / "test_unfold_seed_1_expanded" / "test_data_set_0" / "output_0.pb"
    tensor = onnx.load_tensor(victim)
    array = onnx.numpy_helper.to_array(tensor).copy()
    array.flat[0] = array.flat[0] + 1
    onnx.save_tensor(onnx.numpy_helper.from_array(array, tensor.name), victim)
    result = cli("conformance", "run", str(tmp_path))
    assert result.returncode == 1
    assert "1 passed, 1 failed" in result.stdout
    assert "test_unfold_seed_1_expanded: Y differs in 1 of" in result.stdout
    assert "[2/2] test_unfold_seed_1_expanded FAILED" in result.stderr


@pytest.mark.parametrize("args", [("conformance", "run", "no_such_folder"), ("bogus",)])
def test_cli_rejects_bad_use(args, cli):
    result = cli(*args)
    assert result.returncode == 2
