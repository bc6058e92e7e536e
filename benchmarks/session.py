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
added to the caller's options would outlive the session). Each kind of session is created in
processes of its own, three alternating rounds: the first creation in a process (what a
program that creates its session once pays: its memory's pages are new), how far it raises
the peak resident memory, and the median of ``--repeat`` creations after it in that process
(what a program that creates the session again pays). A process of its own for each kind:
in one process, plain onnxruntime's creation took 202 ms right after one of ours with the
caller's options was freed and 292 ms right after one without (the same session, 2-core
machine), because what the last session freed decides how fast the next one's memory comes.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import dml_onnx
from benchmarks.harness import table_head
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
        rounds: dict[tuple[str, str], list[tuple[float, float, float]]] = {
            key: [] for key in makers}
        for _ in range(ROUNDS):  # alternating: drift hits every side
            for who, how in makers:
                rounds[who, how].append(_in_process(
                    who, how, stock if who == "onnxruntime" else raised, args.repeat, args.threads))
        first, peaks, again = ({key: statistics.median(r[k] for r in runs)
                                for key, runs in rounds.items()} for k in range(3))
        print(table_head("session", "options", "first creation, ms",
                         "peak memory of it, MB",
                         f"created again, ms (median of {args.repeat})", "first run ms",
                         text=("options",)))
        for who, how in makers:
            print(f"| {who} | {how} | {first[who, how] * 1e3:.0f} | {peaks[who, how]:.0f} | "
                  f"{again[who, how] * 1e3:.0f} | {first_run[who, how] * 1e3:.0f} |")
    for how in ("no options", "the caller's options"):
        ratios = [mine["dml_onnx", how] / mine["onnxruntime", how]
                  for mine in (first, peaks, again)]
        print(f"creation, {how}: dml_onnx / onnxruntime {ratios[0]:.2f} in time in a fresh "
              f"process, {ratios[1]:.2f} in peak memory, {ratios[2]:.2f} in time created again "
              f"(medians of {ROUNDS} processes)")


_PROCESS = """
import statistics
import sys
import time
import onnxruntime as ort
import dml_onnx
import dml_onnx.runtime


def peak():  # kB; ru_maxrss would carry the parent's peak over the exec
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))


who, how, path, repeat, threads = sys.argv[1:6]
make = ort.InferenceSession if who == "onnxruntime" else dml_onnx.InferenceSession


def options():
    made = ort.SessionOptions()
    made.intra_op_num_threads = int(threads)
    return made


before = peak()
start = time.perf_counter()
session = make(path, options() if how != "no options" else None,
               providers=["CPUExecutionProvider"])
first, memory = time.perf_counter() - start, (peak() - before) / 1024
again = []
for _ in range(int(repeat)):
    del session
    start = time.perf_counter()
    session = make(path, options() if how != "no options" else None,
                   providers=["CPUExecutionProvider"])
    again.append(time.perf_counter() - start)
print(first, memory, statistics.median(again))
"""


ROUNDS = 3
"""Processes per session kind (:func:`_in_process`)."""


def _in_process(who: str, how: str, path: Path, repeat: int, threads: int
                ) -> tuple[float, float, float]:
    """In a fresh process that has imported both packages: the seconds that creating the
    session takes (its memory's pages new), how far that raises the process's peak resident
    memory, MB (Linux's ``VmHWM``), and the median seconds of ``repeat`` creations after it;
    options, where given, with ``threads`` intra-op threads."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", _PROCESS, who, how, str(path), str(repeat),
                           str(threads)],
                          check=True, capture_output=True, text=True)
    first, megabytes, again = done.stdout.split()[-3:]
    return float(first), float(megabytes), float(again)


if __name__ == "__main__":
    main()
