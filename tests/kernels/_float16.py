"""What the float16 kernel tests share: inputs that hold every kind of float16 value, the check
that a float16 result is the float32 computation on the same values rounded once (the spec's
float16 rule), bit for bit, and a thread count that splits even small work into bands."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dml_onnx._kernels import _threads

SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 2.0 ** -24, -(2.0 ** -24),
                    1023 * 2.0 ** -24, 2.0 ** -14, 65504.0, -65504.0], np.float16)
"""Zeros of both signs, infinities, NaN, the smallest and largest subnormals, the smallest
normal and the largest finite values."""


def special_halves(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """float16 values of every kind: normal ones of every size (large ones whose sums overflow
    float16, tiny ones that sum to subnormals), subnormals, and now and then one of
    :data:`SPECIAL`."""
    scale = rng.choice([2.0 ** -20, 1e-3, 1.0, 300.0, 30000.0], size=shape)
    x = np.clip(rng.standard_normal(shape) * scale, -65504, 65504).astype(np.float16)
    flat = x.reshape(-1)
    if flat.size:
        picks = rng.integers(0, flat.size, size=max(1, flat.size // 40))
        flat[picks] = rng.choice(SPECIAL, size=picks.size)
    return x


def halves(shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    """hypothesis: float16 arrays of ``shape``, any value (NaN, infinities, subnormals, zeros
    of both signs)."""
    return hnp.arrays(np.float16, shape, elements=st.floats(width=16))


def assert_rounded_once(got: np.ndarray, wide: np.ndarray) -> None:
    """``got`` (float16) is ``wide`` (the float32 computation on the same values) rounded once
    to float16 as numpy rounds (ties to even, beyond the range to infinity), bit for bit: NaN
    payloads and the sign of zero included."""
    assert got.dtype == np.float16 and wide.dtype == np.float32
    assert got.shape == wide.shape
    with np.errstate(over="ignore"):
        want = wide.astype(np.float16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@contextlib.contextmanager
def threads(count: int) -> Iterator[None]:
    """Kernels called in the block split their work into ``count`` bands, even small work
    (started from compiled code where ``count`` > 1)."""
    token = _threads.thread_limit.set(count)
    try:
        with mock.patch.object(_threads, "THREADS", max(count, 2)), \
                mock.patch.object(_threads, "GRAIN", 1):
            yield
    finally:
        _threads.thread_limit.reset(token)
