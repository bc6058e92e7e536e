"""The load stage's checks and the plan, once per graph: a model's checked element types and
dimensions (:func:`~dml_onnx.runtime.rewrite.checked_types`) and its split execution's steps
(:func:`~dml_onnx.runtime.plan.split`), kept for the next session of the same graph
(:func:`prepared`): they depend on the graph alone, never on the weights' values.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict

import onnx

from dml_onnx.graphs import Dims
from dml_onnx.runtime.plan import HostNode, Kernel, Segment, split
from dml_onnx.runtime.rewrite import checked_types

Prepared = tuple[dict[str, int], Dims, list[Segment | Kernel | HostNode] | None]
PREPARED_MODELS = 8
"""How many models' checked types and steps the process keeps (the latest used), by the digest
of the model without its weights' values: creating a session of a model again skips them
(Mask R-CNN: 60-90 ms of a 300-500 ms creation on the 2-core machine). What is kept is never
changed."""
PREPARED_BYTES = 1 << 28
"""The most bytes of models (serialized, without the weights' values) whose preparations are
kept at once: a larger one is not kept."""
_prepared_models: OrderedDict[tuple[bytes, bool, bool], tuple[int, Prepared]] = OrderedDict()
_prepared_lock = threading.Lock()


def prepared(model: onnx.ModelProto, *, strings: bool, split_it: bool) -> Prepared:
    """``model``'s element types and dimensions (:func:`checked_types`, which raises for a bad
    model) and its steps (:func:`split`; None where it runs as one session or ``split_it`` is
    false), from the kept ones (:data:`PREPARED_MODELS`, :data:`PREPARED_BYTES`) where the
    same model (``model`` is its graph without the weights' values) was prepared before."""
    def prepare() -> Prepared:
        elem_types, dims = checked_types(model, strings=strings)
        return elem_types, dims, split(model, elem_types, dims) if split_it else None

    size = model.ByteSize()
    if size > PREPARED_BYTES:  # not kept: no serialized copy of it just for the key
        return prepare()
    key = hashlib.sha256(model.SerializeToString()).digest(), strings, split_it
    with _prepared_lock:
        if key in _prepared_models:
            _prepared_models.move_to_end(key)
            return _prepared_models[key][1]
    prepared = prepare()
    with _prepared_lock:
        _prepared_models[key] = size, prepared
        while len(_prepared_models) > PREPARED_MODELS or \
                sum(kept for kept, _ in _prepared_models.values()) > PREPARED_BYTES:
            _prepared_models.popitem(last=False)
    return prepared


def _new_prepared_lock() -> None:
    """A forked child's lock: another thread may have held the parent's as it forked."""
    global _prepared_lock
    _prepared_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_prepared_lock)
