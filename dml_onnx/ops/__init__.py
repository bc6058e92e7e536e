"""The operator table: one entry per operator drives registration, docs and tests."""

from __future__ import annotations

from dml_onnx.definition import OpDefinition
from dml_onnx.ops import fold, lp_pooling, roi_pooling, unfold

OPERATORS: tuple[OpDefinition, ...] = (
    roi_pooling.DEFINITION,
    lp_pooling.DEFINITION,
    unfold.DEFINITION,
    fold.DEFINITION,
)
OPERATORS_BY_NAME: dict[str, OpDefinition] = {d.name: d for d in OPERATORS}
