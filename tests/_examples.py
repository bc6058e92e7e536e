"""The table's operator examples that the layer tests iterate over: those that run, and those
whose kernel must refuse them."""

from __future__ import annotations

import dml_onnx

EXAMPLES = [(d, e) for d in dml_onnx.OPERATORS for e in d.examples() if not e.error]
ERROR_EXAMPLES = [(d, e) for d in dml_onnx.OPERATORS for e in d.examples() if e.error]
