"""The commands of ``dml-onnx`` (see :mod:`dml_onnx.cli`, which parses the arguments): each
takes the parsed arguments and returns the exit status."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import onnx

from dml_onnx import conformance, docs
from dml_onnx._domain import MEASUREMENTS, MODELS
from dml_onnx.check import model_problems
from dml_onnx.conformance import directml_ep, probes
from dml_onnx.definition import DOMAIN
from dml_onnx.model_files import load_model, save_model, write_file
from dml_onnx.raising import NotRaisable, raise_model
from dml_onnx.standard import lower_model


def conformance_export(args: argparse.Namespace) -> int:
    directory = args.directory or MODELS
    folders = conformance.export_suite(directory)
    print(f"wrote {len(folders)} conformance cases to {directory}")
    return 0


def _holds(folder: Path, patterns: tuple[str, ...]) -> bool:
    return any(any(folder.glob(pattern)) for pattern in patterns)


@contextlib.contextmanager
def _cases(directory: Path | None, patterns: tuple[str, ...], what: str
           ) -> Iterator[Path | None]:
    """The folder of exported cases a command reads (``patterns``: globs of its cases).

    ``directory`` as given, or None where it holds none (said on stderr, with the command
    that writes them). Without one: :data:`~dml_onnx._domain.MODELS`, or, where that holds none
    (an installed wheel ships no cases, since they are written from the package itself), the
    suite exported afresh to a temporary folder, said on stderr, removed afterwards."""
    if directory is None and not _holds(MODELS, patterns):
        print(f"dml-onnx conformance: no {what} in ./{MODELS} (the installed package ships "
              "none): exporting the suite to a temporary folder first (a few seconds; "
              f"`dml-onnx conformance export {MODELS}` keeps a copy)", file=sys.stderr,
              flush=True)
        with tempfile.TemporaryDirectory(prefix="dml_onnx_conformance_") as temporary:
            start = time.perf_counter()
            folders = conformance.export_suite(temporary)
            print(f"dml-onnx conformance: exported {len(folders)} cases in "
                  f"{time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
            yield Path(temporary)
        return
    folder = directory or MODELS
    if _holds(folder, patterns):
        yield folder
        return
    print(f"no {what} ({' or '.join(patterns)}) in {folder}: write them first with "
          f"`dml-onnx conformance export {folder}`", file=sys.stderr)
    yield None


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
    with _cases(args.directory, ("test_*",), "conformance cases") as directory:
        return 2 if directory is None else _run_cases(args, directory)


def _run_cases(args: argparse.Namespace, directory: Path) -> int:
    def progress(done: int, total: int, outcome: conformance.Outcome) -> None:
        status = "ok" if outcome.passed else "FAILED"
        if not args.quiet or not outcome.passed:
            print(f"[{done}/{total}] {outcome.case} {status} ({outcome.form or 'unreadable'}"
                  f" on {outcome.provider or '-'})", file=sys.stderr, flush=True)

    if args.runtime == "onnxruntime":
        _import_runtime_without_torch()
    outcomes = conformance.run_suite(directory, providers=args.providers,
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
    with _cases(args.directory, (f"{conformance.PROBES}/test_probe_*", "test_probe_*"),
                "probes") as directory:
        return 2 if directory is None else _run_probes(args, directory)


def _run_probes(args: argparse.Namespace, directory: Path) -> int:
    folder = directory / conformance.PROBES
    folder = folder if folder.is_dir() else directory
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


_NO_MEASUREMENTS = (
    "the measurements of the real DirectML are not in the installed package (they would make "
    f"the wheel several times larger): they are in {MEASUREMENTS.as_posix()} of the project's "
    f"source repository; from a checkout of it, run `dml-onnx conformance directml "
    f"{MEASUREMENTS.as_posix()}`")


def conformance_directml(args: argparse.Namespace) -> int:
    from dml_onnx import directml

    files = args.files or ([MEASUREMENTS] if MEASUREMENTS.is_dir() else [])
    if not files:
        print(f"no measurement files given, and no ./{MEASUREMENTS.as_posix()}: "
              f"{_NO_MEASUREMENTS}", file=sys.stderr)
        return 2
    missing = [path for path in files if not path.exists()]
    if missing:
        hint = f"; {_NO_MEASUREMENTS}" if missing[0].parts[-2:] == MEASUREMENTS.parts else ""
        print(f"{missing[0]}: no such file or folder{hint}", file=sys.stderr)
        return 2
    if args.runtime == "onnxruntime":
        _import_runtime_without_torch()
    outcomes = directml.check_files(files, args.runtime)
    for case in directml.measured_cases(files):
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
