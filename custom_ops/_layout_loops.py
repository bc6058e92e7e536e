"""The compiled loops of :func:`dml_onnx._kernels._threads.channels_last` and of the float16
conversions of :func:`dml_onnx._kernels._threads.converted`, by
:data:`dml_onnx._kernels._jit.jit` (numba has no float16 on the CPU: float16 values travel as
their uint16 bits, see :mod:`dml_onnx._kernels._half_float_loops`)."""

from __future__ import annotations

from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic, overload

from ._half_float_loops import float_to_half, half_to_float, half_to_float_ir
from ._halves import HALF_TABLE
from ._jit import jit, parallel_jit

PIXELS, CHANNELS = 256, 8
"""The tile of one pass: a run of pixels of eight channels (32 bytes of each output row in
float32), which reads and writes whole cache lines; into float32 it moves in blocks of 8 x 8
(:func:`_move_blocks`)."""


@jit
def halves_from_floats(bits, out, start, stop):
    """``out[i]`` = the float16 bits of the float32 whose bits are ``bits[i]``
    (:func:`float_to_half`), for ``i`` in ``start:stop``."""
    source, target = bits[start:stop], out[start:stop]
    for i in range(source.size):  # indices from 0: no wraparound check, so it vectorises
        target[i] = float_to_half(source[i])


@jit
def floats_from_halves(bits, out, start, stop):
    """``out[i]`` = the float32 value of the float16 whose bits are ``bits[i]``
    (:func:`half_to_float`), for ``i`` in ``start:stop``."""
    source, target = bits[start:stop], out[start:stop]
    for i in range(source.size):  # indices from 0: no wraparound check, so it vectorises
        target[i] = half_to_float(source[i])


@parallel_jit
def halves_from_floats_bands(cuts, bits, out):
    """:func:`halves_from_floats` on the runs ``cuts[g]:cuts[g + 1]``, one thread each."""
    for g in prange(cuts.size - 1):
        halves_from_floats(bits, out, cuts[g], cuts[g + 1])


@parallel_jit
def floats_from_halves_bands(cuts, bits, out):
    """:func:`floats_from_halves` on the runs ``cuts[g]:cuts[g + 1]``, one thread each."""
    for g in prange(cuts.size - 1):
        floats_from_halves(bits, out, cuts[g], cuts[g + 1])


def _value(x):
    """A value of ``planes`` as ``out`` takes it (compiled through :func:`_value_of`)."""
    return x


@overload(_value)
def _value_of(x):
    if isinstance(x, types.Integer) and x.bitwidth == 16 and not x.signed:
        return lambda x: HALF_TABLE[x]  # float16 bits
    return lambda x: x


@jit
def transpose_rows(planes, out, start, stop):
    """``out[n, p, :] = planes[n, :, p]`` for the flat rows ``n * P + p`` in ``start:stop``
    (``planes [N, C, P]``, ``out [N, P, C]``, converted to ``out``'s element type; uint16
    ``planes`` are float16 bits, read through :data:`HALF_TABLE`), one tile of :data:`PIXELS`
    pixels by :data:`CHANNELS` channels at a time: 8 x 8 blocks into float32 from float32 or
    float16 (:func:`_move_blocks`), value by value otherwise."""
    channels, pixels = planes.shape[1], planes.shape[2]
    source, target = planes.reshape(-1), out.reshape(-1)
    row = start
    while row < stop:
        image = row // pixels
        first = row - image * pixels
        last = min(pixels, first + stop - row)
        for p0 in range(first, last, PIXELS):
            p1 = min(p0 + PIXELS, last)
            for c0 in range(0, channels, CHANNELS):
                c1 = min(c0 + CHANNELS, channels)
                p = p0
                if c1 - c0 == CHANNELS and _blockwise(planes, out):
                    read = (image * channels + c0) * pixels  # planes[image, c0, 0]
                    written = image * pixels * channels + c0  # out[image, 0, c0]
                    p += _move_blocks(source, read + p0, pixels, target,
                                      written + p0 * channels, channels, p1 - p0)
                    for q in range(p, p1):  # flat (3-D indices here halved the blocks' speed)
                        for c in range(CHANNELS):
                            target[written + q * channels + c] = _value(source[read + c * pixels
                                                                               + q])
                else:  # 3-D indices (flat ones made these tiles a quarter slower)
                    for q in range(p, p1):
                        for c in range(c0, c1):
                            out[image, q, c] = _value(planes[image, c, q])
        row += last - first


def _blockwise(planes, out):
    """Whether :func:`transpose_rows` moves ``planes`` to ``out`` in 8 x 8 blocks: both of
    one 32-bit element type, or float16 bits into float32 (a constant of the compiled
    types)."""


@overload(_blockwise)
def _blockwise_of(planes, out):
    blocks = (planes.dtype == out.dtype and planes.dtype.bitwidth == 32
              or planes.dtype == types.uint16 and out.dtype == types.float32)
    return lambda planes, out: blocks


