"""Pieces shared by the kernels: the error type, attribute checks, rounding, window geometry.

Plain numpy only. Every check raises :class:`KernelError` with the message shape the spec asks
for: ``"<Op> '<node>': <field> <value> <rule>"``. The process-wide memory limit lives here too
(:func:`memory_limit`, :func:`set_memory_limit`, :func:`check_memory`): kernels cannot import
``dml_onnx``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import math
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import NamedTuple

import numpy as np

UINT32_MAX = 4294967295


class KernelError(ValueError, RuntimeError):
    """Invalid input or attribute of one node: a ``ValueError``, and a ``RuntimeError`` as
    torch's and torchvision's kernels raise for bad inputs.

    ``str(error)`` reads ``"RoiPooling 'pool1': rois[3] batch index 7 is outside [0, 2)"``;
    the parts are kept as attributes for programs.
    """

    def __init__(self, op: str, node: str, field: str, value: object, rule: str):
        self.op, self.node, self.field, self.value, self.rule = op, node, field, value, rule
        super().__init__(f"{op} '{node}': {field} {_show(value)} {rule}")

    def __reduce__(self):  # keep the five-argument constructor picklable
        return (type(self), (self.op, self.node, self.field, self.value, self.rule))


def _show(value: object) -> str:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (np.generic,)):
        value = value.item()
    if isinstance(value, tuple):
        value = list(value)
    return repr(value) if isinstance(value, str) else str(value)


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a float kernel computes in: float16 is computed in float32."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.float16 else np.dtype(dtype)


def lowest(dtype: np.dtype) -> np.floating:
    """``lowest(T)`` of the specification, the element type's lowest finite value (-65504
    for float16), in the compute type: where a maximum starts."""
    return compute_dtype(dtype).type(np.finfo(dtype).min)


def check_ints(op: str, node: str, name: str, values: Sequence[int], *, minimum: int,
               length: int | None = None) -> tuple[int, ...]:
    """Check a list attribute: optional exact length, every value >= minimum."""
    values = tuple(int(v) for v in values)
    if length is not None and len(values) != length:
        raise KernelError(op, node, name, list(values),
                          f"must have {length} values, not {len(values)}")
    for i, v in enumerate(values):
        if v < minimum:
            raise KernelError(op, node, f"{name}[{i}]", v, f"is below {minimum}")
    return values


def check_int(op: str, node: str, name: str, value: int, *, minimum: int,
              maximum: int | None = None) -> int:
    value = int(value)
    if value < minimum:
        raise KernelError(op, node, name, value, f"is below {minimum}")
    if maximum is not None and value > maximum:
        raise KernelError(op, node, name, value, f"is above {maximum}")
    return value


def check_finite(op: str, node: str, name: str, value: float) -> float:
    value = float(value)
    if not np.isfinite(value):
        raise KernelError(op, node, name, value, "is not finite")
    return value


def check_choice(op: str, node: str, name: str, value: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise KernelError(op, node, name, value, f"is not one of {', '.join(map(repr, choices))}")
    return value


def check_window_attributes(op: str, node: str, *, window: tuple[str, Sequence[int]],
                            strides: Sequence[int] | None, dilations: Sequence[int] | None,
                            start_padding: Sequence[int] | None, end_padding: Sequence[int] | None,
                            spatial_dims: Sequence[int] = (1, 2, 3, 4, 5, 6)) -> int:
    """Check the sliding-window attributes of LpPooling, Unfold and Fold; return k.

    ``window`` is ``(attribute name, values)``. The other lists may be empty (their default)
    or have one value per spatial axis.
    """
    window_name, window_values = window
    k = len(window_values)
    if k not in spatial_dims:
        raise KernelError(op, node, window_name, list(window_values),
                          f"must have {_count_phrase(spatial_dims)} values, not {k}")
    check_ints(op, node, window_name, window_values, minimum=1)
    for name, values, minimum in (("strides", strides, 1), ("dilations", dilations, 1),
                                  ("start_padding", start_padding, 0),
                                  ("end_padding", end_padding, 0)):
        if values:
            check_ints(op, node, name, values, minimum=minimum, length=k)
    return k


def _count_phrase(counts: Sequence[int]) -> str:
    counts = sorted(counts)
    if counts == list(range(counts[0], counts[-1] + 1)) and len(counts) > 1:
        return f"{counts[0]} to {counts[-1]}"
    return " or ".join(map(str, counts))


class WindowGeometry(NamedTuple):
    """Checked sliding-window attributes with their defaults filled in, and the block counts."""

    window: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    start_padding: tuple[int, ...]
    end_padding: tuple[int, ...]
    blocks: tuple[int, ...]  # B_d (output positions) per spatial axis, each >= 1

    @classmethod
    def of(cls, window: tuple[int, ...], strides: tuple[int, ...], dilations: tuple[int, ...],
           start_padding: tuple[int, ...], end_padding: tuple[int, ...],
           blocks: tuple[int, ...]) -> WindowGeometry:
        """The geometry, with the stride of an axis of one block and the dilation of an axis
        of one tap set to 1: they move nothing, and as byte strides they may not fit a C long
        (any int64 attribute value is valid)."""
        return cls(window, tuple(s if b > 1 else 1 for s, b in zip(strides, blocks)),
                   tuple(d if w > 1 else 1 for d, w in zip(dilations, window)),
                   start_padding, end_padding, blocks)

    @property
    def k(self) -> int:
        return len(self.window)


def tap_ranges(g: WindowGeometry, spatial: Sequence[int]) -> tuple[range, ...]:
    """Per spatial axis, the window taps that read the input (not padding) for some block:
    tap ``i`` with ``0 <= b * stride + i * dilation - start < D`` for a ``b`` below ``B``. The
    others read padding only; skipping them costs a window sum nothing."""
    ranges = []
    for w, s, d, a, b, size in zip(g.window, g.strides, g.dilations, g.start_padding,
                                   g.blocks, spatial):
        first = max(0, -((-(a - (b - 1) * s)) // d))  # ceil((a - (B - 1) * s) / d)
        stop = min(w, (a + size - 1) // d + 1) if size else 0
        ranges.append(range(first, max(first, stop)))
    return tuple(ranges)


def read_extent(g: WindowGeometry, spatial: Sequence[int]) -> tuple[tuple[int, ...], bool]:
    """The extent of the padded input that the windows read, per spatial axis (the tail of
    the end padding, or of the input, may be left unread), and whether they read padding."""
    extent = tuple((b - 1) * s + (w - 1) * d + 1
                   for b, s, w, d in zip(g.blocks, g.strides, g.window, g.dilations))
    return extent, any(g.start_padding) or any(e > size for e, size in zip(extent, spatial))


def padded_copy_slices(g: WindowGeometry, spatial: Sequence[int], extent: Sequence[int]
                       ) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
    """Where the read part of an input of ``spatial`` sizes goes in a zero-padded buffer of
    ``extent``: ``(buffer slices, input slices)`` over the spatial axes."""
    kept = [max(0, min(size, e - a)) for size, e, a in zip(spatial, extent, g.start_padding)]
    return (tuple(slice(a, a + m) for a, m in zip(g.start_padding, kept)),
            tuple(slice(0, m) for m in kept))


def as_key(values: Sequence[int] | None) -> tuple[int, ...]:
    """A list attribute as a hashable tuple, for caches keyed by attributes (absent: empty)."""
    if type(values) is tuple:
        return values
    return tuple(int(v) for v in values) if values is not None else ()


def filled(values: Sequence[int] | None, k: int, default: int) -> tuple[int, ...]:
    """A list attribute with its spec default (``k`` copies of ``default``) when empty."""
    return tuple(int(v) for v in values) if values else (default,) * k


def sliding_block_counts(op: str, node: str, spatial_shape: Sequence[int], window: Sequence[int],
                         strides: Sequence[int], dilations: Sequence[int],
                         start_padding: Sequence[int], end_padding: Sequence[int],
                         *, what: str = "output size", first_axis: int = 0) -> tuple[int, ...]:
    """``(D + start + end - dilation * (window - 1) - 1) // stride + 1`` per axis, each >= 1.

    ``first_axis`` numbers the axes in messages when only some of them are passed.
    """
    counts = []
    for axis, (d, w, s, dil, a, b) in enumerate(
            zip(spatial_shape, window, strides, dilations, start_padding, end_padding)):
        span = d + a + b - dil * (w - 1) - 1
        count = span // s + 1 if span >= 0 else 0
        if count < 1:
            raise KernelError(op, node, f"spatial axis {first_axis + axis} {what}", count,
                              f"is below 1 (size {d}, padding {a}+{b}, window {w}, "
                              f"dilation {dil}, stride {s})")
        counts.append(count)
    return tuple(counts)


def channels_last(X: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``X [N, C, H, W]`` as a contiguous ``[N, H, W, C]`` array of ``dtype``.

    Up to :data:`GRAIN` values in one numpy call; above, by the compiled tiles of
    :mod:`custom_ops._layout_loops`, in bands of pixels over the threads (started from
    compiled code: numpy's strided copies, one task per band of channels, held the interpreter
    lock between them and took longer at 16 threads than at 2)."""
    n, c, h, w = X.shape
    if X.size <= GRAIN:
        return np.ascontiguousarray(X.transpose(0, 2, 3, 1), dtype)
    out = np.empty((n, h * w, c), dtype)
    planes = np.ascontiguousarray(X.reshape(n, c, h * w))  # the compiled signatures' layout
    if X.dtype == np.float16:  # numba takes no float16: its bits, converted in the same pass
        planes = planes.view(np.uint16)
    loops = compiled("_layout_loops")
    run_bands(bands(n * h * w, X.size),
              lambda start, stop: loops.transpose_rows(planes, out, start, stop),
              lambda cuts: loops.transpose_bands(cuts, planes, out))
    return out.reshape(n, h, w, c)


