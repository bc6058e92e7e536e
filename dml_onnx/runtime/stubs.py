"""The weights' stubs: how a model without its weights names them (the load stage makes them,
:mod:`~dml_onnx.runtime.weights`), and how onnxruntime is handed their values when the build
stage creates a session: as external initializers on options of our own, or as files in memory
(:func:`in_memory_files`) where the options are the caller's. A stub is an initializer whose
external data's ``location`` is ``dml_onnx:<name>``; other external data onnxruntime reads
itself (:func:`read_by_onnxruntime`).
"""

from __future__ import annotations

import math
import secrets

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from dml_onnx.model_files import WEIGHT_ELEMENTS, with_initializers

NUMPY_TYPES: dict[int, type[np.generic]] = {
    TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64,
    TensorProto.FLOAT16: np.float16, TensorProto.BOOL: np.bool_,
    TensorProto.INT8: np.int8, TensorProto.INT16: np.int16,
    TensorProto.INT32: np.int32, TensorProto.INT64: np.int64,
    TensorProto.UINT8: np.uint8, TensorProto.UINT16: np.uint16,
    TensorProto.UINT32: np.uint32, TensorProto.UINT64: np.uint64}
"""Element types whose values onnxruntime takes as a numpy array of this (little-endian) type."""


def stub_weights(model: onnx.ModelProto, arrays: dict[str, np.ndarray]
                 ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model with a stub for each initializer in ``arrays`` and for each other large one
    of a type in ``NUMPY_TYPES`` that holds its values (which join ``arrays``)."""
    def stub(tensor: TensorProto) -> TensorProto:
        if tensor.name not in arrays:
            if (tensor.data_type not in NUMPY_TYPES or math.prod(tensor.dims) <= WEIGHT_ELEMENTS
                    or tensor.data_location == TensorProto.EXTERNAL or not unique):
                return tensor
            try:
                arrays[tensor.name] = np.ascontiguousarray(numpy_helper.to_array(tensor))
            except ValueError:  # values that do not fill its dims: onnxruntime says so
                return tensor
        light = TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims,
                            data_location=TensorProto.EXTERNAL)
        light.external_data.add(key="location", value=f"{_STUB}{tensor.name}")
        return light

    unique = len({t.name for t in model.graph.initializer}) == len(model.graph.initializer)
    if not arrays and all(math.prod(t.dims) <= WEIGHT_ELEMENTS for t in model.graph.initializer):
        return model, arrays
    return with_initializers(model, stub), arrays


_STUB = "dml_onnx:"
"""How a stub's location starts: the session holds its values (:func:`stub_weights`)."""


def read_by_onnxruntime(tensor: TensorProto) -> bool:
    """Whether ``tensor`` is external data other than a stub: onnxruntime reads its values
    (from the session options or a file), and the session holds no array of them."""
    return tensor.data_location == TensorProto.EXTERNAL and not any(
        entry.key == "location" and entry.value.startswith(_STUB)
        for entry in tensor.external_data)


def in_memory_files(model: onnx.ModelProto, arrays: dict[str, np.ndarray]
                    ) -> tuple[list[str], list[np.ndarray]]:
    """Point each of ``model``'s stubs named in ``arrays`` at an external-data file of its own
    held in memory, for onnxruntime's
    ``SessionOptions.add_external_initializers_from_files_in_memory``: the files' names and
    their bytes (raw_data's little-endian order, the arrays themselves where they are in it).
    onnxruntime copies the values as it creates the session and keeps no reference to them;
    the options keep each name, a random one that no later model names."""
    token = secrets.token_hex(16)
    names: list[str] = []
    buffers: list[np.ndarray] = []
    for tensor in model.graph.initializer:
        if tensor.name in arrays:
            array = arrays[tensor.name]
            values = array.astype(array.dtype.newbyteorder("<"), copy=False)
            names.append(f"dml_onnx-{token}-{len(names)}")
            del tensor.external_data[:]
            tensor.external_data.add(key="location", value=names[-1])
            tensor.external_data.add(key="length", value=str(values.nbytes))
            buffers.append(values.reshape(-1).view(np.uint8))
    return names, buffers
