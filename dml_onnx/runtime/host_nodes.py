"""Standard nodes computed in numpy between the kernels of a split run (chosen by
:mod:`~dml_onnx.runtime.plan`, run by :mod:`~dml_onnx.runtime.segments`), where onnxruntime
would copy or write out what numpy leaves where it lies: a scatter into an array that nothing
else reads, the index an ``Expand`` broadcasts for it, the ``ConstantOfShape`` it starts from,
and a ``Cast`` to the type a value already has.

torchvision's detectors merge their poolers' levels so (``_onnx_merge_levels``): a
``ConstantOfShape`` of zeros ``[R, C, h, w]``, then per level a ``ScatterElements`` along
axis 0 whose indices are the level's region numbers ``Expand``-ed to the pooled shape (int64,
twice the pooled values' bytes) and whose updates are the level's ``Cast`` regions.
onnxruntime writes every expanded index and scatters element by element; here the index is a
broadcast view, so each region is one row copy into the zeros.

Every function checks what onnxruntime's kernel checks and raises its ``InvalidArgument``
naming the node; the results are onnxruntime's, bit for bit (a repeated index: the last
write wins, as onnxruntime's loop leaves it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

SCATTERS = ("ScatterND", "ScatterElements")
VIEWS = ("Cast", "Expand")  # results that are another value's array, or a view of it


class HostNodeError(ort.capi.onnxruntime_pybind11_state.InvalidArgument):
    """An input that onnxruntime's kernel of the node would refuse."""


def compute(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None]) -> np.ndarray:
    """``node``'s output; a scatter writes into its data (its first input)."""
    return _COMPUTE[node.op_type](node, *inputs)


def _attribute(node: onnx.NodeProto, name: str, default: object) -> object:
    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def no_reduction(node: onnx.NodeProto) -> bool:
    return _attribute(node, "reduction", b"none") in (b"", b"none")


def cast_to(node: onnx.NodeProto) -> int:
    """A ``Cast`` node's ``to``: an onnx element type."""
    return int(_attribute(node, "to", 0))  # type: ignore[call-overload]


_FILL_TYPES = frozenset({
    TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BOOL,
    TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
    TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64})
_INDICES = frozenset({TensorProto.INT32, TensorProto.INT64})
_SHAPES = frozenset({TensorProto.INT64})
_INPUT_TYPES: dict[str, tuple[frozenset[int] | int, ...]] = {
    "ScatterND": (_FILL_TYPES, _SHAPES, 0), "ScatterElements": (_FILL_TYPES, _INDICES, 0),
    "Expand": (_FILL_TYPES, _SHAPES), "ConstantOfShape": (_SHAPES,), "Cast": (_FILL_TYPES,)}
"""Per host node type, per input, the element types onnxruntime takes when it creates a
session (its schemas' type constraints and its CPU kernels' types), or the input whose type
it must have. A table rather than a one-node onnxruntime session per node: one took 0.44 ms
on the 2-core machine, and a detector has tens of host nodes. The data types are the
numeric ones, which is all a kernel or a fill makes."""


def takes(node: onnx.NodeProto, elem_types: Mapping[str, int]) -> bool:
    """Whether onnxruntime takes ``node``'s input element types (:data:`_INPUT_TYPES`; by
    value name in ``elem_types``). A node it refuses stays in its segment, so that the session
    is refused when it is created, with onnxruntime's error, as plain onnxruntime refuses the
    model (on the host it failed only in ``run()``)."""
    rules = _INPUT_TYPES[node.op_type]
    types = [elem_types.get(name) for name in node.input]
    return len(types) == len(rules) and all(
        kind == types[rule] if isinstance(rule, int) else kind in rule
        for kind, rule in zip(types, rules))


def plain_fill(node: onnx.NodeProto) -> bool:
    """Whether a ``ConstantOfShape`` node's ``value`` is absent or one element (dimensions
    ``[1]``) of a numeric type: what onnxruntime's kernel takes (it refuses the others when
    the session is created, so those stay in a segment)."""
    value = _attribute(node, "value", None)
    return value is None or (isinstance(value, onnx.TensorProto) and list(value.dims) == [1]
                             and value.data_type in _FILL_TYPES)


