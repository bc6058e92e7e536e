"""The ``dml-onnx`` command (also ``python -m dml_onnx``).

Sub-commands: ``conformance export|run|probe``, ``lower``, ``raise``, ``check`` and ``operators``;
``dml-onnx <command> --help`` describes each.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import onnx

from dml_onnx import conformance, docs, probes
from dml_onnx.check import check_model
from dml_onnx.definition import DOMAIN
from dml_onnx.form import NotEquivalent
from dml_onnx.graphs import load_model
from dml_onnx.raising import raise_model
from dml_onnx.standard import lower_model


def _conformance_export(args: argparse.Namespace) -> int:
    folders = conformance.export_suite(args.directory)
    print(f"wrote {len(folders)} conformance cases to {args.directory}")
    return 0


def _import_runtime_without_torch() -> None:
    """Import the onnxruntime binding with torch hidden: onnxruntime-extensions imports torch
    where installed (0.8 s of start-up, and its OpenMP) only for a converter no command uses."""
    if "torch" in sys.modules or "dml_onnx.runtime" in sys.modules:
        return
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` raises ImportError
    try:
        import dml_onnx.runtime  # noqa: F401
    finally:
        del sys.modules["torch"]


def _conformance_run(args: argparse.Namespace) -> int:
    if not any(args.directory.glob("test_*")):
        print(f"no conformance cases (test_*) in {args.directory}", file=sys.stderr)
        return 2

    def progress(done: int, total: int, outcome: conformance.Outcome) -> None:
        status = "ok" if outcome.passed else "FAILED"
        if not args.quiet or not outcome.passed:
            print(f"[{done}/{total}] {outcome.case} {status}", file=sys.stderr, flush=True)

    if args.runtime == "onnxruntime":
        _import_runtime_without_torch()
    outcomes = conformance.run_suite(args.directory, providers=args.providers,
                                     runtime=args.runtime, progress=progress)
    failed = [o for o in outcomes if not o.passed]
    for outcome in failed:
        for problem in outcome.problems:
            print(f"{outcome.case}: {problem}")
    print(conformance.summary_table(outcomes))
    print(f"conformance: {len(outcomes) - len(failed)} passed, {len(failed)} failed "
          f"(dml_onnx models: {args.runtime}; standard models: {', '.join(args.providers)})")
    return 1 if failed else 0


def _conformance_probe(args: argparse.Namespace) -> int:
    folder = args.directory / conformance.PROBES
    folder = folder if folder.is_dir() else args.directory
    if not any(folder.glob("test_probe_*")):
        print(f"no probes (test_probe_*) in {folder}", file=sys.stderr)
        return 2
    findings = [f for provider in args.providers for f in probes.run_probes(folder, provider)]
    print(probes.report(findings))
    if args.json:
        by_provider = {p: {f.point: f.as_json() for f in findings if f.provider == p}
                       for p in args.providers}
        data = by_provider[args.providers[0]] if len(args.providers) == 1 else by_provider
        args.json.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


def _lower(args: argparse.Namespace) -> int:
    model = lower_model(load_model(args.input), native=not args.decompose)
    onnx.save(model, args.output)
    print(f"wrote {args.output}: {len(model.graph.node)} standard nodes")
    return 0


def _raise(args: argparse.Namespace) -> int:
    result = raise_model(load_model(args.input), positive_rois=args.positive_rois,
                         functions=not args.no_functions)
    onnx.save(result.model, args.output)
    for name in result.raised:
        print(f"raised {name}")
    for name, reason in result.kept.items():
        print(f"kept {name}: {reason}")
    print(f"wrote {args.output}: {len(result.raised)} raised, {len(result.kept)} kept")
    return 0


def _check(args: argparse.Namespace) -> int:
    problems = check_model(args.model)
    for problem in problems:
        print(problem)
    print(f"{args.model}: {len(problems)} problem(s)")
    if not problems:
        model = load_model(args.model)
        if all(node.domain != DOMAIN for node in model.graph.node):
            _raisable(model, args.model)
    return 1 if problems else 0


def _raisable(model: onnx.ModelProto, path: Path) -> None:
    """For a model without ``dml_onnx`` nodes: what ``dml-onnx raise`` would do with it."""
    try:
        result = raise_model(model, functions=False)
    except NotEquivalent as error:
        print(f"{path} has no dml_onnx nodes; dml-onnx raise cannot convert it: {error}")
        return
    print(f"{path} has no dml_onnx nodes; dml-onnx raise would convert "
          f"{len(result.raised)} and keep {len(result.kept)}:")
    for name in result.raised:
        print(f"  would raise {name}")
    for name, reason in result.kept.items():
        print(f"  would keep {name}: {reason}")


def _operators(args: argparse.Namespace) -> int:
    if args.update:
        args.update.write_text(docs.with_reference(args.update.read_text()))
        print(f"updated the operator reference in {args.update}")
        return 0
    print(docs.operator_reference())
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dml-onnx", description="DirectML operators as the ONNX domain dml_onnx.")
    commands = parser.add_subparsers(dest="command", required=True)

    suite = commands.add_parser("conformance", help="the conformance suite").add_subparsers(
        dest="action", required=True)
    export = suite.add_parser("export", help="write the conformance models and test data")
    export.add_argument("directory", nargs="?", default="models", type=Path)
    export.set_defaults(handler=_conformance_export)
    run = suite.add_parser("run", help="run every conformance case and compare its outputs")
    run.add_argument("directory", nargs="?", default="models", type=Path)
    run.add_argument("--providers", nargs="+", default=["CPUExecutionProvider"],
                     metavar="PROVIDER",
                     help="onnxruntime execution providers for the standard (expanded) "
                          "models, e.g. DmlExecutionProvider CPUExecutionProvider")
    run.add_argument("--runtime", choices=("onnxruntime", "reference"), default="onnxruntime",
                     help="what runs the dml_onnx models: dml_onnx.InferenceSession "
                          "(default) or dml_onnx.ReferenceEvaluator")
    run.add_argument("--quiet", action="store_true", help="report failed cases only")
    run.set_defaults(handler=_conformance_run)
    probe = suite.add_parser(
        "probe", help="run the probes and name the reading each provider follows on each "
                      "point DirectML leaves open")
    probe.add_argument("directory", nargs="?", default="models", type=Path)
    probe.add_argument("--providers", nargs="+", default=["CPUExecutionProvider"],
                       metavar="PROVIDER", help="onnxruntime execution providers to measure, "
                                                "e.g. DmlExecutionProvider")
    probe.add_argument("--json", type=Path, metavar="FILE",
                       help='also write {"<point>": {"reading", "cases", "matched", '
                            '"max_diff"}} (keyed by provider first when several are given)')
    probe.set_defaults(handler=_conformance_probe)

    lower = commands.add_parser("lower", help="rewrite every dml_onnx node into standard ops")
    lower.add_argument("input", type=Path)
    lower.add_argument("output", type=Path)
    lower.add_argument("--decompose", action="store_true",
                       help="exact decompositions even where a native op fits")
    lower.set_defaults(handler=_lower)

    raising = commands.add_parser(
        "raise", help="rewrite standard MaxRoiPool, RoiAlign, LpPool and Col2Im nodes into "
                      "dml_onnx nodes where exactly equivalent")
    raising.add_argument("input", type=Path)
    raising.add_argument("output", type=Path)
    raising.add_argument("--positive-rois", action="store_true",
                         help="every RoiAlign ROI has a positive width and height (a "
                              "sampling_ratio 0 RoiAlign then needs no Where zeroing the "
                              "empty and inverted ones)")
    raising.add_argument("--no-functions", action="store_true",
                         help="leave out the standard-op functions of the new nodes")
    raising.set_defaults(handler=_raise)

    check = commands.add_parser("check", help="validate every dml_onnx node of a model")
    check.add_argument("model", type=Path)
    check.set_defaults(handler=_check)

    operators = commands.add_parser("operators", help="print the operator reference (Markdown)")
    operators.add_argument("--update", type=Path, metavar="README",
                           help="rewrite the reference between the markers of this file instead")
    operators.set_defaults(handler=_operators)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except (OSError, ValueError, onnx.checker.ValidationError) as error:
        print(f"dml-onnx {args.command}: {error}", file=sys.stderr)
        return 1
