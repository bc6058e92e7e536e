"""onnx schemas of the domain: explicit, idempotent, process-wide registration."""

from __future__ import annotations

import threading

from onnx import defs

from dml_onnx.definition import DOMAIN, OPSET_VERSION
from dml_onnx.ops import OPERATORS

_lock = threading.Lock()


def register_schemas() -> None:
    """Register every operator's schema (with shape inference) with ``onnx.defs``.

    After it, ``onnx.checker.check_model(m, full_check=True)`` and
    ``onnx.shape_inference.infer_shapes(m, strict_mode=True)`` know the ``dml_onnx`` domain.
    Calling it again does nothing.
    """
    with _lock:
        for definition in OPERATORS:
            if not defs.has(definition.name, OPSET_VERSION, DOMAIN):
                defs.register_schema(definition.to_schema())


def deregister_schemas() -> None:
    """Remove the domain's schemas again (mostly for tests)."""
    with _lock:
        for definition in OPERATORS:
            if defs.has(definition.name, OPSET_VERSION, DOMAIN):
                defs.deregister_schema(definition.name, OPSET_VERSION, DOMAIN)
