"""Time every operator through ``dml_onnx.InferenceSession`` against its native peers, in one run.

    python benchmarks/run.py [--repeat N] [--only TEXT] [--results DIR] [--cores 1,2,16]

Each row runs one ``dml_onnx`` node and then each of its peers on the same inputs (one side's
samples after the other's: see :func:`measure`), and reports the median time of each, the
spread (interquartile range over the median) and the ratio ours / peer against the target.
Peers: onnxruntime's own kernels on the node's standard form (``MaxRoiPool``, ``RoiAlign``,
``LpPool``, ``Col2Im``, ``Pad`` + ``Gather`` for Unfold), ``torch.nn.functional.unfold`` and
torchvision's ``roi_align`` backward when torch and torchvision are importable (they are never
a dependency; rows whose peer is missing say so), and for the float16 rows our own float32 run.
Before timing, every row checks that our output equals the peer's where the specification says
they agree, and measures the memory our run allocates (numpy allocations, by ``tracemalloc``).

With ``--cores``, the rows run once per core count, each in a child process pinned to that many
CPUs (its affinity, so our kernels' threads follow), with onnxruntime's ``intra_op_num_threads``
(ours and the peers' sessions) and torch's ``set_num_threads`` set to the same count: every side
gets the same cores. The report then holds a table per core count and one of how each row
scales.

Writes ``benchmarks.md`` (the tables) to ``--results`` (default: ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort

import dml_onnx
from dml_onnx.conformance import single_node_model

RESULTS = Path(__file__).resolve().parent / "results"
SAMPLE_SECONDS = 0.004  # a tiny case repeats its call until one sample takes about this long
SETTLE = 0.3
"""Seconds of pause before each side's samples."""
threads = 0
"""Threads every side may use (``--threads``; 0: each library's default)."""


def set_threads_from_arguments(description: str) -> None:
    """Parse a script's one option, ``--threads K``, into :data:`threads`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--threads", type=int, default=0,
                        help="onnxruntime intra-op threads of every session (0: default)")
    global threads
    threads = parser.parse_args().threads


def session_options() -> ort.SessionOptions:
    """Session options with :data:`threads` as onnxruntime's intra-op thread count."""
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return options


def _torch():
    """torch with :data:`threads` threads."""
    import torch
    if threads:
        torch.set_num_threads(threads)
    return torch


@dataclass(frozen=True)
class Agreement:
    """How our output must compare with a peer's: exactly, or within a tolerance."""

    rtol: float = 0.0
    atol: float = 0.0

    def check(self, ours: np.ndarray, peer: np.ndarray) -> tuple[bool, float]:
        """(agrees, largest absolute difference)."""
        ours, peer = np.asarray(ours), np.asarray(peer)
        if ours.shape != peer.shape:
            return False, math.inf
        diff = float(np.max(np.abs(ours.astype(np.float64) - peer.astype(np.float64)),
                            initial=0.0))
        if not self.rtol and not self.atol:
            return bool(np.array_equal(ours, peer)), diff
        return bool(np.allclose(ours, peer, rtol=self.rtol, atol=self.atol)), diff

    def describe(self) -> str:
        return "exact" if not self.rtol and not self.atol else f"rtol {self.rtol:g}"


EXACT = Agreement()


@dataclass
class Peer:
    """A peer of a row: ``make()`` returns its call (returning its output) or ``None`` when
    the library it needs is missing (``missing`` says which); ``comparable`` turns its output
    into what ours is compared with (outside the timing)."""

    label: str
    make: Callable[[], Callable[[], np.ndarray] | None]
    agreement: Agreement
    missing: str = ""
    comparable: Callable[[np.ndarray], np.ndarray] = np.asarray


