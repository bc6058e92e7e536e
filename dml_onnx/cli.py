"""The ``dml-onnx`` command (also ``python -m dml_onnx``).

Sub-commands: ``conformance export|run|probe|directml``, ``lower``, ``raise``, ``check`` and
``operators``; ``dml-onnx <command> --help`` describes each, ``dml-onnx --version`` names the
versions in use. This module only parses the arguments: the commands
(:mod:`dml_onnx.commands`) and what they import load after that, so that ``--help``,
``--version`` and a usage error answer at once.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dml_onnx._domain import DOMAIN, DOMAIN_VERSION, MEASUREMENTS, MODELS

DEPENDENCIES = {"onnx": "onnx", "onnxruntime": "onnxruntime",
                "onnxruntime_extensions": "onnxruntime-extensions", "numba": "numba",
                "numpy": "numpy"}
"""Import name -> the distribution that usually provides it, for ``--version``."""


def versions() -> str:
    """``--version``'s text: this package's version (its installed metadata), the version of
    the ``dml_onnx`` domain its models import, and the versions of the packages it runs on
    (from their metadata: nothing is imported)."""
    import platform
    from importlib import metadata

    try:
        own = metadata.version("dml-onnx")
    except metadata.PackageNotFoundError:
        own = "unknown (not installed)"
    lines = [f"dml-onnx {own} (ONNX domain {DOMAIN}, version {DOMAIN_VERSION})"]
    providers = metadata.packages_distributions()
    for module, usual in DEPENDENCIES.items():
        names = list(dict.fromkeys(providers.get(module, [])))  # onnxruntime-gpu ...
        found = [f"{name} {metadata.version(name)}" for name in names] or [f"{usual} not installed"]
        lines.append(", ".join(found))
    lines.append(f"Python {platform.python_version()} ({platform.python_implementation()}, "
                 f"{platform.system()} {platform.machine()})")
    return "\n".join(lines)


class _Version(argparse.Action):
    """``--version``: :func:`versions`, found only when asked (it reads every installed
    distribution's metadata)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(versions())
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dml-onnx", description="DirectML operators as the ONNX domain dml_onnx.")
    parser.add_argument("--version", action=_Version,
                        help="print the versions of dml-onnx, its ONNX domain and the packages "
                             "it runs on (onnx, onnxruntime, onnxruntime-extensions, numba, "
                             "numpy), and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     help="what to do; dml-onnx COMMAND --help describes it")

    suite = commands.add_parser("conformance", help="the conformance suite").add_subparsers(
        dest="action", required=True, metavar="ACTION",
        help="what to do with it; dml-onnx conformance ACTION --help describes it")
    export = suite.add_parser("export", help="write the conformance models and test data")
    export.add_argument("directory", nargs="?", type=Path,
                        help=f"the folder to write the cases into (default: {MODELS}); the "
                             "case folders it wrote before are replaced")
    export.set_defaults(handler="conformance_export")
    run = suite.add_parser("run", help="run every conformance case and compare its outputs")
    run.add_argument("directory", nargs="?", type=Path,
                     help=f"the folder of exported cases (default: {MODELS}, or, where it "
                          "holds none, the suite exported afresh to a temporary folder)")
    run.add_argument("--providers", nargs="+", default=["CPUExecutionProvider"],
                     metavar="PROVIDER",
                     help="onnxruntime execution providers to run the standard models "
                          "(_expanded, _decomposed) on, each in turn, e.g. "
                          "DmlExecutionProvider CPUExecutionProvider; each must be in "
                          "onnxruntime.get_available_providers()")
    run.add_argument("--runtime", choices=("onnxruntime", "reference"), default="onnxruntime",
                     help="what runs the dml_onnx models: dml_onnx.InferenceSession "
                          "(default) or dml_onnx.ReferenceEvaluator")
    run.add_argument("--quiet", action="store_true", help="report failed cases only")
    run.set_defaults(handler="conformance_run")
    probe = suite.add_parser(
        "probe", help="run the probes and name the reading each provider follows on each "
                      "point DirectML leaves open")
    probe.add_argument("directory", nargs="?", type=Path,
                       help=f"the folder of exported cases or its probes subfolder (default: "
                            f"{MODELS}, or, where it holds none, the probes exported afresh to "
                            "a temporary folder)")
    probe.add_argument("--providers", nargs="+", default=["CPUExecutionProvider"],
                       metavar="PROVIDER", help="onnxruntime execution providers to measure, "
                                                "e.g. DmlExecutionProvider")
    probe.add_argument("--json", type=Path, metavar="FILE",
                       help='also write {"<point>": {"reading", "cases", "matched", '
                            '"max_diff"}} (keyed by provider first when several are given)')
    probe.set_defaults(handler="conformance_probe")

    measured = suite.add_parser(
        "directml", help="run cases measured on the real DirectML and compare each output")
    measured.add_argument("files", nargs="*", type=Path, metavar="PATH",
                          help="measurement files (JSON), or folders whose files are read, "
                               f"subfolders included (default: {MEASUREMENTS.as_posix()}, the "
                               "project's measurements, in a checkout of its source: the "
                               "installed package holds none)")
    measured.add_argument("--runtime", choices=("onnxruntime", "reference"),
                          default="onnxruntime",
                          help="what runs the cases: dml_onnx.InferenceSession (default) or "
                               "dml_onnx.ReferenceEvaluator")
    measured.set_defaults(handler="conformance_directml")

    lower = commands.add_parser("lower", help="rewrite every dml_onnx node into standard ops")
    lower.add_argument("input", type=Path, help="the ONNX model to read")
    lower.add_argument("output", type=Path,
                       help="where to write the model of standard ops (replaced if it exists)")
    lower.add_argument("--decompose", action="store_true",
                       help="exact decompositions even where a native op fits")
    lower.set_defaults(handler="lower")

    raising = commands.add_parser(
        "raise", help="rewrite standard MaxRoiPool, RoiAlign, LpPool and Col2Im nodes into "
                      "dml_onnx nodes where exactly equivalent")
    raising.add_argument("input", type=Path, help="the ONNX model to read")
    raising.add_argument("output", type=Path,
                         help="where to write the model with dml_onnx nodes (replaced if it "
                              "exists)")
    raising.add_argument("--positive-rois", action="store_true",
                         help="every RoiAlign ROI has a positive width and height (a "
                              "sampling_ratio 0 RoiAlign then needs no Where zeroing the "
                              "empty and inverted ones)")
    raising.add_argument("--no-functions", action="store_true",
                         help="leave out the standard-op functions of the new nodes")
    raising.set_defaults(handler="raise_nodes")

    check = commands.add_parser("check", help="validate every dml_onnx node of a model")
    check.add_argument("model", type=Path, help="the ONNX model to check")
    check.set_defaults(handler="check")

    operators = commands.add_parser("operators", help="print the operator reference (Markdown)")
    operators.add_argument("--update", type=Path, metavar="README",
                           help="rewrite the reference between the markers of this file instead")
    operators.set_defaults(handler="operators")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    commands = importlib.import_module("dml_onnx.commands")
    import onnx  # loaded with the commands

    try:
        return getattr(commands, args.handler)(args)
    except (OSError, ValueError, onnx.checker.ValidationError) as error:
        print(f"dml-onnx {args.command}: {error}", file=sys.stderr)
        return 1
