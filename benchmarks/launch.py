"""Each ``dml_onnx`` kernel of the benchmark graphs, called alone on the arrays it gets in its
graph, on one thread and on ``--threads`` with the split point moved: when does a call pay
for splitting over the threads?

    taskset -c 0-15 python -m benchmarks.launch --threads 16 [--factors 0.25,0.5,1,2]
                                                [--only TEXT|TEXT...] [--calls N] [--torch]

The graphs are ``benchmarks.graphs``'s (made in a child process; the CNN needs the ``torch``
extra). Each runs once as one onnxruntime session of Python operators, which hands every
kernel call's inputs to this script; each distinct call (operator and input shapes) is then
timed alone, the median of ``--calls`` calls in microseconds: on one thread (``1t``), and on
``--threads`` with the work from which a call splits over them
(:func:`dml_onnx._kernels._threads.launch_work`) times each of ``--factors`` (``x1``: as
shipped; below 1 a call splits earlier). ``work`` is the call's work in grains as the
kernel counts it at ``x1``, where known. Pin the process to the cores yourself
(``taskset``); ``--torch`` imports torch first, as a conversion script would.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def kernel_calls(ours: bytes, feeds: dict[str, np.ndarray], threads: int
                 ) -> list[tuple[str, Callable[[], object]]]:
    """Every distinct kernel call of one run of ``ours`` (as one session at ``threads``
    intra-op threads): a label (operator and input shapes) and the call on copies of its
    inputs."""
    import onnxruntime as ort

    import dml_onnx
    from dml_onnx.runtime import hook, plan

    found: dict[str, Callable[[], object]] = {}
    run_call = hook.run_call

    def capture(call: Any, feed: Sequence[np.ndarray | None], variant: Any) -> list:
        inputs = [None if f is None else np.array(f) for f in feed]
        shapes = ", ".join(str(list(f.shape)) for f in inputs if f is not None)
        found.setdefault(f"{call.definition.name} {shapes}",
                         lambda: call.run(list(inputs)))
        return run_call(call, feed, variant)

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    limits = plan.ONE_SESSION_COPIES, plan.ONE_SESSION_WEIGHTS
    plan.ONE_SESSION_COPIES = plan.ONE_SESSION_WEIGHTS = sys.maxsize  # one session
    hook.run_call = capture
    try:
        dml_onnx.InferenceSession(ours, options).run(None, feeds)
    finally:
        hook.run_call = run_call
        plan.ONE_SESSION_COPIES, plan.ONE_SESSION_WEIGHTS = limits
    return list(found.items())


@contextlib.contextmanager
def split_point(threads: int, factor: float) -> Iterator[None]:
    """Kernel calls in the block may use ``threads`` threads and split over them from
    :func:`~dml_onnx._kernels._threads.launch_work` times ``factor``."""
    from dml_onnx._kernels import _threads

    shipped = _threads.launch_work
    _threads.launch_work = lambda allowed: max(1, int(shipped(allowed) * factor))
    token = _threads.thread_limit.set(threads)
    try:
        yield
    finally:
        _threads.thread_limit.reset(token)
        _threads.launch_work = shipped


def median_us(call: Callable[[], object], calls: int) -> float:
    """The median of ``calls`` timed calls, after a few untimed ones, in µs."""
    for _ in range(max(3, calls // 10)):
        call()
    taken = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        taken.append(time.perf_counter() - start)
    return float(np.median(taken)) * 1e6


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, required=True, help="threads of the split calls")
    parser.add_argument("--factors", default="0.25,0.5,1,2",
                        help="split points, times the shipped one (default 0.25,0.5,1,2)")
    parser.add_argument("--only", default="", help="the graphs whose name has this (A|B|...)")
    parser.add_argument("--calls", type=int, default=60, help="timed calls per cell")
    parser.add_argument("--torch", action="store_true", help="import torch first")
    args = parser.parse_args(argv)
    if args.torch:
        import torch  # noqa: F401 - loaded first, as in a conversion script

    from benchmarks import graphs
    from benchmarks.harness import table_head

    factors = [float(f) for f in args.factors.split(",") if f]
    names = [n for n in graphs.GRAPHS if any(part in n for part in args.only.split("|"))]
    print(table_head("graph", "kernel, inputs", "1t", *(f"x{f:g}" for f in factors),
                     text=("graph", "kernel, inputs")))
    with tempfile.TemporaryDirectory() as folder:
        graphs.make_all(names, Path(folder))
        for k, name in enumerate(names):
            with np.load(Path(folder) / f"{k}.npz") as saved:
                ours = saved["ours"].tobytes()
                feeds = {n[5:]: saved[n] for n in saved.files if n.startswith("feed_")}
            for label, call in kernel_calls(ours, feeds, args.threads):
                cells = []
                for threads, factor in [(1, 1.0), *((args.threads, f) for f in factors)]:
                    with split_point(threads, factor):
                        cells.append(median_us(call, args.calls))
                print(f"| {name} | {label} | " + " | ".join(f"{c:.0f}" for c in cells) + " |",
                      flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
