"""The sliding-window geometry of LpPooling, Unfold and Fold: the window attributes' checks,
the attributes with their defaults filled in (:class:`Window`, which the operator definitions
in ``dml_onnx.ops`` and the references in ``dml_onnx.reference_ops`` read too, so that neither
imports the other), and the block counts and read extents the kernels plan with
(:class:`WindowGeometry`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from ._checks import KernelError, _count_phrase, check_ints


class Window(NamedTuple):
    """The window attributes of one node with their defaults filled in (k values each)."""

    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    start: tuple[int, ...]
    end: tuple[int, ...]

    @classmethod
    def of(cls, sizes: Sequence[int], attributes: dict[str, Any]) -> Window:
        """The window ``sizes`` with the other attributes of a node (or a case)."""
        k = len(sizes)
        return cls(tuple(int(v) for v in sizes), filled(attributes.get("strides"), k, 1),
                   filled(attributes.get("dilations"), k, 1),
                   filled(attributes.get("start_padding"), k, 0),
                   filled(attributes.get("end_padding"), k, 0))

    @property
    def k(self) -> int:
        return len(self.sizes)

    @property
    def padded(self) -> bool:
        return any(self.start) or any(self.end)

    @property
    def spans(self) -> tuple[int, ...]:
        """``dilation * (window - 1)`` per axis: how far the last tap lies from the first."""
        return tuple(d * (w - 1) for w, d in zip(self.sizes, self.dilations))


def check_window_attributes(op: str, node: str, *, window: tuple[str, Sequence[int]],
                            strides: Sequence[int] | None, dilations: Sequence[int] | None,
                            start_padding: Sequence[int] | None, end_padding: Sequence[int] | None,
                            spatial_dims: Sequence[int] = (1, 2, 3, 4, 5, 6),
                            lowest_dilation: int = 1) -> int:
    """Check the sliding-window attributes of LpPooling, Unfold and Fold; return k.

    ``window`` is ``(attribute name, values)``. The other lists may be empty (their default)
    or have one value per spatial axis. Dilations start at ``lowest_dilation`` (Unfold and
    Fold accept 0, as DirectML does: **Measured**, specification sections 5 and 6).
    """
    window_name, window_values = window
    k = len(window_values)
    if k not in spatial_dims:
        raise KernelError(op, node, window_name, list(window_values),
                          f"must have {_count_phrase(spatial_dims)} values, not {k}")
    check_ints(op, node, window_name, window_values, minimum=1)
    for name, values, minimum in (("strides", strides, 1),
                                  ("dilations", dilations, lowest_dilation),
                                  ("start_padding", start_padding, 0),
                                  ("end_padding", end_padding, 0)):
        if values:
            check_ints(op, node, name, values, minimum=minimum, length=k)
    return k


class WindowGeometry(NamedTuple):
    """A checked :class:`Window` over one input, and its block counts."""

    window: Window
    blocks: tuple[int, ...]  # B_d (output positions) per spatial axis, each >= 1

    @classmethod
    def of(cls, window: tuple[int, ...], strides: tuple[int, ...], dilations: tuple[int, ...],
           start_padding: tuple[int, ...], end_padding: tuple[int, ...],
           blocks: tuple[int, ...]) -> WindowGeometry:
        """The geometry, with the stride of an axis of one block and the dilation of an axis
        of one tap set to 1: they move nothing, and as byte strides they may not fit a C long
        (any int64 attribute value is valid)."""
        return cls(Window(window, tuple(s if b > 1 else 1 for s, b in zip(strides, blocks)),
                          tuple(d if w > 1 else 1 for d, w in zip(dilations, window)),
                          start_padding, end_padding), blocks)

    @property
    def k(self) -> int:
        return self.window.k


def tap_ranges(g: WindowGeometry, spatial: Sequence[int]) -> tuple[range, ...]:
    """Per spatial axis, the window taps that read the input (not padding) for some block:
    tap ``i`` with ``0 <= b * stride + i * dilation - start < D`` for a ``b`` below ``B``. The
    others read padding only; skipping them costs a window sum nothing."""
    ranges = []
    for w, s, d, a, b, size in zip(g.window.sizes, g.window.strides, g.window.dilations,
                                   g.window.start, g.blocks, spatial):
        first = max(0, -((-(a - (b - 1) * s)) // d))  # ceil((a - (B - 1) * s) / d)
        stop = min(w, (a + size - 1) // d + 1) if size else 0
        ranges.append(range(first, max(first, stop)))
    return tuple(ranges)


@lru_cache(maxsize=256)
def loop_tables(g: WindowGeometry, spatial: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """The geometry arguments of the compiled Fold and Unfold loops
    (:mod:`dml_onnx._kernels._fold_loops`, :mod:`dml_onnx._kernels._unfold_loops`) for an
    image of ``spatial`` sizes: every tap's offsets ``[taps, k]`` (``tap * dilation -
    start``), then blocks, strides, the sizes and row-major pitches per axis."""
    taps = np.indices(g.window.sizes).reshape(g.k, -1).T
    offsets = taps * np.array(g.window.dilations) - np.array(g.window.start)
    pitch = [math.prod(spatial[d + 1:]) for d in range(g.k)]
    return tuple(np.ascontiguousarray(a, dtype=np.int64)
                 for a in (offsets, g.blocks, g.window.strides, spatial, pitch))


def read_extent(g: WindowGeometry, spatial: Sequence[int]) -> tuple[tuple[int, ...], bool]:
    """The extent of the padded input that the windows read, per spatial axis (the tail of
    the end padding, or of the input, may be left unread), and whether they read padding."""
    extent = tuple((b - 1) * s + (w - 1) * d + 1
                   for b, s, w, d in zip(g.blocks, g.window.strides, g.window.sizes,
                                         g.window.dilations))
    return extent, any(g.window.start) or any(e > size for e, size in zip(extent, spatial))


def padded_copy_slices(g: WindowGeometry, spatial: Sequence[int], extent: Sequence[int]
                       ) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
    """Where the read part of an input of ``spatial`` sizes goes in a zero-padded buffer of
    ``extent``: ``(buffer slices, input slices)`` over the spatial axes."""
    kept = [max(0, min(size, e - a)) for size, e, a in zip(spatial, extent, g.window.start)]
    return (tuple(slice(a, a + m) for a, m in zip(g.window.start, kept)),
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


def window_attributes(op: str, node: str, window_sizes: Sequence[int], strides: Sequence[int],
                      dilations: Sequence[int], start_padding: Sequence[int],
                      end_padding: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """Check the window attributes of Unfold / Fold (a dilation may be 0); return them with
    defaults filled in.

    Returns ``(window, strides, dilations, start_padding, end_padding)``, each of length k.
    """
    k = check_window_attributes(op, node, window=("window_sizes", window_sizes), strides=strides,
                                dilations=dilations, start_padding=start_padding,
                                end_padding=end_padding, lowest_dilation=0)
    return (tuple(int(v) for v in window_sizes), filled(strides, k, 1), filled(dilations, k, 1),
            filled(start_padding, k, 0), filled(end_padding, k, 0))


@lru_cache(maxsize=256)
def window_geometry(op: str, node: str, spatial_shape: tuple[int, ...],
                    window_sizes: tuple[int, ...], strides: tuple[int, ...],
                    dilations: tuple[int, ...], start_padding: tuple[int, ...],
                    end_padding: tuple[int, ...]) -> WindowGeometry:
    """Check the attributes and compute the block counts over ``spatial_shape`` (k sizes).

    Cached (invalid attributes raise every time): every argument must be hashable, the lists
    as tuples (:func:`as_key`).
    """
    window, strides, dilations, start, end = window_attributes(
        op, node, window_sizes, strides, dilations, start_padding, end_padding)
    blocks = sliding_block_counts(op, node, spatial_shape, window, strides, dilations, start, end,
                                  what="block count")
    return WindowGeometry.of(window, strides, dilations, start, end, blocks)
