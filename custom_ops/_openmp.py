"""numba's threading layer and the launches of compiled threads: GNU OpenMP loaded so that its
threads sleep as soon as a launch ends, bound to the library numba links to where torch loaded
its own copy first, and one launch at a time (:func:`run_compiled`). A leaf of the kernels'
modules: :mod:`._threads` decides how many threads a call uses and calls this one.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Literal

_launch_lock = threading.Lock()
_launch_pid: int | None = None  # the process that started numba's threads
SPIN_COUNT = "0"
"""``GOMP_SPINCOUNT`` while GNU OpenMP loads (unless the user set it or ``OMP_WAIT_POLICY``):
its threads then sleep as soon as a launch ends. Any spinning takes the cores that the next
onnxruntime segment needs: on the 16-core server a CNN with 8 ``LpPooling`` nodes between
convolutions ran in 19.4 ms with 10,000 spins (its segments 15.6 ms; stock onnxruntime 5.0 ms),
and in 2.8 ms with none set before Python started (its segments 2.0 ms; stock 3.9); the
default 300,000 spins took 12.6 against 5.9 ms for Conv -> LpPooling -> Conv there."""


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
    LpPooling nodes took 80 ms on the 16-core server with torch imported first, 5.4 without);
    bound deep, it uses the copy it links to. Where that very library was loaded before (by
    ``ctypes``, by another package, by the application's own parallel numba code that loaded
    the layer first), its spin cannot be changed any more: ``long``, and one
    ``RuntimeWarning`` says what to set (:func:`run_compiled` then uses Python threads)."""
    global _openmp_spin, _bound_deep
    if _openmp_spin is not None:  # every launch asks: known, no lock
        return
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


def run_compiled(threads: int, team: int, launch: Callable[[], None]) -> bool:
    """Run ``threads`` groups of work on threads started from compiled code: ``launch()``
    calls a :data:`dml_onnx._kernels._jit.parallel_jit` driver whose ``prange`` runs one group of a
    loop's work per iteration. No interpreter lock passes from thread to thread, which costs
    :func:`._threads.run_parallel` some 0.1-0.2 ms per thread on a 16-core server.

    ``team`` is every thread the call may use (:func:`._threads.workers`), however few groups:
    GNU OpenMP ends the threads a smaller team leaves out and starts them again for the next
    larger one (Faster R-CNN's 3-region call on 3 threads between calls on 16 took 0.8 ms
    against 0.25 on one thread, on the 16-core server); spare threads wake and find no group,
    and every thread sleeps again as soon as the launch ends (:data:`SPIN_COUNT`).

    Returns False, having run nothing, where the caller runs its groups on the Python pool
    (:func:`._threads.run_parallel`) instead: for one group; in a process forked from one that
    launched (GNU OpenMP, numba's threading layer where the system has it, terminates such a
    child at its first parallel launch); where numba's GNU OpenMP spins long
    (:func:`load_threading_layer`); and under numba's fallback layer, workqueue, which ends the
    process when two threads launch at once (our kernel beside the application's own parallel
    numba code). One launch at a time: each uses every thread it may anyway."""
    if (threads <= 1 or _launch_pid not in (None, os.getpid()) or _openmp_spin == "long"
            or _workqueue):
        return False
    return _launch(team, launch)


def _launch(team: int, launch: Callable[[], None]) -> bool:
    global _launch_pid, _workqueue
    import numba

    load_threading_layer()
    with _launch_lock:
        # numba's config sets NUMBA_NUM_THREADS at run time (reload_config), unseen by mypy
        numba.set_num_threads(min(team, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
        if numba.threading_layer() == "workqueue":
            _workqueue = True
        if _workqueue or _openmp_spin == "long":
            return False
        _launch_pid = os.getpid()
        launch()
    return True


_workqueue = False
"""Whether numba's threading layer turned out to be workqueue (see :func:`run_compiled`)."""
