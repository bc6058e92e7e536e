"""Conformance: the suite of backend-style test cases (:mod:`~dml_onnx.conformance.suite`),
and the probes that measure which reading a provider follows where DirectML leaves a point
open (:mod:`~dml_onnx.conformance.probes`, with :mod:`~dml_onnx.conformance.points` and
:mod:`~dml_onnx.conformance.readings`).

The names of the suite are here; ``dml-onnx conformance export|run|probe`` use them.
:mod:`~dml_onnx.conformance.directml_ep` holds what onnxruntime's DirectML execution provider
registers and was measured to do with the suite's forms.
"""

from __future__ import annotations

from dml_onnx.builders import single_node_model, snake
from dml_onnx.conformance.files import SUITE_FILE, SUITE_MODEL_BYTES, written_by_suite
from dml_onnx.conformance.suite import (
    CONFIG_BYTES,
    CONFORMANCE_OPSETS,
    FORMS,
    PROBES,
    RUNNERS,
    TENSOR_BYTES,
    Case,
    Outcome,
    Tolerance,
    all_cases,
    case_opset,
    check_providers,
    compare,
    decomposed,
    example_case,
    expanded,
    export_suite,
    load_case,
    run_case,
    run_suite,
    summary_table,
    write_case,
)

__all__ = ["CONFIG_BYTES", "CONFORMANCE_OPSETS", "FORMS", "PROBES", "RUNNERS", "SUITE_FILE",
           "SUITE_MODEL_BYTES", "TENSOR_BYTES", "Case", "Outcome", "Tolerance", "all_cases",
           "case_opset", "check_providers", "compare", "decomposed", "example_case", "expanded",
           "export_suite", "load_case", "run_case", "run_suite", "single_node_model", "snake",
           "summary_table", "write_case", "written_by_suite"]
