"""Cold compilations in a process of their own, so that the compiler running out of memory
ends that process, not the caller's.

A loop's first call with new argument types and nothing in numba's on-disk cache compiles it:
seconds, and hundreds of MB for LLVM, which aborts the whole process when memory runs out (no
Python code can catch that). So :func:`compile_aside` has a compiler process compile the loop
into the cache, from which the caller then loads it. The process starts on the first cold
compilation and ends itself after :data:`IDLE_SECONDS` without work (no thread of the caller
watches it: under a memory limit a new thread can fail to start; the caller reaps it at its
next cold compilation or at exit). When it dies (out of memory,
killed), the call raises :class:`~dml_onnx.KernelError` and the next call starts a
new one. Where the process cannot be started or cannot compile a loop (or the loop has no
cache), the caller compiles it itself, as numba does.

The process runs :func:`serve`: pickled requests ``(module, name, signature)`` on stdin, each
answered on stdout with ``None`` (compiled and cached) or the error's text.

The first cold compilation of each operator's loops in a process says so, once, with a
:class:`CompilingWarning` (:func:`announce`): seconds without a word looked like a hang.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from types import FrameType
from typing import IO, Any, NamedTuple

from ._checks import KernelError

IDLE_SECONDS = 30.0
"""The compiler process ends after this long without a request (it holds about 150 MB); where
``select`` cannot wait on a pipe (Windows), it ends with the caller."""

_PACKAGE = __name__.rpartition(".")[0]
"""The kernels' package, ``dml_onnx._kernels``: the compiler process imports it by this name."""
_ROOT = os.path.abspath(__file__)
for _ in range(_PACKAGE.count(".") + 2):  # the folder that holds the top-level package
    _ROOT = os.path.dirname(_ROOT)


