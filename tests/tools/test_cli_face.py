"""The command line's public face: ``--version``, a help string for every argument, and what the
conformance commands do where the suite's files are not at hand (an installed wheel holds no
models and no DirectML measurements)."""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

import dml_onnx
from dml_onnx import conformance
from dml_onnx.cli import _parser, main
from tests._support import ROOT

VERSIONED = ("onnx", "onnxruntime", "onnxruntime_extensions", "numba", "numpy")


def _arguments(parser: argparse.ArgumentParser, path: str = "dml-onnx"
               ) -> Iterator[tuple[str, argparse.Action]]:
    """Every argument of ``parser`` and of its sub-commands, at any depth, by command path;
    each sub-command's entry in its parent's list too."""
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        yield path, action
        if isinstance(action, argparse._SubParsersAction):
            yield from ((path, choice) for choice in action._choices_actions)
            for name, sub in action.choices.items():
                yield from _arguments(sub, f"{path} {name}")


def test_every_argument_of_every_command_has_help():
    found = list(_arguments(_parser()))
    commands_seen = {path for path, _ in found}
    assert {"dml-onnx lower", "dml-onnx conformance run", "dml-onnx conformance directml",
            "dml-onnx check"} <= commands_seen
    missing = [f"{path}: {action.dest} {action.option_strings or action.metavar or ''}"
               for path, action in found
               if not action.help or action.help == argparse.SUPPRESS]
    assert missing == []


def test_version_names_the_package_the_domain_and_the_packages_in_use(cli):
    by_module = cli("--version")
    assert by_module.returncode == 0, by_module.stderr
    lines = by_module.stdout.splitlines()
    assert lines[0] == (f"dml-onnx {metadata.version('dml-onnx')} (ONNX domain dml_onnx, "
                        f"version {dml_onnx.DOMAIN_VERSION})")
    providers = metadata.packages_distributions()
    for module in VERSIONED:
        (distribution,) = providers[module]
        assert f"{distribution} {metadata.version(distribution)}" in lines, module
    assert lines[-1].startswith("Python ")


def test_version_loads_none_of_the_packages_it_names(python_child):
    done = python_child("""
        import contextlib, io, sys
        from dml_onnx.cli import main
        with contextlib.redirect_stdout(io.StringIO()) as out, \\
                contextlib.suppress(SystemExit):
            main(["--version"])
        assert "numba" in out.getvalue()
        print([m for m in ("onnx", "onnxruntime", "onnxruntime_extensions", "numba", "numpy")
               if m in sys.modules])
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_a_folder_and_without_models_the_probes_run_on_a_fresh_export(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no ./models, as after a wheel install
    assert main(["conformance", "probe"]) == 0
    out, err = capsys.readouterr()
    assert "no probes in ./models (the installed package ships none): exporting the suite " \
           "to a temporary folder first" in err
    assert "`dml-onnx conformance export models` keeps a copy" in err
    assert "| col2im_3d_dilation | CPUExecutionProvider |" in out
    assert list(tmp_path.iterdir()) == []  # nothing written here


def test_without_a_folder_and_without_models_the_suite_runs_on_a_fresh_export(
        tmp_path, monkeypatch, capsys):
    """``conformance run`` exports the suite to a temporary folder (one case here, for time),
    runs it there and removes it."""
    case = next(c for c in conformance.all_cases() if c.name == "test_unfold_seed_1")
    exported: list[Path] = []

    def export_one(directory: str | Path) -> list[Path]:
        exported.append(Path(directory))
        return [conformance.write_case(case, Path(directory) / case.name)]

    monkeypatch.setattr(conformance, "export_suite", export_one)
    monkeypatch.chdir(tmp_path)
    assert main(["conformance", "run", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert "no conformance cases in ./models" in err and "exported 1 cases in" in err
    assert "conformance: 1 passed, 0 failed" in out
    assert not exported[0].exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["run", "probe"])
def test_a_folder_without_cases_says_how_to_write_them(command, tmp_path, capsys):
    assert main(["conformance", command, str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"in {tmp_path}: write them first with `dml-onnx conformance export {tmp_path}`" in err


def test_export_writes_models_by_default(tmp_path, monkeypatch, capsys):
    written: list[Path] = []
    monkeypatch.setattr(conformance, "export_suite", lambda d: written.append(Path(d)) or [])
    monkeypatch.chdir(tmp_path)
    assert main(["conformance", "export"]) == 0
    assert written == [Path("models")]


def test_directml_without_measurements_says_where_they_are(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no ./tests/directml, as after a wheel install
    for arguments in ([], ["tests/directml"]):
        assert main(["conformance", "directml", *arguments]) == 2
        err = capsys.readouterr().err
        assert "the measurements of the real DirectML are not in the installed package" in err
        assert "from a checkout of it, run `dml-onnx conformance directml tests/directml`" \
            in err
    assert main(["conformance", "directml", "elsewhere.json"]) == 2
    assert capsys.readouterr().err.strip() == "elsewhere.json: no such file or folder"


def test_directml_reads_the_projects_measurements_by_default(tmp_path, monkeypatch, capsys):
    """In a checkout, no path means ``tests/directml`` (one small file of it here)."""
    folder = tmp_path / "tests" / "directml"
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "directml" / "pending_measured.json", folder)
    monkeypatch.chdir(tmp_path)
    status = main(["conformance", "directml", "--runtime", "reference"])
    out = capsys.readouterr().out
    assert "| operator | cases with a DirectML output | agreeing |" in out
    assert status == 0, out
