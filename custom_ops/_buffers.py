"""Large arrays the kernels reuse: an output or a layout copy of :data:`REUSED_BYTES` or more
is a view of a block kept from an earlier call whose arrays are all gone, as onnxruntime's
arena keeps its buffers from run to run.

A fresh large array is memory the system maps anew on every call (glibc maps each allocation
of 32 MiB or more, and unmaps it when it is freed), and the first write to each of its pages
waits while the system finds and zeroes one. 50 MB written into a fresh array took 11.5 ms on
the 2-core machine, 6.3 ms into a kept one; on the 16-core server, Faster R-CNN's RoiAlign1
nodes took 16.2 ms a run at 2 cores with fresh outputs and 11.0 with glibc told to keep its
large blocks (which only the user can tell it, for the whole process, before it starts).

A block is free when nothing but this module refers to it: every array made from it refers to
it (numpy's views and reshapes keep the owning array as their ``base``, and so does whatever
holds those: a memoryview, an ``OrtValue`` made from it, a caller's output). Each request
drops the free blocks beyond :data:`KEPT_BYTES`, the least recently used first; so a process
keeps the blocks its last calls used until its next large request (:func:`drop_free` drops
every free one).
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Sequence

import numpy as np

REUSED_BYTES = 1 << 23
"""Arrays of at least this many bytes come from kept blocks; smaller ones from ``np.empty``
(glibc reuses its smaller blocks itself)."""
KEPT_BYTES = 1 << 29
"""The most bytes of free blocks a request leaves kept."""
_GRANULE = 1 << 20  # a block's size is a whole number of these bytes
_blocks: list[np.ndarray] = []  # uint8 blocks, least recently handed out first
_lock = threading.Lock()


def empty(shape: Sequence[int], dtype: np.dtype | type) -> np.ndarray:
    """``np.empty(shape, dtype)``, C-contiguous; from a free kept block where it has at least
    :data:`REUSED_BYTES` (one at most half as large again as the array)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < REUSED_BYTES:
        return np.empty(shape, dtype)
    with _lock:
        fits = [k for k in range(len(_blocks))  # by index: a name bound to a block holds it
                if nbytes <= _blocks[k].size <= nbytes + nbytes // 2 and _free(k)]
        if fits:
            block = _blocks.pop(min(fits, key=lambda k: _blocks[k].size))
        else:
            block = np.empty(-(-nbytes // _GRANULE) * _GRANULE, np.uint8)
        _blocks.append(block)
        array = block[:nbytes].view(dtype).reshape(shape)  # refers to the block from here on
        del block
        _drop_beyond_kept()
    return array


def _free(k: int) -> bool:
    """Whether only :data:`_blocks` refers to block ``k``: its count as :func:`sys.getrefcount`
    sees a block held by the list alone (the list's reference and the call's)."""
    return sys.getrefcount(_blocks[k]) <= _LIST_ONLY


def drop_free() -> None:
    """Drop every free block (a measurement of what a call allocates starts here)."""
    with _lock:
        _drop_beyond_kept(0)


def _drop_beyond_kept(kept: int | None = None) -> None:
    """Drop free blocks, the least recently handed out first, until they hold at most
    ``kept`` bytes (:data:`KEPT_BYTES`)."""
    free = [k for k in range(len(_blocks)) if _free(k)]
    excess = sum(_blocks[k].size for k in free) - (KEPT_BYTES if kept is None else kept)
    dropped = set()
    for k in free:
        if excess <= 0:
            break
        excess -= _blocks[k].size
        dropped.add(k)
    if dropped:
        _blocks[:] = [block for k, block in enumerate(_blocks) if k not in dropped]


def kept_bytes() -> tuple[int, int]:
    """``(free, in use)``: the bytes of the kept blocks that no array uses, and of those in
    use."""
    with _lock:
        free = [_free(k) for k in range(len(_blocks))]
        sizes = [block.size for block in _blocks]
    return (sum(s for s, f in zip(sizes, free) if f), sum(s for s, f in zip(sizes, free) if not f))


def _list_only_count() -> int:
    """What :func:`_free` sees for a block that only the list holds, on this interpreter."""
    probe = [np.empty(1, np.uint8)]
    return sys.getrefcount(probe[0])


_LIST_ONLY = _list_only_count()