@dataclass
class Row:
    """One benchmark row: a node of ``op`` on ``inputs`` and the peers it is compared with."""

    name: str
    op: str
    inputs: tuple[np.ndarray | None, ...]
    attributes: dict
    target: float
    peers: list[Peer] = field(default_factory=list)
    outputs: tuple[bool, ...] = (True,)
    tiny: bool = False
    onnxruntime: tuple[str, Agreement] | None = None
    """Add onnxruntime on the node's standard form as a peer: (its main ops, agreement)."""

    def model(self):
        definition = dml_onnx.OPERATORS_BY_NAME[self.op]
        return single_node_model(definition, self.inputs, self.attributes, self.outputs)

    def feeds(self) -> dict[str, np.ndarray]:
        definition = dml_onnx.OPERATORS_BY_NAME[self.op]
        return {p.name: a for p, a in zip(definition.inputs, self.inputs) if a is not None}


@dataclass
class Result:
    row: str
    peer: str
    target: float
    ours_ms: float = math.nan
    ours_spread: float = math.nan
    peer_ms: float = math.nan
    peer_spread: float = math.nan
    agrees: str = ""
    temporaries: float = math.nan  # our peak numpy allocation beyond the outputs, in outputs

    @property
    def ratio(self) -> float:
        return self.ours_ms / self.peer_ms if self.peer_ms else math.nan

    @property
    def met(self) -> str:
        return "" if math.isnan(self.ratio) else ("yes" if self.ratio <= self.target else "no")


# ----------------------------------------------------------------------------- peers
def _onnxruntime_peer(row: Row, ops: str, agreement: Agreement) -> Peer:
    def make() -> Callable[[], np.ndarray]:
        standard = dml_onnx.lower_model(row.model())
        session = ort.InferenceSession(standard.SerializeToString(), session_options(),
                                       providers=["CPUExecutionProvider"])
        feeds = row.feeds()
        return lambda: session.run(None, feeds)[0]
    return Peer(f"onnxruntime {ops}", make, agreement)


def _torch_unfold_peer(x: np.ndarray, window: int, padding: int) -> Peer:
    def make() -> Callable[[], np.ndarray] | None:
        try:
            torch = _torch()
        except ImportError:
            return None
        tensor = torch.from_numpy(x)
        return lambda: torch.nn.functional.unfold(tensor, window, padding=padding).numpy()
    return Peer("torch unfold", make, EXACT, missing="torch")


def _torchvision_backward_peer(x: np.ndarray, boxes: np.ndarray, batch: np.ndarray,
                               gradient: np.ndarray, output: int, scale: float,
                               sampling: int) -> Peer:
    def make() -> Callable[[], np.ndarray] | None:
        try:
            torch = _torch()
            import torchvision
        except ImportError:
            return None
        image = torch.from_numpy(x).requires_grad_(True)
        regions = torch.from_numpy(np.concatenate([batch[:, None], boxes], 1).astype(x.dtype))
        y = torchvision.ops.roi_align(image, regions, output, scale, sampling, aligned=True)
        g = torch.from_numpy(gradient)
        # the backward alone: the forward graph is kept
        return lambda: torch.autograd.grad(y, image, g, retain_graph=True)[0].numpy()
    return Peer("torchvision roi_align backward", make, Agreement(1e-4, 1e-4),
                missing="torch, torchvision")


def _float32_peer(row: Row) -> Peer:
    """Ours on the same values in float32, rounded to float16 afterwards: the spec's float16
    rule (compute in float32, round once) makes the two equal."""
    def make() -> Callable[[], np.ndarray]:
        wide = tuple(a.astype(np.float32) if a is not None and a.dtype == np.float16 else a
                     for a in row.inputs)
        wide_row = Row(row.name, row.op, wide, row.attributes, row.target, outputs=row.outputs)
        session = dml_onnx.InferenceSession(wide_row.model(), session_options())
        feeds = wide_row.feeds()
        return lambda: session.run(None, feeds)[0]
    return Peer("ours float32", make, EXACT, comparable=lambda y: y.astype(np.float16))


