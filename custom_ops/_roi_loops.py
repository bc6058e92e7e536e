"""The compiled loops of RoiAlign1 and RoiAlignGrad (specification sections 2, 3).

Compiled by :data:`dml_onnx._kernels._jit.jit`. Conventions:

- ``Xt``, ``dXt``: images channels-last, ``[N, H, W, C]``, in the compute type ``ct`` (float32
  for float16 and float32, float64 for double); ``Y``, ``dY``: ``[R, C, OH, OW]`` in ``ct``,
  or ``Y`` for a float16 image as float16 bits (uint16), each value rounded once as it is
  written (:func:`~dml_onnx._kernels._half_float_loops.narrowed`).
  :func:`forward_planar` reads ``X [N, C, H, W]`` where it lies: in ``ct``, or float16 as its
  uint16 bits (:func:`_value`).
- ``first``, ``size``: ``[2, R]`` (y, then x) scaled first coordinates and sizes in ``ct``,
  ``size = fma(x2, scale, -first)`` rounded once, as DirectML computes it;
  ``n``: ``[2, R]`` samples per output along each axis (``dml_onnx._kernels._roi_grid.Plan``).
- ``settings``: ``[output_pixel_offset, input_pixel_offset, out_of_bounds, lowest(T)]`` in
  ``ct`` (``dml_onnx._kernels._roi_grid.loop_settings``).

Along an axis of ``L`` pixels with ``S = O * n`` samples, sample ``s`` (of output ``s // n``) is
at ``X(s) = first + t(s) * size - input_pixel_offset`` with ``t(s) = (s - output_pixel_offset)
/ S`` (``/ (S - 1)`` when aligning corners, 1/2 when ``S == 1``), computed in ``ct`` operation by
operation as the specification writes it. It is out of bounds outside ``(-1, L)`` (outside
``[0, L - 1]`` when aligning corners), as DirectML measures; otherwise it is clamped into
``[0, L - 1]`` and read from its corners ``floor`` and ``min(floor + 1, L - 1)`` by two nested
linear interpolations, x first (a weight 0 on an infinite pixel gives NaN), or at
``floor(X + 0.5)``. An output reduces its ``n_y * n_x`` samples in row-major order: a sum
divided by the count, or the maximum from ``lowest(T)`` (NaN never wins).
"""

from __future__ import annotations

import numpy as np
from numba import prange, types
from numba.extending import overload

from ._half_float_loops import narrowed, stored_sum, summand
from ._halves import HALF_TABLE
from ._jit import inline_jit, jit, parallel_jit


def _value(x):
    """A value of an image as the loops compute with it (compiled through
    :func:`_value_of`): uint16 is float16's bits, read as float32 through
    :data:`~dml_onnx._kernels._halves.HALF_TABLE` (exact: one load where the branch-free
    :func:`~dml_onnx._kernels._half_float_loops.half_to_float`, inlined here, let LLVM order the
    operands of a NaN's arithmetic otherwise, which changed the sign of NaN outputs); any
    other value is itself."""
    return x


@overload(_value)
def _value_of(x):
    if x == types.uint16:
        return lambda x: HALF_TABLE[x]  # float16 bits
    return lambda x: x


@jit
def plan_regions(boxes, batch, images, scales, outputs, minimum, maximum, limit, first, size,
                 n):
    """Check regions ``boxes [R, 4]`` (``ct``) and ``batch [R]`` against ``images`` images,
    and fill ``first``, ``size`` and ``n`` (``scales``: ``[spatial_scale_y, spatial_scale_x]``,
    rounded to ``ct`` here; ``outputs``: ``(OH, OW)``). Returns ``(problem, r, axis,
    samples)``: problem 0 and the number of samples (a float) when every region is fine,
    else the first problem found in this order: 1 a batch index outside ``[0, images)``, 2 a
    corner that is not finite, 3 a scaled size that is not finite, 4 more than ``limit``
    samples along an axis (y's regions first)."""
    ct = first.dtype.type
    regions = boxes.shape[0]
    for r in range(regions):
        if batch[r] < 0 or batch[r] >= images:
            return 1, r, 0, 0.0
    for r in range(regions):
        for k in range(4):
            if not np.isfinite(boxes[r, k]):
                return 2, r, 0, 0.0
    for r in range(regions):
        for axis in range(2):
            scale = ct(scales[axis])
            start = boxes[r, 1 - axis] * scale
            first[axis, r] = start
            plain = boxes[r, 3 - axis] * scale - start
            if not np.isfinite(plain):
                return 3, r, 0, 0.0
            fused = ct(fused_difference(boxes[r, 3 - axis], scale, start))
            size[axis, r] = fused if np.isfinite(fused) else plain
    for axis in range(2):
        for r in range(regions):
            quotient = np.float64(np.ceil(abs(size[axis, r]) / ct(outputs[axis])))
            count = min(max(quotient, minimum), maximum)
            if count * outputs[axis] > limit:
                return 4, r, axis, count * outputs[axis]
            n[axis, r] = np.int64(count)
    samples = 0.0
    for r in range(regions):
        samples += np.float64(n[0, r] * outputs[0]) * np.float64(n[1, r] * outputs[1])
    return 0, 0, 0, samples


