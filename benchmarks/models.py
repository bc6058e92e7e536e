"""Whole detectors: torchvision's Mask R-CNN and Faster R-CNN, stock in plain onnxruntime
against raised in ``dml_onnx.InferenceSession``, in one run.

    python -m benchmarks.models [--repeat N] [--cores 1,2,16] [--torch no,yes] [--size 512]
                                [--proposals 1000] [--only TEXT|TEXT...] [--results DIR]

Each model (random weights, seed 0; ``min_size = max_size = --size``, ``--proposals`` RPN
proposals kept after NMS, and ``box_score_thresh`` 0, so that both heads do their full work,
or torchvision's default 0.05) is exported by each of torch's exporters (the TorchScript one,
``dynamo=False``, and ``dynamo=True``; a failed export is reported, not hidden). The stock file
runs in a plain ``onnxruntime.InferenceSession``; :func:`dml_onnx.raising.raise_model` turns its
``RoiAlign`` nodes into ``RoiAlign1``, which runs in ``dml_onnx.InferenceSession``. Both get the
same session options (``intra_op_num_threads`` = the cores). The script checks that the outputs
agree, then prints per model the median of ``--repeat`` whole runs of each in each of five
alternating rounds (a new session each, its first two runs untimed), the least and the
largest ratio of one round's two medians, and, from
onnxruntime's profiler (a second pair of sessions; a split ``dml_onnx`` session's trace
holds its kernel calls as nodes too), the node time per run summed per op type for the types
that take the most time: per type the median over ``--repeat`` runs, after two warm-up runs.

Every core count (``--cores``, default: every usable CPU) runs in a child process pinned to
that many CPUs (its affinity), as ``python -m benchmarks.run`` does, once without torch and
once with torch imported first (``--torch no,yes``, as in a conversion script). The models are
exported in other child processes (:func:`export_all`), so that a measuring process imports
torch only when asked to. Writes ``models.md`` to
``--results`` (default: ``benchmarks/results``). Needs the ``torch`` extra.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import warnings
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnx
import onnxruntime as ort

import dml_onnx
from benchmarks.harness import (
    WARM_UP_RUNS,
    alternating,
    pinned_arguments,
    pinned_child,
    round_ratios,
    rounds_header,
    run_all_pinned,
    settle,
    spread_cell,
    table_head,
    use_rounds,
    write_results,
)
from dml_onnx.raising import raise_model

DETECTORS = {"Mask R-CNN": "maskrcnn_resnet50_fpn", "Faster R-CNN": "fasterrcnn_resnet50_fpn"}
THRESHOLDS = {"score threshold 0": 0.0, "default threshold": 0.05}
EXPORTERS = {"TorchScript": False, "dynamo": True}
SHOWN_OPS = ("RoiAlign", "RoiAlign1", "Conv", "MaxRoiPool", "RoiPooling")
"""Op types always shown in the node-time table (besides the slowest others)."""


@dataclass
class Result:
    """One model, exporter and threshold at one core count."""

    model: str
    cores: int
    torch: bool = False  # torch imported in the measuring process
    stock_ms: float = float("nan")
    raised_ms: float = float("nan")
    stock_nodes: dict[str, float] = field(default_factory=dict)  # op type -> ms per run
    raised_nodes: dict[str, float] = field(default_factory=dict)
    round_ratios: list[float] = field(default_factory=list)  # raised / stock, each round
    agrees: str = ""
    raised_count: int = 0
    error: str = ""


def _detector(name: str, size: int, proposals: int, threshold: float):
    import torch
    import torchvision

    torch.manual_seed(0)
    return getattr(torchvision.models.detection, DETECTORS[name])(
        weights=None, weights_backbone=None, num_classes=91, min_size=size, max_size=size,
        rpn_post_nms_top_n_test=proposals, box_score_thresh=threshold).eval()


def export(name: str, dynamo: bool, size: int, proposals: int, threshold: float
           ) -> tuple[bytes, np.ndarray]:
    """The stock ONNX file of a detector and an image to feed it."""
    import torch

    model = _detector(name, size, proposals, threshold)
    image = torch.rand(3, size, size, generator=torch.Generator().manual_seed(1))
    return onnx_bytes(model, image, dynamo), image.numpy()


def onnx_bytes(model, image, dynamo: bool = False) -> bytes:
    """The ONNX file (opset 18) torch's exporter writes for a detector called on ``[image]``:
    TorchScript's, or dynamo's with ``dynamo=True``; the exporters' warnings silenced."""
    import torch

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            program = torch.onnx.export(model, ([image],), dynamo=True, opset_version=18)
            assert program is not None  # dynamo=True returns the program
            # torch declares a path; a file object works where the weights are inside
            program.save(buffer)  # type: ignore[arg-type]
        else:
            # torch declares f a path, yet the TorchScript exporter writes to a file object
            torch.onnx.export(model, ([image],), buffer,  # type: ignore[arg-type]
                              dynamo=False, opset_version=18)
    return buffer.getvalue()