# ----------------------------------------------------------------------------- rows
def _rois(rng: np.random.Generator, count: int, image: int) -> np.ndarray:
    """ROIs ``[x1, y1, x2, y2]`` in an ``image``-pixel square, 16 to 512 pixels across."""
    size = rng.uniform(16, 512, (count, 2))
    corner = rng.uniform(0, image - size)
    return np.concatenate([corner, corner + size], axis=1).astype(np.float32)


FPN_LEVELS = ((2, 200, 272), (3, 100, 136), (4, 50, 68), (5, 25, 34))
"""(level k, H, W) of an FPN's P2-P5 maps for an 800x1088 image (spatial scale 2 ** -k)."""


def _fpn_rows(rng: np.random.Generator, align: dict, agreement: tuple) -> list[Row]:
    """RoiAlign1 on each FPN level of an 800x1088 image, as a detector's box head calls it:
    1000 proposals (16 to 512 pixels across) dealt to the levels by torchvision's level mapper
    (``floor(4 + log2(sqrt(area) / 224))`` clamped to 2..5), each level's share on its map."""
    size = rng.uniform(16, 512, (1000, 2))
    corner = rng.uniform(0, np.array([1088, 800]) - size)
    boxes = np.concatenate([corner, corner + size], axis=1).astype(np.float32)
    levels = np.clip(np.floor(4 + np.log2(np.sqrt(size.prod(axis=1)) / 224) + 1e-6), 2, 5)
    result = []
    for k, height, width in FPN_LEVELS:
        chosen = boxes[levels == k]
        feature = rng.standard_normal((1, 256, height, width)).astype(np.float32)
        attributes = {**align, "spatial_scale_x": 2.0 ** -k, "spatial_scale_y": 2.0 ** -k}
        result.append(Row(f"RoiAlign1 FPN P{k}, {len(chosen)} ROIs, X [1,256,{height},{width}]",
                          "RoiAlign1", (feature, chosen, np.zeros(len(chosen), np.int64)),
                          {"output_size": [7, 7], **attributes}, 0.7,
                          onnxruntime=agreement))
    return result


