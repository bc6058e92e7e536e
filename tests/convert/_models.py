"""The multi-node models and feeds the conversion tests share: a standard model with one node
of each raisable kind, its feeds, and plain onnxruntime's outputs as the oracle."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import dml_onnx

RNG = np.random.default_rng(11)
FEEDS = {
    "image": RNG.standard_normal((2, 3, 12, 12)).astype(np.float32),
    "boxes": np.array([[0, 0, 6, 6], [2.5, 1, 11, 9], [4, 4, 5.5, 8]], np.float32),
    "box_batch": np.array([0, 1, 1], np.int64),
    "pool_boxes": np.array([[0, 0, 0, 5, 5], [1, 2, 4, 10, 9], [1, 6, 0, 11, 11]], np.float32),
    "columns": RNG.standard_normal((1, 16, 16)).astype(np.float32),
}


def value_info(name: str, elem: int, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def standard_model(*, roi_align: dict | None = None, lp_pool: dict | None = None,
                    col2im_constant: bool = True, opset: int = 18) -> onnx.ModelProto:
    """Conv -> RoiAlign -> LpPool head, Conv -> MaxRoiPool head, and a Col2Im."""
    weight = numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    image_shape = numpy_helper.from_array(np.array([5, 5], np.int64), "image_shape")
    nodes = [
        helper.make_node("Conv", ["image", "w"], ["features"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("RoiAlign", ["features", "boxes", "box_batch"], ["aligned"],
                         name="align", **({"output_height": 4, "output_width": 4,
                                           "sampling_ratio": 2, "spatial_scale": 0.5}
                                          | (roi_align or {}))),
        helper.make_node("LpPool", ["aligned"], ["head"], name="lp",
                         **({"kernel_shape": [2, 2], "pads": [1, 0, 1, 1], "p": 2}
                            | (lp_pool or {}))),
        helper.make_node("MaxRoiPool", ["features", "pool_boxes"], ["pooled"], name="pool",
                         pooled_shape=[3, 2], spatial_scale=1.0),
        helper.make_node("Constant", [], ["block_shape"], name="block",
                         value=numpy_helper.from_array(np.array([2, 2], np.int64))),
        helper.make_node("Col2Im", ["columns", "image_shape", "block_shape"], ["folded"],
                         name="col2im"),
    ]
    inputs = [value_info("image", TensorProto.FLOAT, [2, 3, 12, 12]),
              value_info("boxes", TensorProto.FLOAT, ["R", 4]),
              value_info("box_batch", TensorProto.INT64, ["R"]),
              value_info("pool_boxes", TensorProto.FLOAT, ["P", 5]),
              value_info("columns", TensorProto.FLOAT, [1, 16, 16])]
    if not col2im_constant:
        inputs.append(value_info("image_shape", TensorProto.INT64, [2]))
    outputs = [value_info("head", TensorProto.FLOAT, ["R", 4, 5, 4]),
               value_info("pooled", TensorProto.FLOAT, ["P", 4, 3, 2]),
               value_info("folded", TensorProto.FLOAT, [1, 4, 5, 5])]
    graph = helper.make_graph(nodes, "heads", inputs, outputs,
                              initializer=[weight] + ([image_shape] if col2im_constant else []))
    return helper.make_model(graph, ir_version=dml_onnx.IR_VERSION,
                             opset_imports=[helper.make_opsetid("", opset)])


def feeds_for(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    feeds = dict(FEEDS)
    if any(i.name == "image_shape" for i in model.graph.input):
        feeds["image_shape"] = np.array([5, 5], np.int64)
    return feeds


def plain_outputs(model: onnx.ModelProto) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds_for(model))


def assert_same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        scale = float(np.max(np.abs(w[np.isfinite(w)]), initial=1.0))
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=2e-6 * scale)


def op_types(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


# ----------------------------------------------------------------------------- raising
