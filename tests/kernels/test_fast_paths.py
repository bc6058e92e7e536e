"""The kernels' alternative paths agree: gathers for small inputs and strided work for large
ones, chunk sizes and thread counts, compiled and exact ROI geometry. Each path is forced by
setting the size that selects it, or by an input that needs it."""

from __future__ import annotations

import functools
import sys

import numpy as np
import pytest

import dml_onnx._kernels.fold as fold_module
import dml_onnx._kernels.lp_pooling as lp_module
import dml_onnx._kernels.roi_align1 as roi_align_module
import dml_onnx._kernels.roi_pooling as roi_module
import dml_onnx._kernels.unfold as unfold_module
from dml_onnx._kernels import KernelError, _threads, limits
from dml_onnx.reference_ops.fold import fold as fold_reference

CASES = [  # window, strides, dilations, start, end, spatial
    ((3, 3), (), (), (1, 1), (1, 1), (7, 6)),
    ((2, 3), (2, 1), (1, 2), (0, 2), (1, 0), (6, 9)),
    ((3,), (2,), (2,), (3,), (0,), (11,)),
    ((2, 2, 2), (1, 2, 1), (2, 1, 1), (1, 0, 1), (0, 1, 1), (4, 5, 3)),
    ((11, 1), (), (), (0, 0), (0, 0), (12, 2)),  # a long tap axis: sums stay sequential
]
DTYPES = [np.float32, np.float64, np.float16, np.int32, np.uint8, np.bool_]


def _random(rng, shape, dtype):
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _attributes(case):
    window, strides, dilations, start, end, _ = case
    return {"window_sizes": window, "strides": strides, "dilations": dilations,
            "start_padding": start, "end_padding": end}


@pytest.fixture
def force(monkeypatch):
    """``force(module, name, value)``: set a path-selecting size, with fresh plan caches."""
    def set_value(module, name, value):
        monkeypatch.setattr(module, name, value)
        for cached in (unfold_module._plan, lp_module._plan):
            cached.cache_clear()
    yield set_value
    for cached in (unfold_module._plan, lp_module._plan):
        cached.cache_clear()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_unfold_gather_and_strided_paths_agree(case, dtype, force):
    x = _random(np.random.default_rng(0), (2, 3, *case[-1]), dtype)
    gathered = unfold_module.unfold(x, **_attributes(case))
    force(unfold_module, "SMALL", 0)
    strided = unfold_module.unfold(x, **_attributes(case))
    assert gathered.dtype == strided.dtype == x.dtype
    np.testing.assert_array_equal(gathered, strided)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint16, np.uint8])
