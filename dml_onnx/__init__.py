"""dml_onnx: the DirectML operators ROI_POOLING, ROI_ALIGN1, ROI_ALIGN_GRAD, LP_POOLING, UNFOLD
and FOLD as the ONNX custom domain ``dml_onnx``, with exact numpy kernels run in onnxruntime.

Start with the builders (``dml_onnx.lp_pooling`` ...), :func:`make_model` and
:func:`register_schemas`; run models with :class:`InferenceSession` or
:class:`ReferenceEvaluator`; check and convert them with :func:`model_problems`,
:func:`raise_model`, :func:`lower_model` and :func:`to_runtime_model`. ``__all__`` is that user
API; the operator table (``OPERATORS``, ``OpDefinition``, ``Example``, ``BUILDERS``) loads from
here too, for the project's tools and tests.

Every name here loads its module on first use (``import dml_onnx`` imports nothing else), so
that the command line starts at once and the onnxruntime binding, which imports
onnxruntime-extensions (and, through it, torch where installed), loads only when used, or
when onnxruntime-extensions is imported (:mod:`dml_onnx._declare`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dml_onnx._declare import declare_with_extension
from dml_onnx._renamed import PACKAGE_RENAMED, warn_renamed

if TYPE_CHECKING:  # the names _EXPORTS and _INTERNALS load lazily, for type checkers
    from dml_onnx._kernels import KernelError as KernelError
    from dml_onnx._kernels._compiler_process import CompilingWarning as CompilingWarning
    from dml_onnx._kernels.limits import memory_limit as memory_limit
    from dml_onnx._kernels.limits import set_memory_limit as set_memory_limit
    from dml_onnx._kernels.limits import set_work_limit as set_work_limit
    from dml_onnx._kernels.limits import work_limit as work_limit
    from dml_onnx.builders import IR_VERSION as IR_VERSION
    from dml_onnx.builders import STANDARD_OPSET as STANDARD_OPSET
    from dml_onnx.builders import make_model as make_model
    from dml_onnx.check import model_problems as model_problems
    from dml_onnx.definition import DOMAIN as DOMAIN
    from dml_onnx.definition import DOMAIN_VERSION as DOMAIN_VERSION
    from dml_onnx.definition import Example as Example
    from dml_onnx.definition import OpDefinition as OpDefinition
    from dml_onnx.form import NotEquivalent as NotEquivalent
    from dml_onnx.ops import BUILDERS as BUILDERS
    from dml_onnx.ops import OP_TYPES as OP_TYPES
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

_EXPORTS = {
    "dml_onnx._kernels": ("KernelError",),
    "dml_onnx._kernels._compiler_process": ("CompilingWarning",),
    "dml_onnx._kernels.limits": ("memory_limit", "set_memory_limit", "set_work_limit",
                                 "work_limit"),
    "dml_onnx.builders": ("IR_VERSION", "STANDARD_OPSET", "make_model"),
    "dml_onnx.check": ("model_problems",),
    "dml_onnx.definition": ("DOMAIN", "DOMAIN_VERSION"),
    "dml_onnx.form": ("NotEquivalent",),
    "dml_onnx.ops": ("OP_TYPES",),
    "dml_onnx.raising": ("NotRaisable", "Raised", "raise_model"),
    "dml_onnx.reference": ("ReferenceEvaluator",),
    "dml_onnx.runtime": ("InferenceSession", "quiet_session_options", "to_runtime_model"),
    "dml_onnx.schemas": ("register_schemas",),
    "dml_onnx.standard": ("lower_model", "with_functions"),
}
"""Module -> the names of the user API it gives this package (``__all__``, with the builders
``roi_pooling``, ``roi_align1`` ...: one per operator, from ``dml_onnx.ops.BUILDERS``)."""
_INTERNALS = {"Example": "dml_onnx.definition", "OpDefinition": "dml_onnx.definition",
              "BUILDERS": "dml_onnx.ops", "OPERATORS": "dml_onnx.ops",
              "OPERATORS_BY_NAME": "dml_onnx.ops", "register_runtime_ops": "dml_onnx.runtime",
              "deregister_schemas": "dml_onnx.schemas"}
"""Names that load here too, outside ``__all__``: the operator table and its types (what the
tests, tools and benchmarks read), ``register_runtime_ops`` (the binding registers its
operators when it loads) and ``deregister_schemas`` (for tests)."""
_MODULE_OF = {**{name: module for module, names in _EXPORTS.items() for name in names},
              **_INTERNALS}


def _builders() -> dict:
    return importlib.import_module("dml_onnx.ops").BUILDERS


def _version() -> str:
    """The installed distribution's version (its metadata: one source, ``pyproject.toml``)."""
    from importlib import metadata

    try:
        return metadata.version("dml-onnx")
    except metadata.PackageNotFoundError:  # imported from a source tree never installed
        return "unknown"


def __getattr__(name: str) -> Any:  # the builders are known only at run time
    if name in PACKAGE_RENAMED:  # warns at every use: not kept in the module's namespace
        module, new = PACKAGE_RENAMED[name]
        warn_renamed(f"dml_onnx.{name}", f"dml_onnx.{new}")
        return getattr(importlib.import_module(module), new)
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    elif name == "__all__":
        value = [*(n for n in _MODULE_OF if n not in _INTERNALS), *_builders()]
    elif name == "__version__":
        value = _version()
    elif not name.startswith("__") and name in _builders():
        value = _builders()[name]
    else:
        raise AttributeError(f"module 'dml_onnx' has no attribute {name!r}")
    globals()[name] = value  # later lookups find it directly
    return value


def __dir__() -> list[str]:  # the earlier names left out: listing them must not warn
    return sorted({*globals(), *_MODULE_OF, *_builders(), "__all__", "__version__"})


declare_with_extension()  # the kernels, for plain sessions: when onnxruntime-extensions loads