def _fail(node: onnx.NodeProto, problem: str) -> HostNodeError:
    return HostNodeError(f"{node.op_type} node '{node.name}': {problem}")


def _writable(data: np.ndarray, *others: np.ndarray) -> np.ndarray:
    """``data`` itself where it may be written, else a copy."""
    if not data.flags.writeable or not data.flags.c_contiguous or any(
            np.may_share_memory(data, other) for other in others):
        return data.copy()
    return data


def _last_writes(targets: np.ndarray) -> np.ndarray | slice:
    """The positions of ``targets`` whose write is the last to its target, in order."""
    if np.unique(targets).size == targets.size:
        return slice(None)
    return np.sort(targets.size - 1 - np.unique(targets[::-1], return_index=True)[1])


def _within(node: onnx.NodeProto, indices: np.ndarray, size: int, what: str) -> np.ndarray:
    """``indices`` (int64) with negative ones counted from the end, all within ``[-size, size)``."""
    outside = (indices < -size) | (indices >= size)
    if outside.any():
        raise _fail(node, f"index {int(indices[outside].flat[0])} is outside {what} of size "
                          f"{size}")
    return np.where(indices < 0, indices + size, indices)


def _scatter_nd(node: onnx.NodeProto, data: np.ndarray, indices: np.ndarray,
                updates: np.ndarray) -> np.ndarray:
    """``ScatterND`` (no reduction): int64 indices ``[..., k]`` within ``[-s, s)`` for each of
    the first ``k`` dimensions, updates ``indices.shape[:-1] + data.shape[k:]``."""
    depth = indices.shape[-1] if indices.ndim else -1
    if indices.dtype != np.int64 or depth < 0 or depth > data.ndim:
        raise _fail(node, f"indices of type {indices.dtype} and shape {list(indices.shape)} "
                          f"for data of rank {data.ndim}")
    if updates.dtype != data.dtype or updates.shape != indices.shape[:-1] + data.shape[depth:]:
        raise _fail(node, f"updates of type {updates.dtype} and shape {list(updates.shape)}, "
                          f"not {data.dtype} {list(indices.shape[:-1] + data.shape[depth:])}")
    data = _writable(data, indices, updates)
    count = math.prod(indices.shape[:-1])  # slices written (depth 0: the whole data each)
    rows, slices = indices.reshape(count, depth), updates.reshape(count, *data.shape[depth:])
    if not len(rows):
        return data
    if not depth:
        data[...] = slices[-1]
        return data
    sizes = np.array(data.shape[:depth], np.int64)
    outside = np.nonzero(((rows < -sizes) | (rows >= sizes)).any(axis=1))[0]
    if outside.size:
        raise _fail(node, f"index {rows[outside[0]].tolist()} is outside the data's shape "
                          f"{list(data.shape)}")
    rows = np.where(rows < 0, rows + sizes, rows)
    keep = _last_writes(np.ravel_multi_index(tuple(rows.T), data.shape[:depth]))
    data[tuple(rows[keep].T)] = slices[keep]
    return data


