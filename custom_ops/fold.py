"""Fold (DML_FOLD_OPERATOR_DESC): the adjoint of Unfold (col2im), k = 1..6 spatial axes.

``X [N, C * prod(window_sizes), L]`` becomes ``Y [N, C, O1..Ok]`` with ``O = output_size``.
``Y`` starts at zero and every input value is added at the position Unfold reads it from::

    Y[n, c, b_1*stride_1 + k_1*dilation_1 - start_1, ...] += X[n, c * prod(window) + kidx, bidx]

(``kidx`` / ``bidx``: row-major tap / block index, as in Unfold); values that land in the
padding are dropped. ``L`` must equal ``prod(B_d)`` computed from ``output_size`` with Unfold's
formula. Numeric types only (not bool). Integer types accumulate in their own type and wrap
around like numpy; float32 and float64 accumulate in their own type; float16 accumulates in
float32 and is rounded once at the end.

The kernel never loops over elements, only over window taps, adding one strided slice of
``X`` per tap, arranged so that those adds run over long contiguous stretches:

- Strides split the output into phases (positions ``r_d::stride_d``, one residue per axis).
  Inside a phase every tap is a plain shift, so a strided fold is the interleave of stride-1
  folds; with all strides 1 there is one phase, the output itself.
- Inside a phase, taps are grouped by their shift along the last axis. The taps of a group are
  summed into a scratch buffer laid out like ``X`` (lines of ``B_k``), and the scratch is then
  added into the phase in one pass: one shifted 1-D run per row when the phase's lines are
  ``B_k`` long (a grid line may overhang the output; the excess is cropped).

The planes ``N * C`` go through in chunks of about :data:`CHUNK_BYTES` of output, so that a
chunk's output and scratch stay in cache while ``X`` streams through once; chunks run on
:data:`~custom_ops._common.THREADS` threads. Inputs of up to :data:`~custom_ops.unfold.SMALL`
elements are instead one ``np.add.at`` by the positions Unfold reads (cached per shape and
attributes), into an output with one extra element that collects the values falling into the
padding.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from custom_ops._common import (
    KernelError,
    WindowGeometry,
    as_key,
    check_ints,
    check_rank,
    run_parallel,
)
from custom_ops.unfold import (
    SMALL,
    block_positions,
    block_range,
    window_attributes,
    window_geometry,
)

OP = "Fold"
CHUNK_BYTES = 1 << 20
"""Output bytes (in the accumulation type) of the planes folded together."""

#: A tap over axes 1..k-1: (its row-major index in window[:-1], positions, block ranges).
Head = tuple[int, tuple[slice, ...], tuple[slice, ...]]


class _Phase(NamedTuple):
    """The output positions ``r_d::stride_d`` (one residue per axis) and the taps reaching them.

    Inside a phase every tap is a plain shift: tap ``i`` of offset ``i * dilation - start``
    lands in the phase of residue ``offset % stride``, shifted by ``offset // stride``.
    """

    where: tuple[slice, ...]  # this phase's positions in the output, every axis
    shape: tuple[int, ...]  # its grid: size along axes 1..k-1, then the working line length
    heads: tuple[Head, ...]  # taps over axes 1..k-1; slices index the grid and the block grid
    first: Head | None  # a head covering the grid's axes 1..k-1 (copied, not added)
    last_taps: tuple[tuple[int, slice, slice], ...]  # taps over axis k: (j, positions, blocks)
    flat: bool  # line length == B_k: see _add_flat


class _Plan(NamedTuple):
    """Everything about one Fold that depends on the attributes only."""

    geometry: WindowGeometry
    output: tuple[int, ...]
    phases: tuple[_Phase, ...]
    in_place: bool  # one phase, the output itself: strides all 1 and lines O_k long


@lru_cache(maxsize=256)
def _geometry(node: str, window_sizes: tuple[int, ...], strides: tuple[int, ...],
              dilations: tuple[int, ...], start_padding: tuple[int, ...],
              end_padding: tuple[int, ...],
              output_size: tuple[int, ...]) -> tuple[WindowGeometry, tuple[int, ...]]:
    """Check the attributes; the window geometry over ``output_size``, and ``output_size``.

    Cheap, unlike :func:`_plan` (one entry per window tap): attribute checks use this alone.
    Cached (invalid attributes raise every time).
    """
    window = window_attributes(OP, node, window_sizes, strides, dilations, start_padding,
                               end_padding)[0]
    output = check_ints(OP, node, "output_size", output_size, minimum=0, length=len(window))
    return window_geometry(OP, node, output, window_sizes, strides, dilations, start_padding,
                           end_padding), output


@lru_cache(maxsize=256)
def _plan(node: str, window_sizes: tuple[int, ...], strides: tuple[int, ...],
          dilations: tuple[int, ...], start_padding: tuple[int, ...],
          end_padding: tuple[int, ...], output_size: tuple[int, ...]) -> _Plan:
    g, output = _geometry(node, window_sizes, strides, dilations, start_padding, end_padding,
                          output_size)
    by_axis = []  # per axis: [(residue, [(tap, shift), ...]), ...]
    for w, s, d, a in zip(g.window, g.strides, g.dilations, g.start_padding):
        by_residue: dict[int, list[tuple[int, int]]] = {}
        for i in range(w):
            by_residue.setdefault((i * d - a) % s, []).append((i, (i * d - a) // s))
        by_axis.append(sorted(by_residue.items()))
    last_blocks = g.blocks[-1]
    phases = []
    for choice in itertools.product(*by_axis):
        sizes = [len(range(r, o, s)) for (r, _), o, s in zip(choice, output, g.strides)]
        if not all(sizes):
            continue
        flat = last_blocks >= sizes[-1]
        width = last_blocks if flat else sizes[-1]  # lines may overhang (cropped at the end)
        last_taps = tuple((j, *r) for j, r in ((j, block_range(width, last_blocks, 1, shift))
                                                for j, shift in choice[-1][1]) if r is not None)
        reach = [[(i, block_range(q, b, 1, shift)) for i, shift in taps]
                 for (_, taps), q, b in zip(choice[:-1], sizes, g.blocks)]
        heads = []
        for taps in itertools.product(*reach):
            if any(r is None for _, r in taps):
                continue
            index = 0
            for (i, _), w in zip(taps, g.window):
                index = index * w + i
            heads.append((index, tuple(r[0] for _, r in taps), tuple(r[1] for _, r in taps)))
        if heads and last_taps:
            first = next((h for h in heads if all(p.start == 0 and p.step == 1 and p.stop == q
                                                  for p, q in zip(h[1], sizes))), None)
            where = tuple(slice(r, None, s) for (r, _), s in zip(choice, g.strides))
            phases.append(_Phase(where, (*sizes[:-1], width), tuple(heads), first, last_taps,
                                 flat))
    in_place = (len(phases) == 1 and all(s == 1 for s in g.strides)
                and phases[0].shape[-1] == output[-1])
    return _Plan(g, output, tuple(phases), in_place)


def check_attributes(*, node: str, window_sizes: Sequence[int], strides: Sequence[int] = (),
                     dilations: Sequence[int] = (), start_padding: Sequence[int] = (),
                     end_padding: Sequence[int] = (), output_size: Sequence[int]) -> None:
    """Check the attribute-only rules, including a block count below 1 over ``output_size``."""
    _geometry(node, *map(as_key, (window_sizes, strides, dilations, start_padding,
                                   end_padding, output_size)))


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


def fold(X: np.ndarray, *, window_sizes: Sequence[int], strides: Sequence[int] = (),
         dilations: Sequence[int] = (), start_padding: Sequence[int] = (),
         end_padding: Sequence[int] = (), output_size: Sequence[int], node: str = ""
         ) -> np.ndarray:
    """``[N, C * prod(window_sizes), L]`` to ``[N, C, *output_size]``, same element type."""
    X = np.asarray(X)
    attributes = tuple(map(as_key, (window_sizes, strides, dilations, start_padding,
                                     end_padding, output_size)))
    geometry, output = _geometry(node, *attributes)
    check_input(node, X, geometry.window, geometry.blocks, output)
    n, rows, length = X.shape
    taps = math.prod(geometry.window)
    c = rows // taps
    accumulate = np.dtype(np.float32) if X.dtype == np.float16 else X.dtype
    if X.size <= SMALL:
        Y = np.zeros(n * c * math.prod(output) + 1, dtype=accumulate)  # + the padding's sink
        if X.size:
            np.add.at(Y, _positions((n, c, *output), geometry), X.reshape(-1))
        with np.errstate(over="ignore"):  # float16: sums beyond its range round to +-inf
            return Y[:-1].reshape(n, c, *output).astype(X.dtype, copy=False)
    plan = _plan(node, *attributes)  # an entry per tap: built only for X's taps (X not empty)
    Y = np.empty((n * c, *output), dtype=X.dtype)
    planes = X.reshape(n * c, taps, length)
    chunk = max(1, CHUNK_BYTES // max(1, math.prod(output) * accumulate.itemsize))
    run_parallel([functools.partial(_fold_chunk, Y[lo:lo + chunk], planes[lo:lo + chunk], plan,
                                    accumulate) for lo in range(0, n * c, chunk)])
    return Y.reshape(n, c, *output)


def _fold_chunk(Y: np.ndarray, X: np.ndarray, plan: _Plan, accumulate: np.dtype) -> None:
    """``Y [M, *output] = Fold(X [M, prod(window), L])`` for one chunk of planes."""
    target = Y if accumulate == Y.dtype else np.empty(Y.shape, accumulate)
    target.fill(0)
    if plan.phases:
        _fold_into(target, X, plan)
    if target is not Y:
        with np.errstate(over="ignore"):  # float16: sums beyond its range round to +-inf
            np.copyto(Y, target, casting="same_kind")


@lru_cache(maxsize=256)
def _positions(shape: tuple[int, ...], geometry: WindowGeometry) -> np.ndarray:
    """The flat position in ``Y [N, C, *output]`` (``shape``) of every value of ``X``."""
    return block_positions(shape, geometry).reshape(-1)


def _fold_into(Y: np.ndarray, X: np.ndarray, plan: _Plan) -> None:
    """Add ``X [M, prod(window), L]`` into ``Y [M, *output]`` (M = N * C), phase by phase."""
    m, g = Y.shape[0], plan.geometry
    X = X.reshape(m, -1, g.window[-1], *g.blocks)  # [M, taps of axes 1..k-1, taps of axis k, B]
    largest = max(math.prod(p.shape[:-1]) for p in plan.phases)
    scratch = np.empty(m * largest * g.blocks[-1], dtype=Y.dtype)
    if plan.in_place:
        _fold_phase(Y, X, plan.phases[0], scratch)
        return
    grid = np.empty(m * max(math.prod(p.shape) for p in plan.phases), dtype=Y.dtype)
    for phase in plan.phases:
        Z = grid[:m * math.prod(phase.shape)].reshape(m, *phase.shape)
        Z.fill(0)
        _fold_phase(Z, X, phase, scratch)
        target = Y[(slice(None), *phase.where)]
        target[...] = Z[..., :target.shape[-1]]


def _fold_phase(Z: np.ndarray, X: np.ndarray, phase: _Phase, scratch_memory: np.ndarray) -> None:
    """Add the taps of one phase into its grid ``Z [M, *phase.shape]`` (all shifts)."""
    m, last_blocks = Z.shape[0], X.shape[-1]
    scratch = None
    for j, positions, blocks in phase.last_taps:
        if (phase.flat and blocks == slice(0, last_blocks)) or len(phase.heads) == 1:
            # Add each tap straight into the grid (long runs when whole and flat).
            for index, out_slices, in_slices in phase.heads:
                target = Z[(slice(None), *out_slices, positions)]
                np.add(target, X[(slice(None), index, j, *in_slices, blocks)], out=target)
            continue
        # Sum the taps of this group into a [M, *grid axes 1..k-1, B_k] scratch (the last axis
        # laid out as in X: long contiguous runs), then add the scratch into the grid once.
        if scratch is None:
            size = m * math.prod(phase.shape[:-1]) * last_blocks
            scratch = scratch_memory[:size].reshape(m, *phase.shape[:-1], last_blocks)
        if phase.first is None:
            scratch.fill(0)
        else:
            np.copyto(scratch, X[(slice(None), phase.first[0], j, *phase.first[2])])
        for head in phase.heads:
            if head is phase.first:
                continue
            index, out_slices, in_slices = head
            target = scratch[(slice(None), *out_slices)]
            np.add(target, X[(slice(None), index, j, *in_slices)], out=target)
        if phase.flat:
            _add_flat(Z, scratch, blocks, positions.start - blocks.start)
        else:
            target = Z[(..., positions)]
            np.add(target, scratch[(..., blocks)], out=target)


def _add_flat(Z: np.ndarray, scratch: np.ndarray, blocks: slice, shift: int) -> None:
    """``Z[..., b + shift] += scratch[..., b]`` for ``b`` in ``blocks``, as one run per row.

    Needs lines of equal length in ``Z`` and ``scratch``: then, flattened per row, the whole
    add is one shifted run. Blocks outside ``blocks`` (their positions are padding) are zeroed
    first; in flat terms they would land in a neighbouring line, where adding zero changes
    nothing (a sum that starts at +0 is never -0).
    """
    scratch[..., :blocks.start] = 0
    scratch[..., blocks.stop:] = 0
    m = Z.shape[0]
    flat_in, flat_out = scratch.reshape(m, -1), Z.reshape(m, -1)
    size = flat_in.shape[1]
    # blocks holds at least one position inside the line: the run below is not empty
    lo, hi = max(0, -shift), min(size, size - shift)
    target = flat_out[:, lo + shift:hi + shift]
    np.add(target, flat_in[:, lo:hi], out=target)
