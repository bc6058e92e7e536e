"""The commands of ``dml-onnx`` (see :mod:`dml_onnx.cli`, which parses the arguments): each
takes the parsed arguments and returns the exit status."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import onnx

from dml_onnx import conformance, docs
from dml_onnx.check import model_problems
from dml_onnx.conformance import directml_ep, probes
from dml_onnx.definition import DOMAIN
from dml_onnx.graphs import load_model, save_model, write_file
from dml_onnx.raising import NotRaisable, raise_model
from dml_onnx.standard import lower_model


def conformance_export(args: argparse.Namespace) -> int:
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


def conformance_run(args: argparse.Namespace) -> int:
    if not any(args.directory.glob("test_*")):
        print(f"no conformance cases (test_*) in {args.directory}", file=sys.stderr)
        return 2

    def progress(done: int, total: int, outcome: conformance.Outcome) -> None:
        status = "ok" if outcome.passed else "FAILED"
        if not args.quiet or not outcome.passed:
            print(f"[{done}/{total}] {outcome.case} {status} ({outcome.form or 'unreadable'}"
                  f" on {outcome.provider or '-'})", file=sys.stderr, flush=True)

    if args.runtime == "onnxruntime":
        _import_runtime_without_torch()
    outcomes = conformance.run_suite(args.directory, providers=args.providers,
                                     runtime=args.runtime, progress=progress)
    failed = [o for o in outcomes if not o.passed]
    for outcome in failed:
        for problem in outcome.problems:
            print(f"{outcome.case}: {problem} ({outcome.form} on {outcome.provider})")
        if outcome.provider == directml_ep.PROVIDER:
            print(f"{outcome.case}: measured on onnxruntime-directml 1.24: "
                  f"{directml_ep.measured(outcome.case)}")
    print(conformance.summary_table(outcomes))
    print(f"conformance: {len(outcomes) - len(failed)} passed, {len(failed)} failed "
          f"(dml_onnx models: {conformance.RUNNERS[args.runtime]}; standard models: "
          f"{', '.join(args.providers)})")
    return 1 if failed else 0


def conformance_probe(args: argparse.Namespace) -> int:
    folder = args.directory / conformance.PROBES
    folder = folder if folder.is_dir() else args.directory
    if not any(folder.glob("test_probe_*")):
        print(f"no probes (test_probe_*) in {folder}", file=sys.stderr)
        return 2
    conformance.check_providers(args.providers)
    findings = [f for provider in args.providers for f in probes.run_probes(folder, provider)]
    print(probes.report(findings))
    if args.json:
        by_provider = {p: {f.point: f.as_json() for f in findings if f.provider == p}
                       for p in args.providers}
        data = by_provider[args.providers[0]] if len(args.providers) == 1 else by_provider
        write_file(args.json, (json.dumps(data, indent=1) + "\n").encode())
        print(f"wrote {args.json}")
    return 0


def conformance_directml(args: argparse.Namespace) -> int:
    from dml_onnx import directml

    if args.runtime == "onnxruntime":
        _import_runtime_without_torch()
    outcomes = directml.check_files(args.files, args.runtime)
    for case in directml.measured_cases(args.files):
        reason = directml.open_reason(case)
        if reason is not None:
            print(f"{case['id']} ({case['operator']}) left out, {reason}")
    for outcome in outcomes:
        if not outcome.agreed:
            print(f"{outcome.id} ({outcome.operator}): {outcome.detail}")
    print("| operator | cases with a DirectML output | agreeing |\n|---|---:|---:|")
    for operator, (agreed, total) in directml.summary(outcomes).items():
        print(f"| {operator} | {total} | {agreed} |")
    return 0 if all(o.agreed for o in outcomes) else 1


def lower(args: argparse.Namespace) -> int:
    model = lower_model(load_model(args.input), native=not args.decompose)
    save_model(model, args.output)
    print(f"wrote {args.output}: {len(model.graph.node)} standard nodes")
    return 0


def raise_nodes(args: argparse.Namespace) -> int:
    result = raise_model(load_model(args.input), positive_rois=args.positive_rois,
                         functions=not args.no_functions)
    save_model(result.model, args.output)
    for name in result.raised:
        print(f"raised {name}")
    for name, reason in result.kept.items():
        print(f"kept {name}: {reason}")
    print(f"wrote {args.output}: {len(result.raised)} raised, {len(result.kept)} kept")
    return 0


def check(args: argparse.Namespace) -> int:
    problems = model_problems(args.model)
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
    except NotRaisable as error:
        print(f"{path} has no dml_onnx nodes; dml-onnx raise cannot convert it: {error}")
        return
    print(f"{path} has no dml_onnx nodes; dml-onnx raise would convert "
          f"{len(result.raised)} and keep {len(result.kept)}:")
    for name in result.raised:
        print(f"  would raise {name}")
    for name, reason in result.kept.items():
        print(f"  would keep {name}: {reason}")


def operators(args: argparse.Namespace) -> int:
    if args.update:
        write_file(args.update,
                   docs.with_reference(args.update.read_text(encoding="utf-8")).encode())
        print(f"updated the operator reference in {args.update}")
        return 0
    print(docs.operator_reference())
    return 0
