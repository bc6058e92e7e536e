"""``onnx.reference.ReferenceEvaluator`` with the domain's operators preloaded: the plain
implementations of :mod:`dml_onnx.reference_ops`, not the kernels."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator as _OnnxReferenceEvaluator
from onnx.reference.op_run import OpRun

from dml_onnx import calls
from dml_onnx.definition import DOMAIN, OpDefinition, node_label
from dml_onnx.graphs import MISSING_DOMAIN_IMPORT
from dml_onnx.model_files import load_model
from dml_onnx.ops import OPERATORS
from dml_onnx.schemas import op_schema


def _op_class(definition: OpDefinition) -> type[OpRun]:
    """An ``OpRun`` subclass named like the op type that calls the operator's plain
    reference implementation."""

    def _run(self: OpRun, *inputs: np.ndarray | None, **_: Any) -> tuple:
        node = self.onnx_node
        attributes = definition.node_attributes(node)
        present = [i < len(node.output) and bool(node.output[i])
                   for i in range(len(definition.outputs))]
        outputs = calls.run_reference(definition, list(inputs), attributes, node_label(node),
                                      present)
        # onnx.reference wants a tensor even for an omitted ("") output
        return tuple(np.zeros(0) if o is None else o for o in outputs[:len(node.output)])

    return type(definition.name, (OpRun,), {
        "op_domain": DOMAIN, "op_schema": op_schema(definition), "_run": _run,
        "__doc__": f"Reference evaluation of {DOMAIN}::{definition.name}."})


OP_CLASSES: tuple[type[OpRun], ...] = tuple(_op_class(d) for d in OPERATORS)


class ReferenceEvaluator(_OnnxReferenceEvaluator):
    """``onnx.reference.ReferenceEvaluator`` that also runs every ``dml_onnx`` operator.

    Each ``dml_onnx`` node runs the operator's plain implementation
    (:mod:`dml_onnx.reference_ops`): independent of the kernels that sessions run, exact, and
    slow (small inputs). A model's ``dml_onnx`` functions (the standard-op fallbacks) are
    ignored.
    """

    def __init__(self, proto: Any, opsets: dict[str, int] | None = None,
                 functions: list[Any] | None = None, verbose: int = 0,
                 new_ops: list[type[OpRun]] | None = None, *args: Any, **kwargs: Any):
        # onnx's parameters in onnx's order: any of them may come by position
        if isinstance(proto, (str, bytes, os.PathLike)):
            proto = load_model(proto)
        if (isinstance(proto, onnx.ModelProto)
                and all(o.domain != DOMAIN for o in proto.opset_import)
                and any(node.domain == DOMAIN for node in proto.graph.node)):
            raise RuntimeError(MISSING_DOMAIN_IMPORT)  # the error onnx raises, with the fix
        if isinstance(proto, onnx.ModelProto) and any(f.domain == DOMAIN
                                                      for f in proto.functions):
            stripped = onnx.ModelProto()
            stripped.CopyFrom(proto)
            del stripped.functions[:]
            stripped.functions.extend(f for f in proto.functions if f.domain != DOMAIN)
            proto = stripped
        super().__init__(proto, opsets, functions, verbose, [*OP_CLASSES, *(new_ops or [])],
                         *args, **kwargs)
