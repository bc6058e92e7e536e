"""Our kernel right after another, plain onnxruntime session on the same cores.

    python -m benchmarks.neighbours [--threads K] [--repeat N]

A plain session's idle worker threads spin for a while after each run (onnxruntime's
default), on the cores our next kernel call needs. The script times one RoiAlign1 node
(X ``[1,256,128,128]``, 1000 ROIs, 7x7, sampling 2) alone, then each call right after a run of
a plain session (an onnxruntime ``RoiAlign`` on the same inputs) with onnxruntime's default
options, with :func:`dml_onnx.quiet_session_options`, and with only
``session.force_spinning_stop`` (its threads spin during a run and stop at its end); every
session gets ``--threads``
intra-op threads. Pin the process with ``taskset`` to give every side the same cores.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import ModelProto, TensorProto, ValueInfoProto, helper

import dml_onnx
from dml_onnx.builders import IR_VERSION


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    size = rng.uniform(2, 64, (1000, 2))
    corner = rng.uniform(0, 128 - size)
    return {"X": rng.standard_normal((1, 256, 128, 128)).astype(np.float32),
            "rois": np.concatenate([corner, corner + size], axis=1).astype(np.float32),
            "batch": np.zeros(1000, np.int64)}


def _models() -> tuple[bytes, ModelProto]:
    def value(name: str, elem: int) -> ValueInfoProto:
        return helper.make_tensor_value_info(name, elem, None)
    inputs = [value("X", TensorProto.FLOAT), value("rois", TensorProto.FLOAT),
              value("batch", TensorProto.INT64)]
    outputs = [value("Y", TensorProto.FLOAT)]
    plain = helper.make_model(helper.make_graph(
        [helper.make_node("RoiAlign", ["X", "rois", "batch"], ["Y"], output_height=7,
                          output_width=7, sampling_ratio=2)], "plain", inputs, outputs),
        opset_imports=[helper.make_opsetid("", 16)], ir_version=IR_VERSION)
    ours = dml_onnx.make_model([dml_onnx.roi_align1(
        "X", "rois", "batch", "Y", output_size=[7, 7], minimum_samples_per_output=2,
        maximum_samples_per_output=2)], inputs, outputs)
    return plain.SerializeToString(), ours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: all)")
    parser.add_argument("--repeat", type=int, default=15, help="samples (default 15)")
    args = parser.parse_args()

    def options() -> ort.SessionOptions:
        chosen = ort.SessionOptions()
        chosen.intra_op_num_threads = args.threads
        return chosen

    feeds = _inputs()
    plain_model, our_model = _models()
    ours = dml_onnx.InferenceSession(our_model, options())

    def timed(before: ort.InferenceSession | None) -> float:
        samples = []
        for _ in range(args.repeat + 1):
            if before is not None:
                before.run(None, feeds)
            start = time.perf_counter()
            ours.run(None, feeds)
            samples.append(time.perf_counter() - start)
        return 1000 * statistics.median(samples[1:])

    alone = timed(None)
    default = timed(ort.InferenceSession(plain_model, options()))
    quiet = timed(ort.InferenceSession(plain_model, dml_onnx.quiet_session_options(options())))
    stopping = options()
    stopping.add_session_config_entry("session.force_spinning_stop", "1")
    stop = timed(ort.InferenceSession(plain_model, stopping))
    print(f"| threads | ours alone ms | right after a plain session ms (default) | "
          f"(quiet_session_options) | (force_spinning_stop only) |\n|---:|---:|---:|---:|---:|\n"
          f"| {args.threads or 'all'} | {alone:.1f} | {default:.1f} ({default / alone:.2f}x) | "
          f"{quiet:.1f} ({quiet / alone:.2f}x) | {stop:.1f} ({stop / alone:.2f}x) |")


if __name__ == "__main__":
    main()
