"""The compiled loop of :func:`custom_ops._common.channels_last`, by
:data:`custom_ops._jit.jit`."""

from __future__ import annotations

from numba import prange

from custom_ops._jit import jit, parallel_jit

PIXELS, CHANNELS = 256, 8
"""The tile of one pass: a run of pixels of eight channels (32 bytes of each output row in
float32), which reads and writes whole cache lines."""


@jit
def transpose_rows(planes, out, start, stop):
    """``out[n, p, :] = planes[n, :, p]`` for the flat rows ``n * P + p`` in ``start:stop``
    (``planes [N, C, P]``, ``out [N, P, C]``, converted to ``out``'s element type), one tile
    of :data:`PIXELS` pixels by :data:`CHANNELS` channels at a time."""
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
                        out[image, p, c] = planes[image, c, p]
        row += last - first


@parallel_jit
def transpose_bands(cuts, planes, out):
    """:func:`transpose_rows` on the bands of rows ``cuts[g]:cuts[g + 1]``, one thread each."""
    for g in prange(cuts.size - 1):
        transpose_rows(planes, out, cuts[g], cuts[g + 1])
