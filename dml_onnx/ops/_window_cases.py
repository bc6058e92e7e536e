"""The case tables of the sliding-window operators (LpPooling, Unfold, Fold): the shared
geometries (spatial sizes and window attributes) every one of them runs, and each operator's
``examples``, which the conformance suite and the layer tests run. Inputs are
``[N, C, D1..Dk]`` (Fold's ``[N, C * prod(window_sizes), L]``)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
from onnx import TensorProto, helper

from dml_onnx._kernels._window import Window, sliding_block_counts
from dml_onnx.definition import ANY_TYPES, FLOAT_TYPES, NUMERIC_TYPES, Example


class WindowCase(NamedTuple):
    """One geometry of the shared case table: spatial input sizes and window attributes."""

    name: str
    spatial: tuple[int, ...]
    attributes: dict[str, list[int]]  # "window" stands for the operator's window attribute

    def for_op(self, sizes: str) -> dict[str, list[int]]:
        """The attributes with the window under the operator's name ``sizes``."""
        return {(sizes if key == "window" else key): value
                for key, value in self.attributes.items()}


def _case(name: str, spatial: Sequence[int], window: Sequence[int], **others: Sequence[int]
          ) -> WindowCase:
    return WindowCase(name, tuple(spatial), {"window": list(window),
                                             **{k: list(v) for k, v in others.items()}})


DEFAULTS = _case("defaults", (5, 4), (2, 3))
"""Every attribute but the window at its default."""
EVERYTHING = _case("everything", (6, 5), (3, 2), strides=(2, 3), dilations=(2, 2),
                   start_padding=(2, 1), end_padding=(1, 3))
"""Every attribute away from its default; the element-type cases use it."""

WINDOW_CASES = (
    DEFAULTS,
    _case("strides", (5, 4), (2, 3), strides=(2, 3)),
    _case("dilations", (5, 4), (2, 3), dilations=(2, 1)),
    _case("start_padding", (5, 4), (2, 3), start_padding=(1, 2)),
    _case("end_padding", (5, 4), (2, 3), end_padding=(2, 1)),
    EVERYTHING,
    _case("window_fills_padded_input", (3, 2), (4, 4), start_padding=(1, 1),
          end_padding=(0, 1)),
    _case("dilated_window_fills_input", (4, 5), (2, 3), dilations=(3, 2)),
    _case("one_pixel", (1, 1), (1, 1)),
    _case("one_pixel_padded", (1, 1), (2, 3), start_padding=(1, 1), end_padding=(0, 1)),
    _case("stride_beyond_window", (7, 6), (2, 1), strides=(3, 4)),
    _case("padding_beyond_window", (3, 2), (1, 2), start_padding=(2, 0), end_padding=(1, 3)),
    _case("1d", (9,), (3,), strides=(2,), dilations=(2,), start_padding=(1,)),
    _case("3d", (4, 3, 5), (2, 2, 3), strides=(1, 2, 1), dilations=(2, 1, 1),
          start_padding=(0, 1, 0), end_padding=(1, 0, 2)),
    _case("3d_undilated", (3, 4, 3), (2, 3, 2), strides=(2, 1, 1), start_padding=(1, 0, 1),
          end_padding=(0, 2, 0)),
    _case("6d", (2, 3, 2, 2, 3, 2), (1, 2, 2, 1, 2, 2), strides=(1, 1, 2, 1, 2, 1),
          dilations=(1, 2, 1, 1, 1, 1), start_padding=(0, 0, 1, 0, 0, 1),
          end_padding=(1, 0, 0, 0, 1, 0)),
)
"""The geometries every sliding-window operator runs: each attribute varied on its own, edge
cases (window as large as the padded input, one-pixel inputs, stride or padding beyond the
window), 1 to 3 spatial axes (3-D with and without dilations: onnxruntime's Col2Im takes
only the latter) and the most (6)."""


def case_table(max_k: int, types: Sequence[str]) -> Iterator[tuple[str, WindowCase, np.dtype]]:
    """``(name, geometry, element type)``: the shared geometries with at most ``max_k``
    spatial axes in float32, then each other of ``types`` (type-constraint entries) on
    :data:`EVERYTHING`, named ``type_<dtype>``."""
    for case in WINDOW_CASES:
        if len(case.spatial) <= max_k:
            yield case.name, case, np.dtype(np.float32)
    for dtype in element_dtypes(types):
        if dtype != np.float32:
            yield f"type_{dtype.name}", EVERYTHING, dtype


def case_blocks(case: WindowCase) -> tuple[int, ...]:
    """``B_d`` of a case's geometry."""
    return sliding_block_counts("case", case.name, case.spatial,
                                *Window.of(case.attributes["window"], case.attributes))


