"""The compiler of the kernels' loops: numba, without the interpreter lock (so that threads of
``run_parallel`` run compiled loops side by side), cached on disk, and with numpy's rules for
floating-point errors (a division by zero gives infinity or NaN, as the formulas say).
:data:`parallel_jit` compiles the drivers whose ``prange`` starts one thread per band from
compiled code (numba's threading layer: OpenMP where the system has it), see
:func:`custom_ops._common.run_bands`.

Only the ``_*_loops`` modules import this one, and the kernels import those on their first
call: importing the package does not import numba (about half a second).
"""

from __future__ import annotations

import numba
from numba.core.registry import cpu_target

jit = numba.njit(nogil=True, cache=True, error_model="numpy")
parallel_jit = numba.njit(nogil=True, cache=True, error_model="numpy", parallel=True)

# numba finishes setting itself up (type registries, extension entry points) on its first
# compilation or cache load; an interrupt in the middle of that breaks it for the process
# ("duplicate registration"). Done here, it is part of the import, which runs on a helper
# thread that signals do not interrupt (custom_ops._common.compiled).
cpu_target.typing_context.refresh()
cpu_target.target_context.refresh()
