"""Session creation: ``dml_onnx.InferenceSession`` against plain onnxruntime on one detector.

    python -m benchmarks.session [--repeat N] [--threads K]

torchvision's ``maskrcnn_resnet50_fpn`` (random weights, 3x320x320 image; needs the ``torch``
extra) is exported by torch's TorchScript exporter, whose file has eight ``RoiAlign`` nodes,
and raised by :func:`dml_onnx.raising.raise_model` to eight ``RoiAlign1`` nodes. Both files
are saved; the script prints the median time to create a session from each path (plain
onnxruntime on the stock file, ``dml_onnx.InferenceSession`` on the raised one) and its first
run, without session options (dml_onnx then hands the weights to onnxruntime as arrays) and
with options of the caller's (``intra_op_num_threads`` = ``--threads``; dml_onnx then hands
them over as external-data files in memory, which onnxruntime copies: external initializers
added to the caller's options would outlive the session), all in one process; then, in
three alternating rounds of fresh processes, the time to create the one session (what a
program that creates its session once pays: its memory's pages are new) and how far creating
it raises the peak resident memory.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import dml_onnx
from benchmarks.models import onnx_bytes
from dml_onnx.raising import raise_model


def _export(folder: Path) -> tuple[Path, Path, np.ndarray]:
    """The stock and the raised Mask R-CNN files in ``folder``, and an image to feed."""
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.detection.maskrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=91, min_size=320, max_size=320).eval()
    image = torch.rand(3, 320, 320, generator=torch.Generator().manual_seed(1))
    stock = onnx.load_from_string(onnx_bytes(model, image))
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
        fresh: dict[tuple[str, str], list[tuple[float, float]]] = {key: [] for key in makers}
        for _ in range(FRESH_ROUNDS):  # alternating, as above
            for who, how in makers:
                fresh[who, how].append(
                    _fresh(who, how, stock if who == "onnxruntime" else raised))
        alone = {key: statistics.median(s for s, _ in runs) for key, runs in fresh.items()}
        peaks = {key: statistics.median(m for _, m in runs) for key, runs in fresh.items()}
        print("\n| session | options | created in a fresh process, ms | peak memory of "
              "creation, MB |\n|---|---|---:|---:|")
        for (who, how), megabytes in peaks.items():
            print(f"| {who} | {how} | {alone[who, how] * 1e3:.0f} | {megabytes:.0f} |")
    for how in ("no options", "the caller's options"):
        ratio = created["dml_onnx", how] / created["onnxruntime", how]
        first = alone["dml_onnx", how] / alone["onnxruntime", how]
        memory = peaks["dml_onnx", how] / peaks["onnxruntime", how]
        print(f"creation, {how}: dml_onnx / onnxruntime {ratio:.2f} in time (median of "
              f"{args.repeat} in one process), {first:.2f} in a fresh process (median of "
              f"{FRESH_ROUNDS}), {memory:.2f} in peak memory")


_PEAK = """
import sys
import time
import onnxruntime as ort
import dml_onnx
import dml_onnx.runtime


def peak():  # kB; ru_maxrss would carry the parent's peak over the exec
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))


who, how, path = sys.argv[1:]
options = ort.SessionOptions() if how != "no options" else None
before = peak()
start = time.perf_counter()
if who == "onnxruntime":
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
else:
    session = dml_onnx.InferenceSession(path, options, providers=["CPUExecutionProvider"])
print(time.perf_counter() - start, (peak() - before) / 1024)
"""


FRESH_ROUNDS = 3
"""Fresh processes per session kind (:func:`_fresh`)."""


def _fresh(who: str, how: str, path: Path) -> tuple[float, float]:
    """The seconds that creating the session takes in a fresh process that has imported both
    packages (the one session a program creates, its memory's pages new), and how far it
    raises that process's peak resident memory, MB (Linux's ``VmHWM``)."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", _PEAK, who, how, str(path)], check=True,
                          capture_output=True, text=True)
    seconds, megabytes = done.stdout.split()[-2:]
    return float(seconds), float(megabytes)


if __name__ == "__main__":
    main()