@jit
def _move_blocks(source, start, step, target, first, stride, count):
    """Move the first ``count // 8 * 8`` of ``count`` pixels of 8 channels of 32-bit values
    (or float16 bits into float32), 8 x 8 at a time: ``target[first + p * stride + c] =
    source[start + c * step + p]``; return how many pixels moved."""
    moved = 0
    while moved + 8 <= count:
        _transpose_8x8(source, start + moved, step, target, first + moved * stride, stride)
        moved += 8
    return moved


_UNPACK = ([0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15])
_PAIRS = ([0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15])
_HALVES = ([0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15])
"""The shuffles of an 8 x 8 transpose of 32-bit values in three rounds (AVX's unpack, shuffle
and 128-bit permute): element ``j`` of row ``k`` ends as element ``k`` of row ``j``."""


@intrinsic
def _transpose_8x8(typingctx, source, start, step, target, first, stride):
    """``target[first + j * stride + k] = source[start + k * step + j]`` for ``j, k < 8``:
    eight vector loads, 24 shuffles, eight vector stores (32-bit values: bits moved, never
    converted; float16 bits: each loaded row converted to float32 exactly, as
    :func:`~dml_onnx._kernels._half_float_loops.half_to_float` converts a value)."""
    signature = types.void(source, start, step, target, first, stride)

    def codegen(context, builder, sig, args):
        source_array, start, step, target_array, first, stride = args
        source_data = context.make_array(sig.args[0])(context, builder, source_array).data
        target_data = context.make_array(sig.args[3])(context, builder, target_array).data
        halves = sig.args[0].dtype == types.uint16

        def at(data, base, pitch, k, dtype):
            offset = builder.add(base, builder.mul(pitch, ir.Constant(base.type, k)))
            row_type = ir.VectorType(context.get_value_type(dtype), 8)
            return builder.bitcast(builder.gep(data, [offset]), row_type.as_pointer())

        def shuffle(a, b, mask):
            return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(ir.IntType(32), 8),
                                                            mask))
        rows = []
        for k in range(8):
            rows.append(builder.load(at(source_data, start, step, k, sig.args[0].dtype)))
            rows[-1].align = 2 if halves else 4
            if halves:
                rows[-1] = half_to_float_ir(builder, rows[-1], lanes=8)
        rows = [shuffle(rows[k], rows[k + 1], mask) for k in range(0, 8, 2) for mask in _UNPACK]
        rows = [shuffle(rows[k], rows[k + 2], mask) for k in (0, 1, 4, 5) for mask in _PAIRS]
        rows = [shuffle(rows[k], rows[k + 4], mask) for mask in _HALVES for k in range(4)]
        for j, row in enumerate(rows):
            builder.store(row, at(target_data, first, stride, j, sig.args[3].dtype)).align = 4
        return context.get_dummy_value()
    return signature, codegen


@jit
def transpose_runs(planes, out, runs, start, stop):
    """:func:`transpose_rows` on the rows ``start:stop`` of the runs' rows counted in order
    (``runs [K, 2]``: start and stop of each run of flat rows, ascending)."""
    seen = 0
    for k in range(runs.shape[0]):
        if seen >= stop:
            break
        length = runs[k, 1] - runs[k, 0]
        first, last = max(start - seen, 0), min(stop - seen, length)
        if first < last:
            transpose_rows(planes, out, runs[k, 0] + first, runs[k, 0] + last)
        seen += length


@parallel_jit
def transpose_runs_bands(cuts, runs, planes, out):
    """:func:`transpose_runs` on the bands ``cuts[g]:cuts[g + 1]`` of the runs' rows, one
    thread each."""
    for g in prange(cuts.size - 1):
        transpose_runs(planes, out, runs, cuts[g], cuts[g + 1])


def _compile_every_signature() -> None:
    """Compile (or load from the cache) every signature :func:`channels_last` and
    :func:`converted` call, while the module loads on :func:`~dml_onnx._kernels._threads.compiled`'s
    helper thread: a signal that lands in a compilation on the calling thread breaks the
    dispatcher for the process ("no compiled object yet")."""
    for source, target in ((types.float32, types.float32), (types.uint16, types.float32),
                           (types.float64, types.float64)):
        out = types.Array(target, 3, "C")
        for readonly in (False, True):
            planes = types.Array(source, 3, "C", readonly=readonly)
            runs = types.Array(types.int64, 2, "C")
            transpose_runs.compile((planes, out, runs, types.int64, types.int64))
            transpose_runs_bands.compile((types.Array(types.int64, 1, "C"), runs, planes, out))
    cuts, floats = types.Array(types.int64, 1, "C"), types.Array(types.float32, 1, "C")
    for readonly in (False, True):
        halves, words = (types.Array(types.uint16, 1, "C", readonly=readonly),
                         types.Array(types.uint32, 1, "C", readonly=readonly))
        floats_from_halves.compile((halves, floats, types.int64, types.int64))
        floats_from_halves_bands.compile((cuts, halves, floats))
        halves_from_floats.compile((words, types.Array(types.uint16, 1, "C"), types.int64,
                                    types.int64))
        halves_from_floats_bands.compile((cuts, words, types.Array(types.uint16, 1, "C")))


_compile_every_signature()
