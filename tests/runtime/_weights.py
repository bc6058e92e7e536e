"""What the weight-splitting tests share: a seeded generator, the size just above the
threshold, initializers raw or typed (one of each kind, handed over or kept), and a model of
Identity nodes that outputs every initializer."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import dml_onnx
from dml_onnx.model_files import WEIGHT_ELEMENTS

RNG = np.random.default_rng(11)
BIG = WEIGHT_ELEMENTS + 1


def _tensor(name: str, array: np.ndarray, *, raw: bool = True) -> TensorProto:
    tensor = numpy_helper.from_array(array, name)
    if not raw:  # the typed field (float_data, int64_data ...) instead of raw_data
        tensor = helper.make_tensor(name, tensor.data_type, array.shape, array.reshape(-1))
    return tensor


def _initializers() -> list[TensorProto]:
    """One of each kind: handed over, or kept for a reason named in its name."""
    bfloat16 = helper.make_tensor("kept_bfloat16", TensorProto.BFLOAT16, [BIG],
                                  RNG.integers(0, 2 ** 16, BIG, dtype=np.uint16).tobytes(),
                                  raw=True)
    wrong_size = _tensor("kept_wrong_size", np.ones(BIG, np.float32))
    wrong_size.raw_data = wrong_size.raw_data[:-4]
    return [
        _tensor("f32", RNG.standard_normal((BIG // 4 + 1, 4)).astype(np.float32)),
        _tensor("f64", RNG.standard_normal(BIG)),
        _tensor("f16", RNG.standard_normal(BIG).astype(np.float16)),
        _tensor("i64", RNG.integers(-2 ** 62, 2 ** 62, BIG)),
        _tensor("u8", RNG.integers(0, 255, (3, BIG), dtype=np.uint8)),
        _tensor("flag", RNG.random(BIG) < 0.5),
        _tensor("typed_f32", RNG.standard_normal(BIG).astype(np.float32), raw=False),
        _tensor("kept_small", RNG.standard_normal(WEIGHT_ELEMENTS).astype(np.float32)),
        _tensor("kept_small_many_bytes", RNG.standard_normal(WEIGHT_ELEMENTS)),
        helper.make_tensor("kept_strings", TensorProto.STRING, [BIG], [b"a"] * BIG),
        bfloat16, wrong_size,
    ]


def _model(initializers: list[TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Identity", [t.name], [f"out_{t.name}"]) for t in initializers],
        "weights", [], [helper.make_tensor_value_info(f"out_{t.name}", t.data_type, None)
                        for t in initializers], initializer=initializers, doc_string="kept")
    model = dml_onnx.make_model([], [], [])
    model.graph.CopyFrom(graph)
    model.producer_name = "tests"
    helper.set_model_props(model, {"key": "value"})
    return model
