"""The rank of every value of a model, as ONNX shape inference reads it."""

from __future__ import annotations

import onnx


def ranks(model: onnx.ModelProto) -> dict[str, int]:
    """The rank of every input and node output of ``model``, from ONNX shape inference;
    fails where it leaves a rank unknown (the check would not see that value)."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    graph = inferred.graph
    types = {v.name: v.type.tensor_type for v in (*graph.input, *graph.value_info,
                                                    *graph.output)}
    names = [*(v.name for v in graph.input), *(o for n in graph.node for o in n.output if o)]
    unknown = [name for name in names if not types[name].HasField("shape")]
    assert not unknown, f"shape inference leaves the rank of {unknown} unknown"
    return {name: len(types[name].shape.dim) for name in names}