def rows(rng: np.random.Generator) -> list[Row]:
    """The rows of the issue's target table, then the tiny cases, then float16 ones."""
    feature = rng.standard_normal((8, 64, 56, 56)).astype(np.float32)
    volume = rng.standard_normal((2, 16, 16, 32, 32)).astype(np.float32)
    columns = rng.standard_normal((8, 576, 3136)).astype(np.float32)
    image = rng.standard_normal((2, 256, 64, 64)).astype(np.float32)
    boxes = _rois(rng, 512, 1024)
    batch = rng.integers(0, 2, 512)
    pool_rois = np.concatenate([batch[:, None].astype(np.float32), boxes], axis=1)
    gradient = rng.standard_normal((512, 256, 7, 7)).astype(np.float32)
    window = {"window_sizes": [3, 3], "start_padding": [1, 1], "end_padding": [1, 1]}
    pad = {"start_padding": [1, 1], "end_padding": [1, 1]}
    align = {"spatial_scale_x": 1 / 16, "spatial_scale_y": 1 / 16,
             "minimum_samples_per_output": 2, "maximum_samples_per_output": 2}
    grad_attributes = {**align, "input_shape": list(image.shape)}

    tiny = rng.standard_normal((1, 1, 8, 8)).astype(np.float32)
    tiny_box = np.array([[1, 1, 6, 5]], np.float32)
    tiny_batch = np.zeros(1, np.int64)
    tiny_columns = rng.standard_normal((1, 9, 64)).astype(np.float32)
    tiny_gradient = rng.standard_normal((1, 1, 2, 2)).astype(np.float32)
    tiny_align = {"minimum_samples_per_output": 2, "maximum_samples_per_output": 2}

    close = Agreement(1e-5, 1e-5)
    lp_pool, col2im = ("LpPool", close), ("Col2Im", close)
    gather, max_roi_pool = ("Pad+Gather", EXACT), ("MaxRoiPool", EXACT)
    roi_align = ("RoiAlign", Agreement(1e-4, 1e-4))
    big = [
        Row("LpPooling p=2, 3x3, pad 1, X [8,64,56,56]", "LpPooling", (feature,),
            {"window_size": [3, 3], **pad}, 0.3, onnxruntime=lp_pool),
        Row("LpPooling p=3, 3x3x3, X [2,16,16,32,32]", "LpPooling", (volume,),
            {"window_size": [3, 3, 3], "p": 3}, 0.5, onnxruntime=lp_pool),
        Row("Unfold 3x3, pad 1, X [8,64,56,56]", "Unfold", (feature,), window, 0.5,
            [_torch_unfold_peer(feature, 3, 1)], onnxruntime=gather),
        Row("Fold 3x3, pad 1, [8,576,3136] -> [8,64,56,56]", "Fold", (columns,),
            {**window, "output_size": [56, 56]}, 0.5, onnxruntime=col2im),
        Row("RoiPooling 7x7, 512 ROIs, X [2,256,64,64]", "RoiPooling", (image, pool_rois),
            {"pooled_size": [7, 7], "spatial_scale": 1 / 16}, 0.7, onnxruntime=max_roi_pool),
        Row("RoiAlign1 avg, sampling 2, 7x7, 512 ROIs", "RoiAlign1", (image, boxes, batch),
            {"output_size": [7, 7], **align}, 1.0, onnxruntime=roi_align),
        Row("RoiAlignGrad dX, same", "RoiAlignGrad", (None, gradient, boxes, batch),
            grad_attributes, 0.3,
            [_torchvision_backward_peer(image, boxes, batch, gradient, 7, 1 / 16, 2)],
            outputs=(True, False)),
        *_fpn_rows(rng, align, roi_align),
    ]
    small = [
        Row("LpPooling tiny, X [1,1,8,8]", "LpPooling", (tiny,),
            {"window_size": [3, 3], **pad}, 2.0, onnxruntime=lp_pool),
        Row("Unfold tiny, X [1,1,8,8]", "Unfold", (tiny,), window, 2.0,
            [_torch_unfold_peer(tiny, 3, 1)], onnxruntime=gather),
        Row("Fold tiny, [1,9,64] -> [1,1,8,8]", "Fold", (tiny_columns,),
            {**window, "output_size": [8, 8]}, 2.0, onnxruntime=col2im),
        Row("RoiPooling tiny, 1 ROI, X [1,1,8,8]", "RoiPooling",
            (tiny, np.concatenate([tiny_batch[:, None], tiny_box], 1).astype(np.float32)),
            {"pooled_size": [2, 2]}, 2.0, onnxruntime=max_roi_pool),
        Row("RoiAlign1 tiny, 1 ROI, X [1,1,8,8]", "RoiAlign1", (tiny, tiny_box, tiny_batch),
            {"output_size": [2, 2], **tiny_align}, 2.0, onnxruntime=roi_align),
        Row("RoiAlignGrad dX tiny, 1 ROI, X [1,1,8,8]", "RoiAlignGrad",
            (None, tiny_gradient, tiny_box, tiny_batch),
            {**tiny_align, "input_shape": list(tiny.shape)}, 2.0,
            [_torchvision_backward_peer(tiny, tiny_box, tiny_batch, tiny_gradient, 2, 1.0, 2)],
            outputs=(True, False)),
    ]
    for row in small:
        row.tiny = True
    half = []
    for row in big:
        inputs = tuple(a.astype(np.float16) if a is not None and a.dtype == np.float32 else a
                       for a in row.inputs)
        if row.op == "RoiPooling":  # batch ids and corners stay exact in float16
            inputs = (inputs[0], np.round(row.inputs[1]).astype(np.float16))
        half_row = Row(f"{row.name.split(',')[0]} float16", row.op, inputs, row.attributes,
                       1.5, outputs=row.outputs)
        half_row.peers = [_float32_peer(half_row)]
        half.append(half_row)
    return big + small + half


