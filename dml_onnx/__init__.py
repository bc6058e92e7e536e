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
from typing import TYPE_CHECKING, Any

from dml_onnx._declare import declare_with_extension

if TYPE_CHECKING:  # the names _EXPORTS loads lazily, for type checkers
    from custom_ops import KernelError as KernelError
    from custom_ops.limits import memory_limit as memory_limit
    from custom_ops.limits import set_memory_limit as set_memory_limit
    from custom_ops.limits import set_work_limit as set_work_limit
    from custom_ops.limits import work_limit as work_limit
    from dml_onnx.builders import IR_VERSION as IR_VERSION
    from dml_onnx.builders import STANDARD_OPSET as STANDARD_OPSET
    from dml_onnx.builders import make_model as make_model
    from dml_onnx.check import check_model as check_model
    from dml_onnx.check import model_problems as model_problems
    from dml_onnx.definition import DOMAIN as DOMAIN
    from dml_onnx.definition import DOMAIN_VERSION as DOMAIN_VERSION
    from dml_onnx.definition import OPSET_VERSION as OPSET_VERSION
    from dml_onnx.definition import Example as Example
    from dml_onnx.definition import OpDefinition as OpDefinition
    from dml_onnx.form import NotEquivalent as NotEquivalent
    from dml_onnx.ops import BUILDERS as BUILDERS
    from dml_onnx.ops import OPERATORS as OPERATORS
    from dml_onnx.ops import OPERATORS_BY_NAME as OPERATORS_BY_NAME
    from dml_onnx.raising import NotRaisable as NotRaisable
    from dml_onnx.raising import Raised as Raised
    from dml_onnx.raising import raise_model as raise_model
    from dml_onnx.reference import ReferenceEvaluator as ReferenceEvaluator
    from dml_onnx.runtime import InferenceSession as InferenceSession
    from dml_onnx.runtime import quiet_session_options as quiet_session_options
    from dml_onnx.runtime import register_runtime_ops as register_runtime_ops
    from dml_onnx.runtime import to_runtime_model as to_runtime_model
    from dml_onnx.schemas import deregister_schemas as deregister_schemas
    from dml_onnx.schemas import register_schemas as register_schemas
    from dml_onnx.standard import lower_model as lower_model
    from dml_onnx.standard import with_functions as with_functions

__version__ = "0.1.0"

_EXPORTS = {
    "custom_ops": ("KernelError",),
    "custom_ops.limits": ("memory_limit", "set_memory_limit", "set_work_limit", "work_limit"),
    "dml_onnx.builders": ("IR_VERSION", "STANDARD_OPSET", "make_model"),
    "dml_onnx.check": ("model_problems",),
    "dml_onnx.definition": ("DOMAIN", "DOMAIN_VERSION", "Example", "OpDefinition"),
    "dml_onnx.form": ("NotEquivalent",),
    "dml_onnx.ops": ("BUILDERS", "OPERATORS", "OPERATORS_BY_NAME"),
    "dml_onnx.raising": ("NotRaisable", "Raised", "raise_model"),
    "dml_onnx.reference": ("ReferenceEvaluator",),
    "dml_onnx.runtime": ("InferenceSession", "quiet_session_options", "to_runtime_model"),
    "dml_onnx.schemas": ("register_schemas",),
    "dml_onnx.standard": ("lower_model", "with_functions"),
}
"""Module -> the names it gives this package; the builders (``roi_pooling``, ``roi_align1``
...: one per operator of the table) come from ``dml_onnx.ops.BUILDERS``."""
_EARLIER_NAMES = {"check_model": "dml_onnx.check", "register_runtime_ops": "dml_onnx.runtime",
                  "deregister_schemas": "dml_onnx.schemas", "OPSET_VERSION": "dml_onnx.definition"}
"""Names still taken, outside ``__all__``: ``check_model`` is ``model_problems``,
``OPSET_VERSION`` is ``DOMAIN_VERSION``; the binding
registers its operators when it loads, and ``deregister_schemas`` is for tests."""
_MODULE_OF = {**{name: module for module, names in _EXPORTS.items() for name in names},
              **_EARLIER_NAMES}

def _builders() -> dict:
    return importlib.import_module("dml_onnx.ops").BUILDERS


def __getattr__(name: str) -> Any:  # the builders are known only at run time
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    elif name == "__all__":
        value = [*(n for n in _MODULE_OF if n not in _EARLIER_NAMES), *_builders()]
    elif not name.startswith("__") and name in _builders():
        value = _builders()[name]
    else:
        raise AttributeError(f"module 'dml_onnx' has no attribute {name!r}")
    globals()[name] = value  # later lookups find it directly
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF, *_builders()})


declare_with_extension()  # the kernels, for plain sessions: when onnxruntime-extensions loads
