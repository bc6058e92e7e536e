"""The kernels' threads: how many a call uses (:func:`workers`), how work is dealt to them, in
bands or interleaved groups, on threads started from compiled code (:mod:`._openmp`) or on the
shared Python pool, the lazy import of the compiled loops, and the layout copies split over
the threads (:func:`channels_last`, :func:`converted`).
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import math
import os
import queue
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from types import ModuleType
from typing import Literal, TypedDict

import numpy as np

from ._buffers import empty
from ._checks import KernelError
from ._openmp import load_threading_layer, run_compiled
from .limits import work_limit


def channels_last(X: np.ndarray, dtype: np.dtype, runs: np.ndarray | None = None
                  ) -> np.ndarray:
    """``X [N, C, H, W]`` as a contiguous ``[N, H, W, C]`` array of ``dtype``; with ``runs``
    (``[K, 2]`` ascending start and stop of runs of flat pixels ``(n * H + y) * W + x``), only
    those pixels: the others are left as the array's memory had them.

    Up to :data:`GRAIN` values in one numpy call (every pixel); above, by the compiled tiles of
    :mod:`dml_onnx._kernels._layout_loops`, in bands of pixels over the threads (started from
    compiled code: numpy's strided copies, one task per band of channels, held the interpreter
    lock between them and took longer at 16 threads than at 2)."""
    n, c, h, w = X.shape
    if X.size <= GRAIN:
        return np.ascontiguousarray(X.transpose(0, 2, 3, 1), dtype)
    out = empty((n, h * w, c), dtype)
    planes = np.ascontiguousarray(X.reshape(n, c, h * w))  # the compiled signatures' layout
    if X.dtype == np.float16:  # numba takes no float16: its bits, converted in the same pass
        planes = planes.view(np.uint16)
    loops = compiled("_layout_loops")
    if runs is None:
        runs = np.array([[0, n * h * w]], np.int64)
    pixels = int((runs[:, 1] - runs[:, 0]).sum())
    run_bands(bands(pixels, pixels * c),
              lambda start, stop: loops.transpose_runs(planes, out, runs, start, stop),
              lambda cuts: loops.transpose_runs_bands(cuts, runs, planes, out))
    return out.reshape(n, h, w, c)


def converted(X: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``X`` as a contiguous array of ``dtype`` (``X`` itself where it is one already),
    converted in runs of its flat values over the threads (numpy's conversion is one thread);
    float16 to and from float32 by compiled loops (:func:`convert_into`)."""
    dtype = np.dtype(dtype)
    if X.dtype == dtype and X.flags.c_contiguous:
        return X
    out = empty(X.shape, dtype)
    source, target = X.reshape(-1), out.reshape(-1)
    if not X.flags.c_contiguous or X.size <= 2 * GRAIN:
        np.copyto(out, X, casting="unsafe")
        return out
    if (X.dtype, dtype) in _HALF_PAIRS:
        run_bands(bands(X.size, X.size), *_half_loops(source, target))
        return out
    runs = min(2 * workers(), X.size // GRAIN)
    edges = [X.size * k // runs for k in range(runs + 1)]
    run_parallel([functools.partial(np.copyto, target[a:b], source[a:b], casting="unsafe")
                  for a, b in zip(edges, edges[1:])])
    return out


def convert_into(source: np.ndarray, target: np.ndarray) -> None:
    """``target[...] = source`` on this thread (one shape); C-contiguous float16 to and from
    float32 by compiled loops on the bits, rounding as numpy does (numpy takes
    several times a copy's time there; float32 to float16 beyond its range gives infinity,
    without numpy's warning)."""
    if ((source.dtype, target.dtype) in _HALF_PAIRS and source.size > GRAIN
            and source.flags.c_contiguous and target.flags.c_contiguous):
        run, _ = _half_loops(source.reshape(-1), target.reshape(-1))
        run(0, source.size)
    else:
        with np.errstate(over="ignore"):
            np.copyto(target, source, casting="unsafe")


_HALF_PAIRS = {(np.dtype(np.float16), np.dtype(np.float32)),
               (np.dtype(np.float32), np.dtype(np.float16))}


def _half_loops(source: np.ndarray, target: np.ndarray
                ) -> tuple[Callable[[int, int], None], Callable[[np.ndarray], None]]:
    """The compiled float16 <-> float32 conversion of flat ``source`` into flat ``target``:
    ``(run(start, stop)`` on this thread, ``run_all(cuts)`` over the runs between ``cuts``
    on numba's threads), as :func:`run_bands` takes them."""
    loops = compiled("_layout_loops")
    if source.dtype == np.float16:
        bits = source.view(np.uint16)
        return (lambda start, stop: loops.floats_from_halves(bits, target, start, stop),
                lambda cuts: loops.floats_from_halves_bands(cuts, bits, target))
    words, halves = source.view(np.uint32), target.view(np.uint16)
    return (lambda start, stop: loops.halves_from_floats(words, halves, start, stop),
            lambda cuts: loops.halves_from_floats_bands(cuts, words, halves))


THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
"""Threads a kernel splits independent chunks over (numpy and the compiled loops release the
interpreter lock): the CPUs this process may use when it starts."""
thread_limit: contextvars.ContextVar[int] = contextvars.ContextVar("thread_limit", default=0)
"""The most threads a kernel called in this context may use (0: :data:`THREADS`); set by
``dml_onnx.InferenceSession.run`` from the session's ``intra_op_num_threads``."""


GRAIN = 1 << 15
"""Values read per thread below which splitting a call over more threads costs more than it
saves (starting a task takes some 20-50 us)."""
LAUNCH_GRAINS = 8
"""A call splits over its threads from :func:`launch_work` on: a grain per thread up to this
many threads, beyond them half a grain per thread but at least this many grains. A compiled
launch wakes every thread for some 30-100 us on the 16-core server, not 8 times what it
costs on 2, so that with many threads a call pays for its launch well before each thread
gets a grain. Measured there at 16 threads, each kernel on its arrays in the benchmark
graphs: LpPooling of ``[1,16,64,64]`` (13 grains) 0.35-0.55 ms on one thread, 0.10-0.12 ms
on 16; RoiAlign1 of 16 regions on ``[1,32,32,32]`` (64 grains of values read) 0.65-0.73
against 0.17-0.20 ms; Unfold and Fold of ``[1,16,32,32]`` (4.5 grains), whose values are
cheap to copy, 51-79 us on one, 66-93 on 16 (in a chain of 8 such nodes an earlier form took
3.9 ms on 16 threads, 1.2 on one). Above 16 threads (not measured) the split point grows with
the threads again, as the cost of waking them does."""


def launch_work(allowed: int) -> int:
    """The work (values read) from which a call on ``allowed`` threads splits over them:
    ``allowed`` grains up to :data:`LAUNCH_GRAINS` threads, then ``max(LAUNCH_GRAINS,
    allowed / 2)`` (8 grains at 16 threads, 32 at 64)."""
    return min(allowed, max(LAUNCH_GRAINS, allowed // 2)) * GRAIN


def workers(work: float | None = None) -> int:
    """The threads a kernel called now may use: :data:`THREADS`, or :data:`thread_limit` when
    it is set and lower; with ``work`` (values read), all of them from :func:`launch_work`
    on, else one. Not a number in between: a compiled launch wakes every thread it may use
    anyway (:func:`._openmp.run_compiled`)."""
    allowed = min(THREADS, thread_limit.get() or THREADS)
    return allowed if work is None or work >= launch_work(allowed) else 1


def serial_work() -> float:
    """The most work (values read) that a call now does on the calling thread alone (see
    :func:`workers`); never above :func:`work_limit`, which larger calls check first."""
    allowed = workers()
    return min(work_limit(), math.inf if allowed == 1 else launch_work(allowed) - 1)


class LayoutMemo:
    """The last input layout (a key of shapes and element types) that passed a prepared
    kernel's checks: later calls with the same layout skip them. A race only repeats a check;
    a key is stored after its check passed."""

    __slots__ = ("key",)

    def __init__(self) -> None:
        self.key: object = None

    def check(self, key: object, check: Callable[[], object]) -> None:
        if key != self.key:
            check()
            self.key = key


POOL_GRAINS = 8
"""A task of :func:`run_parallel` reads at least this many :data:`GRAIN` of values (of sample
reads, for the ROI kernels' regions): handing one to a thread of the pool takes 0.1-0.2 ms of
the interpreter lock on the server (FPN P5's 32 regions, 1.6 million sample reads, took 1.4
ms on 16 threads, 0.9 on 2)."""


def interleaved(count: int, work: float | None = None) -> list[np.ndarray]:
    """``range(count)`` dealt to one group per worker (see :func:`workers`), where each gets
    :data:`POOL_GRAINS` grains of ``work`` (else one group; with any number of threads: the
    pool's cost grows with its tasks): ``k, k + g, k + 2g, ...``, so that items of different
    cost mix in every group."""
    allowed = workers()
    enough = work is None or work >= allowed * POOL_GRAINS * GRAIN
    groups = min(allowed, count) if count > 1 and enough else 1
    if groups == 1:
        return [np.arange(count)]
    return [np.arange(k, count, groups) for k in range(groups)]


def bands(count: int, work: float | None = None) -> list[tuple[int, int]]:
    """``range(count)`` cut into one run of consecutive items per worker (see
    :func:`workers`), as ``(start, stop)`` pairs."""
    groups = 1 if count <= 1 else min(workers(work), count)
    if groups == 1:
        return [(0, count)]
    cuts = [count * k // groups for k in range(groups + 1)]
    return list(zip(cuts, cuts[1:]))


def run_parallel(tasks: Sequence[Callable[[], None]]) -> None:
    """Run independent tasks, split in :data:`THREADS` (or :data:`thread_limit`) interleaved
    groups: one group on the calling thread, the others on shared worker threads, in copies
    of the caller's context and under its ``np.errstate`` (numpy 1 keeps that per thread, not
    in the context).
    Raises the error of the first failing task in ``tasks`` order, as a serial loop would
    (each group stops at its first failure)."""
    groups = min(workers(), len(tasks)) if len(tasks) > 1 else 1
    if groups <= 1:
        for task in tasks:
            task()
        return
    pool = _shared_pool(groups - 1)
    errors = np.geterr()
    futures = [pool.submit(contextvars.copy_context().run, _run_group, tasks, k, groups, errors)
               for k in range(1, groups)]
    failures = [_run_group(tasks, 0, groups), *(future.result() for future in futures)]
    first = min((f for f in failures if f is not None), key=lambda f: f[0], default=None)
    if first is not None:
        raise first[1]


class _DaemonPool:
    """Daemon threads that run the tasks put on one queue, each task's result or error set on
    its ``Future``. Not ``ThreadPoolExecutor``: its threads are not daemons, and it registers
    each for the interpreter's exit only after starting it, while ``submit`` waits for the
    start in a way a signal handler interrupts; where the handler raised there (Ctrl-C),
    nothing ever told that thread to end, and the interpreter waited for it at exit for ever.
    Here a start that an exception interrupts leaves a spare thread, which serves the queue
    too."""

    def __init__(self) -> None:
        self._tasks: queue.SimpleQueue[tuple[Future, Callable[..., object], tuple]] = (
            queue.SimpleQueue())
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def grow(self, count: int) -> None:
        """Start threads until there are ``count``; raises ``RuntimeError`` where the system
        starts no more."""
        with self._lock:
            while len(self._threads) < count:
                thread = threading.Thread(target=self._serve, daemon=True,
                                          name=f"dml_onnx-{len(self._threads)}")
                thread.start()
                self._threads.append(thread)

    def submit(self, function: Callable[..., object], *args: object) -> Future:
        future: Future = Future()
        self._tasks.put((future, function, args))
        return future

    def _serve(self) -> None:
        while True:
            future, function, args = self._tasks.get()
            try:
                future.set_result(function(*args))
            except BaseException as error:  # noqa: BLE001 - handed to the caller's Future
                future.set_exception(error)
            del future, function, args  # hold no task's arrays while idle


_pool: tuple[int, _DaemonPool] | None = None  # with the process that started it
_pool_lock = threading.Lock()


def _shared_pool(threads: int) -> _DaemonPool:
    """The pool of :func:`run_parallel`, with at least ``threads`` threads."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():  # a forked child has no workers
            _pool = os.getpid(), _DaemonPool()
        pool = _pool[1]
    pool.grow(threads)
    return pool


_ErrorKind = Literal["ignore", "warn", "raise", "call", "print", "log"]


class _ErrorRules(TypedDict):
    """What ``np.geterr()`` returns: how numpy treats each kind of floating-point error."""

    divide: _ErrorKind
    over: _ErrorKind
    under: _ErrorKind
    invalid: _ErrorKind


def run_bands(groups: Sequence[tuple[int, int]], band: Callable[[int, int], None],
              launch: Callable[[np.ndarray], None]) -> None:
    """:func:`._openmp.run_compiled` of consecutive bands ``(start, stop)`` (from :func:`bands`):
    ``launch(cuts)``'s driver runs band ``g`` as ``cuts[g]:cuts[g + 1]``; ``band(start,
    stop)`` runs one on a thread (the calling one, or the Python pool's where no compiled
    launch may run)."""
    if len(groups) == 1:  # no launch to decide on (tiny calls)
        band(*groups[0])
    elif not run_compiled(len(groups), workers(), lambda: launch(
            np.array([start for start, _ in groups] + [groups[-1][1]], np.int64))):
        run_parallel([functools.partial(band, start, stop) for start, stop in groups])


def run_interleaved(count: int, work: float, task: Callable[[np.ndarray], None],
                    launch: Callable[[int], None], pool_work: float | None = None) -> None:
    """``range(count)`` in interleaved groups (``g, g + groups, ...``, so that items of
    different cost mix in every group): ``launch(groups)``'s compiled driver runs them on
    threads started from compiled code (:func:`._openmp.run_compiled`), as :func:`workers`
    says for ``work`` (values read); where it cannot, ``task(items)`` runs each group of
    :func:`interleaved` on the pool, for ``pool_work`` (the work in the units its
    :data:`POOL_GRAINS` were measured in; ``work`` where not given)."""
    threads = 1 if count <= 1 else min(workers(work), count)
    if threads > 1 and run_compiled(threads, workers(), lambda: launch(threads)):
        return
    run_parallel([functools.partial(task, items)
                  for items in interleaved(count, work if pool_work is None else pool_work)])


def _run_group(tasks: Sequence[Callable[[], None]], start: int, step: int,
               errors: _ErrorRules | None = None) -> tuple[int, BaseException] | None:
    """Tasks ``start::step`` in order (under ``np.errstate(**errors)`` when given); the index
    and error of the first that fails."""
    with np.errstate() if errors is None else np.errstate(**errors):
        for index in range(start, len(tasks), step):
            try:
                tasks[index]()
            except Exception as error:  # noqa: BLE001 - handed to run_parallel, which raises it
                return index, error
    return None


_imports: dict[str, Future] = {}  # module name -> its import, started once
_loaded: dict[str, ModuleType] = {}  # the imports done: read without a lock on every call
_imports_lock = threading.Lock()


def compiled(name: str) -> ModuleType:
    """The module ``dml_onnx._kernels.<name>`` of compiled loops, imported on its first use.

    The first import loads numba and the loops' cache (about a second). It runs on a helper
    thread, which signals never interrupt: a Ctrl-C that lands during it reaches the caller
    at once, while the import goes on, where an interrupted import would leave numba
    half-loaded for the rest of the process. Every caller gets the module once its import is
    complete (``sys.modules`` holds it while it is still loading)."""
    module = _loaded.get(name)
    if module is not None:
        return module
    with _imports_lock:
        loading = _imports.get(name)
        if loading is None:
            loading = _imports[name] = Future()
            threading.Thread(target=_import, args=(f"{__package__}.{name}", loading),
                             name="dml_onnx-import", daemon=True).start()
    module = _loaded[name] = loading.result()
    return module


def _forget_unfinished_imports() -> None:
    """In a forked child: the imports still loading belong to threads the child has not;
    its first call starts them again (instead of waiting for ever)."""
    global _imports_lock
    _imports_lock = threading.Lock()
    for name in [n for n, loading in _imports.items() if not loading.done()]:
        del _imports[name]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_unfinished_imports)


_LOADED_PACKAGES = ("numba", "llvmlite", f"{__package__}.")
"""What a compiled module's import loads: where it fails part-way (memory ran out), their
modules loaded so far are dropped, so that the next call imports them afresh (a half-loaded
numba failed every later import: "partially initialized module 'numba'")."""
_one_import = threading.Lock()  # so that a failed import drops only what it loaded itself


def _import(module: str, done: Future) -> None:
    with _one_import:
        before = set(sys.modules)
        try:
            # numba, then its threading layer, which a module that compiles its parallel
            # drivers as it loads (dml_onnx._kernels._layout_loops) would load otherwise
            importlib.import_module(f"{__package__}._jit")
            load_threading_layer()
            loaded = importlib.import_module(module)
            done.set_result(loaded)
            return
        except BaseException as failure:  # noqa: BLE001 - handed to the callers waiting for it
            for name in set(sys.modules) - before:
                if name.startswith(_LOADED_PACKAGES):
                    del sys.modules[name]
            error: BaseException = failure
    with _imports_lock:  # the next call tries again
        del _imports[module.rpartition(".")[2]]
    if isinstance(error, Exception):
        cause, error = error, KernelError(
            "dml_onnx", module, "import", f"{type(error).__name__}: {error}",
            "failed (most often: memory ran out); the next call tries again")
        error.__cause__ = cause
    done.set_exception(error)
