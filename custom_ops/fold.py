"""Fold (DML_FOLD_OPERATOR_DESC): the adjoint of Unfold (col2im), k = 1..6 spatial axes.

``X [N, C * prod(window_sizes), L]`` becomes ``Y [N, C, O1..Ok]`` with ``O = output_size``.
``Y`` starts at zero and every input value is added at the position Unfold reads it from::

    Y[n, c, b_1*stride_1 + k_1*dilation_1 - start_1, ...] += X[n, c * prod(window) + kidx, bidx]

(``kidx`` / ``bidx``: row-major tap / block index, as in Unfold); values that land in the
padding are dropped. ``L`` must equal ``prod(B_d)`` computed from ``output_size`` with Unfold's
formula. Numeric types only (not bool). Each output element is a sequential sum from 0 of its
values in ascending block index, as DirectML sums (**Measured**). Integer types accumulate in
their own type and wrap around like numpy; float32 and float64 accumulate in their own type;
float16 accumulates in float32 and is rounded once at the end. A dilation of 0 (accepted, as
DirectML accepts it) gives all zeros, as DirectML's Fold does (**Measured**).

Implementation: the compiled loop of :mod:`dml_onnx._kernels._fold_loops`, planes ``N * C`` split
over threads (started from compiled code). Per plane the output is zeroed, then every tap adds
its values line by line (one contiguous run of ``X`` per line of the block grid along the last
axis), so ``X`` is read once while the plane's output stays in cache. float16 is read as its
bits, converted exactly to float32 as it is added into a float32 line of the thread's that
holds the plane, which is then written as float16 bits: no float32 copy of ``X`` or ``Y``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from ._buffers import empty
from ._checks import KernelError, check_ints, check_rank, takes_attributes
from ._threads import LayoutMemo, bands, compiled, run_bands
from ._window import WindowGeometry, as_key, loop_tables, window_attributes, window_geometry

OP = "Fold"


@lru_cache(maxsize=256)
def _geometry(node: str, window_sizes: tuple[int, ...], strides: tuple[int, ...],
              dilations: tuple[int, ...], start_padding: tuple[int, ...],
              end_padding: tuple[int, ...],
              output_size: tuple[int, ...]) -> tuple[WindowGeometry, tuple[int, ...], bool]:
    """Check the attributes; the window geometry over ``output_size``, ``output_size``, and
    whether a dilation is 0 (the output is then all zeros).

    Cheap, unlike :func:`loop_tables` (one entry per window tap): attribute checks use this
    alone. Cached (invalid attributes raise every time).
    """
    window, _, dilations, _, _ = window_attributes(OP, node, window_sizes, strides, dilations,
                                                   start_padding, end_padding)
    output = check_ints(OP, node, "output_size", output_size, minimum=0, length=len(window))
    return window_geometry(OP, node, output, window_sizes, strides, dilations, start_padding,
                           end_padding), output, 0 in dilations


def check_input(node: str, X: np.ndarray, window: Sequence[int], blocks: Sequence[int],
                output_size: Sequence[int]) -> None:
    """Check ``X``: rank 3, a numeric element type, and ``[N, C * prod(window), prod(blocks)]``
    (``blocks``: the block counts over ``output_size``)."""
    check_rank(OP, node, "X", X, (3,))
    if X.dtype.kind not in "iuf":
        raise KernelError(OP, node, "X element type", X.dtype.name,
                          "is not an integer or float16/32/64 type")
    _, rows, length = X.shape
    taps = math.prod(window)
    if rows % taps:
        raise KernelError(OP, node, "X dim 1", rows,
                          f"is not a multiple of prod(window_sizes) {taps}")
    count = math.prod(blocks)
    if length != count:
        raise KernelError(OP, node, "X dim 2", length,
                          f"is not the block count {count} of output_size {list(output_size)}")


@takes_attributes(OP)
def prepare(*, node: str = "", window_sizes: Sequence[int], strides: Sequence[int] = (),
            dilations: Sequence[int] = (), start_padding: Sequence[int] = (),
            end_padding: Sequence[int] = (), output_size: Sequence[int]
            ) -> Callable[[np.ndarray], np.ndarray]:
    """:func:`fold` for one node, its attributes checked once (including a block count below
    1 over ``output_size``): ``run(X) -> Y``."""
    geometry, output, zeros = _geometry(node, *map(as_key, (
        window_sizes, strides, dilations, start_padding, end_padding, output_size)))
    tables = functools.cache(lambda: loop_tables(geometry, output))  # for the first data
    return functools.partial(_run, node, geometry, output, zeros, tables, LayoutMemo())


def fold(X: np.ndarray, *, node: str = "", **attributes: Any) -> np.ndarray:
    """``[N, C * prod(window_sizes), L]`` to ``[N, C, *output_size]``, same element type
    (attributes: :func:`prepare`)."""
    return prepare(node=node, **attributes)(X)


def _run(node: str, geometry: WindowGeometry, output: tuple[int, ...], zeros: bool,
         tables: Callable[[], tuple[np.ndarray, ...]], layout: LayoutMemo, X: np.ndarray
         ) -> np.ndarray:
    X = np.asarray(X)
    layout.check((X.shape, X.dtype),
                 lambda: check_input(node, X, geometry.window.sizes, geometry.blocks, output))
    n, rows, length = X.shape
    taps = math.prod(geometry.window.sizes)
    c = rows // taps
    Y = empty((n * c, math.prod(output)), X.dtype)
    if zeros:
        Y.fill(0)
    elif Y.size:  # then X is not empty either: it holds at least one tap and block per plane
        _fold(np.ascontiguousarray(X).reshape(n * c, taps, length), Y, tables())
    return Y.reshape(n, c, *output)


def _fold(planes: np.ndarray, Y: np.ndarray, tables: tuple[np.ndarray, ...]) -> None:
    """``Y [M, prod(output)]`` from ``planes [M, taps, L]``, bands of planes over threads."""
    loops = compiled("_fold_loops")

    groups = bands(Y.shape[0], planes.size)
    if Y.dtype.kind == "u":  # wrapping sums of the signed type of the same width are the same
        signed = np.dtype(f"i{Y.itemsize}")  # bits: one compiled loop serves both
        planes, Y = planes.view(signed), Y.view(signed)
    if Y.dtype != np.float16:
        run_bands(groups, lambda first, stop: loops.fold_planes(planes, Y, *tables, first, stop),
                  lambda cuts: loops.fold_bands(cuts, planes, Y, *tables))
        return
    bits, out = planes.view(np.uint16), Y.view(np.uint16)  # float16: summed in float32
    run_bands(groups, lambda first, stop: loops.fold_half_planes(bits, out, *tables, first, stop),
              lambda cuts: loops.fold_half_bands(cuts, bits, out, *tables))