def test_fold_thread_count_changes_no_bit(case, dtype, force):
    """Planes split over threads: the same bits on one thread and on several, and the plain
    loop reference's values."""
    shape = unfold_module.unfold(np.zeros((2, 3, *case[-1]), dtype), **_attributes(case)).shape
    x = _random(np.random.default_rng(1), shape, dtype)
    attributes = {**_attributes(case), "output_size": case[-1]}
    force(_threads, "GRAIN", 1)  # split even this small work
    results = []
    for threads in (1, 2, 3, 6):
        force(_threads, "THREADS", threads)
        results.append(fold_module.fold(x, **attributes))
    for got in results:
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got, results[0])
    want = fold_reference(x, **attributes)  # sums floats in float64: equal up to rounding
    if np.dtype(dtype).kind == "f":
        np.testing.assert_allclose(results[0].astype(np.float64), want.astype(np.float64),
                                   rtol=1e-3 if dtype == np.float16 else 1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(results[0], want)


@pytest.mark.parametrize("case", [c for c in CASES if len(c[0]) <= 3])
@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_lp_pooling_thread_count_changes_no_bit(case, p, dtype, force):
    """Planes split over threads: the same bits on one thread and on several."""
    window, strides, dilations, start, end, spatial = case
    x = _random(np.random.default_rng(2), (3, 5, *spatial), dtype)
    attributes = {"window_size": window, "strides": strides, "dilations": dilations,
                  "start_padding": start, "end_padding": end, "p": p}
    force(_threads, "THREADS", 1)
    alone = lp_module.lp_pooling(x, **attributes)
    force(_threads, "THREADS", 4)
    force(_threads, "GRAIN", 1)  # split even this small work
    np.testing.assert_array_equal(lp_module.lp_pooling(x, **attributes), alone)


def _rois(rng, count, n, size):
    corners = rng.uniform(-3, size + 3, (count, 4))
    return np.concatenate([rng.integers(0, n, (count, 1)), corners], axis=1)


HUGE_ROW = [0, -1e13, 2, 3, 4]  # a corner beyond int64's exact range: the exact path


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pooled", [(1, 1), (2, 3), (4, 4)])
@pytest.mark.parametrize("scale", [1.0, 0.5, 1 / 3])
@pytest.mark.parametrize("count", [1, 3, 40])
def test_roi_pooling_compiled_and_exact_geometry_agree(dtype, pooled, scale, count):
    """One row beyond the compiled geometry's range sends all rows down the exact path."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 9, 7)).astype(dtype)
    x[0, 1, 2, 3] = np.nan
    rois = _rois(rng, count, 2, 9).astype(dtype)
    compiled = roi_module.roi_pooling(x, rois, pooled_size=pooled, spatial_scale=scale)
    exact = roi_module.roi_pooling(x, np.concatenate([rois, [HUGE_ROW]]).astype(dtype),
                                   pooled_size=pooled, spatial_scale=scale)
    np.testing.assert_array_equal(compiled, exact[:count])


@pytest.mark.parametrize("row, field", [
    ([np.nan, 0, 0, 1, 1], "rois[1] batch index"), ([2, 0, 0, 1, 1], "rois[1] batch index"),
    ([-0.5, 0, np.inf, 1, 1], "rois[1] y1"), ([0, 0, 0, 3e38, 1], "rois[1] x2"),
])
def test_roi_pooling_invalid_rows_raise_on_either_path(row, field):
    x = np.zeros((2, 1, 4, 4), np.float32)
    for rows in ([[0, 0, 0, 1, 1], row], [[0, 0, 0, 1, 1], row, HUGE_ROW]):
        with pytest.raises(KernelError, match=field.replace("[", r"\[")):
            roi_module.roi_pooling(x, np.array(rows, np.float32), pooled_size=(2, 2),
                                   spatial_scale=4.0)


def _roi_align_call(dtype):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 5, 11, 9)).astype(dtype)
    boxes = (rng.random((30, 4)) * [9, 11, 9, 11]).astype(dtype)
    boxes[:, 2:] += boxes[:, :2]  # some regions reach beyond the image
    batch = rng.integers(0, 2, 30).astype(np.int32)
    return functools.partial(roi_align_module.roi_align1, x, boxes, batch, output_size=(3, 2),
                             reduction_function="average", interpolation_mode="linear",
                             spatial_scale_x=0.75, spatial_scale_y=1.25,
                             input_pixel_offset=0.5, output_pixel_offset=-0.5,
                             out_of_bounds_input_value=0.0, minimum_samples_per_output=1,
                             maximum_samples_per_output=3, align_regions_to_corners=0)


def _roi_pooling_call(dtype):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 5, 11, 9)).astype(dtype)
    return functools.partial(roi_module.roi_pooling, x, _rois(rng, 30, 2, 11).astype(dtype),
                             pooled_size=(3, 2), spatial_scale=0.75)


@pytest.mark.parametrize("call", [_roi_align_call, _roi_pooling_call])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_roi_small_calls_and_threaded_calls_agree(call, dtype, monkeypatch):
    """A small ROI call plans and runs in one compiled call; a larger one plans first and then
    splits its regions over threads. Both give the same bits."""
    run = call(dtype)
    module = sys.modules[run.func.__module__]
    groups = []  # the groups of each split: a launch's, or the pool's
    if hasattr(module, "run_interleaved"):
        def split(count, work, task, launch, pool_work=None):
            seen = []
            _threads.run_interleaved(count, work, lambda items: (seen.append(1), task(items)),
                                     lambda threads: (seen.append(threads), launch(threads)),
                                     pool_work)
            groups.append(sum(seen))
        monkeypatch.setattr(module, "run_interleaved", split)
    else:
        monkeypatch.setattr(module, "interleaved", lambda *args: (
            groups.append(len(_threads.interleaved(*args))), _threads.interleaved(*args))[1])
    small = run()
    assert groups == []  # one compiled call
    monkeypatch.setattr(module, "serial_work", lambda: 0)  # no call is small
    monkeypatch.setattr(_threads, "THREADS", 4)
    monkeypatch.setattr(_threads, "GRAIN", 1)
    np.testing.assert_array_equal(run(), small)
    assert groups == [4]


def test_a_prepared_kernel_checks_every_new_input_layout():
    """A prepared kernel skips the checks of a layout that passed them, and only of that one."""
    run = roi_module.prepare(node="pool", pooled_size=(2, 2), spatial_scale=1.0)
    x, rois = np.zeros((1, 2, 4, 4), np.float32), np.array([[0, 0, 0, 3, 3]], np.float32)
    assert run(x, rois).shape == (1, 2, 2, 2)
    with pytest.raises(KernelError, match="rois element type"):
        run(x, rois.astype(np.float64))
    with pytest.raises(KernelError, match="rois shape"):
        run(x, rois[:, :4])
    previous = limits.set_memory_limit(8)
    try:
        with pytest.raises(KernelError, match="above the memory limit"):
            run(x, rois)
    finally:
        limits.set_memory_limit(previous)
    assert run(x, rois).shape == (1, 2, 2, 2)
    align = roi_align_module.prepare(
        node="align", output_size=(2, 2), reduction_function="max",
        interpolation_mode="linear", spatial_scale_x=1.0, spatial_scale_y=1.0,
        input_pixel_offset=0.5, output_pixel_offset=-0.5, out_of_bounds_input_value=0.0,
        minimum_samples_per_output=1, maximum_samples_per_output=2, align_regions_to_corners=0)
    boxes, batch = rois[:, 1:], np.zeros(1, np.int64)
    assert align(x, boxes, batch).shape == (1, 2, 2, 2)
    for bad, field in (((x, boxes, batch.astype(np.float32)), "batch_indices element type"),
                       ((x, boxes, np.zeros(2, np.int64)), "batch_indices length"),
                       ((x[0], boxes, batch), "X rank")):
        with pytest.raises(KernelError, match=field):
            align(*bad)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_run_parallel_runs_every_task_and_raises_the_first_failure(threads, monkeypatch):
    monkeypatch.setattr(_threads, "THREADS", threads)
    done = []
    _threads.run_parallel([lambda k=k: done.append(k) for k in range(10)])
    assert sorted(done) == list(range(10))

    def task(k: int) -> None:
        if k in (3, 4, 7):
            raise ValueError(f"task {k}")
    for _ in range(5):  # whatever the threads' timing
        with pytest.raises(ValueError, match="task 3"):
            _threads.run_parallel([lambda k=k: task(k) for k in range(10)])


def test_run_parallel_tasks_see_the_callers_errstate(monkeypatch):
    monkeypatch.setattr(_threads, "THREADS", 2)
    seen = []
    with np.errstate(invalid="ignore"):
        _threads.run_parallel([lambda: seen.append(np.geterr()["invalid"]) for _ in range(4)])
    assert seen == ["ignore"] * 4


@pytest.mark.parametrize("threads", [1, 2, 5])
@pytest.mark.parametrize(("shape", "dtype", "target"), [
    ((1, 256, 64, 64), np.float32, np.float32),  # above GRAIN: the compiled tiles
    ((3, 13, 37, 41), np.float16, np.float32),  # bands that cross images, float16 converted
    ((2, 9, 300, 7), np.float64, np.float64),  # channels not a multiple of the tile
    ((3, 20, 33, 37), np.float32, np.float32),  # 8 x 8 blocks and what is left of them
    ((1, 2, 3, 4), np.float32, np.float32),  # within GRAIN: one numpy call
])
def test_channels_last_is_an_exact_transpose(shape, dtype, target, threads):
    """Any layout, element type and thread count; strided input too."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal(shape).astype(dtype)
    strided = rng.standard_normal((*shape[:-1], 2 * shape[-1])).astype(dtype)[..., ::2]
    token = _threads.thread_limit.set(threads)
    try:
        for given in (X, strided):
            got = _threads.channels_last(given, np.dtype(target))
            assert got.flags.c_contiguous and got.dtype == target
            np.testing.assert_array_equal(got, given.transpose(0, 2, 3, 1).astype(target))
    finally:
        _threads.thread_limit.reset(token)


def test_channels_last_moves_float32_bits_unchanged():
    """The 8 x 8 blocks move bits: NaN payloads, signalling NaNs, subnormals and signed zeros
    come out as they went in, from a read-only map too."""
    bits = np.random.default_rng(4).integers(0, 1 << 32, (2, 24, 40, 41), dtype=np.uint32)
    bits[0, :, 0, :8] = [0x7F800001, 0xFFC00123, 0x80000000, 0x00000001, 0x7F800000,
                         0xFF800000, 0x7FBFFFFF, 0x807FFFFF]
    X = bits.view(np.float32)
    X.flags.writeable = False  # a session's read-only input: the other compiled signature
    got = _threads.channels_last(X, np.dtype(np.float32))
    np.testing.assert_array_equal(got.view(np.uint32), bits.transpose(0, 2, 3, 1))


def test_channels_last_converts_every_float16_exactly():
    """The compiled tiles read float16 as its bits: every one of the 65536 values comes out as
    numpy converts it (NaN as NaN, zeros with their sign)."""
    X = np.arange(1 << 16, dtype=np.uint16).view(np.float16).reshape(1, 64, 32, 32)
    got = _threads.channels_last(X, np.dtype(np.float32))
    want = X.transpose(0, 2, 3, 1).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("threads", [1, 3])
def test_channels_last_converts_float16_blocks_and_leftovers_bit_for_bit(threads):
    """float16 moves into float32 in 8 x 8 blocks too, each row converted in vector lanes: NaN
    payloads (signalling ones stay signalling), subnormals, infinities and signed zeros come
    out bit for bit as the table of every float16 gives them, in whole blocks and in the
    leftover pixels and channels (20 channels, 37 x 33 pixels), from a read-only map too."""
    from dml_onnx._kernels._halves import HALF_TABLE

    bits = np.random.default_rng(8).integers(0, 1 << 16, (2, 20, 37, 33), dtype=np.uint16)
    special = [0x7C01, 0xFC01, 0x7E00, 0x7DFF, 0x8000, 0x0000, 0x0001, 0x83FF, 0x7C00,
               0xFC00, 0x3C00, 0x03FF, 0x0400, 0xFBFF, 0x7FFF, 0xFFFF]
    bits[0, :16, 0, 0] = special  # one pixel's channels: rows of one block
    bits[1, 3, 0, :16] = special  # one channel's pixels: columns of two blocks
    X = bits.view(np.float16)
    X.flags.writeable = False
    token = _threads.thread_limit.set(threads)
    try:
        got = _threads.channels_last(X, np.dtype(np.float32))
    finally:
        _threads.thread_limit.reset(token)
    np.testing.assert_array_equal(got.view(np.uint32),
                                  HALF_TABLE[bits].transpose(0, 2, 3, 1).view(np.uint32))


def test_the_loops_read_and_write_every_float16_as_numpy_does():
    """What Fold and LpPooling read float16 bits with (``widened``: every one of the 65536
    values, signalling NaN payloads, subnormals and zeros with their sign) and write them with
    (``narrowed``: ties to even, subnormals, infinities, NaN payloads): numpy's conversions,
    bit for bit."""
    from numba import njit

    from dml_onnx._kernels._half_float_loops import narrowed, widened

    @njit
    def convert(source, target):
        for i in range(source.size):
            target[i] = narrowed(target, widened(target, source[i]))

    bits = np.arange(1 << 16, dtype=np.uint16)
    got = np.empty(bits.size, np.float32)
    convert(bits, got)
    _same_bits(got, bits.view(np.float16).astype(np.float32))
    floats = _float32_cases()
    written = np.empty(floats.size, np.uint16)
    convert(floats, written)
    with np.errstate(over="ignore", invalid="ignore"):
        _same_bits(written.view(np.float16), floats.astype(np.float16))
    integers = np.arange(1 << 16, dtype=np.uint16)  # uint16 into uint16: integers, as they are
    convert(bits, integers)
    np.testing.assert_array_equal(integers, bits)


_F16C_PROBE = """
import numpy as np
from numba import njit
from dml_onnx._kernels._half_float_loops import stored_sum, summand

@njit
def sums(source, target):
    for i in range(source.size):
        target[i] += summand(target, source[i])

@njit
def stored(source, target):
    for i in range(source.size):
        target[i] = stored_sum(target, source[i])

got = np.zeros(1 << 16, np.float32)
sums(np.arange(1 << 16, dtype=np.uint16), got)
halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
finite = np.unique(halves[np.isfinite(halves)].astype(np.float32))
words = np.concatenate([  # each float16, the midpoints (ties), their neighbours, random bits
    finite.view(np.uint32),
    ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32).view(np.uint32),
    np.random.default_rng(5).integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)])
words = np.concatenate([words - 1, words, words + 1])
values = words.view(np.float32)
values = np.where(np.isnan(values), (words | (1 << 22)).view(np.float32), values)  # quiet
written = np.empty(values.size, np.uint16)
stored(values, written)
with np.errstate(over="ignore"):
    want = values.astype(np.float16).view(np.uint16)
code = "".join(sums.inspect_asm().values()) + "".join(stored.inspect_asm().values())
print("vcvtph2ps" in code, "vcvtps2ph" in code, got.tobytes().hex(),
      bool(np.array_equal(written, want)))
"""


@pytest.mark.parametrize("f16c", [True, False])
def test_float16_sums_use_f16c_only_where_the_compiled_code_may(f16c, tmp_path):
    """``summand`` and ``stored_sum`` (what Fold and RoiAlignGrad read and write float16 bits
    with) convert with the F16C instructions where numba's CPU features include them, and by
    integer arithmetic where they do not (LLVM would otherwise call a library function that
    numba's JIT does not find). Either way every one of the 65536 values adds as numpy adds it
    (NaN payloads and signs included), and sums (every float16, the ties between neighbours,
    a step to either side, random bits, NaNs quiet as arithmetic leaves them) round as numpy
    rounds them. A fresh interpreter for each, with its own numba cache."""
    import os
    import subprocess

    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    features = llvm.get_host_cpu_features()
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    if features.get("f16c"):  # else this CPU lacks it: both runs fall back
        features["f16c"] = f16c
        env["NUMBA_CPU_FEATURES"] = features.flatten()
    result = subprocess.run([sys.executable, "-c", _F16C_PROBE], env=env, capture_output=True,
                            text=True, timeout=300, check=True)
    read_by_f16c, written_by_f16c, sums, rounded = result.stdout.split()
    used = str(f16c and bool(features.get("f16c")))
    assert (read_by_f16c, written_by_f16c, rounded) == (used, used, "True")
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    _same_bits(np.frombuffer(bytes.fromhex(sums), np.float32), np.zeros_like(every) + every)


def _float32_cases() -> np.ndarray:
    """float32 values around every float16: each finite float16, the midpoints between
    neighbours (ties to even) and one float32 step to either side of both, then random bits
    (every exponent: subnormals, overflow to infinity, NaN payloads) and the edge values."""
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    finite = np.unique(halves[np.isfinite(halves)].astype(np.float32))
    midpoints = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)
    bits = np.concatenate([v.view(np.uint32) for v in (finite, midpoints)])
    rng = np.random.default_rng(5)
    return np.concatenate([
        (bits - 1).view(np.float32), bits.view(np.float32), (bits + 1).view(np.float32),
        rng.integers(0, 1 << 32, 1 << 21, dtype=np.uint64).astype(np.uint32).view(np.float32),
        np.array([0x7F800001, 0x7FC00000, 0xFFC00001, 0x7FFFFFFF, 0x7F802000, 0x7F801FFF],
                 np.uint32).view(np.float32),
        np.array([np.inf, -np.inf, -0.0, 65504, 65519.996, 65520, 65536, 3.4e38, 1e-45,
                  2.9802322e-08, 5.9604645e-08, 6.1035156e-05], np.float32)])


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    bits = {2: np.uint16, 4: np.uint32}[want.itemsize]
    np.testing.assert_array_equal(got.view(bits), want.view(bits))


@pytest.mark.parametrize("threads", [1, 3])
def test_float16_conversions_round_as_numpy_does_bit_for_bit(threads):
    """converted() and convert_into() take float16 to float32 (every one of the 65536 values)
    and float32 to float16 (ties to even, subnormals, infinities, NaN payloads) by compiled
    loops on the bits: the same bits as numpy's astype, on one thread and on several."""
    token = _threads.thread_limit.set(threads)
    try:
        halves = np.tile(np.arange(1 << 16, dtype=np.uint16), 3).view(np.float16)
        floats = _float32_cases()
        with np.errstate(over="ignore", invalid="ignore"):
            cases = [(halves, np.float32, halves.astype(np.float32)),
                     (floats, np.float16, floats.astype(np.float16))]
        for source, dtype, want in cases:
            _same_bits(_threads.converted(source, np.dtype(dtype)), want)
            into = np.empty(source.shape, dtype)
            _threads.convert_into(source, into)
            _same_bits(into, want)
            strided = np.empty((source.size, 2), dtype)[:, 0]  # not contiguous: numpy's way
            _threads.convert_into(source, strided)
            _same_bits(np.ascontiguousarray(strided), want)
    finally:
        _threads.thread_limit.reset(token)
