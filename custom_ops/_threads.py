"""The kernels' threads: the shared thread pool and how work is dealt to it, launches from
compiled code (with GNU OpenMP's short spin while it loads), the lazy import of the compiled
loops, and the layout copies split over the threads (:func:`channels_last`, :func:`converted`).
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import importlib
import math
import os
import queue
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from types import ModuleType
from typing import Literal, TypedDict

import numpy as np

from ._buffers import empty
from ._checks import KernelError
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


def workers(work: float | None = None) -> int:
    """The threads a kernel called now may use: :data:`THREADS`, or :data:`thread_limit` when
    it is set and lower; with ``work`` (values read), all of them where each gets a
    :data:`GRAIN`, else one. Not a number in between: a compiled launch wakes every thread
    it may use anyway (:func:`run_compiled`), and waking sleeping threads costs more than a
    few grains save (on the 16-core server 8 Unfold and Fold nodes of 5 grains each took 3.9
    ms in a chain on 16 threads, 1.2 on one)."""
    allowed = min(THREADS, thread_limit.get() or THREADS)
    return allowed if work is None or work >= allowed * GRAIN else 1


def serial_work() -> float:
    """The most work (values read) that a call now does on the calling thread alone (see
    :func:`workers`); never above :func:`work_limit`, which larger calls check first."""
    allowed = workers()
    return min(work_limit(), math.inf if allowed == 1 else allowed * GRAIN - 1)


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
"""A task of :func:`run_parallel` reads at least this many :data:`GRAIN` of values: handing
one to a thread of the pool takes 0.1-0.2 ms of the interpreter lock on the server (FPN P5's
32 regions, 1.6 million sample reads, took 1.4 ms on 16 threads, 0.9 on 2)."""


def interleaved(count: int, work: float | None = None) -> list[np.ndarray]:
    """``range(count)`` dealt to one group per worker (see :func:`workers`; at most one per
    :data:`POOL_GRAINS` grains of ``work``): ``k, k + g, k + 2g, ...``, so that items of
    different cost mix in every group."""
    groups = 1 if count <= 1 else min(workers(None if work is None else work / POOL_GRAINS),
                                      count)
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


_launch_lock = threading.Lock()
_launch_pid: int | None = None  # the process that started numba's threads
SPIN_COUNT = "0"
"""``GOMP_SPINCOUNT`` while GNU OpenMP loads (unless the user set it or ``OMP_WAIT_POLICY``):
its threads then sleep as soon as a launch ends. Any spinning takes the cores that the next
onnxruntime segment needs: on the 16-core server a CNN with 8 ``LpPooling`` nodes between
convolutions ran in 19.4 ms with 10,000 spins and 2.8 with none (stock onnxruntime 3.9 ms),
its segments 15.6 against 2.0 ms; the default 300,000 spins took 12.6 against 5.9 ms for
Conv -> LpPooling -> Conv there."""


@contextlib.contextmanager
def short_openmp_spin() -> Iterator[None]:
    """Set ``GOMP_SPINCOUNT`` to :data:`SPIN_COUNT` for the block, unless the user chose how
    OpenMP threads wait (:func:`_user_chose_spin`); then remove it. GNU OpenMP reads it once,
    as the library loads: wrap each import or call that may load it (numba's threading layer,
    :func:`load_threading_layer`; onnxruntime-extensions' import of torch, which loads torch's
    own copy). Blocks may overlap, on one thread or several: the last to end removes it."""
    global _spin_blocks, _chosen
    with _spin_lock:
        if _spin_blocks == 0:
            _chosen = _user_chose_spin()
            if not _chosen:
                os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
        _spin_blocks += 1
    try:
        yield
    finally:
        with _spin_lock:
            _spin_blocks -= 1
            if _spin_blocks == 0 and not _chosen:
                os.environ.pop("GOMP_SPINCOUNT", None)


_spin_lock = threading.Lock()
_spin_blocks = 0  # short_openmp_spin blocks open now
_chosen = False  # whether the user had chosen when the open blocks began


def _user_chose_spin() -> bool:
    """Whether the user set ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` (not our blocks)."""
    if _spin_blocks:
        return _chosen
    return bool({"GOMP_SPINCOUNT", "OMP_WAIT_POLICY"} & os.environ.keys())


_openmp_spin: Literal["short", "long"] | None = None
"""How the GNU OpenMP of numba's threading layer waits after a launch, once the layer is
loaded (:func:`load_threading_layer`): ``short`` where that library loaded with
:data:`SPIN_COUNT` (or the user chose, or the layer is not OpenMP), ``long`` where it was
loaded before, by other code, with the default spin."""
_layer_lock = threading.Lock()
_bound_deep = False  # whether numba's OpenMP pool loaded with RTLD_DEEPBIND


def load_threading_layer() -> None:
    """Load numba's threading layer, once, and find out how its GNU OpenMP spins.

    It loads with :data:`SPIN_COUNT` set, and, where a GNU OpenMP library is in the process
    already, with ``RTLD_DEEPBIND``: torch loads its own copy of libgomp into the process's
    global scope, where numba's OpenMP pool would otherwise find its ``GOMP_*`` functions, and
    use torch's threads with their default spin of some 10 ms after every launch (a CNN with 8
    LpPooling nodes took 80 ms against 5.4 on the 16-core server with torch imported first);
    bound deep, it uses the copy it links to. Where that very library was loaded before (by
    ``ctypes``, by another package, by the application's own parallel numba code that loaded
    the layer first), its spin cannot be changed any more: ``long``, and one
    ``RuntimeWarning`` says what to set (:func:`run_compiled` then uses Python threads)."""
    global _openmp_spin, _bound_deep
    with _layer_lock:
        if _openmp_spin is not None:
            return
        import numba

        fresh = False
        if _threading_layer() is None:
            before = _openmp_libraries()
            deep = bool(before) and hasattr(os, "RTLD_DEEPBIND") and not _sanitized()
            flags = sys.getdlopenflags()
            with short_openmp_spin():
                if deep:
                    sys.setdlopenflags(flags | os.RTLD_DEEPBIND)
                try:
                    numba.get_num_threads()  # loads the layer
                finally:
                    sys.setdlopenflags(flags)
            _bound_deep = deep
            library = _numba_openmp(deep)
            fresh = library is None or library not in before
        spins_long = _threading_layer() == "omp" and not _user_chose_spin() and not fresh
        _openmp_spin = "long" if spins_long else "short"
    if spins_long:
        with contextlib.suppress(Warning):  # error filters must not fail a kernel for a hint
            warnings.warn(
                "dml_onnx: the GNU OpenMP (libgomp) that numba's threads use was loaded "
                "before dml_onnx's kernels could stop its spinning: after every parallel "
                "launch its idle threads would spin for milliseconds on the cores the next "
                "onnxruntime node needs, so the kernels use Python threads instead (slower "
                f"for small calls). Set GOMP_SPINCOUNT={SPIN_COUNT} (or "
                "OMP_WAIT_POLICY=passive) in the environment before Python starts to keep the "
                "compiled launches", RuntimeWarning, stacklevel=3)


def _openmp_libraries(maps: str = "/proc/self/maps") -> frozenset[tuple[str, str]]:
    """The GNU OpenMP libraries in the process's memory map, as (device, inode): each file
    once, however it was named (``libgomp.so.1`` and ``libgomp.so.1.0.0`` are one file; a
    wheel's copy, torch's ``torch/lib/libgomp.so.1``, another). Empty where the map cannot be
    read (not Linux)."""
    return frozenset(key for key, path in _mappings(maps)
                     if os.path.basename(path).startswith("libgomp"))


def _mappings(maps: str = "/proc/self/maps", address: int | None = None
              ) -> list[tuple[tuple[str, str], str]]:
    """The file mappings of the process's memory map (those that hold ``address``, if
    given): ((device, inode), path) each."""
    found = []
    try:
        with open(maps) as mapped:
            for line in mapped:
                fields = line.split()
                if len(fields) < 6:  # anonymous
                    continue
                start, _, stop = fields[0].partition("-")
                if address is None or int(start, 16) <= address < int(stop, 16):
                    found.append(((fields[3], fields[4]), fields[5]))
    except OSError:
        pass
    return found


def _numba_openmp(deep: bool) -> tuple[str, str] | None:
    """The (device, inode) of the library whose ``GOMP_parallel`` numba's OpenMP pool calls:
    the process's global scope comes first unless the pool was bound ``deep``, then the pool's
    own dependencies (the dynamic linker's order). None where the pool is not loaded, or
    not on Linux."""
    pool = sys.modules.get("numba.np.ufunc.omppool")
    path = getattr(pool, "__file__", None)
    if path is None or not sys.platform.startswith("linux"):  # GNU OpenMP, a memory map
        return None
    scopes = [ctypes.CDLL(path)] if deep else [ctypes.CDLL(None), ctypes.CDLL(path)]
    for scope in scopes:
        function = getattr(scope, "GOMP_parallel", None)
        if function is not None:
            address = ctypes.cast(function, ctypes.c_void_p).value
            found = _mappings(address=address) if address else []
            return found[0][0] if found else None
    return None


def _sanitized() -> bool:
    """Whether a sanitizer's runtime is loaded (it refuses ``RTLD_DEEPBIND``)."""
    return any(os.path.basename(path).startswith(("libasan", "libtsan", "libubsan", "libmsan"))
               for _, path in _mappings())


def _threading_layer() -> str | None:
    """numba's threading layer where it is loaded (``omp``, ``tbb``, ``workqueue``)."""
    numba = sys.modules.get("numba")
    try:
        return None if numba is None else numba.threading_layer()
    except ValueError:  # not loaded yet
        return None


def run_compiled(threads: int, launch: Callable[[], None]) -> bool:
    """Run ``threads`` groups of work on threads started from compiled code: ``launch()``
    calls a :data:`dml_onnx._kernels._jit.parallel_jit` driver whose ``prange`` runs one group of a
    loop's work per iteration. No interpreter lock passes from thread to thread, which costs
    :func:`run_parallel` some 0.1-0.2 ms per thread on a 16-core server.

    The team is every thread a call may use (:func:`workers`), however few groups: GNU
    OpenMP ends the threads a smaller team leaves out and starts them again for the next
    larger one (Faster R-CNN's 3-region call on 3 threads between calls on 16 took 0.8 ms
    against 0.25 on one thread, on the 16-core server); spare threads wake and find no group,
    and every thread sleeps again as soon as the launch ends (:data:`SPIN_COUNT`).

    Returns False, having run nothing, where the caller runs its groups on the Python pool
    (:func:`run_parallel`) instead: for one group; in a process forked from one that launched
    (GNU OpenMP, numba's threading layer where the system has it, terminates such a child at
    its first parallel launch); where numba's GNU OpenMP spins long (:func:`load_threading_layer`);
    and under numba's fallback layer, workqueue, which ends the process when two threads
    launch at once (our kernel beside the application's own parallel numba code). One launch
    at a time: each uses every thread it may anyway."""
    if (threads <= 1 or _launch_pid not in (None, os.getpid()) or _openmp_spin == "long"
            or _workqueue):
        return False
    return _launch(launch)


def _launch(launch: Callable[[], None]) -> bool:
    global _launch_pid, _workqueue
    import numba

    load_threading_layer()
    with _launch_lock:
        # numba's config sets NUMBA_NUM_THREADS at run time (reload_config), unseen by mypy
        numba.set_num_threads(min(workers(), numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
        if numba.threading_layer() == "workqueue":
            _workqueue = True
        if _workqueue or _openmp_spin == "long":
            return False
        _launch_pid = os.getpid()
        launch()
    return True


_workqueue = False
"""Whether numba's threading layer turned out to be workqueue (see :func:`run_compiled`)."""


def run_bands(groups: Sequence[tuple[int, int]], band: Callable[[int, int], None],
              launch: Callable[[np.ndarray], None]) -> None:
    """:func:`run_compiled` of consecutive bands ``(start, stop)`` (from :func:`bands`):
    ``launch(cuts)``'s driver runs band ``g`` as ``cuts[g]:cuts[g + 1]``; ``band(start,
    stop)`` runs one on a thread (the calling one, or the Python pool's where no compiled
    launch may run)."""
    if len(groups) == 1:  # no launch to decide on (tiny calls)
        band(*groups[0])
    elif not run_compiled(len(groups), lambda: launch(
            np.array([start for start, _ in groups] + [groups[-1][1]], np.int64))):
        run_parallel([functools.partial(band, start, stop) for start, stop in groups])


def run_interleaved(count: int, work: float, task: Callable[[np.ndarray], None],
                    launch: Callable[[int], None]) -> None:
    """``range(count)`` in interleaved groups (``g, g + groups, ...``, so that items of
    different cost mix in every group): ``launch(groups)``'s compiled driver runs them on
    threads started from compiled code (:func:`run_compiled`), one per :data:`GRAIN` of
    ``work``; where it cannot, ``task(items)`` runs each group of :func:`interleaved` on the
    pool."""
    threads = 1 if count <= 1 else min(workers(work), count)
    if threads > 1 and run_compiled(threads, lambda: launch(threads)):
        return
    run_parallel([functools.partial(task, items) for items in interleaved(count, work)])


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
