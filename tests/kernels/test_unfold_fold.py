"""Numeric tests of the Unfold and Fold kernels (spec sections 5 and 6).

Oracles: the two DML seed examples, the plain references written from the spec formula
(:mod:`dml_onnx.reference_ops`), onnxruntime's native Col2Im (opset 18) for Fold, and the adjoint
identity between the two ops, on fixed cases and drawn geometries. Element types and errors are
in ``test_unfold_fold_types_and_errors``; what both share in ``_unfold_fold``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dml_onnx._kernels.fold import fold
from dml_onnx._kernels.unfold import unfold
from dml_onnx.ops import _window_cases as seeds
from dml_onnx.reference_ops.fold import fold as fold_reference
from dml_onnx.reference_ops.unfold import unfold as unfold_reference
from tests._support.native import run_native
from tests.kernels._float16 import assert_rounded_once, halves
from tests.kernels._float16 import threads as float16_threads
from tests.kernels._unfold_fold import (
    NUMERIC_TYPES,
    _blocks,
    _unravel,
    _wrap,
    assert_fold_matches,
    attrs,
    filled,
    fold_shape,
    random_array,
)

# ----------------------------------------------------------------------------------------------
# The two DML seed examples (seeds/unfold.es.txt), typed in from the seed page once, in
# dml_onnx.ops._window_cases, where they are also conformance cases (Unfold's examples).

SEED_INPUT = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)

SEED_1 = np.array([seeds.SEED_1], dtype=np.float32)
SEED_2 = np.array([seeds.SEED_2], dtype=np.float32)


def test_seed_example_1_unpadded():
    got = unfold(SEED_INPUT, window_sizes=[3, 3], strides=[1, 1], dilations=[1, 1],
                 start_padding=[0, 0], end_padding=[0, 0], node="seed1")
    assert got.shape == (1, 9, 9) and got.dtype == np.float32
    np.testing.assert_array_equal(got, SEED_1)


def test_seed_example_2_padded_rows():
    got = unfold(SEED_INPUT, window_sizes=[3, 3], strides=[1, 1], dilations=[1, 1],
                 start_padding=[1, 0], end_padding=[1, 0], node="seed2")
    assert got.shape == (1, 9, 15) and got.dtype == np.float32
    np.testing.assert_array_equal(got, SEED_2)


def test_seed_examples_with_defaults_omitted():
    np.testing.assert_array_equal(unfold(SEED_INPUT, **attrs([3, 3])), SEED_1)
    np.testing.assert_array_equal(unfold(SEED_INPUT, **attrs([3, 3], a=[1, 0], e=[1, 0])), SEED_2)


def test_fold_of_seed_example_counts_overlaps():
    # Fold(Unfold(x)) multiplies every pixel by the number of blocks that read it.
    counts = fold(np.ones_like(SEED_1), **attrs([3, 3]), output_size=[5, 5])
    want = np.outer([1, 2, 3, 2, 1], [1, 2, 3, 2, 1]).astype(np.float32)
    np.testing.assert_array_equal(counts[0, 0], want)
    folded = fold(SEED_2, **attrs([3, 3], a=[1, 0], e=[1, 0]), output_size=[5, 5])
    rows = np.array([2, 3, 3, 3, 2])[:, None] * np.array([1, 2, 3, 2, 1])[None]
    np.testing.assert_array_equal(folded[0, 0], SEED_INPUT[0, 0] * rows)


# ----------------------------------------------------------------------------------------------
# Fixed cases against the loop references: k = 1..6, asymmetric padding, strides, dilations.

CASES = [
    # (spatial shape, window, strides, dilations, start_padding, end_padding)
    ((7,), (3,), (2,), (1,), (1,), (0,)),
    ((9,), (2,), (1,), (3,), (0,), (2,)),
    ((5,), (5,), (), (), (), ()),  # window = full size: one block
    ((6, 7), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),  # the benchmark geometry, small
    ((6, 7), (2, 3), (2, 1), (2, 1), (1, 0), (0, 2)),
    ((5, 8), (3, 2), (3, 4), (1, 2), (2, 1), (1, 3)),  # stride > window
    ((8, 8), (3, 3), (2, 2), (1, 1), (1, 1), (0, 0)),  # output = blocks * stride (flat path)
    ((1, 6), (1, 3), (1, 1), (1, 2), (0, 2), (0, 2)),  # size-1 axis
    ((5, 7), (2, 3), (), (), (), ()),  # no padding: blocks shorter than the output lines
    ((6, 9), (2, 2), (1, 2), (1, 3), (0, 0), (0, 0)),
    ((3, 4), (4, 5), (1, 1), (1, 1), (1, 1), (0, 0)),  # window = padded size: one block
    ((4, 5, 6), (2, 3, 2), (1, 2, 1), (1, 1, 2), (0, 1, 1), (1, 0, 2)),
    ((3, 3, 3), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    ((3, 2, 3), (5, 4, 5), (1, 2, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),  # one block
    ((3, 4, 2, 3), (2, 2, 1, 2), (1, 2, 1, 1), (1, 1, 1, 2), (1, 0, 0, 1), (0, 1, 1, 1)),
    ((2, 3, 2, 2, 3), (2, 1, 2, 1, 2), (), (1, 2, 1, 1, 1), (0, 1, 0, 1, 0), (1, 0, 0, 0, 1)),
    ((2, 2, 3, 1, 2, 2), (1, 2, 2, 1, 2, 1), (1, 1, 2, 1, 1, 2), (), (1, 0, 0, 1, 0, 1), ()),
]


def _case_id(case):
    return "x".join(map(str, case[0])) + "_w" + "x".join(map(str, case[1]))


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_unfold_matches_loop_reference(case):
    spatial, w, s, d, a, e = case
    rng = np.random.default_rng(11)
    x = rng.integers(-1000, 1000, size=(2, 3, *spatial)).astype(np.int64)
    got = unfold(x, **attrs(w, s, d, a, e))
    want = unfold_reference(x, **attrs(w, s, d, a, e))
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_fold_matches_loop_reference(case):
    spatial, w, s, d, a, e = case
    k = len(w)
    s, d, a, e = filled(s, k, 1), filled(d, k, 1), filled(a, k, 0), filled(e, k, 0)
    rng = np.random.default_rng(12)
    y = rng.integers(-1000, 1000, size=fold_shape(2, 3, w, s, d, a, e, spatial))
    got = fold(y, **attrs(w, s, d, a, e), output_size=list(spatial))
    np.testing.assert_array_equal(got, fold_reference(y, **attrs(w, s, d, a, e),
                                                      output_size=list(spatial)))
    yf = rng.standard_normal(y.shape)
    assert_fold_matches(fold(yf, **attrs(w, s, d, a, e), output_size=list(spatial)),
                        fold_reference(yf, **attrs(w, s, d, a, e), output_size=list(spatial)))


@pytest.mark.parametrize("case", [c for c in CASES if any(c[4]) or any(c[5])], ids=_case_id)
def test_fold_drops_nan_and_inf_that_fall_into_padding(case):
    spatial, w, s, d, a, e = case
    k = len(w)
    s, d, a, e = filled(s, k, 1), filled(d, k, 1), filled(a, k, 0), filled(e, k, 0)
    blocks = _blocks(spatial, w, s, d, a, e)
    shape = fold_shape(1, 2, w, s, d, a, e, spatial)
    y = np.random.default_rng(19).standard_normal(shape).astype(np.float32)
    poisoned = y.copy()
    count = 0
    for kidx in range(math.prod(w)):
        kk = _unravel(kidx, w)
        for bidx in range(shape[2]):
            bb = _unravel(bidx, blocks)
            pos = [bb[i] * s[i] + kk[i] * d[i] - a[i] for i in range(k)]
            if not all(0 <= p < size for p, size in zip(pos, spatial)):
                y[:, kidx::math.prod(w), bidx] = 0
                poisoned[:, kidx::math.prod(w), bidx] = [np.nan, np.inf][count % 2]
                count += 1
    assert count
    got = fold(poisoned, **attrs(w, s, d, a, e), output_size=list(spatial))
    assert np.isfinite(got).all()
    np.testing.assert_array_equal(got, fold(y, **attrs(w, s, d, a, e), output_size=list(spatial)))
    assert_fold_matches(got, fold_reference(y, **attrs(w, s, d, a, e), output_size=list(spatial)))


def test_unfold_and_fold_of_non_contiguous_input():
    rng = np.random.default_rng(13)
    x = rng.integers(-50, 50, size=(3, 2, 9, 8)).astype(np.int32).transpose(1, 0, 3, 2)[..., ::2]
    assert not x.flags.c_contiguous
    for a in ((0, 0), (1, 2)):
        got = unfold(x, **attrs([2, 3], [1, 2], [2, 1], a, [0, 1]))
        want = unfold_reference(x, **attrs([2, 3], [1, 2], [2, 1], a, [0, 1]))
        np.testing.assert_array_equal(got, want)
    y = rng.integers(-50, 50, size=(20, 2, 9)).astype(np.int32).transpose(1, 0, 2)[:, ::2]
    assert not y.flags.c_contiguous
    got = fold(y, **attrs([2, 5]), output_size=[4, 7])
    np.testing.assert_array_equal(got, fold_reference(y, **attrs([2, 5]), output_size=[4, 7]))


def test_empty_batch_and_channels():
    assert unfold(np.zeros((0, 3, 4, 4), np.float32), **attrs([2, 2])).shape == (0, 12, 9)
    assert unfold(np.zeros((2, 0, 4), np.int8), **attrs([3])).shape == (2, 0, 2)
    assert fold(np.zeros((0, 4, 9), np.float32), **attrs([2, 2]), output_size=[4, 4]).shape == \
        (0, 1, 4, 4)
    assert fold(np.zeros((2, 0, 9), np.int16), **attrs([2, 2]), output_size=[4, 4]).shape == \
        (2, 0, 4, 4)


def test_unfold_of_empty_spatial_axis_reads_only_padding():
    x = np.zeros((1, 2, 0, 3), np.float32)
    got = unfold(x, **attrs([1, 2], a=[1, 0], e=[1, 0]))
    assert got.shape == (1, 4, 4)
    assert not got.any()


def test_fold_to_empty_spatial_axis_drops_everything():
    # the adjoint of unfolding a size-0 axis that only padding feeds
    got = fold(np.ones((1, 4, 4), np.float32), **attrs([1, 2], a=[1, 0], e=[1, 0]),
               output_size=[0, 3])
    assert got.shape == (1, 2, 0, 3) and got.dtype == np.float32


def test_fold_drops_values_in_padding():
    # window 2x1, start padding 2 rows, output 2x3: B = (3, 3). Tap row 0 reads padded rows
    # b - 2 (only block row 2 is inside); tap row 1 reads b - 1 (block rows 1 and 2).
    y = np.arange(1, 19, dtype=np.int64).reshape(1, 2, 9)
    got = fold(y, **attrs([2, 1], a=[2, 0]), output_size=[2, 3])
    want = np.array([[7 + 13, 8 + 14, 9 + 15], [16, 17, 18]])
    np.testing.assert_array_equal(got[0, 0], want)
    # every block of a tap in the padding: the whole tap vanishes
    got = fold(np.ones((1, 3, 1), np.float32), **attrs([3], a=[2], e=[0]), output_size=[1])
    np.testing.assert_array_equal(got, np.ones((1, 1, 1), np.float32))


# ----------------------------------------------------------------------------------------------
# Fold against onnxruntime's native Col2Im (opset 18): 2-D, and 3-D without dilation.

COL2IM_CASES = [
    ((6, 7), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    ((6, 7), (2, 3), (2, 1), (2, 1), (1, 0), (0, 2)),
    ((9, 8), (3, 2), (3, 4), (1, 2), (2, 1), (1, 3)),
    ((10, 10), (3, 3), (2, 2), (2, 3), (2, 2), (2, 2)),
    ((8, 8), (3, 3), (2, 2), (1, 1), (1, 1), (0, 0)),
    ((4, 5, 6), (2, 3, 2), (1, 2, 1), (1, 1, 1), (0, 1, 1), (1, 0, 2)),
    ((5, 5, 5), (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
]


@pytest.mark.parametrize("case", COL2IM_CASES, ids=_case_id)
def test_fold_matches_onnxruntime_col2im(case):
    spatial, w, s, d, a, e = case
    rng = np.random.default_rng(14)
    y = rng.standard_normal(fold_shape(2, 3, w, s, d, a, e, spatial)).astype(np.float32)
    (native,) = run_native("Col2Im", [y, np.array(spatial, np.int64), np.array(w, np.int64)],
                           opset=18, constant_inputs=(1, 2), pads=[*a, *e], strides=list(s),
                           dilations=list(d))
    got = fold(y, **attrs(w, s, d, a, e), output_size=list(spatial))
    assert got.shape == native.shape
    np.testing.assert_allclose(got, native, rtol=1e-5, atol=1e-5)


def test_fold_matches_col2im_at_benchmark_geometry():
    rng = np.random.default_rng(15)
    y = rng.standard_normal((2, 4 * 9, 14 * 14)).astype(np.float32)
    (native,) = run_native("Col2Im", [y, np.array([14, 14], np.int64),
                                      np.array([3, 3], np.int64)],
                           opset=18, constant_inputs=(1, 2), pads=[1, 1, 1, 1])
    got = fold(y, **attrs([3, 3], a=[1, 1], e=[1, 1]), output_size=[14, 14])
    np.testing.assert_allclose(got, native, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------------------
# Adjoint identity <Unfold(x), y> == <x, Fold(y)>.

def _inner(u, v, dtype):
    """Inner product: exact modulo 2**bits for integers, float64 for floats."""
    if np.dtype(dtype).kind in "iu":
        total = sum(int(p) * int(q) for p, q in zip(u.ravel().tolist(), v.ravel().tolist()))
        return _wrap(total, dtype)
    return float(np.dot(u.astype(np.float64).ravel(), v.astype(np.float64).ravel()))


@pytest.mark.parametrize("dtype", NUMERIC_TYPES, ids=lambda t: np.dtype(t).name)
def test_adjoint_identity(dtype):
    rng = np.random.default_rng(16)
    for spatial, w, s, d, a, e in CASES:
        k = len(w)
        s, d, a, e = filled(s, k, 1), filled(d, k, 1), filled(a, k, 0), filled(e, k, 0)
        x = random_array(rng, (1, 2, *spatial), dtype)
        y = random_array(rng, fold_shape(1, 2, w, s, d, a, e, spatial), dtype)
        ux = unfold(x, **attrs(w, s, d, a, e))
        fy = fold(y, **attrs(w, s, d, a, e), output_size=list(spatial))
        left, right = _inner(ux, y, dtype), _inner(x, fy, dtype)
        if np.dtype(dtype).kind in "iu":
            assert left == right  # exact, with the wrap-around of the element type
        else:
            scale = float(np.abs(ux.astype(np.float64)).ravel()
                          @ np.abs(y.astype(np.float64)).ravel())
            rel = 1e-2 if dtype == np.float16 else 1e-5
            assert abs(left - right) <= rel * scale + 1e-12


# ----------------------------------------------------------------------------------------------
# Property tests against the loop references.

MAX_EXTRA = {1: 6, 2: 4, 3: 2, 4: 1, 5: 1, 6: 0}


@st.composite
def geometries(draw, max_k=4, lowest_dilation=0):
    """(spatial, window, strides, dilations, start, end) with every block count >= 1; a
    dilation may be 0 (DirectML's, spec sections 5 and 6) unless ``lowest_dilation`` is 1."""
    k = draw(st.integers(1, max_k))
    small = k >= 3
    w = [draw(st.integers(1, 2 if small else 3)) for _ in range(k)]
    s = [draw(st.integers(1, 2 if small else 4)) for _ in range(k)]
    d = [draw(st.integers(lowest_dilation, 1 if small else 2)) for _ in range(k)]
    a = [draw(st.integers(0, 1 if small else 2)) for _ in range(k)]
    e = [draw(st.integers(0, 1 if small else 2)) for _ in range(k)]
    spatial = []
    for i in range(k):
        least = max(0 if a[i] + e[i] else 1, d[i] * (w[i] - 1) + 1 - a[i] - e[i])
        spatial.append(draw(st.integers(least, least + MAX_EXTRA[k])))
    return tuple(spatial), tuple(w), tuple(s), tuple(d), tuple(a), tuple(e)


def _maybe_default(draw, values, default):
    return [] if all(v == default for v in values) and draw(st.booleans()) else list(values)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(geometry=geometries(), n=st.integers(1, 2), c=st.integers(1, 2),
       dtype=st.sampled_from([np.int64, np.float64, np.uint8, np.bool_]), data=st.data())
def test_unfold_property(geometry, n, c, dtype, data):
    spatial, w, s, d, a, e = geometry
    x = random_array(np.random.default_rng(len(spatial) * 7 + sum(spatial)), (n, c, *spatial),
                     dtype)
    kw = dict(window_sizes=list(w), strides=_maybe_default(data.draw, s, 1),
              dilations=_maybe_default(data.draw, d, 1),
              start_padding=_maybe_default(data.draw, a, 0),
              end_padding=_maybe_default(data.draw, e, 0))
    got = unfold(x, **kw)
    np.testing.assert_array_equal(got, unfold_reference(x, **attrs(w, s, d, a, e)))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(geometry=geometries(), n=st.integers(1, 2), c=st.integers(1, 2),
       dtype=st.sampled_from([np.int64, np.int8, np.float64, np.float32, np.float16]))
def test_fold_property(geometry, n, c, dtype):
    spatial, w, s, d, a, e = geometry
    y = random_array(np.random.default_rng(sum(spatial) + 3 * len(w)),
                     fold_shape(n, c, w, s, d, a, e, spatial), dtype)
    got = fold(y, **attrs(w, s, d, a, e), output_size=list(spatial))
    assert_fold_matches(got, fold_reference(y, **attrs(w, s, d, a, e), output_size=list(spatial)))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(geometry=geometries(max_k=3), n=st.integers(0, 2), c=st.integers(1, 3),
       threads=st.integers(1, 3), data=st.data())
def test_fold_float16_property_is_float32_rounded_once(geometry, n, c, threads, data):
    """Any float16 values (NaN, infinities, subnormals, zeros of both signs): the float32 fold
    of the same values rounded once by numpy, bit for bit, on any number of bands."""
    spatial, w, s, d, a, e = geometry
    y = data.draw(halves(fold_shape(n, c, w, s, d, a, e, spatial)))
    kw = {**attrs(w, s, d, a, e), "output_size": list(spatial)}
    with float16_threads(threads):
        got = fold(y, **kw)
    assert_rounded_once(got, fold(y.astype(np.float32), **kw))


@settings(max_examples=80, deadline=None, derandomize=True)
@given(geometry=geometries(max_k=6, lowest_dilation=1))
def test_adjoint_property(geometry):
    """Adjoint where Fold is Unfold's adjoint: a dilation of 0 makes Fold zeros (DirectML)."""
    spatial, w, s, d, a, e = geometry
    rng = np.random.default_rng(sum(spatial) + len(w))
    x = rng.integers(-(2 ** 20), 2 ** 20, size=(1, 2, *spatial))
    y = rng.integers(-(2 ** 20), 2 ** 20, size=fold_shape(1, 2, w, s, d, a, e, spatial))
    ux = unfold(x, **attrs(w, s, d, a, e))
    fy = fold(y, **attrs(w, s, d, a, e), output_size=list(spatial))
    assert int((ux * y).sum()) == int((x * fy).sum())


def test_fixed_cases_cover_the_edges():
    # the hand-written CASES hold the edges the strategy may rarely draw
    def blocks(case):
        spatial, w, s, d, a, e = case
        k = len(w)
        return _blocks(spatial, w, filled(s, k, 1), filled(d, k, 1), filled(a, k, 0),
                       filled(e, k, 0))
    all_blocks = [blocks(c) for c in CASES]
    assert (1,) in all_blocks and (1, 1) in all_blocks and (1, 1, 1) in all_blocks
    assert any(1 in c[0] for c in CASES)
    assert any(s > w for c in CASES for s, w in zip(c[2], c[1]))
    assert {len(c[1]) for c in CASES} == {1, 2, 3, 4, 5, 6}


# ----------------------------------------------------------------------------------------------
# A dilation of 0 (spec sections 5 and 6, Measured on DirectML 1.15.4).

@settings(max_examples=60, deadline=None, derandomize=True)
@given(geometry=geometries(max_k=3), data=st.data())
def test_unfold_dilation_zero_reads_one_position_per_axis(geometry, data):
    """Unfold with a dilation of 0 is the formula read literally: along such an axis every
    tap reads the position of tap 0, so each tap's rows equal those of a window of 1 there."""
    spatial, w, s, d, a, e = geometry
    zeroed = [data.draw(st.booleans()) for _ in w]
    if not any(zeroed):
        zeroed[0] = True
    d = tuple(0 if z else v for z, v in zip(zeroed, d))
    x = random_array(np.random.default_rng(sum(spatial) + 5), (1, 2, *spatial), np.float32)
    got = unfold(x, **attrs(w, s, d, a, e))
    single = tuple(1 if z else v for z, v in zip(zeroed, w))
    base = unfold(x, **attrs(single, s, d, a, e)).reshape(1, 2, *single, -1)
    for tap in np.ndindex(*w):
        read = tuple(0 if z else i for z, i in zip(zeroed, tap))
        row = got.reshape(1, 2, *w, -1)[(slice(None), slice(None), *tap)]
        np.testing.assert_array_equal(row, base[(slice(None), slice(None), *read)])
    np.testing.assert_array_equal(got, unfold_reference(x, **attrs(w, s, d, a, e)))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.uint8])