class _CompilerProcess:
    """The running compiler process and its stderr (kept for the message when it dies)."""

    def __init__(self) -> None:
        self.errors: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self.process = subprocess.Popen(  # -P and our folder last: the caller's folder and
            [sys.executable, "-P", "-c",  # ours shadow nothing on its path
             "import sys; sys.path.append(sys.argv[1]); from importlib import import_module; "
             "import_module(sys.argv[2]).serve(sys.argv[1], float(sys.argv[3]))", _ROOT,
             __name__, repr(IDLE_SECONDS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors)
        try:
            ready = self._answer()
        except (OSError, EOFError, pickle.UnpicklingError):
            ready = None
        if ready != "ready":  # it could not import us (or found another copy of us)
            self.close()
            raise OSError("the compiler process did not start")

    def compile(self, request: tuple[str, str, Any]) -> str | None:
        """The answer to ``request``; ``EOFError`` / ``OSError`` where the process died."""
        stdin = self.process.stdin
        assert stdin is not None  # a pipe
        pickle.dump(request, stdin)
        stdin.flush()
        return self._answer()

    def _answer(self) -> Any:
        stdout = self.process.stdout
        assert stdout is not None  # a pipe
        return pickle.load(stdout)

    def death(self) -> str | None:
        """How the process ended (after it did), with the last line it wrote to stderr; None
        where it ended itself, idle."""
        status = self.process.wait()
        if status == 0:
            return None
        how = f"exit status {status}"
        if status < 0:
            try:
                how = f"killed by {signal.Signals(-status).name}"
            except ValueError:  # a real-time signal
                how = f"killed by signal {-status}"
        self.errors.seek(0)
        lines = self.errors.read().decode(errors="replace").strip().splitlines()
        return f"{how} ({lines[-1].strip()})" if lines else how

    def close(self) -> None:
        """End the process (it exits when its stdin closes) and free its pipes."""
        _close_pipes(self.process)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.errors.close()


_lock = threading.Lock()
_running: _CompilerProcess | None = None
_serving = False  # True in the compiler process itself


class CompilingWarning(UserWarning):
    """Said once per operator and process when its kernel's loops are not in numba's on-disk
    cache and are compiled for this machine (seconds; later processes load them from the
    cache). A warning rather than a log record: it shows on stderr without any set-up, as
    onnxruntime's own warnings do, where an INFO record would stay silent unless the
    application configured logging; ``warnings.filterwarnings("ignore",
    category=dml_onnx.CompilingWarning)`` silences it."""

    __module__ = "dml_onnx"  # its public name, which warnings print


COMPILE_SECONDS = "a few seconds to half a minute"
"""How long an operator's first compilation takes: 2-13 s per operator measured on a 2-core
machine (Fold 2.3 s, RoiAlign1 3.9 s, the layout loops the ROI kernels share 12.4 s), 25 s for
the first run of a Faster R-CNN."""
_announced: set[str] = set()
_announcing = threading.Lock()


def announce() -> None:
    """Say, once per operator and process, that its kernel's loops compile now (a loop is not
    in the cache). Filters that make warnings errors must not fail a kernel for a notice: the
    warning is dropped there."""
    operator = _operator()
    with _announcing:
        if operator in _announced:
            return
        _announced.add(operator)
    what = f"the {operator} kernel's loops" if operator else "the kernels' loops"
    with contextlib.suppress(Warning):
        warnings.warn(f"dml_onnx: compiling {what} for this machine ({COMPILE_SECONDS}, once: "
                      "numba keeps them in its on-disk cache for later processes) ...",
                      CompilingWarning, stacklevel=_caller_level())


_INTERNAL = ("dml_onnx", "numba", "llvmlite", "onnxruntime",
             "onnxruntime_extensions", "importlib", "threading", "concurrent", "contextlib",
             "functools")
"""The packages between the application's call and a compilation."""


def _caller_level() -> int:
    """The ``stacklevel`` of the application's frame that led to this compilation (its
    ``session.run(...)`` or kernel call), so that the warning names that line as warnings
    do; 2 (:func:`announce`'s caller) where there is none on this thread."""
    frame: FrameType | None = sys._getframe(2)  # announce's caller
    level = 2
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).split(".")[0] not in _INTERNAL:
            return level
        frame, level = frame.f_back, level + 1
    return 2


def _operator() -> str:
    """The operator whose kernel is running: the ``OP`` of the first kernel module
    (``dml_onnx._kernels.<op>``) on this thread's stack, else on another thread's (a loop
    module that a kernel asked for compiles as it loads, on a helper thread, while the kernel
    waits); "" where none is found."""
    this = threading.get_ident()
    stacks = [sys._getframe(1), *(frame for ident, frame in sys._current_frames().items()
                                   if ident != this)]
    for top in stacks:
        frame: FrameType | None = top
        while frame is not None:
            name, operator = frame.f_globals.get("__name__", ""), frame.f_globals.get("OP")
            if (isinstance(operator, str) and name.startswith(_PACKAGE + ".")
                    and not name.rpartition(".")[2].startswith("_")):
                return operator
            frame = frame.f_back
    return ""


def compile_aside(function: Any, signature: Any) -> bool:
    """Compile the loop ``function`` (a module-level function of a loop module, by its
    ``py_func``) for ``signature`` into numba's cache in the compiler process: True once it is
    there, False where the caller is to compile it itself. Raises :class:`KernelError` where
    the compiler process died (most often for memory); the next call starts another."""
    if _serving:
        return False
    announce()
    if (not sys.executable or getattr(sys, "frozen", False)  # a bundled app's executable
            or "<locals>" in function.__qualname__):  # would start the app itself
        return False
    request = (function.__module__, function.__qualname__, signature)
    with _lock:
        for _ in range(2):  # again once where the process had just ended itself, idle
            answer = _ask(request)
            if not isinstance(answer, _Ended):
                return answer is None
            if answer.how is not None:
                raise KernelError(
                    "dml_onnx", function.__qualname__, "compiler process", answer.how,
                    "ended before the loop was compiled (most often: memory ran out); the "
                    "next call starts another")
    return False


class _Ended(NamedTuple):
    """The compiler process ended during a request: how (None: it had ended itself, idle)."""

    how: str | None


def _ask(request: tuple[str, str, Any]) -> str | None | _Ended:
    """The compiler process's answer to ``request``, starting it where none runs."""
    global _running
    try:
        if _running is None:
            _running = _CompilerProcess()
        return _running.compile(request)
    except (OSError, EOFError, pickle.UnpicklingError):
        ended, _running = _running, None
        if ended is None:  # could not start: the caller compiles
            return "the compiler process could not start"
        how = ended.death()
        ended.close()
        return _Ended(how)


def _close_pipes(process: subprocess.Popen) -> None:
    for pipe in (process.stdin, process.stdout):  # unsent bytes to a dead process: dropped
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def _end() -> None:
    """At exit and in a forked child: let go of the process (a child's copy of the pipes
    closed; the process itself belongs to the parent)."""
    global _running, _lock
    if _running is not None:
        _close_pipes(_running.process)
        _running = None
    _lock = threading.Lock()


atexit.register(_end)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_end)


def serve(root: str, idle_seconds: float) -> None:
    """The compiler process: compile each request's loop (which saves it in numba's cache)
    until stdin ends or ``idle_seconds`` pass without a request. Interrupts are the caller's
    to handle: SIGINT is ignored here. Where its path found another copy of this package than
    the caller's (at ``root``), it ends at once, before saying it is ready: the caller then
    compiles itself."""
    global _serving
    if os.path.realpath(_ROOT) != os.path.realpath(root):
        return
    _serving = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    pickle.dump("ready", answers)
    answers.flush()
    while True:
        if os.name == "posix" and not select.select([requests], [], [], idle_seconds)[0]:
            return  # idle
        try:
            module, name, signature = pickle.load(requests)
        except EOFError:
            return
        try:
            getattr(importlib.import_module(module), name).compile(signature)
            answer = None
        except Exception as error:  # noqa: BLE001 - the caller compiles it and raises it itself
            answer = f"{type(error).__name__}: {error}"
        pickle.dump(answer, answers)
        answers.flush()