class _Session(Protocol):
    """What the measurements call of a session: onnxruntime's or dml_onnx's."""

    def run(self, output_names: Sequence[str] | None, input_feed: dict[str, Any]) -> list[Any]:
        ...

    def end_profiling(self) -> str:
        ...


def _options(cores: int, profile: str = "") -> ort.SessionOptions:
    options = ort.SessionOptions()
    if cores:
        options.intra_op_num_threads = cores
    if profile:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    return options


def node_times(make: Callable[[ort.SessionOptions], _Session], feeds: dict, cores: int,
               runs: int, folder: str) -> dict[str, float]:
    """Milliseconds per run spent in each op type, from onnxruntime's profiler: per op type,
    the median over ``runs`` runs of the run's total (a mean of a few runs of millisecond
    nodes moves with one late thread wake-up)."""
    session = make(_options(cores, os.path.join(folder, "profile")))
    for _ in range(runs + WARM_UP_RUNS):
        session.run(None, feeds)
    path = session.end_profiling()
    per_run: list[dict[str, float]] = [defaultdict(float)]
    for event in json.loads(Path(path).read_text()):
        if event.get("cat") == "Session" and event.get("name") == "model_run":
            per_run.append(defaultdict(float))  # a run's nodes are logged before its end
        elif event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            per_run[-1][_op_type(event["args"]["op_name"])] += event["dur"] / 1000
    counted = per_run[WARM_UP_RUNS:-1]
    return {op: statistics.median(run.get(op, 0.0) for run in counted)
            for op in {op for run in counted for op in run}}


def _op_type(name: str) -> str:
    """The op type of a profiler ``op_name``: a ``dml_onnx`` node's carries its kernel's
    binding name (``RoiAlign1_float_int64_unguarded``)."""
    return next((op for op in dml_onnx.OPERATORS_BY_NAME if name.startswith(f"{op}_")), name)


