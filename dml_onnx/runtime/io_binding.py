"""onnxruntime's I/O binding on the CPU for :class:`~dml_onnx.runtime.session.InferenceSession`
(:class:`IOBinding`), a run over the session's ``run()``, and the ``OrtValue`` that holds an
output's array (:func:`ort_value`), which ``run_with_ort_values`` gives too.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import helper

from dml_onnx._kernels import KernelError


def ort_value(output: Any) -> ort.OrtValue:
    """``output`` as an ``OrtValue`` whose C value holds the array: ``OrtValue.numpy()``
    returns a view that keeps the C value, not the Python wrapper, and
    ``ortvalue_from_numpy`` leaves the array to the wrapper, so the view of a dropped wrapper
    read freed memory, or a kept block (:mod:`dml_onnx._kernels._buffers`) that the next run wrote.
    DLPack hands the array itself to the C value (no copy); strings, which DLPack does not
    carry, ``ortvalue_from_numpy`` copies into the C value."""
    array = np.asarray(output, order="C")  # np.ascontiguousarray makes a 0-d array 1-d
    if array.dtype.kind in "OSU":
        return ort.OrtValue.ortvalue_from_numpy(array)
    return ort.OrtValue.from_dlpack(array)


class IOBinding:
    """``onnxruntime.IOBinding`` on the CPU over :meth:`InferenceSession.run` (a kernel's
    graph inputs and outputs never pass through onnxruntime, and split execution has no one
    session to bind). Inputs are read and outputs given as onnxruntime's binding gives them:
    a bound C-contiguous array is read when the session runs, another is copied when it is
    bound; an output bound to an ``OrtValue`` or a buffer is written there (its type and
    shape must be the output's), and one bound by name is bound to the ``OrtValue`` its
    first run gives. A failed run raises ``RuntimeError``, as onnxruntime's
    ``run_with_iobinding`` does (a kernel's :class:`KernelError` as it is)."""

    def __init__(self, session: ort.InferenceSession):
        self._session = session
        self._names = {value.name for value in session.get_inputs()}
        self._inputs: dict[str, np.ndarray | ort.OrtValue] = {}
        self._outputs: dict[str, np.ndarray | ort.OrtValue | None] = {}  # None: allocated
        self._values: list[ort.OrtValue] = []  # the last run's outputs

    def _input(self, name: str, value: np.ndarray | ort.OrtValue) -> None:
        if name not in self._names:
            raise RuntimeError(f"Failed to find NodeArg with name: {name} in the def list")
        self._inputs[name] = value

    def bind_cpu_input(self, name: str, arr_on_cpu: np.ndarray) -> None:
        if not isinstance(arr_on_cpu, np.ndarray):
            raise RuntimeError("Unable to create OrtValue from the given python object")
        self._input(name, np.asarray(arr_on_cpu, order="C"))  # a 0-d array stays 0-d

    def bind_input(self, name: str, device_type: str, device_id: int, element_type: Any,
                   shape: Sequence[int], buffer_ptr: int) -> None:
        self._input(name, _buffer(device_type, device_id, element_type, shape, buffer_ptr))

    def bind_ortvalue_input(self, name: str, ortvalue: ort.OrtValue) -> None:
        self._input(name, _checked_ort_value(ortvalue))

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0,
                    element_type: Any = None, shape: Sequence[int] | None = None,
                    buffer_ptr: int | None = None) -> None:
        if buffer_ptr is None:
            ort.OrtDevice.make(device_type, device_id)  # refuses an unknown device type
            self._outputs[name] = None
        elif element_type is None or shape is None:
            raise ValueError("`element_type` and `shape` are to be provided if pre-allocated "
                             "memory is provided")
        else:
            self._outputs[name] = _buffer(device_type, device_id, element_type, shape,
                                          buffer_ptr)

    def bind_ortvalue_output(self, name: str, ortvalue: ort.OrtValue) -> None:
        self._outputs[name] = _checked_ort_value(ortvalue)

    def synchronize_inputs(self) -> None:
        """Nothing to wait for: the inputs are on the CPU."""

    def synchronize_outputs(self) -> None:
        """Nothing to wait for: the outputs are on the CPU."""

    def get_outputs(self) -> list[ort.OrtValue]:
        return list(self._values)

    def get_outputs_as_ortvaluevector(self) -> Any:
        """The last run's outputs as onnxruntime's ``OrtValueVector``."""
        vector = ort.capi._pybind_state.OrtValueVector()
        for value in self._values:
            vector.push_back(value._ortvalue)
        return vector

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        return [value.numpy().copy() for value in self._values]

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._values = []

    def _run(self, run_options: ort.RunOptions | None) -> None:
        """:meth:`InferenceSession.run` of the bound inputs, its outputs written where they
        are bound; one bound by name is bound to its ``OrtValue`` afterwards, as onnxruntime
        keeps it (the next run writes into it, and fails where its shape changed)."""
        if not self._outputs:
            raise RuntimeError("Error in execution: At least one output should be requested.")
        feeds = {name: value.numpy() if isinstance(value, ort.OrtValue) else value
                 for name, value in self._inputs.items()}
        try:
            results = self._session.run(list(self._outputs), feeds, run_options)
        except KernelError:
            raise
        except Exception as error:  # onnxruntime's binding reports every failure so
            raise RuntimeError(f"Error in execution: {error}") from error
        values = []
        for (name, bound), result in zip(self._outputs.items(), results):
            if bound is None:
                values.append(ort_value(result))
                continue
            target = bound.numpy() if isinstance(bound, ort.OrtValue) else bound
            result = np.asarray(result)
            if target.dtype != result.dtype or target.shape != result.shape:
                raise RuntimeError(
                    f"Error in execution: the output OrtValue provided for output '{name}' is "
                    f"{target.dtype} {list(target.shape)}, the output is {result.dtype} "
                    f"{list(result.shape)}")
            np.copyto(target, result)
            values.append(bound if isinstance(bound, ort.OrtValue) else
                          ort.OrtValue.ortvalue_from_numpy(target))
        self._outputs.update(zip(self._outputs, values))
        self._values = values


def _checked_ort_value(value: Any) -> ort.OrtValue:
    """``value``, an ``OrtValue``; anything else raises the ``AttributeError`` onnxruntime's
    binding raises for it (it reads the ``OrtValue``'s C value at once)."""
    if not isinstance(value, ort.OrtValue):
        raise AttributeError(f"'{type(value).__name__}' object has no attribute '_ortvalue'")
    return value


def _buffer(device_type: str, device_id: int, element_type: Any, shape: Sequence[int],
            buffer_ptr: int) -> np.ndarray:
    """The array of ``shape`` and ``element_type`` (a numpy type, or an onnx element type)
    at ``buffer_ptr`` in the CPU's memory, as ``IOBinding.bind_input`` takes it."""
    ort.OrtDevice.make(device_type, device_id)  # refuses an unknown device type
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(element_type)
                     if isinstance(element_type, int) else element_type)
    size = math.prod(shape) * dtype.itemsize
    memory = memoryview((ctypes.c_byte * size).from_address(buffer_ptr))
    return np.frombuffer(memory, dtype).reshape(shape)
