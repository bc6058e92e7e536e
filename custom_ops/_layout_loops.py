"""The compiled loops of :func:`custom_ops._threads.channels_last` and of the float16 conversions
of :func:`custom_ops._threads.converted`, by :data:`custom_ops._jit.jit` (numba has no float16
on the CPU: float16 values travel as their uint16 bits, see :mod:`custom_ops._half_float_loops`)."""

from __future__ import annotations

from numba import prange, types
from numba.extending import overload

from custom_ops._half_float_loops import float_to_half, half_to_float
from custom_ops._halves import HALF_TABLE
from custom_ops._jit import jit, parallel_jit

PIXELS, CHANNELS = 256, 8
"""The tile of one pass: a run of pixels of eight channels (32 bytes of each output row in
float32), which reads and writes whole cache lines."""


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
    pixels by :data:`CHANNELS` channels at a time."""
    channels, pixels = planes.shape[1], planes.shape[2]
    row = start
    while row < stop:
        image = row // pixels
        first = row - image * pixels
        last = min(pixels, first + stop - row)
        for p0 in range(first, last, PIXELS):
            p1 = min(p0 + PIXELS, last)
            for c0 in range(0, channels, CHANNELS):
                c1 = min(c0 + CHANNELS, channels)
                for p in range(p0, p1):
                    for c in range(c0, c1):
                        out[image, p, c] = _value(planes[image, c, p])
        row += last - first


@parallel_jit
def transpose_bands(cuts, planes, out):
    """:func:`transpose_rows` on the bands of rows ``cuts[g]:cuts[g + 1]``, one thread each."""
    for g in prange(cuts.size - 1):
        transpose_rows(planes, out, cuts[g], cuts[g + 1])


def _compile_every_signature() -> None:
    """Compile (or load from the cache) every signature :func:`channels_last` and
    :func:`converted` call, while the module loads on :func:`~custom_ops._threads.compiled`'s
    helper thread: a signal that lands in a compilation on the calling thread breaks the
    dispatcher for the process ("no compiled object yet")."""
    for source, target in ((types.float32, types.float32), (types.uint16, types.float32),
                           (types.float64, types.float64)):
        out = types.Array(target, 3, "C")
        for readonly in (False, True):
            planes = types.Array(source, 3, "C", readonly=readonly)
            transpose_rows.compile((planes, out, types.int64, types.int64))
            transpose_bands.compile((types.Array(types.int64, 1, "C"), planes, out))
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
