"""I/O binding on the CPU (``io_binding()``, ``run_with_iobinding()``): each case runs on
plain onnxruntime and on ``dml_onnx.InferenceSession`` in every way the session runs a model
(one onnxruntime session, one whose kernel reads the graph input, split execution) and
requires the same results, the same buffers written and the same error types."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dml_onnx
from dml_onnx.runtime.io_binding import IOBinding
from tests.runtime.test_session_compatibility import POOL, X, _sessions, _value

LAYOUTS = ["standard", "one session", "at the ends", "between"]
"""Where the ``dml_onnx`` node is: none; between standard nodes in a model that runs as one
session (a graph input with an initializer), where onnxruntime's own binding of that session
would not be exact; reading the graph input; between standard nodes (split execution)."""


def _model(layout: str) -> onnx.ModelProto:
    """``X`` -> ``C`` through a chain with the ``dml_onnx`` node as ``layout`` says, and
    ``D = Sigmoid(X)``."""
    if layout == "at the ends":
        chain = [dml_onnx.lp_pooling("X", "C", **POOL)]
    else:
        chain = [helper.make_node("Neg", ["X"], ["A"]),
                 dml_onnx.lp_pooling("A", "B", **POOL) if layout != "standard" else
                 helper.make_node("Relu", ["A"], ["B"]),
                 helper.make_node("Mul", ["B", "k"], ["C"])]
    return dml_onnx.make_model(
        [*chain, helper.make_node("Sigmoid", ["X"], ["D"])],
        [_value("X", shape=["N", 3, 5, 5]), *([_value("k", shape=[])] * (layout == "one session"))],
        [_value("C"), _value("D")],
        initializers=[numpy_helper.from_array(np.array(2, np.float32), "k")] * (len(chain) > 1))


def _both(layout: str):
    plain, ours = _sessions(_model(layout))
    assert (ours._split is not None) == (layout == "between")
    assert isinstance(ours.io_binding(), IOBinding)
    return plain, ours


@pytest.mark.parametrize("layout", LAYOUTS)
def test_bound_inputs_and_outputs_give_onnxruntimes_results_in_its_buffers(layout):
    """Inputs bound as arrays (read when the session runs), pointers and ``OrtValue``s;
    outputs by name (the next run writes into the same buffer), into a preallocated
    ``OrtValue`` (the same one comes back, written) and into a buffer;
    ``copy_outputs_to_cpu`` copies; cleared outputs leave none."""
    results = []
    for session in _both(layout):
        binding = session.io_binding()
        x = X.copy()
        binding.bind_cpu_input("X", x)
        x[0, 0, 0, 0] = 5  # a C-contiguous array is read when the session runs
        binding.bind_output("C")
        into = ort.OrtValue.ortvalue_from_numpy(np.zeros_like(X))
        binding.bind_ortvalue_output("D", into)
        session.run_with_iobinding(binding)
        binding.synchronize_outputs()
        got = binding.get_outputs()
        assert got[1].data_ptr() == into.data_ptr()
        session.run_with_iobinding(binding)
        assert [value.data_ptr() for value in binding.get_outputs()] == \
            [value.data_ptr() for value in got]
        copied = binding.copy_outputs_to_cpu()
        copied[0][...] = -1
        first = [value.numpy().copy() for value in got]
        assert not (got[0].numpy() == -1).any()

        y = np.repeat(X[..., ::-1], 2, axis=3)
        binding.bind_cpu_input("X", y[..., ::2])  # not contiguous: copied when bound
        y[...] = 0
        buffer = np.zeros(first[0].shape, np.float32)
        binding.bind_output("C", "cpu", 0, np.float32, list(buffer.shape), buffer.ctypes.data)
        session.run_with_iobinding(binding)
        second = [buffer.copy(), into.numpy().copy()]
        assert binding.get_outputs()[0].data_ptr() == buffer.ctypes.data

        z = 2 * X
        binding.clear_binding_inputs()
        binding.bind_input("X", "cpu", 0, TensorProto.FLOAT, list(z.shape), z.ctypes.data)
        session.run_with_iobinding(binding)
        third = binding.copy_outputs_to_cpu()
        binding.bind_ortvalue_input("X", ort.OrtValue.ortvalue_from_numpy(-z))
        session.run_with_iobinding(binding)
        binding.synchronize_inputs()
        fourth = binding.copy_outputs_to_cpu()
        binding.clear_binding_outputs()
        results.append((first, second, third, fourth, binding.get_outputs()))
    ours, theirs = results[1], results[0]
    for got, want in zip(ours[:4], theirs[:4], strict=True):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-6)
    assert ours[4] == theirs[4] == []


def _error(call, *args):
    try:
        call(*args)
    except Exception as error:  # compared by type with onnxruntime's
        return error
    return None


@pytest.mark.parametrize("layout", LAYOUTS)
def test_binding_errors_are_onnxruntimes(layout):
    """An unknown input name at binding; at the run: an input of another type, a missing
    input, an unknown output, no output, a preallocated output of another shape or type, a
    binding of another session, an output bound by name whose shape changes from one run to
    the next: the error types are onnxruntime's, and the binding goes on."""
    errors = []
    for session, other in zip(_both(layout), _both(layout)):
        binding = session.io_binding()
        binding.bind_output("C")
        run = session.run_with_iobinding
        found = [_error(binding.bind_cpu_input, "nothing", X), _error(run, binding)]
        binding.bind_cpu_input("X", X.astype(np.float64))
        found.append(_error(run, binding))
        binding.bind_cpu_input("X", X)
        for bound in (np.zeros((2, 2), np.float32), np.zeros(X.shape, np.float64)):
            binding.bind_ortvalue_output("D", ort.OrtValue.ortvalue_from_numpy(bound))
            found.append(_error(run, binding))
        binding.bind_output("nothing")
        found.append(_error(run, binding))
        binding.clear_binding_outputs()
        found.append(_error(run, binding))
        found.append(_error(other.run_with_iobinding, binding))
        binding.bind_output("D")
        session.run_with_iobinding(binding)
        np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], 1 / (1 + np.exp(-X)),
                                   rtol=1e-6)
        binding.bind_cpu_input("X", np.concatenate([X, X]))
        found.append(_error(run, binding))  # an output bound by name keeps its first run's shape
        errors.append(found)
    theirs, ours = errors
    assert all(error is not None for error in theirs)
    assert [type(e) for e in ours] == [type(e) for e in theirs], list(zip(ours, theirs))


@pytest.mark.parametrize("layout", LAYOUTS[1:])
def test_a_failed_kernel_raises_its_kernel_error_and_the_binding_goes_on(layout):
    """A kernel that fails in a bound run raises its :class:`dml_onnx.KernelError`, as
    ``run()`` does, in each way the session runs the model; the next run is right."""
    plain, ours = _both(layout)
    binding = ours.io_binding()
    binding.bind_cpu_input("X", X)
    binding.bind_output("C")
    previous = dml_onnx.set_work_limit(1)
    try:
        with pytest.raises(dml_onnx.KernelError, match="above the work limit"):
            ours.run_with_iobinding(binding)
    finally:
        dml_onnx.set_work_limit(previous)
    ours.run_with_iobinding(binding)  # the failed run left no output bound to its placeholder
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0],
                               plain.run(["C"], {"X": X})[0], rtol=1e-6)