@jit
def fused_difference(a, b, c):
    """``a * b - c`` rounded once (as a fused multiply-add), in float64: exact products of
    float32 values, and Dekker's error-free product for float64 ones."""
    a, b, c = np.float64(a), np.float64(b), np.float64(c)
    product = a * b
    split = 134217729.0  # 2 ** 27 + 1
    a_hi = a * split - (a * split - a)
    b_hi = b * split - (b * split - b)
    a_lo, b_lo = a - a_hi, b - b_hi
    error = ((a_hi * b_hi - product) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    difference = product - c
    shift = difference - product
    rest = (product - (difference - shift)) + (-c - shift)
    return difference + (rest + error)


@jit
def small_forward(Xt, boxes, batch, scales, minimum, maximum, limit, serial_work, settings,
                  align, linear, average, Y):
    """:func:`forward` on every region in one call with its plan (a small call's one compiled
    call), where :func:`plan_regions` finds every region fine and the work (samples times
    channels) is at most ``serial_work``. Returns whether ``Y`` is done; when not, the
    caller plans the call (and raises the plan's problem)."""
    regions = boxes.shape[0]
    first = np.empty((2, regions), settings.dtype)
    size = np.empty((2, regions), settings.dtype)
    n = np.empty((2, regions), np.int64)
    problem, _, _, amount = plan_regions(boxes, batch, Xt.shape[0], scales, Y.shape[2:],
                                         minimum, maximum, limit, first, size, n)
    if problem or amount * Xt.shape[3] > serial_work:
        return False
    forward(Xt, batch, first, size, n, np.arange(regions), settings, align, linear, average, Y)
    return True


@jit
def axis_samples(first, size, n, outputs, length, settings, align, linear):
    """The ``outputs * n`` samples of one region along one axis of ``length`` pixels:
    ``(lo, hi, w_lo, w_hi, inside, unclamped, t)``, the two corners (equal for
    nearest_neighbor) and their weights (0 when out of bounds), whether the sample is in bounds
    and read where it lies (not clamped), and ``t(s)``."""
    ct = settings.dtype.type
    total = outputs * n
    lo = np.empty(total, np.intp)
    hi = np.empty(total, np.intp)
    w_lo = np.empty(total, settings.dtype)
    w_hi = np.empty(total, settings.dtype)
    inside = np.empty(total, np.bool_)
    unclamped = np.empty(total, np.bool_)
    t = np.empty(total, settings.dtype)
    zero, one, half = ct(0), ct(1), ct(0.5)
    top, end = ct(length - 1), ct(length)
    for s in range(total):
        ts, coordinate = sample_position(s, total, first, size, settings, align)
        if align:
            within = coordinate >= zero and coordinate <= top
        else:
            within = coordinate > -one and coordinate < end
        clamped = min(max(coordinate, zero), top)
        if linear:
            whole = np.floor(clamped)
            frac = clamped - whole
            lo[s] = int(whole)
            hi[s] = min(lo[s] + 1, length - 1)
            w_lo[s] = one - frac if within else zero
            w_hi[s] = frac if within else zero
        else:
            lo[s] = hi[s] = int(min(np.floor(clamped + half), top))
            w_lo[s] = one if within else zero
            w_hi[s] = zero
        inside[s] = within
        unclamped[s] = within and coordinate == clamped
        t[s] = ts
    return lo, hi, w_lo, w_hi, inside, unclamped, t


@jit
def sample_position(s, total, first, size, settings, align):
    """Sample ``s`` of the ``total`` along an axis: ``(t(s), X(s))`` in ``ct``."""
    ct = settings.dtype.type
    if not align:
        ts = (ct(s) - settings[0]) / ct(total)
    elif total > 1:
        ts = (ct(s) - settings[0]) / ct(total - 1)
    else:
        ts = ct(0.5)
    return ts, first + ts * size - settings[1]


@jit
def read_span(first, size, n, outputs, length, settings, align):
    """``(a, b)``: every pixel that a region's samples along an axis of ``length`` pixels
    read lies in ``a..b`` (both corners of both interpolations, or the nearest pixel). ``X(s)``
    is monotonic in ``s`` (every operation of :func:`sample_position` rounds monotonically),
    so the first and last samples bound the others; both are clamped into the image as the
    reads are (a sample out of bounds reads nothing: the span may hold more than is read)."""
    ct = settings.dtype.type
    total = outputs * n
    _, start = sample_position(0, total, first, size, settings, align)
    _, end = sample_position(total - 1, total, first, size, settings, align)
    top = ct(length - 1)
    low = min(max(min(start, end), ct(0)), top)
    high = min(max(max(start, end), ct(0)), top)
    return int(np.floor(low)), min(int(np.floor(high)) + 1, length - 1)


@jit
def read_runs(images, height, width, batch, first, size, n, outputs, settings, align, gap):
    """The pixels that the regions' samples read, in runs of whole blocks of 8 flat pixel
    indices ``(b * H + y) * W + x``: ``runs [K, 2]`` (start, stop; the last may stop at the
    image's end), ascending, where two runs fewer than ``gap`` blocks apart are one; and the
    pixels the runs hold. Each region marks the rectangle of its :func:`read_span` along y
    and x (the corners of a difference array, then its prefix sums: O(R + N H W))."""
    marks = np.zeros((images, height + 1, width + 1), np.int64)  # counts up to R
    for r in range(batch.size):
        ya, yb = read_span(first[0, r], size[0, r], n[0, r], outputs[0], height, settings,
                           align)
        xa, xb = read_span(first[1, r], size[1, r], n[1, r], outputs[1], width, settings,
                           align)
        b = batch[r]
        marks[b, ya, xa] += 1
        marks[b, ya, xb + 1] -= 1
        marks[b, yb + 1, xa] -= 1
        marks[b, yb + 1, xb + 1] += 1
    pixels = images * height * width
    read = np.zeros((pixels + 7) // 8, np.bool_)  # per block of 8 pixels
    for b in range(images):
        for y in range(height):
            row = 0
            for x in range(width):
                row += marks[b, y, x]
                marks[b, y, x] = row + (marks[b, y - 1, x] if y else 0)
                if marks[b, y, x] > 0:
                    read[((b * height + y) * width + x) // 8] = True
    runs = np.empty((_block_runs(read, gap, np.empty((0, 2), np.int64)), 2), np.int64)
    _block_runs(read, gap, runs)
    held = 0
    for k in range(runs.shape[0]):
        runs[k, 0], runs[k, 1] = 8 * runs[k, 0], min(8 * runs[k, 1], pixels)
        held += runs[k, 1] - runs[k, 0]
    return runs, held


@jit
def _block_runs(read, gap, runs):
    """The runs of True in ``read``, those fewer than ``gap`` apart joined: how many; each
    written into ``runs`` (start, stop) where it has the rows."""
    count, start, last = 0, -1, -1
    for f in range(read.size):
        if not read[f]:
            continue
        if start >= 0 and f - last > gap:
            if runs.shape[0]:
                runs[count, 0], runs[count, 1] = start, last + 1
            count += 1
            start = -1
        if start < 0:
            start = f
        last = f
    if start >= 0:
        if runs.shape[0]:
            runs[count, 0], runs[count, 1] = start, last + 1
        count += 1
    return count


@jit
def read_sample(Xt, b, ys, sy, xs, sx, linear, out_of_bounds, values):
    """``values[c]``: sample ``(sy, sx)`` of image ``b`` in every channel."""
    if not (ys[4][sy] and xs[4][sx]):
        values[:] = out_of_bounds
        return
    y0, y1, x0, x1 = ys[0][sy], ys[1][sy], xs[0][sx], xs[1][sx]
    if not linear:
        values[:] = Xt[b, y0, x0]
        return
    ly, lx = ys[3][sy], xs[3][sx]
    p00, p01, p10, p11 = Xt[b, y0, x0], Xt[b, y0, x1], Xt[b, y1, x0], Xt[b, y1, x1]
    for c in range(values.size):
        top = p00[c] + (p01[c] - p00[c]) * lx
        bottom = p10[c] + (p11[c] - p10[c]) * lx
        values[c] = top + (bottom - top) * ly


@jit
def forward(Xt, batch, first, size, n, regions, settings, align, linear, average, Y):
    """``Y[r]`` for every region ``r`` in ``regions``. Each output reduces its samples into a
    row of ``sums [OH * OW, C]`` (channels contiguous: stores in Y's layout would land each
    channel ``OH * OW`` values apart), moved into ``Y[r]`` once the region is done. An output of
    2 x 2 linear samples, all in bounds, averaged (torchvision's detectors), is computed in
    one pass over the channels (:func:`_mean_of_four`); any other sample in a pass of its own
    (:func:`_reduce_sample`)."""
    ct = settings.dtype.type
    _, height, width, channels = Xt.shape
    _, _, oh, ow = Y.shape
    sums = np.empty((oh * ow, channels), settings.dtype)
    for r in regions:
        b = batch[r]
        ny, nx = n[0, r], n[1, r]
        ys = axis_samples(first[0, r], size[0, r], ny, oh, height, settings, align, linear)
        xs = axis_samples(first[1, r], size[1, r], nx, ow, width, settings, align, linear)
        count = ct(ny * nx)
        fours = linear and average and ny == 2 and nx == 2
        for oy in range(oh):
            for ox in range(ow):
                acc = sums[oy * ow + ox]
                sy0, sx0 = oy * ny, ox * nx  # the output's first sample
                if fours and ys[4][sy0] and ys[4][sy0 + 1] and xs[4][sx0] and xs[4][sx0 + 1]:
                    _mean_of_four(Xt[b], ys, sy0, xs, sx0, acc)
                    continue
                acc[:] = ct(-0.0) if average else settings[3]
                for sy in range(oy * ny, oy * ny + ny):
                    for sx in range(ox * nx, ox * nx + nx):
                        _reduce_sample(Xt[b], ys, sy, xs, sx, settings[2], linear, average,
                                       acc)
                if average:
                    for c in range(channels):
                        acc[c] = acc[c] / count
        into = Y[r].reshape(channels, oh * ow)
        for c in range(channels):
            for k in range(oh * ow):
                into[c, k] = narrowed(Y, sums[k, c])


@inline_jit
def _reduce_sample(image, ys, sy, xs, sx, out_of_bounds, linear, average, acc):
    """``acc[c]``, for every channel, reduced with sample ``(sy, sx)`` of ``image [H, W,
    C]``: added (``average``) or its maximum taken (NaN never wins); ``out_of_bounds`` where
    the sample is."""
    y0, y1, ly = ys[0][sy], ys[1][sy], ys[3][sy]
    x0, x1, lx = xs[0][sx], xs[1][sx], xs[3][sx]
    if not (ys[4][sy] and xs[4][sx]):
        for c in range(acc.size):
            v = out_of_bounds
            acc[c] = acc[c] + v if average else (v if v > acc[c] else acc[c])
    elif linear and average:
        for c in range(acc.size):
            top = image[y0, x0, c] + (image[y0, x1, c] - image[y0, x0, c]) * lx
            bottom = image[y1, x0, c] + (image[y1, x1, c] - image[y1, x0, c]) * lx
            acc[c] += top + (bottom - top) * ly
    elif linear:
        for c in range(acc.size):
            top = image[y0, x0, c] + (image[y0, x1, c] - image[y0, x0, c]) * lx
            bottom = image[y1, x0, c] + (image[y1, x1, c] - image[y1, x0, c]) * lx
            v = top + (bottom - top) * ly
            if v > acc[c]:  # False for NaN
                acc[c] = v
    elif average:
        for c in range(acc.size):
            acc[c] += image[y0, x0, c]
    else:
        for c in range(acc.size):
            v = image[y0, x0, c]
            if v > acc[c]:
                acc[c] = v


@inline_jit
def _mean_of_four(image, ys, sy, xs, sx, out):
    """``out[c]``: the mean of the 2 x 2 linear samples ``(sy, sy + 1) x (sx, sx + 1)`` of
    ``image [H, W, C]``, all in bounds, in every channel: the operations of
    :func:`_reduce_sample` from ``-0.0``, in its order, without a pass per sample."""
    a0, a1, la = image[ys[0][sy]], image[ys[1][sy]], ys[3][sy]
    b0, b1, lb = image[ys[0][sy + 1]], image[ys[1][sy + 1]], ys[3][sy + 1]
    p0, p1, lp = xs[0][sx], xs[1][sx], xs[3][sx]
    q0, q1, lq = xs[0][sx + 1], xs[1][sx + 1], xs[3][sx + 1]
    four = out.dtype.type(4)
    for c in range(out.size):
        top = a0[p0, c] + (a0[p1, c] - a0[p0, c]) * lp
        bottom = a1[p0, c] + (a1[p1, c] - a1[p0, c]) * lp
        total = out.dtype.type(-0.0) + (top + (bottom - top) * la)
        top = a0[q0, c] + (a0[q1, c] - a0[q0, c]) * lq
        bottom = a1[q0, c] + (a1[q1, c] - a1[q0, c]) * lq
        total = _added(total, top + (bottom - top) * la)
        top = b0[p0, c] + (b0[p1, c] - b0[p0, c]) * lp
        bottom = b1[p0, c] + (b1[p1, c] - b1[p0, c]) * lp
        total = _added(total, top + (bottom - top) * lb)
        top = b0[q0, c] + (b0[q1, c] - b0[q0, c]) * lq
        bottom = b1[q0, c] + (b1[q1, c] - b1[q0, c]) * lq
        out[c] = _added(total, top + (bottom - top) * lb) / four


@inline_jit
def _added(total, sample):
    """``total + sample``, and where both are NaN, ``sample``'s NaN: the bits the per-sample
    passes give (compiled, their sums keep the later sample's NaN), so that an output's NaN
    does not depend on the pass that computed it."""
    return sample if sample != sample else total + sample


@jit
def forward_planar(X, batch, first, size, n, regions, settings, align, linear, average, Y):
    """:func:`forward` reading the image ``X [N, C, H, W]`` where it lies, for calls whose
    samples are few against the image (no channels-last copy, nor a float32 copy of a float16
    image): per sample, its corners' offsets once, then every channel at a stride of one plane.
    ``X`` is in ``ct``, or float16 as its uint16 bits, each value read as float32 by
    :func:`_value` (exact). The same operations in the same order per channel: the same bits
    as :func:`forward` on ``X`` in ``ct``."""
    ct = settings.dtype.type
    _, channels, height, width = X.shape
    _, _, oh, ow = Y.shape
    flat = X.reshape(X.shape[0], channels, height * width)
    acc = np.empty(channels, settings.dtype)
    out_of_bounds, lowest = settings[2], settings[3]
    for r in regions:
        b = batch[r]
        image = flat[b]
        ny, nx = n[0, r], n[1, r]
        y_lo, y_hi, _, y_whi, y_in, _, _ = axis_samples(first[0, r], size[0, r], ny, oh,
                                                        height, settings, align, linear)
        x_lo, x_hi, _, x_whi, x_in, _, _ = axis_samples(first[1, r], size[1, r], nx, ow,
                                                        width, settings, align, linear)
        count = ct(ny * nx)
        for oy in range(oh):
            for ox in range(ow):
                acc[:] = ct(-0.0) if average else lowest
                for sy in range(oy * ny, oy * ny + ny):
                    top_row, bottom_row, ly = y_lo[sy] * width, y_hi[sy] * width, y_whi[sy]
                    for sx in range(ox * nx, ox * nx + nx):
                        x0, x1, lx = x_lo[sx], x_hi[sx], x_whi[sx]
                        if not (y_in[sy] and x_in[sx]):
                            for c in range(channels):
                                v = out_of_bounds
                                acc[c] = acc[c] + v if average else (v if v > acc[c]
                                                                     else acc[c])
                            continue
                        o00, o01 = top_row + x0, top_row + x1
                        o10, o11 = bottom_row + x0, bottom_row + x1
                        if linear and average:
                            for c in range(channels):
                                p00, p01 = _value(image[c, o00]), _value(image[c, o01])
                                p10, p11 = _value(image[c, o10]), _value(image[c, o11])
                                top = p00 + (p01 - p00) * lx
                                bottom = p10 + (p11 - p10) * lx
                                acc[c] += top + (bottom - top) * ly
                        elif linear:
                            for c in range(channels):
                                p00, p01 = _value(image[c, o00]), _value(image[c, o01])
                                p10, p11 = _value(image[c, o10]), _value(image[c, o11])
                                top = p00 + (p01 - p00) * lx
                                bottom = p10 + (p11 - p10) * lx
                                v = top + (bottom - top) * ly
                                if v > acc[c]:  # False for NaN
                                    acc[c] = v
                        elif average:
                            for c in range(channels):
                                acc[c] += _value(image[c, o00])
                        else:
                            for c in range(channels):
                                v = _value(image[c, o00])
                                if v > acc[c]:
                                    acc[c] = v
                for c in range(channels):
                    value = acc[c] / count if average else acc[c]
                    Y[r, c, oy, ox] = narrowed(Y, value)


@parallel_jit
def forward_groups(planar, groups, X, batch, first, size, n, settings, align, linear, average,
                   Y):
    """:func:`forward` (:func:`forward_planar` where ``planar``) with the regions dealt to
    ``groups`` threads started here, ``g, g + groups, g + 2 groups, ...`` each."""
    count = Y.shape[0]
    for g in prange(groups):
        regions = np.arange(g, count, groups)
        if planar:
            forward_planar(X, batch, first, size, n, regions, settings, align, linear, average,
                           Y)
        else:
            forward(X, batch, first, size, n, regions, settings, align, linear, average, Y)


@jit
def region_gradients(Xt, dY, batch, first, size, n, regions, settings, align, linear, average,
                     scales, exact, winners, drois):
    """Per region ``r`` in ``regions``: with max reduction the first maximising sample of
    every output and channel into ``winners[r] [OH, OW, C]`` (when ``winners`` has regions):
    the first sample above the running maximum, which starts at ``lowest(T)`` (so NaN never
    wins, and -1 where no sample does); out-of-bounds samples take part reading
    ``settings[2]``. With ``drois`` rows, the ROI gradient into ``drois[r]`` (float64):

    - ``exact``: ``d sum(dY * Y) / d [x1, y1, x2, y2]`` with the sample counts held fixed,
      ``scales`` = ``[spatial_scale_y, spatial_scale_x]`` (linear interpolation only);
    - else DirectML's (:func:`directml_factors`), the same for both interpolation modes.
    """
    ct = settings.dtype.type
    _, height, width, channels = Xt.shape
    _, _, oh, ow = dY.shape
    values = np.empty(channels, settings.dtype)
    best = np.empty(channels, settings.dtype)
    index = np.zeros(channels, winners.dtype)
    weight = np.empty(channels, settings.dtype)
    taken = np.empty(channels, np.bool_)
    lowest = settings[3]
    for r in regions:
        b = batch[r]
        ny, nx = n[0, r], n[1, r]
        ys = axis_samples(first[0, r], size[0, r], ny, oh, height, settings, align, linear)
        xs = axis_samples(first[1, r], size[1, r], nx, ow, width, settings, align, linear)
        if drois.shape[0] and not linear:  # the image gradient is bilinear in both modes
            y_grid = axis_samples(first[0, r], size[0, r], ny, oh, height, settings, align, True)
            x_grid = axis_samples(first[1, r], size[1, r], nx, ow, width, settings, align, True)
        else:
            y_grid, x_grid = ys, xs
        count = ct(ny * nx)
        along_y = np.zeros(oh * ny)  # float64 sums of the y derivative terms per sample
        along_x = np.zeros(ow * nx)
        for oy in range(oh):
            for ox in range(ow):
                if not average:
                    best[:] = lowest
                    index[:] = -1
                    for k in range(ny * nx):
                        sy, sx = oy * ny + k // nx, ox * nx + k % nx
                        read_sample(Xt, b, ys, sy, xs, sx, linear, settings[2], values)
                        for c in range(channels):
                            if values[c] > best[c]:  # False for NaN
                                best[c], index[c] = values[c], k
                    if winners.shape[0]:
                        winners[r, oy, ox] = index
                if drois.shape[0] == 0:
                    continue
                for k in range(ny * nx):
                    sy, sx = oy * ny + k // nx, ox * nx + k % nx
                    if not (ys[4][sy] and xs[4][sx]):
                        continue
                    for c in range(channels):
                        weight[c] = dY[r, c, oy, ox] / count if average else dY[r, c, oy, ox]
                        taken[c] = average or index[c] == k
                    _corner_terms(Xt[b], y_grid, sy, x_grid, sx, exact, weight, taken, along_y,
                                  along_x, one=ct(1))
        if drois.shape[0]:
            if exact:
                x_near, x_far = _moments(along_x, 1 - xs[6].astype(np.float64), xs[6])
                y_near, y_far = _moments(along_y, 1 - ys[6].astype(np.float64), ys[6])
                x_near, x_far = scales[1] * x_near, scales[1] * x_far
                y_near, y_far = scales[0] * y_near, scales[0] * y_far
            else:
                x_near, x_far = _moments(along_x,
                                         *directml_factors(ow, nx, width, align, settings))
                y_near, y_far = _moments(along_y,
                                         *directml_factors(oh, ny, height, align, settings))
            drois[r, 0], drois[r, 1], drois[r, 2], drois[r, 3] = x_near, y_near, x_far, y_far


@jit
def directml_factors(outputs, n, length, align, settings):
    """DirectML's ROI-gradient factors of the ``outputs * n`` samples along an axis of
    ``length`` pixels (TensorFlow's CropAndResizeGradBoxes, as measured): a sample of output
    ``o`` moves the first corner by ``fma(-o, ratio, extent)`` and the last by ``o * ratio``,
    ``extent = L`` and ``ratio = L * (1 / S)`` (aligning corners: ``L - 1`` and
    ``(L - 1) * (1 / (S - 1))``, both factors ``(L - 1) / 2`` when ``S == 1``), in the compute
    type of ``settings`` (the fma in float64, exact for float32)."""
    ct = settings.dtype.type
    total = outputs * n
    near = np.empty(total)
    far = np.empty(total)
    extent = ct(length - 1) if align else ct(length)
    if align and total == 1:
        near[0] = far[0] = ct(ct(0.5) * extent)
        return near, far
    ratio = extent * (ct(1) / ct(total - 1 if align else total))
    for s in range(total):
        o = ct(s // n)
        near[s] = ct(np.float64(extent) - np.float64(o) * np.float64(ratio))
        far[s] = o * ratio
    return near, far


@jit
def _moments(terms, near, far):
    """``(sum(terms * near), sum(terms * far))`` in float64: how the terms move the first and
    the last coordinate of the region."""
    first = last = 0.0
    for s in range(terms.size):
        first += terms[s] * np.float64(near[s])
        last += terms[s] * np.float64(far[s])
    return first, last


@jit
def _corner_terms(image, ys, sy, xs, sx, exact, weight, taken, along_y, along_x, one):
    """Add sample ``(sy, sx)``'s ``weight``-ed image gradient in the ``taken`` channels along x
    to ``along_x[sx]`` and along y to ``along_y[sy]`` (an axis whose coordinate was clamped
    adds nothing): the differences of the corners, times the other axis's weights. The
    corners are ``floor`` and ``min(floor + 1, L - 1)`` (DirectML), or ``floor`` and
    ``ceil`` when ``exact`` (the derivative's one-sided choice at an integer coordinate)."""
    ly, lx = ys[3][sy], xs[3][sx]
    y0, x0 = ys[0][sy], xs[0][sx]
    if exact:
        y1, x1 = y0 + (ly > 0), x0 + (lx > 0)
    else:
        y1, x1 = ys[1][sy], xs[1][sx]
    p00, p01, p10, p11 = image[y0, x0], image[y0, x1], image[y1, x0], image[y1, x1]
    for c in range(weight.size):
        if not taken[c]:
            continue
        g = weight[c]
        if xs[5][sx]:
            along_x[sx] += g * ((one - ly) * (p01[c] - p00[c]) + ly * (p11[c] - p10[c]))
        if ys[5][sy]:
            along_y[sy] += g * ((one - lx) * (p10[c] - p00[c]) + lx * (p11[c] - p01[c]))


@jit
def scatter_rows(dY, batch, first, size, n, settings, align, linear, average, winners,
                 row_start, row_stop, dXt, dX):
    """Rows ``row_start:row_stop`` (of the flattened ``[N * H]``) of the image gradient: every
    region's ``dY`` added onto them in ``dXt [N, H, W, C]`` (zeroed here first), then copied to
    ``dX [N, C, H, W]`` (float16 ``dY`` and ``dX`` as their bits beside a float32 ``dXt``:
    :func:`~dml_onnx._kernels._half_float_loops.summand`, ``stored_sum``). Each in-bounds
    sample adds its weight (``dY / (n_y n_x)`` for average, ``dY`` on the winning sample for
    max) times each corner's weight. Regions, outputs, samples and corners are visited in
    order, so each element sums in the same order whatever the rows a thread owns."""
    ct = settings.dtype.type
    n_images, height, width, channels = dXt.shape
    regions, _, oh, ow = dY.shape
    for row in range(row_start, row_stop):
        for x in range(width):
            for c in range(channels):
                dXt[row // height, row % height, x, c] = 0
    weight = np.empty(channels, settings.dtype)
    for r in range(regions):
        b = batch[r]
        lowest, highest = max(row_start - b * height, 0), min(row_stop - b * height, height)
        if lowest >= highest:
            continue
        ny, nx = n[0, r], n[1, r]
        y_lo, y_hi, y_wlo, y_whi, y_in, _, _ = axis_samples(first[0, r], size[0, r], ny, oh,
                                                            height, settings, align, linear)
        x_lo, x_hi, x_wlo, x_whi, x_in, _, _ = axis_samples(first[1, r], size[1, r], nx, ow,
                                                            width, settings, align, linear)
        count = ct(ny * nx)
        for oy in range(oh):
            touched = False
            for sy in range(oy * ny, oy * ny + ny):
                touched |= y_in[sy] and (lowest <= y_lo[sy] < highest
                                         or lowest <= y_hi[sy] < highest)
            if not touched:
                continue
            for ox in range(ow):
                for c in range(channels):
                    value = summand(weight, dY[r, c, oy, ox])
                    weight[c] = value / count if average else value
                for k in range(ny * nx):
                    sy, sx = oy * ny + k // nx, ox * nx + k % nx
                    if not (y_in[sy] and x_in[sx]):
                        continue
                    for corner in range(4 if linear else 1):
                        y, wy = (y_lo[sy], y_wlo[sy]) if corner < 2 else (y_hi[sy], y_whi[sy])
                        if not lowest <= y < highest:
                            continue
                        x, wx = (x_lo[sx], x_wlo[sx]) if corner % 2 == 0 else (x_hi[sx],
                                                                                x_whi[sx])
                        w = wy * wx
                        if average:
                            for c in range(channels):
                                dXt[b, y, x, c] += weight[c] * w
                        else:
                            for c in range(channels):
                                if winners[r, oy, ox, c] == k:
                                    dXt[b, y, x, c] += weight[c] * w
    for row in range(row_start, row_stop):
        for c in range(channels):
            for x in range(width):
                dX[row // height, c, row % height, x] = stored_sum(
                    dX, dXt[row // height, row % height, x, c])


@parallel_jit
def scatter_bands(cuts, dY, batch, first, size, n, settings, align, linear, average, winners,
                  dXt, dX):
    """:func:`scatter_rows` on the bands of rows ``cuts[g]:cuts[g + 1]``, one thread each."""
    for g in prange(cuts.size - 1):
        scatter_rows(dY, batch, first, size, n, settings, align, linear, average, winners,
                     cuts[g], cuts[g + 1], dXt, dX)
