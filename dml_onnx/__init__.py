"""dml_onnx: the DirectML operators ROI_POOLING, ROI_ALIGN1, ROI_ALIGN_GRAD, LP_POOLING, UNFOLD
and FOLD as the ONNX custom domain ``dml_onnx``, with exact numpy kernels run in onnxruntime.

Start with :func:`register_schemas`, the builders (``dml_onnx.lp_pooling`` ...) and
:func:`make_model`; run models with :class:`InferenceSession` or :class:`ReferenceEvaluator`.

Every name here loads its module on first use (``import dml_onnx`` imports nothing else), so
that the command line starts at once and the onnxruntime binding, which imports
onnxruntime-extensions (and, through it, torch where installed), loads only when used, or
when onnxruntime-extensions is imported (:mod:`dml_onnx._declare`).
"""

from __future__ import annotations

import importlib

from dml_onnx._declare import declare_with_extension

__version__ = "0.1.0"

_EXPORTS = {
    "custom_ops": ("KernelError",),
    "custom_ops.limits": ("memory_limit", "set_memory_limit", "set_work_limit", "work_limit"),
    "dml_onnx.builders": ("IR_VERSION", "STANDARD_OPSET", "make_model"),
    "dml_onnx.check": ("check_model", "model_problems"),
    "dml_onnx.definition": ("DOMAIN", "OPSET_VERSION"),
    "dml_onnx.form": ("NotEquivalent",),
    "dml_onnx.ops": ("BUILDERS", "OPERATORS", "OPERATORS_BY_NAME"),
    "dml_onnx.raising": ("NotRaisable", "Raised", "raise_model"),
    "dml_onnx.reference": ("ReferenceEvaluator",),
    "dml_onnx.runtime": ("InferenceSession", "quiet_session_options", "register_runtime_ops",
                         "to_runtime_model"),
    "dml_onnx.schemas": ("deregister_schemas", "register_schemas"),
    "dml_onnx.standard": ("lower_model", "with_functions"),
}
"""Module -> the names it gives this package; the builders (``roi_pooling``, ``roi_align1``
...: one per operator of the table) come from ``dml_onnx.ops.BUILDERS``."""
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

def _builders() -> dict:
    return importlib.import_module("dml_onnx.ops").BUILDERS


def __getattr__(name: str) -> object:
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    elif name == "__all__":
        value = [*_MODULE_OF, *_builders()]
    elif not name.startswith("__") and name in _builders():
        value = _builders()[name]
    else:
        raise AttributeError(f"module 'dml_onnx' has no attribute {name!r}")
    globals()[name] = value  # later lookups find it directly
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF, *_builders()})


declare_with_extension()  # the kernels, for plain sessions: when onnxruntime-extensions loads
