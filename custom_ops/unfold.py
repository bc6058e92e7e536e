"""Unfold (DML_UNFOLD_OPERATOR_DESC): extract sliding blocks (im2col), k = 1..6 spatial axes.

``X [N, C, D1..Dk]`` becomes ``Y [N, C * prod(window_sizes), L]`` with ``L = prod(B_d)``::

    B_d = (D_d + start_d + end_d - dilation_d * (window_d - 1) - 1) // stride_d + 1   # >= 1
    Y[n, c * prod(window) + kidx, bidx] = Xpad[n, c, b_1*stride_1 + k_1*dilation_1, ...]

``kidx`` is the row-major index of the window tap ``(k_1..k_k)``, ``bidx`` the row-major index
of the block ``(b_1..b_k)``, and ``Xpad`` is ``X`` zero-padded (False for bool) by ``start_d``
before and ``end_d`` after each spatial axis: ``torch.nn.functional.unfold`` generalised to k
axes and asymmetric padding. Every ONNX numeric type and bool; values are copied exactly.

The kernel copies each plane's window values in a compiled loop, as bits, planes split over
threads (:mod:`dml_onnx._kernels._unfold_loops`, Fold's adjoint; on one core of the 2-core
machine, side by side, a strided numpy copy of the blocks took 62-79 us for ``[1, 16, 32, 32]``
with a 3x3 window, its inner runs 32 values long, the loop 53-54 us; ``[8, 64, 56, 56]``
11.2-12.3 -> 9.6-9.9 ms, and 5.1-6.7 -> 2.5-2.8 ms on both cores).
Outputs of up to :data:`SMALL` elements are instead one gather of ``X``'s values by an index
cached per shape and attributes (a strided copy of the positions themselves, made once). The
window geometry, which Fold shares, is in :mod:`dml_onnx._kernels._window`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ._buffers import empty
from ._checks import KernelError, check_rank, takes_attributes
from ._threads import bands, compiled, run_bands, run_parallel
from ._window import (
    WindowGeometry,
    as_key,
    loop_tables,
    padded_copy_slices,
    read_extent,
    window_attributes,
    window_geometry,
)
from .limits import check_memory, memory_limit

OP = "Unfold"
SMALL = 1 << 12
"""Outputs of up to this many elements are gathered by a cached index (fewer numpy calls)."""

#: Element types of Unfold (T_any): every ONNX numeric type numpy has natively, and bool.
UNFOLD_TYPES = tuple(np.dtype(t) for t in (
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.bool_))


def check_input(node: str, X: np.ndarray, k: int) -> None:
    """Check ``X`` of a k-D Unfold: rank k + 2 and an element type of :data:`UNFOLD_TYPES`."""
    check_rank(OP, node, "X", X, (k + 2,))
    if X.dtype not in UNFOLD_TYPES:
        raise KernelError(OP, node, "X element type", X.dtype.name,
                          "is not an integer, float16/32/64 or bool type")


class _Plan(NamedTuple):
    """One Unfold over one input shape: geometry, the padded extent it reads, and for small
    outputs the gather index of ``Y`` into ``X``'s flat values (``X.size``: a padding zero),
    made in a buffer of that extent."""

    geometry: WindowGeometry
    extent: tuple[int, ...]  # of the padded input that the blocks read, per spatial axis
    padded: bool  # the blocks read padding
    gather: np.ndarray | None


@lru_cache(maxsize=256)
def _plan(node: str, shape: tuple[int, ...], dtype: np.dtype, window_sizes: tuple[int, ...],
          strides: tuple[int, ...], dilations: tuple[int, ...], start_padding: tuple[int, ...],
          end_padding: tuple[int, ...], limit: int) -> _Plan:
    """Checked and cached per shape, element type, attributes and memory limit."""
    n, c, *spatial = shape
    g = window_geometry(OP, node, tuple(spatial), window_sizes, strides, dilations,
                        start_padding, end_padding)
    plan = _Plan(g, *read_extent(g, spatial), None)
    if n * c * math.prod(g.window.sizes) * math.prod(g.blocks) <= SMALL:
        if plan.padded:
            check_memory(OP, node, "temporary padded X", (n, c, *plan.extent), dtype)
        plan = plan._replace(gather=block_positions(shape, g))
    return plan


def block_positions(shape: tuple[int, ...], geometry: WindowGeometry) -> np.ndarray:
    """``[N, C * prod(window), L]``: the flat position in an array of ``shape`` that Unfold
    reads each output value from; ``prod(shape)`` where it reads padding."""
    positions = np.arange(math.prod(shape)).reshape(shape)
    plan = _Plan(geometry, *read_extent(geometry, shape[2:]), None)
    return _blocks(positions, plan, fill=positions.size)


def _blocks(X: np.ndarray, plan: _Plan, fill: object) -> np.ndarray:
    """The strided path: pad (with ``fill``) if needed, view the blocks, copy once; planes
    split over threads."""
    g = plan.geometry
    n, c, *spatial = X.shape
    planes = X.reshape(n * c, *spatial)
    source = empty((n * c, *plan.extent), X.dtype) if plan.padded else planes
    axis_strides = source.strides[1:]
    view = as_strided(
        source, shape=(n * c, *g.window.sizes, *g.blocks),
        strides=(source.strides[0],
                 *(st * d for st, d in zip(axis_strides, g.window.dilations)),
                 *(st * s for st, s in zip(axis_strides, g.window.strides))),
        writeable=False)
    Y = empty(view.shape, X.dtype)

    def copy(first: int, stop: int) -> None:
        if plan.padded:  # pad into a buffer of the extent the blocks read
            part = source[first:stop]
            part.fill(fill)
            inside, kept = padded_copy_slices(g, spatial, plan.extent)
            part[(slice(None), *inside)] = planes[(slice(first, stop), *kept)]
        np.copyto(Y[first:stop], view[first:stop])

    run_parallel([functools.partial(copy, first, stop)
                  for first, stop in bands(n * c, Y.size + source.size * plan.padded)])
    return Y.reshape(n, c * math.prod(g.window.sizes), math.prod(g.blocks))


def _copy_blocks(X: np.ndarray, g: WindowGeometry) -> np.ndarray:
    """Unfold in the compiled loop, as unsigned integers of the element's width; bands of
    planes over threads."""
    loops = compiled("_unfold_loops")
    n, c, *spatial = X.shape
    taps, length = math.prod(g.window.sizes), math.prod(g.blocks)
    Y = empty((n * c, taps, length), X.dtype)
    if Y.size:
        bits = np.dtype(f"u{X.itemsize}")
        planes = np.ascontiguousarray(X).reshape(n * c, -1).view(bits)
        out, tables = Y.view(bits), loop_tables(g, tuple(spatial))
        run_bands(bands(n * c, Y.size),
                  lambda first, stop: loops.unfold_planes(planes, out, *tables, first, stop),
                  lambda cuts: loops.unfold_bands(cuts, planes, out, *tables))
    return Y.reshape(n, c * taps, length)


@takes_attributes(OP)
def prepare(*, node: str = "", window_sizes: Sequence[int], strides: Sequence[int] = (),
            dilations: Sequence[int] = (), start_padding: Sequence[int] = (),
            end_padding: Sequence[int] = ()) -> Callable[[np.ndarray], np.ndarray]:
    """:func:`unfold` for one node, its attributes checked once (k in 1..6, list lengths,
    value ranges): ``run(X) -> Y``."""
    attributes = (as_key(window_sizes), as_key(strides), as_key(dilations),
                  as_key(start_padding), as_key(end_padding))
    _check_attributes(node, *attributes)
    return functools.partial(_run, node, attributes)


def unfold(X: np.ndarray, *, node: str = "", **attributes: Any) -> np.ndarray:
    """``[N, C, D1..Dk]`` to ``[N, C * prod(window_sizes), L]``, same element type as ``X``
    (attributes: :func:`prepare`)."""
    return prepare(node=node, **attributes)(X)


@lru_cache(maxsize=256)
def _check_attributes(node: str, *attributes: tuple[int, ...]) -> None:
    """:func:`~dml_onnx._kernels._window.window_attributes` (cached; invalid ones raise every
    time)."""
    window_attributes(OP, node, *attributes)


def _run(node: str, attributes: tuple[tuple[int, ...], ...], X: np.ndarray) -> np.ndarray:
    X = np.asarray(X)
    if X.ndim != len(attributes[0]) + 2 or X.dtype not in UNFOLD_TYPES:
        check_input(node, X, len(attributes[0]))  # raises
    plan = _plan(node, X.shape, X.dtype, *attributes, memory_limit())
    if plan.gather is None:
        return _copy_blocks(X, plan.geometry)
    values = X.reshape(-1)
    if plan.padded:
        values = np.concatenate((values, np.zeros(1, X.dtype)))
    # into a kept block where large (mode clip: no buffered copy; every index is in range)
    return values.take(plan.gather, out=empty(plan.gather.shape, X.dtype), mode="clip")
