"""The process-wide limits on one kernel call, checked before it allocates or starts its work.

- The memory limit (:func:`memory_limit`, :func:`set_memory_limit`, :func:`check_memory`)
  guards against an output or temporary array too large for the machine: by default
  :data:`MEMORY_FRACTION` of the available memory per array.
- The work limit (:func:`work_limit`, :func:`set_work_limit`, :func:`check_work`) guards
  against a call that would run for minutes: by default :data:`DEFAULT_WORK_LIMIT` values read
  on the slowest path.

The checks raise :class:`~dml_onnx.KernelError`. ``dml_onnx`` re-exports the four getters
and setters; the limits live here because the kernels cannot import ``dml_onnx``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np

from ._checks import KernelError

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
