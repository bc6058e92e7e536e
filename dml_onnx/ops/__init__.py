"""The operator table: one entry per operator drives registration, docs and tests."""

from __future__ import annotations

from dml_onnx.definition import OpDefinition
from dml_onnx.ops import lp_pooling

OPERATORS: tuple[OpDefinition, ...] = (
    lp_pooling.DEFINITION,
)
OPERATORS_BY_NAME: dict[str, OpDefinition] = {d.name: d for d in OPERATORS}
