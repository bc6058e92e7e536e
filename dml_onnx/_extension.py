"""onnxruntime-extensions' import, as the kernels need it (:func:`extension_import`): with
OpenMP's short spin (torch, where installed, loads its OpenMP as the extension imports it) and
the extension's converters deferred until used. Its own module, which imports nothing of the
package: :mod:`dml_onnx._declare` wraps whoever imports the extension first, and the binding
(:mod:`dml_onnx.runtime.private_api`) imports the extension through it.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

EXTENSION = "onnxruntime_extensions"
CONVERTERS = f"{EXTENSION}.cvt"
"""The extension's converter module: its package ``__init__`` imports it, and it imports
transformers and torch where installed (about 10 s where both are) for converters that no
kernel needs."""


class _DeferredConverters(types.ModuleType):
    """Stands in for :data:`CONVERTERS` while the extension's package loads: the package's
    ``gen_processing_models`` and any attribute of ``onnxruntime_extensions.cvt`` load the real
    module on first use, so the user's own use of the extension is unchanged."""

    gen_processing_models: Callable[..., Any]  # set by extension_import

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system's questions (``__path__`` ...)
            raise AttributeError(name)
        return getattr(_real_converters(), name)


def _real_converters() -> types.ModuleType:
    if isinstance(sys.modules.get(CONVERTERS), _DeferredConverters):
        del sys.modules[CONVERTERS]
    return importlib.import_module(CONVERTERS)  # sets the package's attribute to it


def _generate_processing_models(*args: Any, **kwargs: Any) -> Any:
    return _real_converters().gen_processing_models(*args, **kwargs)


@contextlib.contextmanager
def extension_import() -> Iterator[None]:
    """The block imports onnxruntime-extensions: with OpenMP's short spin (torch, where
    imported, loads its OpenMP) and its converters deferred until used."""
    from dml_onnx._kernels._openmp import short_openmp_spin

    deferred = None
    if CONVERTERS not in sys.modules:
        deferred = sys.modules[CONVERTERS] = _DeferredConverters(CONVERTERS)
        deferred.gen_processing_models = _generate_processing_models
    try:
        with short_openmp_spin():
            yield
    finally:
        if deferred is not None and sys.modules.get(CONVERTERS) is deferred:
            del sys.modules[CONVERTERS]  # a later import loads the real module
            package = sys.modules.get(EXTENSION)
            if package is not None and not hasattr(package, "cvt"):
                # a module takes any attribute; mypy knows only ModuleType's own
                package.cvt = deferred  # type: ignore[attr-defined]
