"""How far an output is from the expected one: the one relative difference that the suite's
worst error and the probes' matching both report."""

from __future__ import annotations

import math

import numpy as np


def difference(got: np.ndarray, want: np.ndarray) -> float:
    """``max |got - want|`` relative to ``max(1, max |want|)`` (the largest finite
    ``|want|``); NaN must meet NaN and an infinity the same infinity, and a shape or NaN
    mismatch is ``inf``."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape or not np.array_equal(np.isnan(got), np.isnan(want)):
        return math.inf
    compared = ~np.isnan(want)
    scale = max(1.0, float(np.max(np.abs(want[np.isfinite(want)]), initial=0.0)))
    with np.errstate(invalid="ignore"):
        diff = np.where(got[compared] == want[compared], 0.0,
                        np.abs(got[compared] - want[compared]))
    return float(np.max(diff, initial=0.0)) / scale
