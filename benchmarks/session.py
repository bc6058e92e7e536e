"""Session creation: ``dml_onnx.InferenceSession`` against plain onnxruntime on one detector.

    python benchmarks/session.py [--repeat N] [--threads K]

torchvision's ``maskrcnn_resnet50_fpn`` (random weights, 3x320x320 image; needs the ``torch``
extra) is exported by torch's TorchScript exporter, whose file has eight ``RoiAlign`` nodes,
and raised by :func:`dml_onnx.raising.raise_model` to eight ``RoiAlign1`` nodes. Both files
are saved; the script prints the median time to create a session from each path (plain
onnxruntime on the stock file, ``dml_onnx.InferenceSession`` on the raised one) and its first
run, without session options (dml_onnx then hands the weights to onnxruntime as arrays) and
with options of the caller's (``intra_op_num_threads`` = ``--threads``; dml_onnx must then
serialize them: external initializers added to the caller's options would outlive the
session), all in one process.
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import dml_onnx
from dml_onnx.raising import raise_model


def _export(folder: Path) -> tuple[Path, Path, np.ndarray]:
    """The stock and the raised Mask R-CNN files in ``folder``, and an image to feed."""
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.detection.maskrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=91, min_size=320, max_size=320).eval()
    image = torch.rand(3, 320, 320, generator=torch.Generator().manual_seed(1))
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, ([image],), buffer, dynamo=False, opset_version=18)
    stock = onnx.load_from_string(buffer.getvalue())
    raised = raise_model(stock)
    counts = [sum(n.op_type == op for n in m.graph.node)
              for m, op in ((stock, "RoiAlign"), (raised.model, "RoiAlign1"))]
    print(f"Mask R-CNN: {counts[0]} RoiAlign nodes in the stock file, "
          f"{counts[1]} RoiAlign1 in the raised one")
    paths = folder / "stock.onnx", folder / "raised.onnx"
    onnx.save(stock, paths[0])
    onnx.save(raised.model, paths[1])
    return *paths, image.numpy()


def _seconds(make: Callable[[], object]) -> float:
    start = time.perf_counter()
    made = make()
    seconds = time.perf_counter() - start
    del made
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0,
                        help="intra-op threads of the sessions given options (0: default)")
    args = parser.parse_args()
    ort.set_default_logger_severity(3)  # the exported mask head's declared shapes are too small

    def options() -> ort.SessionOptions:
        made = ort.SessionOptions()
        made.intra_op_num_threads = args.threads
        return made

    providers = ["CPUExecutionProvider"]
    with tempfile.TemporaryDirectory() as folder:
        stock, raised, image = _export(Path(folder))
        makers = {  # no options: dml_onnx hands the weights over; the caller's: it cannot
            ("onnxruntime", "no options"): lambda: ort.InferenceSession(
                str(stock), providers=providers),
            ("dml_onnx", "no options"): lambda: dml_onnx.InferenceSession(
                str(raised), providers=providers),
            ("onnxruntime", "the caller's options"): lambda: ort.InferenceSession(
                str(stock), options(), providers=providers),
            ("dml_onnx", "the caller's options"): lambda: dml_onnx.InferenceSession(
                str(raised), options(), providers=providers),
        }
        first_run = {}
        for key, make in makers.items():
            session = make()  # imports, numba's cache, the first session of each kind
            feeds = {session.get_inputs()[0].name: image}
            session.run(None, feeds)
            session = make()
            start = time.perf_counter()
            session.run(None, feeds)
            first_run[key] = time.perf_counter() - start
        samples: dict[tuple[str, str], list[float]] = {key: [] for key in makers}
        for _ in range(args.repeat):  # rounds of one session each: drift hits every side
            for key, make in makers.items():
                samples[key].append(_seconds(make))
        created = {key: statistics.median(times) for key, times in samples.items()}
        print("| session | options | created ms | first run ms |")
        print("|---|---|---:|---:|")
        for (who, how), seconds in created.items():
            print(f"| {who} | {how} | {seconds * 1e3:.0f} | {first_run[who, how] * 1e3:.0f} |")
    for how in ("no options", "the caller's options"):
        ratio = created["dml_onnx", how] / created["onnxruntime", how]
        print(f"creation, {how}: dml_onnx / onnxruntime {ratio:.2f} (median of {args.repeat})")


if __name__ == "__main__":
    main()
