"""The operator table: one entry per operator drives registration, docs and tests."""

from __future__ import annotations

from dml_onnx.definition import OpDefinition
from dml_onnx.ops import fold, lp_pooling, roi_align1, roi_align_grad, roi_pooling, unfold

OPERATORS: tuple[OpDefinition, ...] = (
    roi_pooling.DEFINITION,
    roi_align1.DEFINITION,
    roi_align_grad.DEFINITION,
    lp_pooling.DEFINITION,
    unfold.DEFINITION,
    fold.DEFINITION,
)
OPERATORS_BY_NAME: dict[str, OpDefinition] = {d.name: d for d in OPERATORS}
