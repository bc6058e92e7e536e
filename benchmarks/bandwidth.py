"""How close the rows that stream large inputs come to one pass over memory.

    taskset -c 0 python -m benchmarks.bandwidth [--threads K]

For every large row of ``benchmarks/rows.py`` whose inputs exceed 32 MB (Fold: 58 MB of
columns in, 6.4 MB out), in milliseconds (best of 15): one read of the inputs (``np.max``,
vectorised, reading each byte once), one copy of them (``np.copyto`` into a preallocated
array), our session and the row's onnxruntime peer, each as a time and as the read bandwidth
it implies (input bytes / time). A row at the read time is at the machine's memory bandwidth
on those cores; no kernel that reads its whole input can be faster.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

import dml_onnx
from benchmarks import harness
from benchmarks.rows import onnxruntime_peer, rows

LARGE_INPUT = 32 << 20


def best_ms(call: Callable[[], object], repeat: int = 15) -> float:
    call()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> None:
    threads = harness.threads_argument(__doc__.split("\n\n")[0])
    print(harness.table_head("row", "input MB", "read ms", "copy ms", "ours ms", "peer ms",
                             "read GB/s", "ours GB/s", "peer GB/s", "ours / read"))
    for row in rows(np.random.default_rng(0)):
        arrays = [a for a in row.inputs if a is not None]
        size = sum(a.nbytes for a in arrays)
        if row.tiny or size < LARGE_INPUT or not row.onnxruntime:
            continue
        copies = [np.empty_like(a) for a in arrays]
        read = best_ms(lambda: [a.max() for a in arrays])  # noqa: B023 - called at once

        def copy_all() -> None:
            for c, a in zip(copies, arrays):  # noqa: B023 - called at once
                np.copyto(c, a)
        copy = best_ms(copy_all)
        session = dml_onnx.InferenceSession(row.model(), harness.session_options(threads))
        feeds = row.feeds()
        ours = best_ms(lambda: session.run(None, feeds))  # noqa: B023
        peer_run = onnxruntime_peer(row, *row.onnxruntime).make(threads)
        assert peer_run is not None  # an onnxruntime peer always runs
        peer = best_ms(peer_run)
        rate = [size / t / 1e6 for t in (read, ours, peer)]
        print(f"| {row.name} | {size / 1e6:.1f} | {read:.2f} | {copy:.2f} | {ours:.2f} | "
              f"{peer:.2f} | {rate[0]:.1f} | {rate[1]:.1f} | {rate[2]:.1f} | "
              f"{ours / read:.2f} |")


if __name__ == "__main__":
    main()
