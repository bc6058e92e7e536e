"""The compiler of the kernels' loops: numba, without the interpreter lock (so that threads of
``run_parallel`` run compiled loops side by side), cached on disk, and with numpy's rules for
floating-point errors (a division by zero gives infinity or NaN, as the formulas say).
:data:`parallel_jit` compiles the drivers whose ``prange`` starts one thread per band from
compiled code (numba's threading layer: OpenMP where the system has it), see
:func:`dml_onnx._kernels._threads.run_bands`.

Only the ``_*_loops`` modules import this one, and the kernels import those on their first
call: importing the package does not import numba (about half a second).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.abc
import os
import signal
import sys
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any, Literal, TypedDict, Unpack

import numba
from numba.core import event
from numba.core.registry import cpu_target

from ._compiler_process import compile_aside


class _Options(TypedDict, total=False):
    """The options of ``numba.njit`` that the kernels' loops set."""

    nogil: bool
    error_model: Literal["python", "numpy"]
    parallel: bool
    inline: Literal["always", "never"]


_OPTIONS: _Options = {"nogil": True, "error_model": "numpy"}
_uncached: list[str] = []  # loops compiled without a cache (warned about once)


def _compiler(**options: Unpack[_Options]) -> Callable[[Callable], Any]:
    """``numba.njit`` with the on-disk cache where numba finds a place for it, and a cache
    that never fails a call: a damaged file is named in a warning, removed, and the loop
    compiled afresh (numba would raise "Ran out of input" or "Can't get attribute" in every
    process). A loop missing from the cache compiles in the compiler process
    (:mod:`dml_onnx._kernels._compiler_process`), so that LLVM running out of memory does not
    end the caller's. Where numba has no writable place (a read-only install and no writable home:
    "no locator available"), the loops compile in each process, without a cache."""
    settings: _Options = {**_OPTIONS, **options}

    def compile_(function: Callable) -> Any:
        try:
            dispatcher = numba.njit(cache=True, **settings)(function)
        except RuntimeError as error:  # no locator available
            if not _uncached:
                warnings.warn(f"dml_onnx: numba has no place for its cache ({error}); the "
                              "kernels' loops compile in every process", RuntimeWarning,
                              stacklevel=2)
            _uncached.append(function.__name__)
            return numba.njit(cache=False, **settings)(function)
        _hook_cache(dispatcher)
        _stamp_with_imports(dispatcher, function)
        return dispatcher
    return compile_


def _stamp_with_imports(dispatcher: Any, function: Callable) -> None:
    """Let ``dispatcher``'s cache go stale when a module of its package that ``function``'s
    module imports from changes, not only its own file: numba stamps a cache with the source of
    its function's file alone, while the cached machine code holds the compiled code it calls
    from other modules (:mod:`dml_onnx._kernels._half_float_loops`). The stamp becomes numba's
    with the hash of each such module's source (numba's private parts: where they differ, the
    stamp is left as numba has it)."""
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    package, _, _ = function.__module__.rpartition(".")
    if cache_file is None or getattr(cache_file, "_source_stamp", None) is None or not package:
        return
    names = set()
    for value in list(function.__globals__.values()):
        name = getattr(value, "__module__", None)
        if (isinstance(name, str) and name.startswith(package + ".")
                and name != function.__module__):
            names.add(name)
    sources = tuple((name, _source_hash(path)) for name in sorted(names)
                    if (path := getattr(sys.modules.get(name), "__file__", None)))
    if sources:
        cache_file._source_stamp = (cache_file._source_stamp, sources)


@functools.cache
def _source_hash(path: str) -> str:
    with open(path, "rb") as source:
        return hashlib.sha256(source.read()).hexdigest()


def _hook_cache(dispatcher: Any) -> None:
    """Read ``dispatcher``'s cache as a miss where its files cannot be read back, removing
    a damaged index so that the fresh compilation's save replaces it; on a miss, compile in
    the compiler process (:mod:`dml_onnx._kernels._compiler_process`) and load what it cached.
    numba's private parts: where they differ, the cache is left as numba has it."""
    cache = getattr(dispatcher, "_cache", None)
    load = getattr(cache, "load_overload", None)
    if (cache is None or load is None
            or not hasattr(getattr(cache, "_cache_file", None), "_index_path")):
        return

    def read(signature: Any, target_context: Any) -> Any:
        try:
            return load(signature, target_context)
        except Exception as error:  # noqa: BLE001 - any unreadable file: compile instead
            index = cache._cache_file._index_path
            warnings.warn(f"dml_onnx: numba's cache of {dispatcher.py_func.__name__} in "
                          f"{os.path.dirname(index)} cannot be read ({type(error).__name__}: "
                          f"{error}); it is compiled afresh and the cache replaced",
                          RuntimeWarning, stacklevel=3)
            with contextlib.suppress(OSError):
                os.unlink(index)
            return None

    def load_overload(signature: Any, target_context: Any) -> Any:
        result = read(signature, target_context)
        if result is None and compile_aside(dispatcher.py_func, signature):
            result = read(signature, target_context)
        return result

    cache.load_overload = load_overload


