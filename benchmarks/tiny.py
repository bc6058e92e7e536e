"""Where the time of a tiny call goes: the benchmark's tiny rows, split into their parts.

    python -m benchmarks.tiny [--threads K]

Per tiny row of ``benchmarks/rows.py``, in microseconds per call (best of several loops):

- **native**: the row's first peer (onnxruntime's own kernel on the standard form);
- **Python floor**: a session whose one node is a Python operator that returns its one-value
  input unchanged: what onnxruntime and onnxruntime-extensions cost to reach Python and back,
  before any kernel work. A row's model (its node alone) no longer pays it: it runs split,
  with no onnxruntime call for a plain feed (``docs/running.md``); a ``dml_onnx`` node
  beside standard nodes that reads graph inputs and writes graph outputs still does;
- **kernel**: our kernel called directly from Python on the same inputs (checks, plan, loops);
- **session**: ``dml_onnx.InferenceSession.run`` of the row's model;
- **rest**: session - kernel, what our binding adds (the feed's check, the step, outputs).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper
from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op

import dml_onnx
from benchmarks import harness
from benchmarks.rows import Row, onnxruntime_peer, rows
from dml_onnx import calls
from dml_onnx.builders import IR_VERSION

LOOPS = 2000


@onnx_op(op_type="PassThrough", inputs=[PyCustomOpDef.dt_float],
         outputs=[PyCustomOpDef.dt_float])
def _pass_through(x: np.ndarray) -> np.ndarray:
    return x


def per_call(calls: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Microseconds per call of each: the best of five loops of :data:`LOOPS` calls, the
    loops of all calls taken in turn (a slower stretch of the machine hits every one)."""
    best = dict.fromkeys(calls, float("inf"))
    for call in calls.values():
        call()
    for _ in range(5):
        for name, call in calls.items():
            start = time.perf_counter()
            for _ in range(LOOPS):
                call()
            best[name] = min(best[name], (time.perf_counter() - start) / LOOPS)
    return {name: seconds * 1e6 for name, seconds in best.items()}


def floor_session(threads: int) -> Callable[[], object]:
    """A session of one Python operator returning its one-value float input: the cost of
    reaching Python from onnxruntime and back."""
    x = np.zeros(1, np.float32)
    node = helper.make_node("PassThrough", ["x"], ["y"], domain="ai.onnx.contrib")
    value = helper.make_tensor_value_info
    model = helper.make_model(
        helper.make_graph([node], "floor", [value("x", TensorProto.FLOAT, list(x.shape))],
                          [value("y", TensorProto.FLOAT, list(x.shape))]),
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.contrib", 1)],
        ir_version=IR_VERSION)
    options = harness.session_options(threads)
    options.register_custom_ops_library(get_library_path())
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return lambda: session.run(None, {"x": x})


def kernel_call(row: Row) -> Callable[[], object]:
    definition = dml_onnx.OPERATORS_BY_NAME[row.op]
    node = row.model().graph.node[0]
    run = calls.bind_kernel(definition, definition.node_attributes(node), "tiny", row.outputs)
    return lambda: run(row.inputs)


def main() -> None:
    threads = harness.threads_argument(__doc__.split("\n\n")[0])
    print(harness.table_head("tiny row", "native µs", "Python floor µs", "kernel µs",
                             "session µs", "rest µs", "session / native"))
    for row in rows(np.random.default_rng(0)):
        if not row.tiny:
            continue
        session = dml_onnx.InferenceSession(row.model(), harness.session_options(threads))
        feeds = row.feeds()
        peer = (onnxruntime_peer(row, *row.onnxruntime) if row.onnxruntime
                else row.peers[0])
        native_call = peer.make(threads)
        times = per_call({"floor": floor_session(threads), "kernel": kernel_call(row),
                          "ours": lambda: session.run(None, feeds),  # noqa: B023 - at once
                          **({"native": native_call} if native_call else {})})
        native = times.get("native", float("nan"))
        floor, kernel, ours = times["floor"], times["kernel"], times["ours"]
        print(f"| {row.name} vs {peer.label} | {native:.1f} | {floor:.1f} | {kernel:.1f} | "
              f"{ours:.1f} | {ours - kernel:.1f} | {ours / native:.2f} |")


if __name__ == "__main__":
    main()
