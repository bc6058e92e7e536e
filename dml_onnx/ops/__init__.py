"""The operator table: one entry per operator drives registration, builders, docs and tests.

Each entry is the operator's module in this package: its ``DEFINITION`` and its builder, a
function named like the module, whose keywords spell the attributes for users and which hands
its arguments to :meth:`~dml_onnx.definition.OpDefinition.build`. The builder's docstring is
written here from the definition (:func:`~dml_onnx.builder_docs.builder_doc`).
"""

from __future__ import annotations

from collections.abc import Callable

from onnx import NodeProto

from dml_onnx.builder_docs import builder_doc
from dml_onnx.definition import OpDefinition
from dml_onnx.ops import fold, lp_pooling, roi_align1, roi_align_grad, roi_pooling, unfold

_MODULES = (roi_pooling, roi_align1, roi_align_grad, lp_pooling, unfold, fold)

OPERATORS: tuple[OpDefinition, ...] = tuple(m.DEFINITION for m in _MODULES)
OPERATORS_BY_NAME: dict[str, OpDefinition] = {d.name: d for d in OPERATORS}
BUILDERS: dict[str, Callable[..., NodeProto]] = {
    name: getattr(m, name) for m in _MODULES for name in [m.__name__.rpartition(".")[2]]}
"""Builder functions by name (``roi_pooling`` ...), exported by ``dml_onnx``."""
OP_TYPES: tuple[str, ...] = tuple(OPERATORS_BY_NAME)
"""The op types of the ``dml_onnx`` domain (``"RoiPooling"`` ...), in the table's order."""

for _module in _MODULES:
    BUILDERS[_module.__name__.rpartition(".")[2]].__doc__ = builder_doc(_module.DEFINITION)
