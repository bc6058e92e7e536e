"""Standard-op forms: rewrite ``dml_onnx`` nodes into standard ONNX where an exact equivalent
exists (``MaxRoiPool``, ``RoiAlign``, ``LpPool``, ``Col2Im``, ``Pad`` + ``Gather`` for Unfold).

The result runs on any ONNX runtime, including onnxruntime's own kernels and the DirectML
execution provider; see each operator's ``standard_form`` for what it can express.
"""

from __future__ import annotations

import onnx

from dml_onnx.definition import DOMAIN, NotEquivalent, StandardNode, node_label
from dml_onnx.ops import OPERATORS_BY_NAME
from dml_onnx.schemas import register_schemas

MINIMUM_OPSET = 18
"""Standard opset the forms need (LpPool dilations, Col2Im)."""


def to_standard_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every ``dml_onnx`` node replaced by its standard form.

    Raises :class:`NotEquivalent` (a ``ValueError``) naming the node when one has none.
    """
    register_schemas()
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    shapes = _shapes(inferred.graph)
    imports = {o.domain or "": o.version for o in model.opset_import}
    if imports.get("", 0) < MINIMUM_OPSET:
        raise NotEquivalent(f"the standard forms need the default opset >= {MINIMUM_OPSET}, "
                            f"the model imports {imports.get('')}")
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    for index, node in enumerate(model.graph.node):
        if node.domain != DOMAIN:
            result.graph.node.append(node)
            continue
        definition = OPERATORS_BY_NAME[node.op_type]
        label = node_label(node)
        if definition.standard_form is None:
            raise NotEquivalent(f"{definition.name} '{label}': no standard ONNX equivalent")
        view = StandardNode(label, list(node.input), list(node.output),
                            definition.node_attributes(node),
                            [shapes.get(name) for name in node.input], f"_standard_{index}")
        try:
            result.graph.node.extend(definition.standard_form(view))
        except NotEquivalent as error:
            raise NotEquivalent(f"{definition.name} {error}") from None
    kept = [o for o in result.opset_import if o.domain != DOMAIN]
    del result.opset_import[:]
    result.opset_import.extend(kept)
    return result


def _shapes(graph: onnx.GraphProto) -> dict[str, list]:
    shapes = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        tensor = value.type.tensor_type
        if tensor.HasField("shape"):
            shapes[value.name] = [d.dim_value if d.HasField("dim_value") else
                                  (d.dim_param or None) for d in tensor.shape.dim]
    for tensor in graph.initializer:
        shapes[tensor.name] = list(tensor.dims)
    return shapes


__all__ = ["MINIMUM_OPSET", "NotEquivalent", "to_standard_model"]
