"""What the adversarial runtime tests share: a fresh interpreter for what could end the
process, a plain onnxruntime session of a model's runtime form, value infos, and a small
RoiPooling model with its inputs (children import them from here)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper
from onnxruntime_extensions import get_library_path

import dml_onnx

ROOT = Path(__file__).resolve().parents[2]
INT64_MAX = (1 << 63) - 1


def child(code: str, timeout: float = 120) -> str:
    """Run ``code`` in a fresh interpreter; its stdout (it must exit 0, not crash)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, cwd=ROOT, timeout=timeout)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


def plain_session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    options.log_severity_level = 4
    return ort.InferenceSession(dml_onnx.to_runtime_model(model).SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def tensor(name: str, shape: list | None = None, elem: int = TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def pooling_model(channels: int, pooled: int) -> onnx.ModelProto:
    """One RoiPooling node "pool" (``pooled`` x ``pooled`` bins) on ``X [1, channels, H, W]``
    and ``rois [R, 5]``, both float."""
    return dml_onnx.make_model(
        [dml_onnx.roi_pooling("X", "rois", "Y", pooled_size=[pooled, pooled], name="pool")],
        [tensor("X", [1, channels, "H", "W"]), tensor("rois", ["R", 5])], [tensor("Y")])


POOL = dml_onnx.make_model(
    [dml_onnx.roi_pooling("X", "rois", "Y", pooled_size=[2, 2], name="pool")],
    [tensor("X", [1, 1, 4, 4]), tensor("rois", ["R", 5])], [tensor("Y", ["R", 1, 2, 2])])
X = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
ROIS = np.array([[0, 0, 0, 3, 3]], np.float32)
