"""The ``dml-onnx`` command (also ``python -m dml_onnx``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from dml_onnx import conformance, docs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dml-onnx", description="DirectML operators as the ONNX domain dml_onnx.")
    commands = parser.add_subparsers(dest="command", required=True)
    write = commands.add_parser("write-conformance",
                                help="write the conformance models and their test data")
    write.add_argument("directory", nargs="?", default="models", type=Path)
    check = commands.add_parser(
        "check-conformance", help="run the conformance models and compare with their data")
    check.add_argument("directory", nargs="?", default="models", type=Path)
    check.add_argument("--runtime", choices=("onnxruntime", "reference"), default="onnxruntime",
                       help="dml_onnx.InferenceSession (default) or dml_onnx.ReferenceEvaluator")
    operators = commands.add_parser("operators", help="print the operator reference (Markdown)")
    operators.add_argument("--update", type=Path, metavar="README",
                           help="rewrite the reference between the markers of this file instead")
    args = parser.parse_args(argv)

    if args.command == "write-conformance":
        folders = conformance.write_suite(args.directory)
        print(f"wrote {len(folders)} conformance cases to {args.directory}")
        return 0
    if args.command == "check-conformance":
        if not any(args.directory.glob("test_*")):
            print(f"no conformance cases (test_*) in {args.directory}", file=sys.stderr)
            return 2
        count, problems = conformance.check_suite(args.directory, runtime=args.runtime)
        for problem in problems:
            print(problem)
        print(f"conformance: {count - len({p.split(':')[0] for p in problems})} passed, "
              f"{len({p.split(':')[0] for p in problems})} failed ({args.runtime})")
        return 1 if problems else 0
    if args.update:
        args.update.write_text(docs.with_reference(args.update.read_text()))
        print(f"updated the operator reference in {args.update}")
        return 0
    print(docs.operator_reference())
    return 0
