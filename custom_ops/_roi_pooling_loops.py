"""The compiled loop of RoiPooling (specification section 1), by :data:`custom_ops._jit.jit`."""

from __future__ import annotations

import numpy as np

from custom_ops._jit import jit


@jit
def pool_regions(Xt, batch, hs, he, ws, we, regions, Y):
    """``Y[r] [C, PH, PW]`` for every region ``r`` in ``regions``: per bin, the maximum over
    rows ``hs[r, i]:he[r, i]`` and columns ``ws[r, j]:we[r, j]`` of the channels-last image
    ``Xt[batch[r]] [H, W, C]`` (NaN wins), 0 for an empty bin."""
    ct = Y.dtype.type
    channels = Xt.shape[3]
    _, _, ph, pw = Y.shape
    acc = np.empty(channels, Y.dtype)
    for r in regions:
        b = batch[r]
        for i in range(ph):
            for j in range(pw):
                if he[r, i] <= hs[r, i] or we[r, j] <= ws[r, j]:
                    for c in range(channels):
                        Y[r, c, i, j] = 0
                    continue
                for c in range(channels):
                    acc[c] = ct(-np.inf)
                for y in range(hs[r, i], he[r, i]):
                    for x in range(ws[r, j], we[r, j]):
                        for c in range(channels):
                            v = Xt[b, y, x, c]
                            if v > acc[c] or v != v:
                                acc[c] = v
                for c in range(channels):
                    Y[r, c, i, j] = acc[c]