@pytest.mark.parametrize("dilations", [(0, 1), (1, 0), (0, 0)])
def test_fold_dilation_zero_gives_zeros(dtype, dilations):
    """DirectML's Fold returns zeros for a dilation of 0, whatever the values (NaN too)."""
    w, s, a, e, out = (2, 3), (1, 2), (1, 0), (0, 2), (5, 6)
    y = random_array(np.random.default_rng(4), fold_shape(2, 3, w, s, dilations, a, e, out),
                     dtype)
    if y.dtype.kind == "f":
        y.flat[::7] = np.nan
    got = fold(y, **attrs(w, s, dilations, a, e), output_size=list(out))
    assert got.dtype == np.dtype(dtype) and got.shape == (2, 3, *out)
    assert not got.any() and not np.signbit(got).any()
    np.testing.assert_array_equal(got, fold_reference(y, **attrs(w, s, dilations, a, e),
                                                      output_size=list(out)))


@pytest.fixture
def every_unfold_compiled(monkeypatch):
    """Every Unfold through the compiled loop: none small enough for the cached gather."""
    from dml_onnx._kernels import unfold as module
    monkeypatch.setattr(module, "SMALL", -1)
    module._plan.cache_clear()
    yield
    module._plan.cache_clear()


@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_unfold_compiled_loop_matches_loop_reference(case, dtype, every_unfold_compiled):
    """The compiled loop copies bits of each width (k = 1..6, strides, dilations, padding,
    blocks reading padding only) as the plain-loop reference reads them."""
    spatial, w, s, d, a, e = case
    x = random_array(np.random.default_rng(12), (2, 3, *spatial), dtype)
    got = unfold(x, **attrs(w, s, d, a, e))
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, unfold_reference(x, **attrs(w, s, d, a, e)))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(geometry=geometries(), n=st.integers(1, 2), c=st.integers(1, 2),
       dtype=st.sampled_from([np.int64, np.float32, np.uint16, np.bool_]))
