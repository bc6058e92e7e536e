"""What every benchmark script shares: session options and torch at a thread count, timing
(samples, medians, spreads), memory (``tracemalloc`` and the peak resident size), the machine's
description, and child processes pinned to k CPUs.

Every side of a comparison gets the same threads: a script's ``--threads K`` is passed to
:func:`session_options` and :func:`torch_threads` explicitly (0: each library's default).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from dml_onnx._kernels import _buffers

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
SAMPLE_SECONDS = 0.004  # a tiny case repeats its call until one sample takes about this long
SETTLE = 0.3
"""Seconds of pause before each side's samples."""


def threads_argument(description: str) -> int:
    """Parse a script's one option, ``--threads K`` (0: each library's default)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--threads", type=int, default=0,
                        help="onnxruntime intra-op threads of every session (0: default)")
    return parser.parse_args().threads


def session_options(threads: int) -> ort.SessionOptions:
    """Session options with ``threads`` intra-op threads (0: onnxruntime's default)."""
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return options


def torch_threads(threads: int):
    """torch, set to ``threads`` threads (0: its default); ImportError where it is missing."""
    import torch
    if threads:
        torch.set_num_threads(threads)
    return torch


def _sample(call: Callable[[], object], inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        call()
    return (time.perf_counter() - start) / inner


def measure(calls: Sequence[Callable[[], object]], repeat: int, tiny: bool
            ) -> list[list[float]]:
    """Seconds per call, ``repeat`` samples of each call, one call after the other (ours
    first).

    Not alternated: onnxruntime's worker threads keep spinning for a while after a parallel
    kernel (measured: still slowing down the next call on the same cores 0.2 s later; on the
    16-core server a peer's spinning made the next row's LpPooling 3-D 5x slower), which
    would slow down the other side's samples, not the call that caused it. Each call's
    samples follow a pause of :data:`SETTLE` seconds and an untimed call; no call runs before
    the calls ahead of it are timed, and a peer's session (and its threads) is gone before the
    next row starts."""
    samples: list[list[float]] = [[] for _ in calls]
    enabled = gc.isenabled()
    gc.disable()
    try:
        for k, call in enumerate(calls):
            time.sleep(SETTLE)
            call()
            inner = 1  # a tiny call repeats in a sample until the sample is long enough to time
            if tiny:
                inner = max(1, int(SAMPLE_SECONDS / max(_sample(call, 20), 1e-7)))
            samples[k] = [_sample(call, inner) for _ in range(repeat)]
    finally:
        if enabled:
            gc.enable()
    return samples


def summary(samples: list[float]) -> tuple[float, float]:
    """Median in ms and spread: interquartile range over the median."""
    q1, median, q3 = np.percentile(samples, [25, 50, 75])
    return median * 1e3, (q3 - q1) / median


def traced_peak(call: Callable[[], Sequence[np.ndarray]]) -> tuple[int, Sequence[np.ndarray]]:
    """The peak numpy allocation of one call beyond what was allocated before it
    (``tracemalloc``), and the call's outputs."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        outputs = call()
        return tracemalloc.get_traced_memory()[1] - before, outputs
    finally:
        tracemalloc.stop()


def temporaries(call: Callable[[], Sequence[np.ndarray]]) -> float:
    """Peak memory of one call beyond its outputs, in units of the outputs: the larger of
    the peak numpy allocation (:func:`traced_peak`) and, on Linux, the growth of the
    process's peak resident memory (which also sees onnxruntime's own buffers). The kernels'
    kept blocks are dropped first, so that the call allocates every array it needs."""
    gc.collect()
    _buffers.drop_free()
    resident = _reset_peak_resident()
    peak, outputs = traced_peak(call)
    if resident is not None:
        peak = max(peak, _resident("VmHWM") - resident)
    size = sum(np.asarray(o).nbytes for o in outputs if o is not None)
    return (peak - size) / size if size else math.nan


def _resident(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak_resident() -> int | None:
    """Reset the peak resident size to the current one (Linux); that size, or None."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        return _resident("VmRSS")
    except (OSError, KeyError):
        return None


def environment(repeat: int, load: tuple[float, float]) -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{platform.machine()}, {os.cpu_count()} cores ({cores} usable), {_cpu_name()}, "
            f"Python {platform.python_version()}, onnxruntime {ort.__version__}, numpy "
            f"{np.__version__}{_torch_versions()}; {repeat} samples per call (tiny cases: "
            f"each sample averages a loop of about {SAMPLE_SECONDS * 1e3:g} ms); 1-minute load "
            f"average {load[0]:.1f} before the run, {load[1]:.1f} after")


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan


