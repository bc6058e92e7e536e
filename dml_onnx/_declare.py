"""The kernels are declared to onnxruntime-extensions as soon as it is imported.

A plain onnxruntime session sees only the Python operators declared when its options register
the extension library (``register_custom_ops_library(get_library_path())``), and
:mod:`dml_onnx.runtime` declares them as it loads. ``import dml_onnx`` does not load it: the
extension imports torch where installed (0.8 s). So :func:`declare_with_extension` loads the
runtime at once where the extension is already imported, and else right after whoever imports
the extension first (a one-shot import hook). Either way the kernels are declared before any
options can register the library, in whatever order the caller imports the two packages, and
the extension loads in :func:`dml_onnx._extension.extension_import`: with OpenMP's short spin (see
:func:`dml_onnx._kernels._openmp.short_openmp_spin`) and its converters deferred.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence

from dml_onnx._extension import EXTENSION, extension_import


def declare_with_extension() -> None:
    """Declare the kernels now if onnxruntime-extensions is imported, else when it is."""
    if EXTENSION in sys.modules:
        _load_runtime()
    elif not any(isinstance(finder, _AfterExtension) for finder in sys.meta_path):
        # a new list, not the list changed in place: another thread's import may iterate it
        sys.meta_path = [_AfterExtension(), *sys.meta_path]


def _load_runtime() -> None:
    with contextlib.suppress(ImportError):  # an unsupported extension: the binding's first
        importlib.import_module("dml_onnx.runtime")  # use raises it again


class _AfterExtension(importlib.abc.MetaPathFinder):
    """Finds onnxruntime-extensions as the other finders do, once, and runs the runtime's
    import right after the extension's own."""

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != EXTENSION:
            return None
        if self in sys.meta_path:
            sys.meta_path = [finder for finder in sys.meta_path if finder is not self]
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            with extension_import():
                load(module)
            _load_runtime()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
