"""float16 in the compiled loops: numba has no float16 on the CPU, so float16 arrays travel as
their uint16 bits, and a loop reads each value through :data:`HALF_TABLE`.

Data only (no numba): each ``_*_loops`` module types its own reads of the bits (numba's cache
of a loop notices changes to the loop's own file only) and freezes this table, which
IEEE 754 fixes, into its code.
"""

from __future__ import annotations

import numpy as np

HALF_TABLE = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(
    np.float32)
"""Every float16 value as float32, by its bits (exact: every float16 is a float32; NaN stays
NaN, zero keeps its sign)."""
