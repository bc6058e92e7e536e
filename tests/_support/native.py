"""Run one standard ONNX node on onnxruntime's own CPU kernels: the native oracles of the tests;
and compare outputs with the reference's within the conformance tolerance."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from dml_onnx.conformance import Case, Tolerance, compare

IR_VERSION = 10


def run_native(op_type: str, inputs: list[np.ndarray], *, opset: int, n_outputs: int = 1,
               constant_inputs: tuple[int, ...] = (), output_dtype: np.dtype | None = None,
               **attributes) -> list[np.ndarray]:
    """Build ``op_type(inputs) -> outputs`` at ``opset`` and run it on onnxruntime's CPU kernels.

    Inputs whose index is in ``constant_inputs`` become initializers (for shape-like inputs);
    the outputs' element type is ``output_dtype``, by default the first input's.
    """
    out_dtype = np.dtype(output_dtype or np.asarray(inputs[0]).dtype)
    out_elem = helper.np_dtype_to_tensor_dtype(out_dtype)
    names = [f"in{i}" for i in range(len(inputs))]
    outputs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outputs, **attributes)
    graph_inputs, initializers, feeds = [], [], {}
    for i, (name, array) in enumerate(zip(names, inputs)):
        array = np.asarray(array)
        if i in constant_inputs:
            initializers.append(numpy_helper.from_array(array, name))
        else:
            elem = helper.np_dtype_to_tensor_dtype(array.dtype)
            graph_inputs.append(helper.make_tensor_value_info(name, elem, list(array.shape)))
            feeds[name] = array
    graph_outputs = [helper.make_tensor_value_info(o, out_elem, None) for o in outputs]
    graph = helper.make_graph([node], "native", graph_inputs, graph_outputs,
                              initializer=initializers)
    model = helper.make_model(graph, ir_version=IR_VERSION,
                              opset_imports=[helper.make_opsetid("", opset)])
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_matches_reference(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    """``got`` (kernel outputs) equals ``want`` (the reference's) within the tolerance a
    conformance case of ``want`` would have: exact for integers, a few units in the last place
    of the largest float output."""
    expected = {str(k): w for k, w in enumerate(want)}
    case = Case("", onnx.ModelProto(), {}, expected, Tolerance.for_outputs(list(want)))
    outcome = compare(case, {str(k): g for k, g in enumerate(got)})
    assert outcome.passed, outcome.problems


def unraised_roi_aligns(model: onnx.ModelProto) -> list[str]:
    """The names of the ``RoiAlign`` nodes of ``model`` other than those that compute a raised
    node's regions on an image edge (``dml_onnx.raising.EDGE_REGIONS``)."""
    from dml_onnx.raising import EDGE_REGIONS

    return [n.name for n in model.graph.node
            if n.op_type == "RoiAlign" and n.doc_string != EDGE_REGIONS]
