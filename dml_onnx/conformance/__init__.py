"""Conformance: the suite of backend-style test cases (:mod:`~dml_onnx.conformance.suite`),
and the probes that measure which reading a provider follows where DirectML leaves a point
open (:mod:`~dml_onnx.conformance.probes`, with :mod:`~dml_onnx.conformance.points` and
:mod:`~dml_onnx.conformance.readings`).

The names of the suite are here; ``dml-onnx conformance export|run|probe`` use them.
"""

from __future__ import annotations

from dml_onnx.builders import single_node_model, snake
from dml_onnx.conformance.files import SUITE_FILE, SUITE_MODEL_BYTES, written_by_suite
from dml_onnx.conformance.suite import (
    CONFIG_BYTES,
    CONFORMANCE_OPSETS,
    PROBES,
    TENSOR_BYTES,
    Case,
    Outcome,
    Tolerance,
    all_cases,
    case_opset,
    compare,
    example_case,
    expanded,
    export_suite,
    load_case,
    run_case,
    run_suite,
    summary_table,
)

__all__ = ["CONFIG_BYTES", "CONFORMANCE_OPSETS", "PROBES", "SUITE_FILE", "SUITE_MODEL_BYTES",
           "TENSOR_BYTES", "Case", "Outcome", "Tolerance", "all_cases", "case_opset", "compare",
           "example_case", "expanded", "export_suite", "load_case", "run_case", "run_suite",
           "single_node_model", "snake", "summary_table", "written_by_suite"]