def test_unfold_compiled_loop_property(geometry, n, c, dtype):
    from dml_onnx._kernels import unfold as module
    spatial, w, s, d, a, e = geometry
    x = random_array(np.random.default_rng(len(spatial) * 5 + sum(spatial)), (n, c, *spatial),
                     dtype)
    small, module.SMALL = module.SMALL, -1
    module._plan.cache_clear()
    try:
        got = unfold(x, **attrs(w, s, d, a, e))
    finally:
        module.SMALL = small
        module._plan.cache_clear()
    np.testing.assert_array_equal(got, unfold_reference(x, **attrs(w, s, d, a, e)))


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_unfold_of_many_planes_over_threads_matches_the_reference(threads, monkeypatch):
    """Bands of planes over threads (the compiled driver, or one band) give the same copy."""
    from dml_onnx._kernels import _threads
    monkeypatch.setattr(_threads, "THREADS", max(threads, _threads.THREADS))
    token = _threads.thread_limit.set(threads)
    try:
        x = np.random.default_rng(13).standard_normal((2, 8, 80, 74)).astype(np.float32)
        kw = attrs((3, 2), (2, 1), (1, 2), (1, 0), (2, 1))
        np.testing.assert_array_equal(unfold(x, **kw), unfold_reference(x, **kw))
    finally:
        _threads.thread_limit.reset(token)
