"""Time every operator through ``dml_onnx.InferenceSession`` against its native peer, in one run.

Peers: onnxruntime's own kernels on the standard-op form of the same node (MaxRoiPool,
RoiAlign, LpPool, Col2Im, and Pad + Gather for Unfold), plus ``torch.nn.functional.unfold``
and torchvision's ``roi_align`` backward when those are importable (benchmark-only; never a
dependency). Prints the median time of each and the ratio ours / peer (below 1: we are faster).

    python benchmarks/run.py [--repeat N] [--only NAME]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

import dml_onnx
from dml_onnx.conformance import single_node_model


@dataclass
class Benchmark:
    name: str
    op: str
    inputs: tuple[np.ndarray | None, ...]
    attributes: dict
    outputs: tuple[bool, ...] = (True,)
    torch_peer: Callable[[], Callable[[], object] | None] | None = None


def _rois(rng: np.random.Generator, count: int, image: int, batch: int) -> np.ndarray:
    """ROIs as [x1, y1, x2, y2] in an ``image``-pixel square, 16 to 512 pixels across."""
    size = rng.uniform(16, 512, (count, 2))
    corner = rng.uniform(0, image - size)
    return np.concatenate([corner, corner + size], axis=1).astype(np.float32)


def benchmarks(rng: np.random.Generator) -> list[Benchmark]:
    feature = rng.standard_normal((8, 64, 56, 56)).astype(np.float32)
    image = rng.standard_normal((2, 256, 64, 64)).astype(np.float32)
    boxes = _rois(rng, 512, 1024, 2)
    batch = rng.integers(0, 2, 512)
    pool_rois = np.concatenate([batch[:, None].astype(np.float32), boxes], axis=1)
    tiny = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    tiny_rois = np.array([[0, 1, 1, 6, 5]], np.float32)
    align = {"output_size": [7, 7], "spatial_scale_x": 1 / 16, "spatial_scale_y": 1 / 16,
             "minimum_samples_per_output": 2, "maximum_samples_per_output": 2}
    window = {"window_sizes": [3, 3], "start_padding": [1, 1], "end_padding": [1, 1]}
    columns = rng.standard_normal((8, 576, 3136)).astype(np.float32)
    gradient = rng.standard_normal((512, 256, 7, 7)).astype(np.float32)

    def torch_unfold():
        try:
            import torch
        except ImportError:
            return None
        x = torch.from_numpy(feature)
        return lambda: torch.nn.functional.unfold(x, 3, padding=1)

    def torchvision_roi_align_backward():
        try:
            import torch
            import torchvision
        except ImportError:
            return None
        x = torch.from_numpy(image).requires_grad_(True)
        boxes5 = torch.from_numpy(np.concatenate([batch[:, None], boxes], 1).astype(np.float32))
        g = torch.from_numpy(gradient)

        y = torchvision.ops.roi_align(x, boxes5, 7, 1 / 16, 2, aligned=True)
        return lambda: torch.autograd.grad(y, x, g, retain_graph=True)  # the backward alone

    return [
        Benchmark("RoiPooling [2,256,64,64] 512 ROIs 7x7", "RoiPooling", (image, pool_rois),
                  {"pooled_size": [7, 7], "spatial_scale": 1 / 16}),
        Benchmark("RoiPooling tiny [1,4,8,8] 1 ROI 2x2", "RoiPooling", (tiny, tiny_rois),
                  {"pooled_size": [2, 2]}),
        Benchmark("RoiAlign1 [2,256,64,64] 512 ROIs 7x7 avg sr2", "RoiAlign1",
                  (image, boxes, batch), align),
        Benchmark("RoiAlign1 tiny [1,4,8,8] 1 ROI 2x2", "RoiAlign1",
                  (tiny, tiny_rois[:, 1:], np.zeros(1, np.int64)), {"output_size": [2, 2]}),
        Benchmark("RoiAlignGrad dX [2,256,64,64] 512 ROIs 7x7 avg sr2", "RoiAlignGrad",
                  (None, gradient, boxes, batch),
                  {**{k: v for k, v in align.items() if k != "output_size"},
                   "input_shape": list(image.shape)}, (True, False),
                  torch_peer=torchvision_roi_align_backward),
        Benchmark("LpPooling p2 3x3 pad1 [8,64,56,56]", "LpPooling", (feature,),
                  {"window_size": [3, 3], "start_padding": [1, 1], "end_padding": [1, 1]}),
        Benchmark("LpPooling tiny [1,4,8,8]", "LpPooling", (tiny,), {"window_size": [3, 3]}),
        Benchmark("Unfold 3x3 pad1 [8,64,56,56]", "Unfold", (feature,), window,
                  torch_peer=torch_unfold),
        Benchmark("Unfold tiny [1,4,8,8]", "Unfold", (tiny,), {"window_sizes": [3, 3]}),
        Benchmark("Fold 3x3 pad1 [8,576,3136] -> [8,64,56,56]", "Fold", (columns,),
                  {**window, "output_size": [56, 56]}),
        Benchmark("Fold tiny [1,36,36] -> [1,4,8,8]", "Fold",
                  (rng.standard_normal((1, 36, 36)).astype(np.float32),),
                  {"window_sizes": [3, 3], "output_size": [8, 8]}),
    ]


def median_ms(call: Callable[[], object], repeat: int) -> float:
    call()  # warm up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--only", default="", help="run the benchmarks whose name has this")
    args = parser.parse_args()
    print(f"onnxruntime {ort.__version__}, numpy {np.__version__}, "
          f"{args.repeat} timed runs each; ratio = ours / peer")
    print(f"| {'benchmark':52} | {'ours ms':>8} | {'peer':32} | {'peer ms':>8} | ratio |")
    print(f"|{'-' * 54}|{'-' * 10}|{'-' * 34}|{'-' * 10}|-------|")
    for bench in benchmarks(np.random.default_rng(0)):
        if args.only not in bench.name or bench.op not in dml_onnx.OPERATORS_BY_NAME:
            continue
        definition = dml_onnx.OPERATORS_BY_NAME[bench.op]
        model = single_node_model(definition, bench.inputs, bench.attributes, bench.outputs)
        feeds = {p.name: a for p, a in zip(definition.inputs, bench.inputs) if a is not None}
        ours = dml_onnx.InferenceSession(model)
        ours_ms = median_ms(lambda: ours.run(None, feeds), args.repeat)  # noqa: B023
        peers = []
        if definition.standard_form is not None:
            standard = dml_onnx.lower_model(model)
            ops = "+".join(dict.fromkeys(n.op_type for n in standard.graph.node
                                         if n.op_type != "Constant"))
            session = ort.InferenceSession(standard.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
            peers.append((f"onnxruntime {ops}", lambda: session.run(None, feeds)))  # noqa: B023
        if bench.torch_peer is not None and (call := bench.torch_peer()) is not None:
            peers.append(("torch" if bench.op == "Unfold" else "torchvision backward", call))
        if not peers:
            peers.append(("(no peer importable)", None))
        for label, call in peers:
            peer_ms = median_ms(call, args.repeat) if call else float("nan")
            print(f"| {bench.name:52} | {ours_ms:8.2f} | {label:32} | {peer_ms:8.2f} | "
                  f"{ours_ms / peer_ms:5.2f} |", flush=True)


if __name__ == "__main__":
    main()
