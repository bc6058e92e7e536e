"""Graph builders: one function per operator returning a NodeProto, and ``make_model``.

The per-operator functions live beside their definitions in ``dml_onnx.ops`` and are exported
here from the operator table (``dml_onnx.roi_pooling`` ...); they validate attributes at build
time and raise ``ValueError`` naming the operator, node, field and value.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import helper

from dml_onnx.definition import DOMAIN, OPSET_VERSION
from dml_onnx.ops import BUILDERS

IR_VERSION = 10
"""IR version of the models the project writes (onnxruntime >= 1.16 reads it)."""
STANDARD_OPSET = 18
"""Default-domain opset the project's models import."""

globals().update(BUILDERS)
__all__ = ["IR_VERSION", "STANDARD_OPSET", "make_model", *BUILDERS]


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
               outputs: Sequence[onnx.ValueInfoProto], *, name: str = "dml_onnx",
               initializers: Sequence[onnx.TensorProto] = (),
               standard_opset: int = STANDARD_OPSET) -> onnx.ModelProto:
    """A model over ``nodes`` that imports ``dml_onnx`` version 1 and the standard opset,
    with a pinned IR version onnxruntime accepts."""
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs),
                              initializer=list(initializers))
    return helper.make_model(graph, ir_version=IR_VERSION, producer_name="dml_onnx",
                             opset_imports=[helper.make_opsetid("", standard_opset),
                                            helper.make_opsetid(DOMAIN, OPSET_VERSION)])