class _SignalsAfterCompiling(event.Listener):
    """Python signal handlers wait while the main thread holds numba's compiler or LLVM lock,
    then run.

    A loop compiles (or loads its cache) on its first call with new argument types, on the
    calling thread. A Ctrl-C (or any signal with a Python handler) raised in the middle of
    numba's compiler leaves the loop broken for the process ("no compiled object yet"); so
    each such signal is recorded and raised again once the compiler lock is released, where
    the handler runs as usual (an interrupt inside llvmlite's lock left it held: the next
    compilation hung). Other threads are never interrupted by signals."""

    def __init__(self) -> None:
        self.depth = 0
        self.saved: dict[int, Any] = {}
        self.pending: list[int] = []

    def on_start(self, event: event.Event) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self.depth += 1
        if self.depth == 1:
            for number in signal.valid_signals():
                handler = signal.getsignal(number)
                if callable(handler):
                    self.saved[number] = handler
                    signal.signal(number, self._record)

    def _record(self, number: int, frame: Any) -> None:
        self.pending.append(number)

    def on_end(self, event: event.Event) -> None:
        if threading.current_thread() is not threading.main_thread() or not self.depth:
            return
        self.depth -= 1
        if self.depth == 0:
            for number, handler in self.saved.items():
                signal.signal(number, handler)
            self.saved.clear()
            pending, self.pending = self.pending, []
            for number in dict.fromkeys(pending):
                signal.raise_signal(number)


_deferring = _SignalsAfterCompiling()
for _kind in ("numba:compiler_lock", "numba:llvm_lock"):  # the second is also taken alone
    event.register(_kind, _deferring)
jit = _compiler()
parallel_jit = _compiler(parallel=True)
inline_jit = _compiler(inline="always")
"""For a loop's helper that runs once per short pass (a few hundred values): numba puts its
body into each caller, so that a call builds no array arguments and LLVM sees the whole
pass (RoiAlign1's samples: 7-11% of the loop on the 2-core machine)."""

class _LaterBlasProbe:
    """numba's ``numba.np.arraymath._HAVE_BLAS`` (whether ``np.convolve`` and its kind may call
    BLAS), found by numba's own probe the first time numba reads it."""

    def __init__(self, probe: Callable[[], bool]) -> None:
        self._probe = probe
        self._found: bool | None = None

    def __bool__(self) -> bool:
        if self._found is None:
            self._found = bool(self._probe())
        return self._found


class _DeferBlasProbe(importlib.abc.MetaPathFinder):
    """Refuses ``scipy.linalg`` to numba's BLAS probe (``_check_blas`` of
    ``numba.np.arraymath``) on one thread, so that the probe's answer can wait for its first
    use (:class:`_LaterBlasProbe`): numba runs it on importing that module, and SciPy's
    linear algebra took 0.15 s of a cold start on a 16-core server (0.1 s of 0.64 s on a
    2-core machine). Other imports, and other threads, go on as usual."""

    def __init__(self) -> None:
        self.thread, self.refused = threading.get_ident(), False

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name != "scipy.linalg" or threading.get_ident() != self.thread:
            return None
        frame: types.FrameType | None = sys._getframe(1)
        while frame is not None:
            if (frame.f_code.co_name == "_check_blas"
                    and frame.f_globals.get("__name__") == "numba.np.arraymath"):
                self.refused = True
                raise ModuleNotFoundError("numba's BLAS probe waits for its first use")
            frame = frame.f_back
        return None


def _set_up_numba() -> None:
    """Finish setting numba up (type registries, extension entry points), with its BLAS
    probe left for its first use (:class:`_DeferBlasProbe`). numba does this on its first
    compilation or cache load, where an interrupt in the middle breaks it for the process
    ("duplicate registration"); done here, it is part of this module's import, which runs on
    a helper thread that signals do not interrupt (dml_onnx._kernels._threads.compiled)."""
    finder = _DeferBlasProbe()
    # new lists, not the list changed in place: another thread's import may be iterating it
    sys.meta_path = [finder, *sys.meta_path]
    try:
        cpu_target.typing_context.refresh()
        cpu_target.target_context.refresh()
    finally:
        sys.meta_path = [entry for entry in sys.meta_path if entry is not finder]
    arraymath = sys.modules.get("numba.np.arraymath")
    if (finder.refused and getattr(arraymath, "_HAVE_BLAS", None) is False
            and callable(getattr(arraymath, "_check_blas", None))):
        arraymath._HAVE_BLAS = _LaterBlasProbe(arraymath._check_blas)  # type: ignore[union-attr]


_set_up_numba()