def _torch_versions() -> str:
    try:
        import torch
        import torchvision
    except ImportError:
        return "; torch/torchvision not installed"
    return f", torch {torch.__version__}, torchvision {torchvision.__version__}"


def run_pinned(cores: int, module: str, argv: Sequence[str], result: type) -> list:
    """``python -m module`` in a child process pinned to the first ``cores`` usable CPUs,
    given ``--threads cores`` and ``--json FILE``; its JSON records read back as ``result``."""
    cpus = sorted(os.sched_getaffinity(0))
    if cores > len(cpus):
        raise SystemExit(f"--cores {cores}: only {len(cpus)} CPUs are usable here")
    chosen = set(cpus[:cores])
    with tempfile.TemporaryDirectory() as folder:
        found = Path(folder) / "results.json"
        subprocess.run([sys.executable, "-m", module, *argv, "--threads", str(cores),
                        "--json", str(found)], cwd=ROOT,
                       preexec_fn=lambda: os.sched_setaffinity(0, chosen), check=True,
                       stdout=subprocess.DEVNULL)
        return [result(**fields) for fields in json.loads(found.read_text())]


ROUNDS = 5
"""Alternating rounds of whole runs per side (:func:`alternating`): five, since on the server
one side's round now and then took a fifth longer than the others (a 2-core Faster R-CNN call
gave 1.19, the next ones 0.92-0.98)."""
WARM_UP_RUNS = 2
"""Runs of a new session not timed: its arenas still grow in its second run (measured: a split
session's Expand nodes 3.4 ms in its second run, 0.5 in its third)."""


@contextlib.contextmanager
def scaled_split_point(factor: float) -> Iterator[None]:
    """While the block runs, a kernel call splits over its threads from
    :func:`dml_onnx._kernels._threads.launch_work` times ``factor`` (below 1: earlier), the
    rest of the kernels (their numpy or compiled copies, by the grain) unchanged."""
    from dml_onnx._kernels import _threads

    shipped = _threads.launch_work
    _threads.launch_work = lambda allowed: max(1, int(shipped(allowed) * factor))
    try:
        yield
    finally:
        _threads.launch_work = shipped


def times_ms(run: Callable[[], object], repeat: int) -> list[float]:
    """``repeat`` calls of ``run``, each timed, in ms."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        samples.append(1000 * (time.perf_counter() - start))
    return samples


def settle() -> None:
    """Let a closed session's threads and memory go before the next one starts."""
    gc.collect()
    time.sleep(SETTLE)


def alternating(makers: dict[str, Callable[[], Any]], feeds: dict[str, Any], repeat: int
                ) -> tuple[dict[str, float], dict[str, list], dict[str, list[float]]]:
    """Each side's median whole run, over :data:`ROUNDS` alternating rounds of ``repeat`` runs
    (a new session of ``makers[side]()`` each, its first :data:`WARM_UP_RUNS` runs untimed), so
    that a drift of the machine's speed does not fall on one side; each side's outputs; and
    each side's median run in each round (for :func:`round_ratios`).
    Each side runs alone: its session is gone, and its idle threads with it, before the other
    side starts (a plain session's spinning threads slow whatever runs next)."""
    outputs: dict[str, list] = {}
    samples: dict[str, list[float]] = {side: [] for side in makers}
    rounds: dict[str, list[float]] = {side: [] for side in makers}
    for _ in range(ROUNDS):
        for side, make in makers.items():
            session = make()
            outputs[side] = session.run(None, feeds)
            for _ in range(WARM_UP_RUNS - 1):
                session.run(None, feeds)
            taken = times_ms(functools.partial(session.run, None, feeds), repeat)
            samples[side] += taken
            rounds[side].append(statistics.median(taken))
            del session
            settle()
    return {side: statistics.median(taken) for side, taken in samples.items()}, outputs, rounds


