"""dml_onnx: the DirectML operators ROI_POOLING, ROI_ALIGN1, ROI_ALIGN_GRAD, LP_POOLING, UNFOLD
and FOLD as the ONNX custom domain ``dml_onnx``, with exact numpy kernels run in onnxruntime.

Start with :func:`register_schemas`, the builders (``dml_onnx.lp_pooling`` ...) and
:func:`make_model`; run models with :class:`InferenceSession` or :class:`ReferenceEvaluator`.
"""

from custom_ops import KernelError
from custom_ops._common import memory_limit, set_memory_limit, set_work_limit, work_limit
from dml_onnx.builders import IR_VERSION, STANDARD_OPSET, make_model
from dml_onnx.check import check_model
from dml_onnx.definition import DOMAIN, OPSET_VERSION
from dml_onnx.form import NotEquivalent
from dml_onnx.ops import BUILDERS, OPERATORS, OPERATORS_BY_NAME
from dml_onnx.reference import ReferenceEvaluator
from dml_onnx.schemas import deregister_schemas, register_schemas
from dml_onnx.standard import lower_model, with_functions

__version__ = "0.1.0"

_RUNTIME_NAMES = ("InferenceSession", "register_runtime_ops", "to_runtime_model")
"""Imported from :mod:`dml_onnx.runtime` on first use: it imports onnxruntime-extensions, which
imports torch where installed (0.8 s), so that ``import dml_onnx`` and the CLI start fast."""


def __getattr__(name: str) -> object:
    if name in _RUNTIME_NAMES:
        from dml_onnx import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'dml_onnx' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_RUNTIME_NAMES})


globals().update(BUILDERS)  # roi_pooling, roi_align1, ... : one per operator of the table

__all__ = [
    "BUILDERS", "DOMAIN", "IR_VERSION", "OPERATORS", "OPERATORS_BY_NAME", "OPSET_VERSION",
    "STANDARD_OPSET", "InferenceSession", "KernelError", "NotEquivalent", "ReferenceEvaluator",
    "check_model", "deregister_schemas", "make_model", "memory_limit", "register_runtime_ops",
    "register_schemas", "set_memory_limit", "set_work_limit", "lower_model", "to_runtime_model",
    "with_functions", "work_limit",
    *BUILDERS,
]
