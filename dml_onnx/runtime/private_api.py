"""Every private part of onnxruntime-extensions and onnxruntime that the binding relies on.

onnxruntime-extensions' public API declares Python operators one decorated function at a time
and turns their outputs into Python lists; :mod:`dml_onnx.runtime` instead declares many
operator variants that share one invocation hook returning numpy arrays. That takes four
private hooks of the extension's ``_ocos`` module, checked here at import: a missing one fails
with an ``ImportError`` naming the supported versions, not later inside a session.
onnxruntime's ``InferenceSession._sess`` (the C++ session behind the Python wrapper) is used
where present and replaced by the public call where not: it saves the wrapper's re-check of
the feed names, and its list of ``run_with_ort_values``'s results (:func:`ort_values_run`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import onnxruntime

from dml_onnx._extension import extension_import

with extension_import():
    import onnxruntime_extensions
    from onnxruntime_extensions import PyCustomOpDef, _ocos
    from onnxruntime_extensions import get_library_path as get_library_path  # re-exported

SUPPORTED_EXTENSIONS = ">=0.13,!=0.14.0,<=0.15.2"
"""The onnxruntime-extensions versions the test suite passed on (as in pyproject.toml)."""

Hook = Callable[[int, list, dict], tuple]


def _missing_hooks() -> list[str]:
    """The private hooks this module needs that the installed extension lacks."""
    wanted = {"_ocos.Opdef.create": (getattr(_ocos, "Opdef", None), "create"),
              "_ocos._on_pyop_invocation": (_ocos, "_on_pyop_invocation"),
              "PyCustomOpDef.install_hooker": (PyCustomOpDef, "install_hooker")}
    return [name for name, (owner, attribute) in wanted.items()
            if owner is None or not callable(getattr(owner, attribute, None))]


def check_hooks() -> None:
    """Raise ``ImportError`` naming the supported versions when a private hook is missing."""
    missing = _missing_hooks()
    if missing:
        raise ImportError(
            f"dml_onnx needs onnxruntime-extensions{SUPPORTED_EXTENSIONS}; the installed "
            f"{getattr(onnxruntime_extensions, '__version__', 'unknown version')} lacks "
            f"{', '.join(missing)} (pip install 'onnxruntime-extensions{SUPPORTED_EXTENSIONS}')")


check_hooks()


def declare_pyop(op_type: str, inputs: Sequence[int], outputs: Sequence[int],
                 attrs: dict[str, int]) -> int:
    """Declare a Python operator (``"domain::Op"``, ``PyCustomOpDef.dt_*`` type codes) whose
    calls reach the installed hook; its id, the hook's first argument."""
    return _ocos.Opdef.create(_never_called, op_type=op_type, inputs=list(inputs),
                              outputs=list(outputs), attrs=attrs)._id


def _never_called(*args: Any, **kwargs: Any) -> None:  # pragma: no cover - the hook runs kernels
    raise AssertionError("dml_onnx runtime ops run through the dml_onnx hook")


def install_hook(hook: Hook) -> None:
    """Route every Python-operator call of the process to ``hook(id, inputs, attributes)``,
    which returns ``(id, shape, array, shape, array, ...)``."""
    PyCustomOpDef.install_hooker(hook)


def extension_hook(k_id: int, inputs: list, attributes: dict) -> tuple:
    """The extension's own invocation of a Python operator that is not ours."""
    return _ocos._on_pyop_invocation(k_id, inputs, attributes)


def session_run(session: onnxruntime.InferenceSession) -> Callable[..., list]:
    """``run(output_names, feeds, run_options)`` of the C++ session behind ``session``, or
    the wrapper's own ``run`` where that is not reachable."""
    return getattr(session, "_sess", session).run


def ort_values_run(session: onnxruntime.InferenceSession
                   ) -> Callable[[list[str], Mapping[str, onnxruntime.OrtValue], Any],
                                 list[onnxruntime.OrtValue]]:
    """``run(output_names, feed, run_options)``: ``session.run_with_ort_values`` for a feed
    already checked (a later segment's). The wrapper builds its list of results by iterating
    onnxruntime's ``OrtValueVector``, which takes 40-65 µs a call on the 2-core machine,
    against 1 µs for indexing it: here the C++ session is called and its results indexed.
    The public call where the C++ session is not reachable."""
    inner = getattr(getattr(session, "_sess", None), "run_with_ort_values", None)
    if inner is None or not hasattr(onnxruntime.OrtValue, "_get_c_value"):
        return session.run_with_ort_values

    def run(output_names: list[str], feed: Mapping[str, onnxruntime.OrtValue],
            run_options: Any) -> list[onnxruntime.OrtValue]:
        found = inner({name: value._get_c_value() for name, value in feed.items()},
                      output_names, run_options)
        return [onnxruntime.OrtValue(found[i]) for i in range(len(found))]
    return run