def _agree(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> str:
    if len(got) != len(want):
        return f"no: {len(got)} outputs against {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            return f"no: output {k} shape {list(g.shape)} against {list(w.shape)}"
        if np.issubdtype(w.dtype, np.floating) and not np.allclose(g, w, rtol=1e-4, atol=1e-4):
            return f"no: output {k} differs by {np.abs(g - w).max():.3g}"
        if not np.issubdtype(w.dtype, np.floating) and not np.array_equal(g, w):
            return f"no: output {k} differs"
    return "yes"


def measure(name: str, stock: bytes, image: np.ndarray, cores: int, repeat: int) -> Result:
    """Stock against raised at ``cores`` threads (this process's affinity decides the CPUs).
    Each side runs alone: its sessions are gone, and their idle threads with them, before the
    other side starts (a plain session's spinning threads slow whatever runs next). The whole
    runs are timed in :data:`ROUNDS` alternating rounds, a new session each, so that a drift of
    the machine's speed does not fall on one side; each session's first
    :data:`~benchmarks.harness.WARM_UP_RUNS` runs are not timed."""
    result = Result(name, cores)
    raised = raise_model(onnx.load_from_string(stock))
    result.raised_count = len(raised.raised)
    feeds = {onnx.load_from_string(stock).graph.input[0].name: image}

    def plain(options: ort.SessionOptions) -> ort.InferenceSession:
        return ort.InferenceSession(stock, options, providers=["CPUExecutionProvider"])

    def ours(options: ort.SessionOptions) -> dml_onnx.InferenceSession:
        return dml_onnx.InferenceSession(raised.model, options)

    medians, outputs, rounds = alternating({"stock": lambda: plain(_options(cores)),
                                            "raised": lambda: ours(_options(cores))}, feeds,
                                           repeat)
    result.stock_ms, result.raised_ms = medians["stock"], medians["raised"]
    result.round_ratios = round_ratios(rounds, "raised", "stock")
    for side, make in (("stock", plain), ("raised", ours)):
        with tempfile.TemporaryDirectory() as folder:
            nodes = node_times(make, feeds, cores, repeat, folder)
        setattr(result, f"{side}_nodes", nodes)
        settle()
    result.agrees = _agree(outputs["raised"], outputs["stock"])
    return result


def cases(args: argparse.Namespace) -> list[tuple[str, str, bool, float]]:
    chosen = []
    for model in DETECTORS:
        for exporter, dynamo in EXPORTERS.items():
            for threshold_name, threshold in THRESHOLDS.items():
                label = f"{model}, {exporter}, {threshold_name}"
                if any(part in label for part in args.only.split("|")):
                    chosen.append((label, model, dynamo, threshold))
    return chosen


def export_all(args: argparse.Namespace, folder: Path) -> None:
    """Each chosen case's stock file and image into ``folder`` (``<k>.npz``, or ``<k>.error``
    with the exporter's failure), exported in a child process: a measuring process imports
    torch only under ``--torch yes``, and then before anything else."""
    context = multiprocessing.get_context("spawn")
    for k, (label, model, dynamo, threshold) in enumerate(cases(args)):
        print(f"== exporting {label}", file=sys.stderr, flush=True)
        child = context.Process(target=_export_to, args=(
            folder / str(k), model, dynamo, args.size, args.proposals, threshold))
        child.start()
        child.join()
        if child.exitcode and not (folder / f"{k}.error").exists():
            (folder / f"{k}.error").write_text(f"the exporting process ended ({child.exitcode})")


def _export_to(path: Path, model: str, dynamo: bool, size: int, proposals: int,
               threshold: float) -> None:
    try:
        stock, image = export(model, dynamo, size, proposals, threshold)
    except Exception as error:  # an exporter that cannot take the model: say so
        path.with_suffix(".error").write_text(
            f"export failed: {type(error).__name__}: {str(error).splitlines()[0][:160]}")
        return
    np.savez(path.with_suffix(".npz"), stock=np.frombuffer(stock, np.uint8), image=image)


def run_here(args: argparse.Namespace, cores: int, folder: Path) -> list[Result]:
    """Each chosen case measured at ``cores`` threads, read from ``folder``
    (:func:`export_all`)."""
    results = []
    for k, (label, *_) in enumerate(cases(args)):
        print(f"== {label} at {cores} core(s)", file=sys.stderr, flush=True)
        failure = folder / f"{k}.error"
        if failure.exists():
            results.append(Result(label, cores, args.with_torch, error=failure.read_text()))
            continue
        with np.load(folder / f"{k}.npz") as saved:
            stock, image = saved["stock"].tobytes(), saved["image"]
        results.append(measure(label, stock, image, cores, args.repeat))
        results[-1].model, results[-1].torch = label, args.with_torch
    return results


def _ms(value: float) -> str:
    return "—" if value != value else f"{value:.1f}"


def table(results: Sequence[Result]) -> str:
    """Whole runs and the ROI nodes' time, one line per model and core count."""
    lines = [table_head("model", "cores", "torch imported", "stock ms", "raised ms",
                        "raised / stock", "per round", "RoiAlign ms (stock)",
                        "RoiAlign1 ms (raised)", "ROI nodes raised / stock", "outputs agree",
                        text=("torch imported", "per round", "outputs agree"))]
    for r in results:
        torch = "yes" if r.torch else "no"
        if r.error:
            lines.append(f"| {r.model} | {r.cores} | {torch} | {r.error} | | | | | | | |")
            continue
        stock_roi = r.stock_nodes.get("RoiAlign", float("nan"))
        ours_roi = r.raised_nodes.get("RoiAlign1", float("nan"))
        lines.append(f"| {r.model} | {r.cores} | {torch} | {_ms(r.stock_ms)} | "
                     f"{_ms(r.raised_ms)} | {r.raised_ms / r.stock_ms:.2f} | "
                     f"{spread_cell(r.round_ratios)} | {_ms(stock_roi)} | "
                     f"{_ms(ours_roi)} | {ours_roi / stock_roi:.2f} | {r.agrees} |")
    return "\n".join(lines)


def node_table(results: Sequence[Result], top: int = 6) -> str:
    """Per model and core count, ms per run of the slowest op types, stock / raised."""
    lines = [table_head("model", "cores", "torch imported", "op type: stock ms / raised ms",
                        text=("torch imported", "op type: stock ms / raised ms"))]
    for r in results:
        if r.error:
            continue
        both = {**r.stock_nodes, **r.raised_nodes}
        slowest = sorted(both, key=lambda op: -both[op])[:top]
        shown = [op for op in SHOWN_OPS if op in both] + [o for o in slowest
                                                          if o not in SHOWN_OPS]
        cells = ", ".join(f"{op} {_ms(r.stock_nodes.get(op, float('nan')))} / "
                          f"{_ms(r.raised_nodes.get(op, float('nan')))}" for op in shown)
        lines.append(f"| {r.model} | {r.cores} | {'yes' if r.torch else 'no'} | {cells} |")
    return "\n".join(lines)


def markdown(results: Sequence[Result], args: argparse.Namespace) -> str:
    return (rounds_header("Detectors: stock against raised", args.repeat,
                          f"image {args.size}x{args.size}, {args.proposals} proposals, ")
            + f"\n\n{table(results)}\n\nNode time per run (onnxruntime's profiler), by op "
            f"type, the median of {args.repeat} runs:\n\n{node_table(results)}\n")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="runs per median (default 7)")
    parser.add_argument("--size", type=int, default=512, help="image side (default 512)")
    parser.add_argument("--proposals", type=int, default=1000,
                        help="RPN proposals after NMS (default 1000)")
    pinned_arguments(parser, "models", "models.md")
    parser.add_argument("--exports", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    use_rounds(args)
    if args.exports:  # a pinned child of the run below
        pinned_child(args, lambda: run_here(args, args.threads, args.exports))
        return
    with tempfile.TemporaryDirectory() as folder:
        export_all(args, Path(folder))
        results = run_all_pinned(args, "benchmarks.models", [
            "--repeat", str(args.repeat), "--size", str(args.size), "--proposals",
            str(args.proposals), "--only", args.only, "--exports", folder], Result)
    write_results(markdown(results, args), args.results, "models.md")


if __name__ == "__main__":
    main()