def _scatter_elements(node: onnx.NodeProto, data: np.ndarray, indices: np.ndarray,
                      updates: np.ndarray) -> np.ndarray:
    """``ScatterElements`` (no reduction): int32/int64 indices of the data's rank, each
    dimension but ``axis`` at most the data's, values within ``[-s, s)`` along ``axis``;
    updates of the indices' shape. Where the indices are constant across every dimension
    but ``axis`` (a broadcast), whole slices are copied."""
    axis = int(_attribute(node, "axis", 0))  # type: ignore[call-overload]
    rank = data.ndim
    if not -rank <= axis < rank:
        raise _fail(node, f"axis {axis} outside the data's rank {rank}")
    axis %= rank
    if indices.dtype not in (np.int32, np.int64) or indices.ndim != rank or any(
            i > d for k, (i, d) in enumerate(zip(indices.shape, data.shape)) if k != axis):
        raise _fail(node, f"indices of type {indices.dtype} and shape {list(indices.shape)} "
                          f"for data of shape {list(data.shape)} along axis {axis}")
    if updates.dtype != data.dtype or updates.shape != indices.shape:
        raise _fail(node, f"updates of type {updates.dtype} and shape {list(updates.shape)}, "
                          f"not {data.dtype} {list(indices.shape)}")
    data = _writable(data, indices, updates)
    if not indices.size:
        return data
    across = [k for k in range(rank) if k != axis]
    if all(indices.strides[k] == 0 or indices.shape[k] == 1 for k in across):
        first = tuple(slice(None) if k == axis else 0 for k in range(rank))
        slices = _within(node, indices[first].astype(np.int64), data.shape[axis], f"axis {axis}")
        keep = _last_writes(slices)
        window: list[slice | np.ndarray] = [slice(0, n) for n in indices.shape]
        window[axis] = slices[keep]
        data[tuple(window)] = np.take(updates, np.arange(slices.size)[keep], axis=axis) \
            if isinstance(keep, np.ndarray) else updates
        return data
    places: list[np.ndarray] = list(np.indices(indices.shape, sparse=True))
    places[axis] = _within(node, indices.astype(np.int64), data.shape[axis], f"axis {axis}")
    flat = np.ravel_multi_index(np.broadcast_arrays(*places), data.shape).ravel()
    keep = _last_writes(flat)
    data.reshape(-1)[flat[keep]] = updates.reshape(-1)[keep]
    return data


def _shape(node: onnx.NodeProto, shape: np.ndarray) -> tuple[int, ...]:
    """A shape input: int64, one dimension, no value below 0."""
    if shape.dtype != np.int64 or shape.ndim != 1 or (shape < 0).any():
        raise _fail(node, f"shape {shape.tolist()} of type {shape.dtype}")
    return tuple(int(n) for n in shape)


def _expand(node: onnx.NodeProto, data: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """``Expand``: ``data`` broadcast with ``shape`` both ways, as a read-only view (a scalar
    by an empty shape: ``[1]``, as onnxruntime gives it)."""
    wanted = _shape(node, shape) or (1,) * (data.ndim == 0)
    try:
        return np.broadcast_to(data, np.broadcast_shapes(data.shape, wanted))
    except ValueError:
        raise _fail(node, f"input of shape {list(data.shape)} does not broadcast with "
                          f"{list(wanted)}") from None


def _constant_of_shape(node: onnx.NodeProto, shape: np.ndarray) -> np.ndarray:
    """``ConstantOfShape`` (a :func:`plain_fill` one): ``shape`` filled with the ``value``
    attribute (float 0 where absent); zeros (all bits 0: not -0.0) come from the system
    already zeroed."""
    wanted = _shape(node, shape)
    value = _attribute(node, "value", None)
    fill = numpy_helper.to_array(value).reshape(-1) if isinstance(
        value, onnx.TensorProto) else np.zeros(1, np.float32)
    try:
        if not fill.view(np.uint8).any():
            return np.zeros(wanted, fill.dtype)
        return np.full(wanted, fill[0], fill.dtype)
    except MemoryError:
        raise MemoryError(f"ConstantOfShape node '{node.name}': no memory for shape "
                          f"{list(wanted)} of {fill.dtype}") from None
    except ValueError:  # more bytes than an address holds
        raise _fail(node, f"shape {list(wanted)} of {fill.dtype} is too large") from None


def _cast(node: onnx.NodeProto, data: np.ndarray) -> np.ndarray:
    """``Cast`` to the type the value has (the only one run here): the value itself."""
    if data.dtype != helper.tensor_dtype_to_np_dtype(cast_to(node)):
        raise _fail(node, f"input of type {data.dtype}")
    return data


_COMPUTE: dict[str, Callable[..., np.ndarray]] = {
    "ScatterND": _scatter_nd, "ScatterElements": _scatter_elements, "Expand": _expand,
    "ConstantOfShape": _constant_of_shape, "Cast": _cast}
