"""Names renamed in earlier versions: each still works and warns with ``DeprecationWarning``
naming the new one. A module that kept an old name answers it from its ``__getattr__`` through
:func:`renamed_attribute`."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

RENAMED: dict[str, dict[str, str]] = {
    "dml_onnx.check": {"check_model": "model_problems"},
    "dml_onnx.definition": {"OPSET_VERSION": "DOMAIN_VERSION"},
}
"""Module -> {earlier name: name now}; the package ``dml_onnx`` answers each too."""
PACKAGE_RENAMED = {old: (module, new) for module, names in RENAMED.items()
                   for old, new in names.items()}
"""Earlier name -> (module, name now), as attributes of the package ``dml_onnx``."""


def warn_renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is ``new`` now (``stacklevel``: the caller's caller by default)."""
    warnings.warn(f"{old} is deprecated and will be removed in a future release; use {new}",
                  DeprecationWarning, stacklevel=stacklevel)


def renamed_attribute(module: str, name: str) -> Any:
    """The value of ``module``'s earlier name ``name`` (warning, for the code that reads it);
    ``AttributeError`` for a name that is not one."""
    new = RENAMED.get(module, {}).get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warn_renamed(f"{module}.{name}", f"{module}.{new}", stacklevel=4)
    return getattr(importlib.import_module(module), new)
