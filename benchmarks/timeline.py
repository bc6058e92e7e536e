"""The first runs of new sessions: each run's time, for the graphs of ``benchmarks/graphs.py``.

    taskset -c 0-15 python -m benchmarks.timeline --threads 16 [--torch] [--only NAME]
        [--segment-threads auto,one,16,4,1] [--grain-factors 4,16] [--sessions 3] [--runs 40]

``graphs.py`` times runs 3-10 of new sessions; this shows where those stand. Per graph and
side, ``--sessions`` new sessions of ``--threads`` intra-op threads each run ``--runs`` times,
and the table gives the median of the runs in each range (run 1, run 2, runs 3-10, 11-20, and
21 on), in ms. Sides: the stock model in plain onnxruntime, ours as shipped ("auto": one
session or split, each segment's threads sized by its work), ours as one session ("one"), and
ours split with every segment created at N threads (N of ``--segment-threads``; the kernels
keep ``--threads``), and ours as shipped with the work from which a kernel call splits over
its threads (:func:`dml_onnx._kernels._threads.launch_work`, in grains of values read) times
each of ``--grain-factors``. Pin the process to the cores yourself (``taskset``);
``--torch`` imports torch first, as a conversion script would.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

RANGES = ((0, 1), (1, 2), (2, 10), (10, 20), (20, None))
"""The runs each column takes its median over (0-based, end excluded)."""


def per_run_ms(make: Callable[[], Any], feeds: dict[str, np.ndarray], sessions: int,
               runs: int) -> list[float]:
    """The median time of each range of :data:`RANGES` over ``sessions`` new sessions of
    ``make()``, each run ``runs`` times."""
    times: list[list[float]] = []
    for _ in range(sessions):
        session = make()
        taken = []
        for _ in range(runs):
            start = time.perf_counter()
            session.run(None, feeds)
            taken.append((time.perf_counter() - start) * 1e3)
        times.append(taken)
        del session
        gc.collect()
        time.sleep(0.2)  # the threads of the session just gone settle
    return [statistics.median(x for taken in times for x in taken[a:b]) if len(times[0]) > a
            else float("nan") for a, b in RANGES]


def sides(stock: bytes, ours: bytes, threads: int, segment_threads: Sequence[str]
          ) -> dict[str, Callable[[], Any]]:
    """Each side's session maker (see the module's docstring)."""
    import onnxruntime as ort

    import dml_onnx
    from dml_onnx.runtime import plan, segments

    def options() -> ort.SessionOptions:
        chosen = ort.SessionOptions()
        chosen.intra_op_num_threads = threads
        return chosen

    sized = segments.segment_threads
    limits = plan.ONE_SESSION_COPIES, plan.ONE_SESSION_WEIGHTS

    def ours_at(count: str) -> Callable[[], Any]:
        def make() -> Any:
            if count == "one":  # one session whatever the sizes
                plan.ONE_SESSION_COPIES = plan.ONE_SESSION_WEIGHTS = 1 << 62
            elif count != "auto":  # split, every segment at that count while it is made
                plan.ONE_SESSION_COPIES = plan.ONE_SESSION_WEIGHTS = -1
                segments.segment_threads = lambda work, allowed: int(count)  # type: ignore
            try:
                return dml_onnx.InferenceSession(ours, options())
            finally:
                segments.segment_threads = sized
                plan.ONE_SESSION_COPIES, plan.ONE_SESSION_WEIGHTS = limits
        return make

    return {"stock": lambda: ort.InferenceSession(stock, options(),
                                                  providers=["CPUExecutionProvider"]),
            **{{"auto": "ours", "one": "ours, one session"}.get(
                count, f"ours, segments at {count}"): ours_at(count) for count in segment_threads}}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, required=True, help="intra-op threads")
    parser.add_argument("--torch", action="store_true", help="import torch first")
    parser.add_argument("--only", default="", help="the graphs whose name has this (A|B|...)")
    parser.add_argument("--segment-threads", default="auto",
                        help="our sides: auto (as shipped), one (one session) and thread "
                        "counts (split, every segment at that count)")
    parser.add_argument("--sessions", type=int, default=3, help="new sessions per side")
    parser.add_argument("--runs", type=int, default=40, help="runs per session")
    parser.add_argument("--grain-factors", default="",
                        help="more sides: ours as shipped with the kernels' GRAIN times each")
    args = parser.parse_args(argv)
    if args.torch:
        import torch  # noqa: F401 - loaded first, as in a conversion script

    from benchmarks import graphs
    from benchmarks.harness import scaled_split_point, table_head

    names = [n for n in graphs.GRAPHS if any(part in n for part in args.only.split("|"))]
    print(table_head("graph", "torch", "side", "run 1", "run 2", "runs 3-10", "runs 11-20",
                     "runs 21-", text=("torch", "side")))
    with tempfile.TemporaryDirectory() as folder:
        graphs.make_all(names, Path(folder))
        for k, name in enumerate(names):
            with np.load(Path(folder) / f"{k}.npz") as saved:
                stock, ours = saved["stock"].tobytes(), saved["ours"].tobytes()
                feeds = {n[5:]: saved[n] for n in saved.files if n.startswith("feed_")}
            made = [(side, make, 1.0) for side, make in sides(
                stock, ours, args.threads, args.segment_threads.split(",")).items()]
            shipped = sides(stock, ours, args.threads, ["auto"])["ours"]
            made += [(f"ours, grain x{f}", shipped, float(f))
                     for f in args.grain_factors.split(",") if f]
            for side, make, factor in made:
                with scaled_split_point(factor):
                    cells = per_run_ms(make, feeds, args.sessions, args.runs)
                print(f"| {name} | {'yes' if args.torch else 'no'} | {side} | "
                      + " | ".join(f"{c:.2f}" for c in cells) + " |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
