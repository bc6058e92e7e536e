"""Graphs with many small ``dml_onnx`` nodes between standard ones, stock in plain onnxruntime
against ours in ``dml_onnx.InferenceSession``, in processes with and without torch imported.

    python -m benchmarks.graphs [--cores 1,2,16] [--repeat N] [--only TEXT|TEXT...]
                                [--torch no,yes] [--profile] [--results DIR]

The graphs (random weights, seed 0):

- ``LPPool CNN``: a convolution, then 8 times ``LPPool2d(2, 3, stride=1)`` and a 3x3
  convolution with ReLU (16 channels), exported by torch's TorchScript exporter (which
  decomposes ``LPPool2d`` into ``Pow``, ``AvgPool``, ``Sign``, ``Relu``, ``Abs``, ``Mul``) and
  raised (8 ``LpPooling`` nodes); at batch 1 on 3x64x64 and batch 4 on 3x128x128;
- ``Unfold/Fold chain``: 4 times a 3x3 convolution, ``Unfold`` 3x3 (pad 1), ``Fold`` back
  and a scale, ``[1,16,32,32]``; the stock model is its lowered form (``Col2Im``);
- ``RoiAlign1 chain``: 4 times a 3x3 convolution and a ``RoiAlign1`` of 16 regions of the
  previous map (``[1,32,32,32]`` first), so each level pools the regions of the last; the
  stock model is its lowered form (``RoiAlign``).

Each core count runs in child processes pinned to that many CPUs (every session gets as many
intra-op threads), one with torch imported before anything else (``--torch yes``: as in a
conversion script, torch's GNU OpenMP then loads first) and one without; the models are made
in another child. Per graph: the median of ``--repeat`` whole runs per side in each of five
alternating rounds (a new session each, its first two runs untimed), and the least and the
largest ratio of one round's two medians. ``--profile`` adds where
our run's time goes, from the split session's trace: the segments' runs, the kernels, and the
rest (Python between steps). Writes ``graphs.md`` to ``--results`` (default
``benchmarks/results``). Needs the ``torch`` extra.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.harness import (
    WARM_UP_RUNS,
    alternating,
    pinned_arguments,
    pinned_child,
    round_ratios,
    rounds_header,
    run_all_pinned,
    spread_cell,
    table_head,
    use_rounds,
    write_results,
)


@dataclass
class Result:
    """One graph at one core count, in a process with or without torch."""

    graph: str
    cores: int
    torch: bool
    stock_ms: float = float("nan")
    ours_ms: float = float("nan")
    nodes: int = 0
    segments_ms: float = float("nan")  # --profile: the segments' runs, per run
    kernels_ms: float = float("nan")  # the kernels and host nodes
    round_ratios: list[float] = field(default_factory=list)  # ours / stock, each round
    agrees: str = ""
    error: str = ""


def _cnn_models(batch: int, side: int) -> tuple[bytes, bytes, np.ndarray]:
    """The LPPool CNN exported (stock) and raised, and its input."""
    import io

    import onnx
    import torch

    from dml_onnx.raising import raise_model

    torch.manual_seed(0)
    layers: list[torch.nn.Module] = [torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU()]
    for _ in range(8):
        layers += [torch.nn.LPPool2d(2, 3, stride=1), torch.nn.Conv2d(16, 16, 3, padding=1),
                   torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).eval()
    image = torch.rand(batch, 3, side, side)
    buffer = io.BytesIO()
    torch.onnx.export(model, (image,), buffer,  # type: ignore[arg-type]
                      dynamo=False, opset_version=17, input_names=["image"],
                      output_names=["features"])
    stock = buffer.getvalue()
    raised = raise_model(onnx.load_from_string(stock))
    if len(raised.raised) != 8:
        raise RuntimeError(f"raised {len(raised.raised)} nodes, not 8")
    return stock, raised.model.SerializeToString(), image.numpy()


def _conv(name: str, source: str, channels: int, rng: np.random.Generator):
    """A 3x3 convolution (pad 1) of ``source`` into ``name`` and its weight initializers."""
    from onnx import helper, numpy_helper

    weight = (rng.standard_normal((channels, channels, 3, 3)) / (3 * channels ** 0.5))
    nodes = [helper.make_node("Conv", [source, f"{name}_w", f"{name}_b"], [name],
                              pads=[1, 1, 1, 1])]
    return nodes, [numpy_helper.from_array(weight.astype(np.float32), f"{name}_w"),
                   numpy_helper.from_array(np.zeros(channels, np.float32), f"{name}_b")]


def _chain_model(kind: str) -> tuple[bytes, bytes, dict[str, np.ndarray]]:
    """The Unfold/Fold or RoiAlign1 chain (ours) and its lowered form (stock), and feeds."""
    from onnx import TensorProto, helper, numpy_helper

    import dml_onnx

    rng = np.random.default_rng(0)
    nodes, weights = [], []
    feeds: dict[str, np.ndarray] = {}
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, None)]
    last = "X"
    if kind == "unfold":
        channels, side = 16, 32
        feeds["X"] = rng.standard_normal((1, channels, side, side)).astype(np.float32)
        weights.append(numpy_helper.from_array(np.array([1 / 9], np.float32), "ninth"))
        for k in range(4):
            conv, w = _conv(f"c{k}", last, channels, rng)
            nodes += conv + [
                dml_onnx.unfold(f"c{k}", f"u{k}", window_sizes=[3, 3], start_padding=[1, 1],
                                end_padding=[1, 1]),
                dml_onnx.fold(f"u{k}", f"f{k}", output_size=[side, side], window_sizes=[3, 3],
                              start_padding=[1, 1], end_padding=[1, 1]),
                helper.make_node("Mul", [f"f{k}", "ninth"], [f"s{k}"])]
            weights += w
            last = f"s{k}"
    else:
        channels, side, regions = 32, 32, 16
        feeds["X"] = rng.standard_normal((1, channels, side, side)).astype(np.float32)
        for k, (extent, out) in enumerate(((32, 16), (16, 8), (8, 8), (8, 4))):
            corner = rng.uniform(0, extent / 2, (regions, 2))
            size = rng.uniform(1, extent / 2, (regions, 2))
            rois = np.concatenate([corner, corner + size], axis=1).astype(np.float32)
            batch = (np.zeros(regions) if k == 0 else rng.permutation(regions)).astype(np.int64)
            weights += [numpy_helper.from_array(rois, f"rois{k}"),
                        numpy_helper.from_array(batch, f"batch{k}")]
            conv, w = _conv(f"c{k}", last, channels, rng)
            nodes += conv + [dml_onnx.roi_align1(
                f"c{k}", f"rois{k}", f"batch{k}", f"r{k}", output_size=[out, out],
                minimum_samples_per_output=2, maximum_samples_per_output=2)]
            weights += w
            last = f"r{k}"
    ours = dml_onnx.make_model(nodes, inputs, [helper.make_tensor_value_info(
        last, TensorProto.FLOAT, None)], initializers=weights)
    stock = dml_onnx.lower_model(ours)
    return stock.SerializeToString(), ours.SerializeToString(), feeds


GRAPHS: dict[str, Callable[[], tuple[bytes, bytes, dict[str, np.ndarray]]]] = {
    "LPPool CNN 1x3x64x64": lambda: _with_feed(*_cnn_models(1, 64)),
    "LPPool CNN 4x3x128x128": lambda: _with_feed(*_cnn_models(4, 128)),
    "Unfold/Fold chain": functools.partial(_chain_model, "unfold"),
    "RoiAlign1 chain": functools.partial(_chain_model, "roi_align"),
}


def _with_feed(stock: bytes, ours: bytes, image: np.ndarray
               ) -> tuple[bytes, bytes, dict[str, np.ndarray]]:
    return stock, ours, {"image": image}


def make_all(names: Sequence[str], folder: Path) -> None:
    """Each graph's two models and feeds into ``folder`` (``<k>.npz``), made in a child
    process: the measuring processes import torch only when asked to."""
    context = multiprocessing.get_context("spawn")
    child = context.Process(target=_make_to, args=(list(names), folder))
    child.start()
    child.join()
    if child.exitcode:
        raise SystemExit(f"making the graphs failed ({child.exitcode})")


def _make_to(names: list[str], folder: Path) -> None:
    for k, name in enumerate(names):
        stock, ours, feeds = GRAPHS[name]()
        arrays = {f"feed_{n}": v for n, v in feeds.items()}
        arrays.update(stock=np.frombuffer(stock, np.uint8), ours=np.frombuffer(ours, np.uint8))
        np.savez(folder / f"{k}.npz", **arrays)  # type: ignore[arg-type]


def measure(name: str, stock: bytes, ours: bytes, feeds: dict[str, np.ndarray], cores: int,
            repeat: int, profile: bool, with_torch: bool) -> Result:
    """Stock against ours at ``cores`` intra-op threads, alternating rounds (see the module)."""
    import onnx
    import onnxruntime as ort

    import dml_onnx

    result = Result(name, cores, with_torch)
    result.nodes = sum(n.domain == dml_onnx.DOMAIN for n in onnx.load_from_string(ours).graph.node)

    def options(prefix: str = "") -> ort.SessionOptions:
        chosen = ort.SessionOptions()
        chosen.intra_op_num_threads = cores
        if prefix:
            chosen.enable_profiling = True
            chosen.profile_file_prefix = prefix
        return chosen

    makers = {"stock": lambda o: ort.InferenceSession(stock, o,
                                                      providers=["CPUExecutionProvider"]),
              "ours": lambda o: dml_onnx.InferenceSession(ours, o)}
    def fresh(make: Callable[[ort.SessionOptions], object]) -> Callable[[], object]:
        return lambda: make(options())  # a split session adds its segments' weights to them

    medians, outputs, rounds = alternating({side: fresh(make) for side, make in makers.items()},
                                           feeds, repeat)
    result.stock_ms, result.ours_ms = medians["stock"], medians["ours"]
    result.round_ratios = round_ratios(rounds, "ours", "stock")
    got, want = outputs["ours"][0], outputs["stock"][0]
    result.agrees = ("yes" if got.shape == want.shape and np.allclose(got, want, 1e-3, 1e-3)
                     else f"no: {np.abs(got - want).max() if got.shape == want.shape else 'shape'}")
    if profile:
        with tempfile.TemporaryDirectory() as folder:
            session = makers["ours"](options(os.path.join(folder, "p")))
            for _ in range(repeat + WARM_UP_RUNS):
                session.run(None, feeds)
            events = json.loads(Path(session.end_profiling()).read_text())
        runs = repeat + WARM_UP_RUNS  # per run over all of them: its first ones are warm
        segments = sum(e["dur"] for e in events if e.get("name") == "segment_run")
        kernels = sum(e["dur"] for e in events if e.get("cat") == "Node"
                      and e.get("args", {}).get("provider") == "dml_onnx")
        result.segments_ms = segments / 1000 / runs
        result.kernels_ms = kernels / 1000 / runs
    return result


def run_here(args: argparse.Namespace, names: Sequence[str], folder: Path) -> list[Result]:
    results = []
    for k, name in enumerate(names):
        print(f"== {name} at {args.threads} core(s), torch {args.with_torch}", file=sys.stderr,
              flush=True)
        with np.load(folder / f"{k}.npz") as saved:
            stock, ours = saved["stock"].tobytes(), saved["ours"].tobytes()
            feeds = {n[5:]: saved[n] for n in saved.files if n.startswith("feed_")}
        try:
            results.append(measure(name, stock, ours, feeds, args.threads, args.repeat,
                                   args.profile, args.with_torch))
        except Exception as error:  # a graph that fails: say so in its row
            results.append(Result(name, args.threads, args.with_torch,
                                  error=f"{type(error).__name__}: {error}"[:200]))
    return results


def table(results: Sequence[Result]) -> str:
    lines = [table_head("graph", "dml_onnx nodes", "cores", "torch imported",
                        "stock ms", "ours ms", "ours / stock", "per round", "segments ms",
                        "kernels ms", "rest ms", "outputs agree",
                        text=("torch imported", "per round", "outputs agree"))]
    for r in results:
        if r.error:
            lines.append(f"| {r.graph} | | {r.cores} | {'yes' if r.torch else 'no'} | "
                         f"{r.error} | | | | | | | |")
            continue
        rest = r.ours_ms - r.segments_ms - r.kernels_ms
        profiled = (f"{r.segments_ms:.2f} | {r.kernels_ms:.2f} | {rest:.2f}"
                    if r.segments_ms == r.segments_ms else "— | — | —")
        lines.append(f"| {r.graph} | {r.nodes} | {r.cores} | {'yes' if r.torch else 'no'} | "
                     f"{r.stock_ms:.2f} | {r.ours_ms:.2f} | {r.ours_ms / r.stock_ms:.2f} | "
                     f"{spread_cell(r.round_ratios)} | {profiled} | {r.agrees} |")
    return "\n".join(lines)


def markdown(results: Sequence[Result], args: argparse.Namespace) -> str:
    return (rounds_header("Graphs with many small dml_onnx nodes: stock against ours",
                          args.repeat)
            + " Segments, kernels and rest: our run's time from its trace (--profile), per "
            f"run.\n\n{table(results)}\n")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20, help="runs per round (default 20)")
    parser.add_argument("--profile", action="store_true",
                        help="also split our run's time into segments, kernels and the rest")
    pinned_arguments(parser, "graphs", "graphs.md")
    parser.add_argument("--models", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    use_rounds(args)
    names = [n for n in GRAPHS if any(part in n for part in args.only.split("|"))]
    if args.models:  # a pinned child of the run below
        pinned_child(args, lambda: run_here(args, names, args.models))
        return
    with tempfile.TemporaryDirectory() as folder:
        make_all(names, Path(folder))
        results = run_all_pinned(args, "benchmarks.graphs", [
            "--repeat", str(args.repeat), "--only", args.only, "--models", folder,
            *(["--profile"] if args.profile else [])], Result)
    write_results(markdown(results, args), args.results, "graphs.md")


if __name__ == "__main__":
    main()
