"""Drawn nodes of the sliding-window operators (Unfold, Fold, LpPooling) for the tests of
their standard-op forms: hypothesis strategies over shapes, attributes, element types, values
and opsets."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

import dml_onnx
from dml_onnx._kernels._window import sliding_block_counts
from dml_onnx.definition import ANY_TYPES, FLOAT_TYPES, NUMERIC_TYPES, OpDefinition
from dml_onnx.ops._window_cases import element_dtypes

OPSETS = (16, 18, 22)
WINDOW_NAME = {"Unfold": "window_sizes", "Fold": "window_sizes", "LpPooling": "window_size"}
SPATIAL_AXES = {"Unfold": 6, "Fold": 6, "LpPooling": 3}
TYPES = {"Unfold": element_dtypes(ANY_TYPES), "Fold": element_dtypes(NUMERIC_TYPES),
         "LpPooling": element_dtypes(FLOAT_TYPES)}
NATIVE_TYPES = (np.dtype(np.float32), np.dtype(np.float16))
WINDOW_OPERATORS = [dml_onnx.OPERATORS_BY_NAME[name] for name in SPATIAL_AXES]
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True)


@st.composite
def cases(draw: st.DrawFn, definition: OpDefinition
          ) -> tuple[tuple[np.ndarray], dict, int]:
    """An input, the node's attributes (defaults sometimes left out) and an opset.

    Half the draws are "plain" (no dilation, each pad below the window) and half the element
    types float32 or float16, where the native ops apply; empty batches and spatial axes read
    only as padding occur, and for Unfold and Fold dilations of 0 (DirectML's).
    """
    name = definition.name
    k = draw(st.integers(1, 3 if draw(st.booleans()) else SPATIAL_AXES[name]))
    most = 3 if k <= 3 else 2
    small = st.integers(1, most)
    dilation = st.integers(1 if name == "LpPooling" else 0, most)
    plain = draw(st.booleans())
    window = draw(st.lists(small, min_size=k, max_size=k))
    lists = {"strides": draw(st.lists(small, min_size=k, max_size=k)),
             "dilations": [1] * k if plain else draw(st.lists(dilation, min_size=k, max_size=k))}
    for side in ("start_padding", "end_padding"):
        lists[side] = [draw(st.integers(0, w - 1 if plain else 3)) for w in window]
    reach = [d * (w - 1) + 1 - a - e for w, d, a, e in
             zip(window, lists["dilations"], lists["start_padding"], lists["end_padding"])]
    least = 0 if draw(st.integers(0, 4)) == 0 else 1  # sometimes axes of padding only
    spatial = [draw(st.integers(max(least, r), max(1, r) + (3 if k <= 3 else 1)))
               for r in reach]
    attributes = {WINDOW_NAME[name]: window}
    for attribute, values in lists.items():
        default = 1 if attribute in ("strides", "dilations") else 0
        if any(v != default for v in values) or draw(st.booleans()):
            attributes[attribute] = values
    if name == "LpPooling" and draw(st.booleans()):
        attributes["p"] = draw(st.integers(1, 5))
    dtype = draw(st.sampled_from(TYPES[name]) | st.sampled_from(NATIVE_TYPES))
    n = draw(st.integers(1, 2)) if draw(st.integers(0, 9)) else 0
    c = draw(st.integers(1, 3))
    if name == "Fold":
        attributes["output_size"] = spatial
        blocks = sliding_block_counts(name, "node", spatial, window, *lists.values())
        shape = (n, c * math.prod(window), math.prod(blocks))
    else:
        shape = (n, c, *spatial)
    x = _values(np.random.default_rng(draw(st.integers(0, 2**32 - 1))), shape, dtype,
                specials=draw(st.booleans()))
    return (x,), attributes, draw(st.sampled_from(OPSETS))


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, *,
            specials: bool) -> np.ndarray:
    """Random values over the type's whole range (integer sums wrap around); floats normal,
    with some inf, NaN and -0 when ``specials``."""
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    if specials and x.size:
        x.flat[rng.integers(0, x.size, 3)] = [np.inf, np.nan, -0.0]
    return x