def round_ratios(rounds: dict[str, list[float]], side: str, base: str) -> list[float]:
    """``side`` / ``base`` in each round of :func:`alternating`: the two ran minutes apart at
    most, so a drift of the machine's speed over a call moves these ratios less than the
    medians of the whole call (how far they spread says how far to trust a row)."""
    return [mine / theirs for mine, theirs in zip(rounds[side], rounds[base])]


def spread_cell(ratios: Sequence[float]) -> str:
    """The least and the largest of ``ratios`` as a table cell, ``0.91-1.04``."""
    return f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "—"


def pinned_arguments(parser: argparse.ArgumentParser, what: str, results: str) -> None:
    """The options every whole-model benchmark takes: ``--cores``, ``--torch``, ``--only``,
    ``--results``, ``--rounds`` (see :func:`use_rounds`), and the hidden ones of its pinned
    children (``--threads``, ``--json``, ``--with-torch``)."""
    parser.add_argument("--cores", default="", help="comma-separated core counts (1,2,16)")
    parser.add_argument("--torch", default="no,yes",
                        help="measure in processes with torch imported: no, yes or no,yes")
    parser.add_argument("--only", default="",
                        help=f"run the {what} whose name has this (or one of A|B|...)")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"where {results} goes")
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help=f"alternating rounds of each side (default {ROUNDS})")
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--with-torch", action="store_true", help=argparse.SUPPRESS)


def pinned_child(args: argparse.Namespace, measure: Callable[[], Sequence[Any]]) -> None:
    """A pinned child's work (:func:`run_pinned`): torch imported first where
    ``--with-torch`` asks, as a conversion script does (its GNU OpenMP then loads before our
    kernels'), then ``measure()``'s results written to ``--json`` for the parent."""
    if args.with_torch:
        import torch  # noqa: F401
    args.json.write_text(json.dumps([dataclasses.asdict(r) for r in measure()]))


def run_all_pinned(args: argparse.Namespace, module: str, argv: Sequence[str],
                   result: type) -> list:
    """:func:`run_pinned` at each of ``--cores`` (default: every usable CPU), in a process
    without torch and one with it, as ``--torch`` asks."""
    cores = sorted({int(k) for k in args.cores.split(",")}) if args.cores else [
        len(os.sched_getaffinity(0))]
    return [r for count in cores for with_torch in args.torch.split(",")
            for r in run_pinned(count, module,
                                [*argv, "--rounds", str(args.rounds),
                                 *(["--with-torch"] if with_torch == "yes" else [])],
                                result)]


def use_rounds(args: argparse.Namespace) -> None:
    """Set :data:`ROUNDS` to ``--rounds`` for this process (the parent's results header and
    each pinned child's :func:`alternating`): more rounds narrow a noisy machine's medians
    and per-round spread."""
    global ROUNDS
    if args.rounds < 1:
        raise SystemExit(f"--rounds {args.rounds}: at least 1")
    ROUNDS = args.rounds


def write_results(text: str, folder: Path, name: str) -> None:
    """Print ``text`` and write it to ``folder / name``."""
    print(text)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    print(f"wrote {folder / name}", file=sys.stderr)


def rounds_header(title: str, repeat: int, detail: str = "") -> str:
    """A whole-run results file's title and how it was measured (:func:`alternating`)."""
    return (f"# {title}\n\n{platform.machine()}, {os.cpu_count()} cores ({_cpu_name()}); "
            f"onnxruntime {ort.__version__}; {detail}median of {ROUNDS} alternating rounds of "
            f"{repeat} runs; per round: the least and the largest ratio of one round's two "
            f"medians. At k cores every session has k intra-op threads and the process k CPUs.")


def table_head(*columns: str, text: Sequence[str] = ()) -> str:
    """A Markdown table's header row and rule: the first column and those named in ``text``
    left-aligned, the others (figures) right-aligned."""
    rule = "|".join("---" if i == 0 or name in text else "---:" for i, name in enumerate(columns))
    return f"| {' | '.join(columns)} |\n|{rule}|"
