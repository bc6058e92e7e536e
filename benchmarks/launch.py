"""Each ``dml_onnx`` kernel of the benchmark graphs, called alone on the arrays it gets in its
graph, on one thread and on ``--threads`` with the split point moved: when does a call pay
for splitting over the threads?

    taskset -c 0-15 python -m benchmarks.launch --threads 16 [--factors 0.25,0.5,1,2]
        [--only TEXT|TEXT...] [--detectors TEXT|TEXT...] [--cold] [--calls N] [--torch]

The graphs are ``benchmarks.graphs``'s whose names have ``--only`` (made in a child process;
the CNN needs the ``torch`` extra), and with ``--detectors`` the raised detectors of
``benchmarks.models`` whose case names have that text (``"Faster R-CNN, TorchScript, default
threshold"``; 512x512, 1000 proposals). Each runs once as one onnxruntime session of Python
operators, which hands every kernel call's inputs to this script; each distinct call
(operator and input shapes) is then timed alone, the median of ``--calls`` calls in
microseconds: on one thread (``1t``), and on ``--threads`` with the work from which a call
splits over them (:func:`dml_onnx._kernels._threads.launch_work`) times each of
``--factors`` (``x1``: as shipped; below 1 a call splits earlier). ``--cold`` reads 256 MiB
before each timed call, so that its inputs come from memory, as a model's fresh maps do,
not from the caches. Pin the process to the cores yourself (``taskset``); ``--torch`` imports
torch first, as a conversion script would.
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

from benchmarks.harness import scaled_split_point, table_head


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

    token = _threads.thread_limit.set(threads)
    try:
        with scaled_split_point(factor):
            yield
    finally:
        _threads.thread_limit.reset(token)


def median_us(call: Callable[[], object], calls: int,
              before: Callable[[], object] | None = None) -> float:
    """The median of ``calls`` timed calls, after a few untimed ones, in µs; ``before()``
    runs untimed before each."""
    for _ in range(max(3, calls // 10)):
        call()
    taken = []
    for _ in range(calls):
        if before is not None:
            before()
        start = time.perf_counter()
        call()
        taken.append(time.perf_counter() - start)
    return float(np.median(taken)) * 1e6


def cache_flush() -> Callable[[], object]:
    """A call that reads 256 MiB (more than any CPU's caches; read, not written, so that the
    timed call does not pay for writing dirty lines back)."""
    junk = np.ones(1 << 26, np.float32)
    return junk.sum


def detector_models(only: str, folder: Path) -> list[tuple[str, bytes, dict[str, np.ndarray]]]:
    """The raised detectors of ``benchmarks.models`` whose case names have ``only``
    (``A|B``), each with its feed (exported in child processes)."""
    import onnx

    from benchmarks import models
    from dml_onnx.raising import raise_model

    chosen = argparse.Namespace(only=only, size=512, proposals=1000)
    models.export_all(chosen, folder)
    made = []
    for k, (label, *_) in enumerate(models.cases(chosen)):
        if (folder / f"{k}.error").exists():
            raise SystemExit(f"{label}: {(folder / f'{k}.error').read_text()}")
        with np.load(folder / f"{k}.npz") as saved:
            stock = onnx.load_from_string(saved["stock"].tobytes())
            feeds = {stock.graph.input[0].name: saved["image"]}
        made.append((label, raise_model(stock).model.SerializeToString(), feeds))
    return made


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, required=True, help="threads of the split calls")
    parser.add_argument("--factors", default="0.25,0.5,1,2",
                        help="split points, times the shipped one (default 0.25,0.5,1,2)")
    parser.add_argument("--only", default="", help="the graphs whose name has this (A|B|...)")
    parser.add_argument("--detectors", default="",
                        help="also the raised detectors whose case names have this (A|B|...)")
    parser.add_argument("--cold", action="store_true",
                        help="read 256 MiB before each timed call")
    parser.add_argument("--calls", type=int, default=60, help="timed calls per cell")
    parser.add_argument("--torch", action="store_true", help="import torch first")
    args = parser.parse_args(argv)
    if args.calls < 1:
        raise SystemExit(f"--calls {args.calls}: at least 1")
    if args.torch:
        import torch  # noqa: F401 - loaded first, as in a conversion script

    from benchmarks import graphs

    factors = [float(f) for f in args.factors.split(",") if f]
    names = [n for n in graphs.GRAPHS if any(part in n for part in args.only.split("|"))]
    print(table_head("graph", "kernel, inputs", "1t", *(f"x{f:g}" for f in factors),
                     text=("graph", "kernel, inputs")))
    before = cache_flush() if args.cold else None
    with tempfile.TemporaryDirectory() as folder:
        graphs.make_all(names, Path(folder))
        chosen = []
        for k, name in enumerate(names):
            with np.load(Path(folder) / f"{k}.npz") as saved:
                chosen.append((name, saved["ours"].tobytes(), {
                    n[5:]: saved[n] for n in saved.files if n.startswith("feed_")}))
        if args.detectors:
            exports = Path(folder) / "detectors"
            exports.mkdir()
            chosen += detector_models(args.detectors, exports)
        for name, ours, feeds in chosen:
            for label, call in kernel_calls(ours, feeds, args.threads):
                cells = []
                for threads, factor in [(1, 1.0), *((args.threads, f) for f in factors)]:
                    with split_point(threads, factor):
                        cells.append(median_us(call, args.calls, before))
                print(f"| {name} | {label} | " + " | ".join(f"{c:.0f}" for c in cells) + " |",
                      flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