def converted(X: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``X`` as a contiguous array of ``dtype`` (``X`` itself where it is one already),
    converted in runs of its flat values over the threads (numpy's conversion is one thread)."""
    if X.dtype == dtype and X.flags.c_contiguous:
        return X
    out = np.empty(X.shape, dtype)
    source, target = X.reshape(-1), out.reshape(-1)
    if not X.flags.c_contiguous or X.size <= 2 * GRAIN:
        np.copyto(out, X, casting="unsafe")
        return out
    runs = min(2 * workers(), X.size // GRAIN)
    edges = [X.size * k // runs for k in range(runs + 1)]
    run_parallel([functools.partial(np.copyto, target[a:b], source[a:b], casting="unsafe")
                  for a, b in zip(edges, edges[1:])])
    return out


THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
"""Threads a kernel splits independent chunks over (numpy and the compiled loops release the
interpreter lock): the CPUs this process may use when it starts."""
_executor: tuple[int, ThreadPoolExecutor] | None = None  # with the process that started it
_executor_lock = threading.Lock()
thread_limit: contextvars.ContextVar[int] = contextvars.ContextVar("thread_limit", default=0)
"""The most threads a kernel called in this context may use (0: :data:`THREADS`); set by
``dml_onnx.InferenceSession.run`` from the session's ``intra_op_num_threads``."""


GRAIN = 1 << 15
"""Values read per thread below which splitting a call over more threads costs more than it
saves (starting a task takes some 20-50 us)."""


def workers(work: float | None = None) -> int:
    """The threads a kernel called now may use: :data:`THREADS`, or :data:`thread_limit` when
    it is set and lower; with ``work`` (values read), at most one per :data:`GRAIN`."""
    allowed = min(THREADS, thread_limit.get() or THREADS)
    return allowed if work is None else max(1, min(allowed, int(work // GRAIN)))


def serial_work() -> float:
    """The most work (values read) that a call now does on the calling thread alone: any
    amount where it may use one thread, else below two :data:`GRAIN` (see :func:`workers`);
    never above :func:`work_limit`, which larger calls check first."""
    return min(work_limit(), math.inf if workers() == 1 else 2 * GRAIN - 1)


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


def interleaved(count: int, work: float | None = None) -> list[np.ndarray]:
    """``range(count)`` dealt to one group per worker (see :func:`workers`): ``k, k + g,
    k + 2g, ...``, so that items of different cost mix in every group."""
    groups = 1 if count <= 1 else min(workers(work), count)
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
    global _executor
    groups = min(workers(), len(tasks)) if len(tasks) > 1 else 1
    if groups <= 1:
        for task in tasks:
            task()
        return
    with _executor_lock:
        if _executor is None or _executor[0] != os.getpid():  # a forked child has no workers
            _executor = os.getpid(), ThreadPoolExecutor(THREADS - 1,
                                                        thread_name_prefix="custom_ops")
        executor = _executor[1]
    errors = np.geterr()
    futures = [executor.submit(contextvars.copy_context().run, _run_group, tasks, k, groups,
                               errors)
               for k in range(1, groups)]
    failures = [_run_group(tasks, 0, groups), *(future.result() for future in futures)]
    first = min((f for f in failures if f is not None), key=lambda f: f[0], default=None)
    if first is not None:
        raise first[1]


_launch_lock = threading.Lock()
_launch_pid: int | None = None  # the process that started numba's threads
SPIN_COUNT = "10000"
"""``GOMP_SPINCOUNT`` while GNU OpenMP loads (unless the user set it or ``OMP_WAIT_POLICY``):
its threads then wait actively for some microseconds after a launch instead of the default
300,000 spins, which took the cores that the next onnxruntime node (and the next kernel's
Python threads) needed: Conv -> LpPooling -> Conv took 12.3 against 9.0 ms on the 2-core
machine, and 12.6 against 5.9 ms on the 16-core server."""


@contextlib.contextmanager
def short_openmp_spin() -> Iterator[None]:
    """Set ``GOMP_SPINCOUNT`` to :data:`SPIN_COUNT` for the block, unless the user chose how
    OpenMP threads wait; then remove it. GNU OpenMP reads it once, as the library loads: wrap
    the first import or call that loads it (numba's threading layer; torch's own OpenMP,
    which numba then shares, loads when onnxruntime-extensions imports torch)."""
    chosen = {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY"} & os.environ.keys()
    if not chosen:
        os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    try:
        yield
    finally:
        if not chosen:
            os.environ.pop("GOMP_SPINCOUNT", None)


def run_compiled(threads: int, launch: Callable[[], None]) -> bool:
    """Start ``threads`` threads from compiled code: ``launch()`` calls a
    :data:`custom_ops._jit.parallel_jit` driver whose ``prange`` runs one group of a loop's
    work per iteration. No interpreter lock passes from thread to thread, which costs
    :func:`run_parallel` some 0.1-0.2 ms per thread on a 16-core server.

    Returns False, having run nothing, where the caller runs its groups itself: for one
    group; in a process forked from one that launched (GNU OpenMP, numba's threading layer
    where the system has it, terminates such a child at its first parallel launch); and under
    numba's fallback layer, workqueue, which ends the process when two threads launch at once
    (our kernel beside the application's own parallel numba code). One launch at a time: each
    uses every thread it may anyway."""
    global _launch_pid, _workqueue
    if threads <= 1 or _launch_pid not in (None, os.getpid()) or _workqueue:
        return False
    import numba

    with _launch_lock:
        # numba loads its threading layer in its first set_num_threads
        with short_openmp_spin() if _launch_pid is None else contextlib.nullcontext():
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        if numba.threading_layer() == "workqueue":
            _workqueue = True
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
    stop)`` runs one on a thread (the calling one, or :func:`run_parallel`'s under numba's
    workqueue layer)."""
    if len(groups) == 1:  # no launch to decide on (tiny calls)
        band(*groups[0])
    elif not run_compiled(len(groups), lambda: launch(
            np.array([start for start, _ in groups] + [groups[-1][1]], np.int64))):
        if _workqueue:  # threads of our own instead
            run_parallel([functools.partial(band, start, stop) for start, stop in groups])
        else:
            for start, stop in groups:
                band(start, stop)


def _run_group(tasks: Sequence[Callable[[], None]], start: int, step: int,
               errors: dict[str, str] | None = None) -> tuple[int, BaseException] | None:
    """Tasks ``start::step`` in order (under ``np.errstate(**errors)`` when given); the index
    and error of the first that fails."""
    with np.errstate(**(errors or {})):
        for index in range(start, len(tasks), step):
            try:
                tasks[index]()
            except Exception as error:  # noqa: BLE001 - handed to run_parallel, which raises it
                return index, error
    return None


def compiled(name: str) -> ModuleType:
    """The module ``custom_ops.<name>`` of compiled loops, imported on its first use.

    The first import loads numba and the loops' cache (about a second). It runs on a helper
    thread, which signals never interrupt: a Ctrl-C that lands during it reaches the caller
    once the import is complete, where an interrupted import would leave numba half-loaded
    for the rest of the process."""
    module = sys.modules.get(f"custom_ops.{name}")
    if module is not None:
        return module
    with ThreadPoolExecutor(1, thread_name_prefix="custom_ops-import") as loader:
        return loader.submit(importlib.import_module, f"custom_ops.{name}").result()


SERIAL_PRODUCT = 65536 * 4
"""OpenBLAS (numpy's BLAS) runs a matrix product of up to this many multiply-adds on the
calling thread and splits larger ones over its own threads, which wait for each other: on a
2-core machine with one core busy elsewhere that made a region's products 40x slower."""


def serial_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` of 2-D arrays, computed in column blocks of ``b`` that stay below
    :data:`SERIAL_PRODUCT` (each element is the same dot product)."""
    (m, k), n = a.shape, b.shape[1]
    block = max(1, SERIAL_PRODUCT // max(1, m * k))
    if n <= block:
        return a @ b
    out = np.empty((m, n), np.result_type(a, b))
    for lo in range(0, n, block):
        np.matmul(a, b[:, lo:lo + block], out=out[:, lo:lo + block])
    return out


def check_rank(op: str, node: str, name: str, array: np.ndarray, ranks: Sequence[int]) -> None:
    if array.ndim not in ranks:
        raise KernelError(op, node, f"{name} rank", array.ndim,
                          f"is not {_count_phrase(ranks)} (shape {list(array.shape)})")


def check_float_input(op: str, node: str, name: str, array: np.ndarray) -> None:
    if array.dtype not in (np.float16, np.float32, np.float64):
        raise KernelError(op, node, f"{name} element type", array.dtype.name,
                          "is not float16, float32 or float64")


# --------------------------------------------------------------------------- memory limit
MEMORY_FRACTION = 0.25
"""Share of the available memory (measured when the limit is first needed) that the default
limit allows one array: an output also gets copied into onnxruntime's buffer, and a kernel holds
temporaries beside it."""
_FALLBACK_AVAILABLE = 8 << 30  # bytes assumed available where the system does not say

_limit_setting: int | None = None  # None: the default
_default_limit: int | None = None


def available_memory() -> int:
    """Bytes available for new allocations: Linux ``MemAvailable``, else the free (or all)
    physical pages from ``os.sysconf``, else 8 GiB."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    for pages in ("SC_AVPHYS_PAGES", "SC_PHYS_PAGES"):
        try:
            return os.sysconf(pages) * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            continue
    return _FALLBACK_AVAILABLE


def memory_limit() -> int:
    """The most bytes that one output or temporary array of one kernel call may take.

    Default: :data:`MEMORY_FRACTION` of :func:`available_memory` when first asked.
    """
    global _default_limit
    if _limit_setting is not None:
        return _limit_setting
    if _default_limit is None:
        _default_limit = int(available_memory() * MEMORY_FRACTION)
    return _default_limit


def set_memory_limit(limit: int | None) -> int | None:
    """Set the process-wide memory limit in bytes (``None``: the default again).

    Returns the previous setting, so that ``set_memory_limit(previous)`` restores it.
    """
    global _limit_setting
    _check_limit_setting("memory limit", limit, "bytes")
    previous, _limit_setting = _limit_setting, limit
    return previous


def _check_limit_setting(name: str, limit: object, unit: str) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 0):
        raise ValueError(f"{name} {limit!r} is not a number of {unit} >= 0 or None")


def check_memory(op: str, node: str, field: str, shape: Sequence[int],
                 dtype: np.dtype | type) -> None:
    """Raise :class:`KernelError` when an array of ``shape`` and ``dtype`` would take more
    than :func:`memory_limit` bytes. Call it before allocating; ``field`` names the array
    (``"output Y"``, ``"temporary padded X"``)."""
    dtype = np.dtype(dtype)
    size = math.prod(int(d) for d in shape) * dtype.itemsize
    limit = memory_limit()
    if size > limit:
        raise KernelError(op, node, field, [int(d) for d in shape],
                          f"of {dtype.name} needs {size} bytes, above the memory limit of "
                          f"{limit} bytes (dml_onnx.set_memory_limit)")


# ----------------------------------------------------------------------------- work limit
DEFAULT_WORK_LIMIT = 1 << 31
"""Values one kernel call may read on its slowest path (ROI samples times channels, window taps
times the values they sum): 47 s at most on a 2-core machine (RoiAlignGrad, max reduction, one
channel, drois)."""
_work_setting: int | None = None  # None: the default


def work_limit() -> int:
    """The most values that one kernel call may read (see :data:`DEFAULT_WORK_LIMIT`)."""
    return DEFAULT_WORK_LIMIT if _work_setting is None else _work_setting


def set_work_limit(limit: int | None) -> int | None:
    """Set the process-wide work limit (``None``: the default again); returns the previous
    setting, so that ``set_work_limit(previous)`` restores it."""
    global _work_setting
    _check_limit_setting("work limit", limit, "values")
    previous, _work_setting = _work_setting, limit
    return previous


def check_work(op: str, node: str, field: str, amount: float) -> None:
    """Raise :class:`KernelError` when a call would read more than :func:`work_limit` values
    (``field`` names them: ``"sample reads"``, ``"window tap reads"``). Call it before the
    work starts."""
    limit = work_limit()
    if amount > limit:
        raise KernelError(op, node, field, int(amount),
                          f"are above the work limit of {limit} (dml_onnx.set_work_limit)")