# ----------------------------------------------------------------------------- measuring
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
    process's peak resident memory (which also sees onnxruntime's own buffers)."""
    gc.collect()
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


def run_row(row: Row, repeat: int, log: Callable[[str], None]) -> list[Result]:
    session = dml_onnx.InferenceSession(row.model(), session_options())
    feeds = row.feeds()
    ours = lambda: session.run(None, feeds)[0]  # noqa: E731
    peers = list(row.peers)
    if row.onnxruntime is not None:
        peers.insert(0, _onnxruntime_peer(row, *row.onnxruntime))
    made = [(peer, peer.make()) for peer in peers]
    calls = [ours, *(call for _, call in made if call is not None)]
    # timed before any peer has run: onnxruntime's workers spin on the cores for a while
    # after a parallel kernel, which would slow down our samples
    log(f"  timing ours and {len(calls) - 1} peer(s), {repeat} samples each")
    samples = measure(calls, repeat, row.tiny)
    ours_ms, ours_spread = summary(samples[0])
    temp = math.nan if row.tiny else temporaries(lambda: session.run(None, feeds))
    timed = iter(samples[1:])
    out = []
    for peer, call in made:
        result = Result(row.name, peer.label, row.target)
        result.ours_ms, result.ours_spread, result.temporaries = ours_ms, ours_spread, temp
        if call is None:
            result.agrees = f"peer missing ({peer.missing} not importable)"
        else:
            agrees, diff = peer.agreement.check(ours(), peer.comparable(call()))
            result.agrees = (f"{'yes' if agrees else 'NO'} ({peer.agreement.describe()}, "
                             f"max diff {diff:.1e})")
            result.peer_ms, result.peer_spread = summary(next(timed))
        out.append(result)
    return out


# ----------------------------------------------------------------------------- reporting
def _ms(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.3f}" if value < 1 else f"{value:.1f}"


def table(results: Sequence[Result]) -> str:
    """The results as a Markdown table."""
    lines = ["| benchmark | peer | ours ms | spread | peer ms | spread | ratio | target | met "
             "| output check | temporaries |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|"]
    for r in results:
        ratio = "-" if math.isnan(r.ratio) else f"{r.ratio:.2f}"
        spread = "-" if math.isnan(r.peer_spread) else f"{r.peer_spread:.0%}"
        temp = "-" if math.isnan(r.temporaries) else f"{r.temporaries:.2f}"
        lines.append(f"| {r.row} | {r.peer} | {_ms(r.ours_ms)} | {r.ours_spread:.0%} | "
                     f"{_ms(r.peer_ms)} | {spread} | {ratio} | <= {r.target:g} | {r.met} | "
                     f"{r.agrees} | {temp} |")
    return "\n".join(lines)


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


def _load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan


def _torch_versions() -> str:
    try:
        import torch
        import torchvision
    except ImportError:
        return "; torch/torchvision not installed"
    return f", torch {torch.__version__}, torchvision {torchvision.__version__}"


LEGEND = ("ratio = median ours / median peer (below 1: we are faster); spread = "
          "interquartile range / median; output check = our output against the peer's; "
          "temporaries = peak memory of our run beyond its outputs (numpy allocations, and "
          "the growth of the process's peak resident size), in units of the outputs' size.")


def markdown(results: Sequence[Result], repeat: int, load: tuple[float, float]) -> str:
    return (f"# Benchmark results\n\n{environment(repeat, load)}.\n\n{LEGEND}\n\n"
            + table(results) + "\n")


def scaling_table(by_cores: dict[int, list[Result]]) -> str:
    """Per row and peer: our time, the peer's time and the ratio at each core count, and our
    time at the most cores over our time at the fewest."""
    counts = sorted(by_cores)
    slash = " / ".join(str(k) for k in counts)
    lines = [f"| benchmark | peer | ours ms at {slash} cores | peer ms | ratio | ours "
             f"{counts[-1]} / ours {counts[0]} |", "|---|---|---:|---:|---:|---:|"]
    for first in by_cores[counts[0]]:
        same = [next(r for r in by_cores[k] if (r.row, r.peer) == (first.row, first.peer))
                for k in counts]
        ratios = " / ".join("-" if math.isnan(r.ratio) else f"{r.ratio:.2f}" for r in same)
        lines.append(f"| {first.row} | {first.peer} | "
                     f"{' / '.join(_ms(r.ours_ms) for r in same)} | "
                     f"{' / '.join(_ms(r.peer_ms) for r in same)} | {ratios} | "
                     f"{same[-1].ours_ms / same[0].ours_ms:.2f} |")
    return "\n".join(lines)


def cores_markdown(by_cores: dict[int, list[Result]], repeat: int,
                   load: tuple[float, float]) -> str:
    """The report of a ``--cores`` run: how each row scales, then a table per core count."""
    parts = [f"# Benchmark results at {', '.join(map(str, sorted(by_cores)))} cores\n\n"
             f"{environment(repeat, load)}. At k cores every side is given k cores: our "
             "process is pinned to k CPUs, onnxruntime's intra_op_num_threads is k, torch "
             f"uses k threads.\n\n{LEGEND}\n\n## Scaling\n\n{scaling_table(by_cores)}\n"]
    for k in sorted(by_cores):
        parts.append(f"\n## {k} core{'s' if k > 1 else ''}\n\n{table(by_cores[k])}\n")
    return "".join(parts)


def run_pinned(cores: int, argv: Sequence[str], script: str = __file__,
               result: type = Result) -> list:
    """``script``'s rows (this one's by default) in a child process pinned to the first
    ``cores`` usable CPUs, given ``--threads cores`` and ``--json FILE``, read back as
    ``result`` records."""
    cpus = sorted(os.sched_getaffinity(0))
    if cores > len(cpus):
        raise SystemExit(f"--cores {cores}: only {len(cpus)} CPUs are usable here")
    chosen = set(cpus[:cores])
    with tempfile.TemporaryDirectory() as folder:
        found = Path(folder) / "results.json"
        subprocess.run([sys.executable, script, *argv, "--threads", str(cores),
                        "--json", str(found)],
                       preexec_fn=lambda: os.sched_setaffinity(0, chosen), check=True,
                       stdout=subprocess.DEVNULL)
        return [result(**fields) for fields in json.loads(found.read_text())]


def main(argv: Sequence[str] | None = None) -> None:
    global threads
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=21, help="samples per call (default 21)")
    parser.add_argument("--only", default="", help="run the rows whose name contains this")
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="where to write benchmarks.md")
    parser.add_argument("--cores", default="",
                        help="comma-separated core counts (e.g. 1,2,16): a run per count, "
                             "every side pinned to that many cores")
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    threads = args.threads

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    load_before = _load()
    args.results.mkdir(parents=True, exist_ok=True)
    if args.cores:
        by_cores = {}
        for cores in sorted({int(k) for k in args.cores.split(",")}):
            log(f"== {cores} core(s)")
            by_cores[cores] = run_pinned(cores, ["--repeat", str(args.repeat),
                                                 "--only", args.only])
        text = cores_markdown(by_cores, args.repeat, (load_before, _load()))
        print(text)
        (args.results / "benchmarks.md").write_text(text)
        log(f"wrote {args.results / 'benchmarks.md'}")
        return
    chosen = [row for row in rows(np.random.default_rng(0)) if args.only in row.name]
    results: list[Result] = []
    for index, row in enumerate(chosen, 1):
        log(f"[{index}/{len(chosen)}] {row.name}")
        results += run_row(row, args.repeat, log)
    if args.json:
        args.json.write_text(json.dumps([dataclasses.asdict(r) for r in results]))
        return
    text = markdown(results, args.repeat, (load_before, _load()))
    print(text)
    (args.results / "benchmarks.md").write_text(text)
    log(f"wrote {args.results / 'benchmarks.md'}")


if __name__ == "__main__":
    main()