def case_shape(case: WindowCase) -> tuple[int, ...]:
    """``[N, C, D1..Dk]`` of a case: two images of two channels up to 2-D, one of one above."""
    return (*((2, 2) if len(case.spatial) <= 2 else (1, 1)), *case.spatial)


def element_dtypes(types: Sequence[str]) -> tuple[np.dtype, ...]:
    """The numpy dtypes of type-constraint entries (``"tensor(float)"`` ...)."""
    return tuple(helper.tensor_dtype_to_np_dtype(TensorProto.DataType.Value(t[7:-1].upper()))
                 for t in types)


def sample(rng: np.random.Generator, shape: Sequence[int], dtype: Any) -> np.ndarray:
    """Small random values of ``dtype``: normal floats, random booleans, integers in [-9, 9]
    ([0, 9] unsigned), so that Fold's sums over the few taps that overlap in a case stay
    within int8 (the cases pin no wrap-around)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(0 if dtype.kind == "u" else -9, 10, shape).astype(dtype)


# The two worked examples of the DirectML UNFOLD page: X = arange(25) as [1, 1, 5, 5], 3x3
# window, then the same with StartPadding = EndPadding = {1, 0}. Rows as printed there.
SEED_1 = [
    [0, 1, 2, 5, 6, 7, 10, 11, 12], [1, 2, 3, 6, 7, 8, 11, 12, 13],
    [2, 3, 4, 7, 8, 9, 12, 13, 14], [5, 6, 7, 10, 11, 12, 15, 16, 17],
    [6, 7, 8, 11, 12, 13, 16, 17, 18], [7, 8, 9, 12, 13, 14, 17, 18, 19],
    [10, 11, 12, 15, 16, 17, 20, 21, 22], [11, 12, 13, 16, 17, 18, 21, 22, 23],
    [12, 13, 14, 17, 18, 19, 22, 23, 24],
]
SEED_2 = [
    [0, 0, 0, 0, 1, 2, 5, 6, 7, 10, 11, 12, 15, 16, 17],
    [0, 0, 0, 1, 2, 3, 6, 7, 8, 11, 12, 13, 16, 17, 18],
    [0, 0, 0, 2, 3, 4, 7, 8, 9, 12, 13, 14, 17, 18, 19],
    [0, 1, 2, 5, 6, 7, 10, 11, 12, 15, 16, 17, 20, 21, 22],
    [1, 2, 3, 6, 7, 8, 11, 12, 13, 16, 17, 18, 21, 22, 23],
    [2, 3, 4, 7, 8, 9, 12, 13, 14, 17, 18, 19, 22, 23, 24],
    [5, 6, 7, 10, 11, 12, 15, 16, 17, 20, 21, 22, 0, 0, 0],
    [6, 7, 8, 11, 12, 13, 16, 17, 18, 21, 22, 23, 0, 0, 0],
    [7, 8, 9, 12, 13, 14, 17, 18, 19, 22, 23, 24, 0, 0, 0],
]


def unfold_examples() -> tuple[Example, ...]:
    rng = np.random.default_rng(5)
    seed_x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    x3 = rng.integers(-50, 50, (2, 2, 4, 5, 3)).astype(np.int32)
    return (
        Example("seed_1", (seed_x,), {"window_sizes": [3, 3]},
                expected=(np.array([SEED_1], np.float32),)),
        Example("seed_2_padded", (seed_x,), {"window_sizes": [3, 3], "start_padding": [1, 0],
                                             "end_padding": [1, 0]},
                expected=(np.array([SEED_2], np.float32),)),
        Example("1d_int8_strided", (rng.integers(-100, 100, (2, 3, 9)).astype(np.int8),),
                {"window_sizes": [2], "strides": [3], "start_padding": [2]}),
        Example("3d_int32_dilated", (x3,), {"window_sizes": [2, 2, 2], "dilations": [2, 1, 1],
                                            "strides": [1, 2, 1], "end_padding": [0, 1, 1]}),
        Example("2d_bool", (rng.random((1, 2, 4, 4)) > 0.5,),
                {"window_sizes": [2, 3], "start_padding": [1, 1], "end_padding": [0, 1]}),
        Example("2d_float16", (rng.standard_normal((1, 3, 5, 4)).astype(np.float16),),
                {"window_sizes": [3, 2], "strides": [2, 2], "start_padding": [1, 0]}),
        Example("6d_uint16", (rng.integers(0, 1000, (1, 1, 2, 3, 2, 2, 3, 2)).astype(np.uint16),),
                {"window_sizes": [1, 2, 2, 1, 2, 2]}),
        Example("window_larger_than_input", (x3[:, :, :1],),
                {"window_sizes": [2, 2, 2], "dilations": [2, 1, 1], "strides": [1, 2, 1],
                 "end_padding": [0, 1, 1]},
                error="spatial axis 0 block count 0 is below 1"),
        *_unfold_table(np.random.default_rng(50)),
    )


def _unfold_table(rng: np.random.Generator) -> tuple[Example, ...]:
    """The shared case table (:func:`case_table`)."""
    return tuple(Example(name, (sample(rng, case_shape(case), dtype),),
                         case.for_op("window_sizes"))
                 for name, case, dtype in case_table(6, ANY_TYPES))


def lp_pooling_examples() -> tuple[Example, ...]:
    rng = np.random.default_rng(4)
    x2 = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    return (
        Example("2d_p2_padded", (x2,), {"window_size": [3, 3], "start_padding": [1, 1],
                                        "end_padding": [1, 1]}),
        Example("2d_p1_strided_asymmetric", (x2,), {"window_size": [2, 3], "strides": [2, 1],
                                                    "start_padding": [0, 2],
                                                    "end_padding": [1, 0], "p": 1}),
        Example("1d_p3_dilated", (rng.standard_normal((1, 2, 11)).astype(np.float64),),
                {"window_size": [3], "dilations": [2], "strides": [2], "p": 3}),
        Example("3d_p4", (rng.standard_normal((1, 2, 4, 5, 3)).astype(np.float32),),
                {"window_size": [2, 2, 2], "dilations": [1, 2, 1], "end_padding": [1, 0, 1],
                 "p": 4}),
        Example("2d_float16", (x2.astype(np.float16),), {"window_size": [2, 2]}),
        Example("window_larger_than_input", (x2[:, :, :1].astype(np.float16),),
                {"window_size": [2, 2]},
                error="spatial axis 0 output size 0 is below 1"),
        *_lp_pooling_table(np.random.default_rng(40)),
    )


def _lp_pooling_table(rng: np.random.Generator) -> tuple[Example, ...]:
    """The shared case table (:func:`case_table`, up to 3-D), then p
    varied on :data:`DEFAULTS`."""
    def example(name: str, case: WindowCase, dtype: np.dtype, **p: int) -> Example:
        return Example(name, (sample(rng, case_shape(case), dtype),),
                       {**case.for_op("window_size"), **p})
    return (*(example(*row) for row in case_table(3, FLOAT_TYPES)),
            *(example(f"p{p}", DEFAULTS, np.dtype(np.float32), p=p) for p in (1, 3, 4, 7)))


def fold_examples() -> tuple[Example, ...]:
    rng = np.random.default_rng(6)
    padded = {"window_sizes": [3, 3], "start_padding": [1, 1], "end_padding": [1, 1],
              "output_size": [5, 4]}
    dilated = {"window_sizes": [2, 2, 2], "dilations": [1, 2, 1], "strides": [2, 1, 1],
               "output_size": [4, 5, 3], "end_padding": [1, 0, 0]}
    x_padded = rng.standard_normal((2, 18, 20)).astype(np.float32)
    return (
        Example("2d_padded", (x_padded,), padded),
        Example("2d_float16", (x_padded.astype(np.float16),), padded),
        Example("3d_int32_dilated", (rng.integers(-9, 9, (1, 16, 12)).astype(np.int32),),
                dilated),
        Example("1d_float64_strided", (rng.standard_normal((1, 6, 4)),),
                {"window_sizes": [3], "strides": [2], "start_padding": [2],
                 "output_size": [7]}),
        Example("4d_uint8", (rng.integers(0, 9, (1, 16, 2)).astype(np.uint8),),
                {"window_sizes": [2, 2, 2, 2], "output_size": [2, 2, 2, 3]}),
        Example("block_count_disagrees", (x_padded[:, :, :19],), padded,
                error="X dim 2 19 is not the block count 20"),
        *_fold_table(np.random.default_rng(60)),
    )


def _fold_table(rng: np.random.Generator) -> tuple[Example, ...]:
    """The shared case table (:func:`case_table`): ``output_size`` the
    case's spatial sizes, ``X`` the matching ``[N, C * W, L]``."""
    def example(name: str, case: WindowCase, dtype: np.dtype) -> Example:
        n, c, *_ = case_shape(case)
        shape = (n, c * math.prod(case.attributes["window"]), math.prod(case_blocks(case)))
        return Example(name, (sample(rng, shape, dtype),),
                       {**case.for_op("window_sizes"), "output_size": list(case.spatial)})
    return tuple(example(*row) for row in case_table(6, NUMERIC_TYPES))
