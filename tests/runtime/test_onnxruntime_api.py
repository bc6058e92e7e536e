"""onnxruntime's Python API on the CPU, mirrored: every case runs on plain
``onnxruntime.InferenceSession`` and on ``dml_onnx.InferenceSession`` (:data:`KINDS`), each
over the models of :data:`LAYOUTS`, and requires what a reference session gives (plain
onnxruntime over the same model, its ``dml_onnx`` nodes as model-local functions): the same
values, element types and shapes, and the same error types. On plain onnxruntime a case checks
the case itself. Written from onnxruntime's documented API.

Where ``dml_onnx.InferenceSession`` takes more than onnxruntime does (a ``ModelProto`` or a
``bytearray`` as the model), the case says so and checks both sides; the cases at the end are
ours alone (an array in the other byte order, which onnxruntime reads by its bytes; when split
execution asks onnxruntime to check a feed)."""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dml_onnx
from dml_onnx.runtime import plan

KINDS = ["onnxruntime", "dml_onnx"]
LAYOUTS = ["standard", "split", "direct"]
"""Where the model has its ``dml_onnx`` node: none (standard nodes only); between standard
nodes (``Neg -> LpPooling -> Mul``: our session runs it split); reading a graph input and
writing a graph output (one session whose kernel reads the caller's array)."""

POOL = {"window_size": [3, 3], "start_padding": [1, 1], "end_padding": [1, 1]}
X = np.arange(150, dtype=np.float32).reshape(2, 3, 5, 5) / 7 - 10
Y = np.array([1, 2], np.int64)
FEED = {"X": X, "Y": Y}


def _value(name: str, elem: int = TensorProto.FLOAT, shape: list | None = None
           ) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(layout: str, nodes: tuple[onnx.NodeProto, ...] = (),
           outputs: tuple[onnx.ValueInfoProto, ...] = (),
           initializers: tuple[onnx.TensorProto, ...] = ()) -> onnx.ModelProto:
    """``C`` from ``X`` through a chain with the ``dml_onnx`` node as ``layout`` says,
    ``D = Sigmoid(X)``, ``E = Y + Y``; then ``nodes`` and ``outputs``; metadata set."""
    if layout == "direct":
        chain = [dml_onnx.lp_pooling("X", "C", **POOL)]
    else:
        chain = [helper.make_node("Neg", ["X"], ["A"]),
                 dml_onnx.lp_pooling("A", "B", **POOL) if layout == "split" else
                 helper.make_node("Relu", ["A"], ["B"]),
                 helper.make_node("Mul", ["B", "k"], ["C"])]
        initializers = (numpy_helper.from_array(np.array(2, np.float32), "k"), *initializers)
    model = dml_onnx.make_model(
        [*chain, helper.make_node("Sigmoid", ["X"], ["D"]),
         helper.make_node("Add", ["Y", "Y"], ["E"]), *nodes],
        [_value("X", shape=["N", 3, 5, 5]), _value("Y", TensorProto.INT64, [2])],
        [_value("C"), _value("D", shape=["N", 3, 5, 5]), _value("E", TensorProto.INT64),
         *outputs], initializers=initializers)
    model.doc_string, model.model_version, model.domain = "mirror", 7, "tests"
    model.graph.doc_string = "the mirror's graph"
    helper.set_model_props(model, {"author": "tests"})
    return model


def _plain(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model as plain onnxruntime runs it: its ``dml_onnx`` nodes' standard forms as
    model-local functions."""
    return dml_onnx.with_functions(model)


def _session(kind: str, model: onnx.ModelProto | bytes | str, options: Any = None,
             **kwargs: Any) -> ort.InferenceSession:
    """A session of ``kind`` over ``model`` (a ModelProto is serialized; bytes and paths are
    given as they are: plain onnxruntime's must hold the plain form)."""
    if isinstance(model, onnx.ModelProto):
        model = (_plain(model) if kind == "onnxruntime" else model).SerializeToString()
    kwargs.setdefault("providers", ["CPUExecutionProvider"])
    if kind == "onnxruntime":
        return ort.InferenceSession(model, options, **kwargs)
    return dml_onnx.InferenceSession(model, options, **kwargs)


def _reference(model: onnx.ModelProto, options: Any = None) -> ort.InferenceSession:
    return ort.InferenceSession(_plain(model).SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def _check_mode(session: Any, kind: str, layout: str) -> None:
    """Our session runs ``layout`` the way the case means (split only for "split")."""
    if kind == "dml_onnx":
        assert (session._split is not None) == (layout == "split")


def _same(got: Any, want: Any) -> None:
    """The same values, types, element types and shapes (lists: element by element)."""
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    elif isinstance(want, ort.OrtValue):
        assert (got.data_type(), got.shape()) == (want.data_type(), want.shape())
        _same(got.numpy(), want.numpy())
    else:
        assert (got.dtype, got.shape) == (want.dtype, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _raises_as(call: Any, reference_call: Any) -> BaseException:
    """``call`` raises an error of the exact type ``reference_call`` raises; that error."""
    with pytest.raises(Exception) as expected:  # noqa: PT011 - the type is compared below
        reference_call()
    with pytest.raises(type(expected.value)) as got:
        call()
    assert type(got.value) is type(expected.value)
    return got.value


_CACHE: dict[tuple[str, str], tuple[Any, ort.InferenceSession]] = {}


def _pair(kind: str, layout: str) -> tuple[Any, ort.InferenceSession]:
    """A session of ``kind`` over ``_model(layout)`` and the reference, kept for the cases
    that change neither."""
    if (kind, layout) not in _CACHE:
        model = _model(layout)
        session = _session(kind, model)
        _check_mode(session, kind, layout)
        _CACHE[kind, layout] = session, _reference(model)
    return _CACHE[kind, layout]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=LAYOUTS)
def layout(request: pytest.FixtureRequest) -> str:
    return request.param


# --- creating a session ---------------------------------------------------------------------

@pytest.mark.parametrize("source", ["str path", "Path", "bytes"])
def test_a_session_from_a_path_or_bytes(kind, layout, source, tmp_path):
    model = _model(layout)
    path = tmp_path / "model.onnx"
    onnx.save(_plain(model) if kind == "onnxruntime" else model, path)
    given = {"str path": str(path), "Path": path, "bytes": path.read_bytes()}[source]
    session = _session(kind, given)
    _check_mode(session, kind, layout)
    _same(session.run(None, FEED), _reference(model).run(None, FEED))


@pytest.mark.parametrize("form", ["ModelProto", "bytearray"])
def test_a_model_proto_or_bytearray_is_taken_by_dml_onnx_alone(kind, layout, form):
    """onnxruntime raises ``TypeError`` for a ``ModelProto`` or a ``bytearray``; our session
    takes both (the extension documented in its docstring) and runs them as the reference."""
    model = _model(layout)
    given: Any = _plain(model) if kind == "onnxruntime" else model
    given = given if form == "ModelProto" else bytearray(given.SerializeToString())
    if kind == "onnxruntime":
        with pytest.raises(TypeError, match="Unable to load from type"):
            ort.InferenceSession(given, providers=["CPUExecutionProvider"])
        return
    session = dml_onnx.InferenceSession(given)
    _check_mode(session, kind, layout)
    _same(session.run(None, FEED), _reference(model).run(None, FEED))


def _bad_source(case: str, tmp_path: Path) -> bytes | str:
    data = _model("standard").SerializeToString()
    if case == "directory":
        return str(tmp_path)
    if case == "nonexistent path":
        return str(tmp_path / "missing.onnx")
    if case == "file of bad bytes":
        (tmp_path / "bad.onnx").write_bytes(b"\x08\x0a\xff\xff garbage")
        return str(tmp_path / "bad.onnx")
    return {"bad bytes": b"\x08\x0a\xff\xff garbage", "empty bytes": b"",
            "truncated bytes": data[:len(data) // 2]}[case]


@pytest.mark.parametrize("case", ["bad bytes", "empty bytes", "truncated bytes",
                                  "nonexistent path", "directory", "file of bad bytes"])
def test_a_source_that_is_no_model_raises_onnxruntimes_error(kind, case, tmp_path):
    source = _bad_source(case, tmp_path)
    error = _raises_as(lambda: _session(kind, source),
                       lambda: ort.InferenceSession(source, providers=["CPUExecutionProvider"]))
    assert "ONNXRuntimeError" in str(error)


@pytest.mark.parametrize("fallback", [0, 1])
@pytest.mark.parametrize("case", ["unknown provider", "providers and options of two lengths",
                                  "options not dicts", "a provider neither str nor pair"])
def test_provider_arguments_are_checked_as_onnxruntime_checks_them(kind, layout, case,
                                                                   fallback):
    """Without fallback the error onnxruntime raises; with it (its default) onnxruntime's
    session on the CPU, after a warning for an unknown provider."""
    model = _model(layout)
    cases: dict[str, dict[str, Any]] = {
        "unknown provider": {"providers": ["NoSuchExecutionProvider"]},
        "providers and options of two lengths": {"providers": ["CPUExecutionProvider"],
                                                 "provider_options": [{}, {}]},
        "options not dicts": {"providers": ["CPUExecutionProvider"], "provider_options": [1]},
        "a provider neither str nor pair": {"providers": [("CPUExecutionProvider",)]},
    }
    arguments = {**cases[case], "enable_fallback": fallback}

    def reference() -> ort.InferenceSession:
        return ort.InferenceSession(_plain(model).SerializeToString(), **arguments)

    expected = pytest.warns(UserWarning, match="NoSuchExecutionProvider") \
        if case == "unknown provider" else contextlib.nullcontext()
    if not fallback:
        with expected:
            _raises_as(lambda: _session(kind, model, **arguments), reference)
        return
    with expected:
        session = _session(kind, model, **arguments)
    want = reference()
    assert session.get_providers() == want.get_providers() == ["CPUExecutionProvider"]
    _same(session.run(None, FEED), want.run(None, FEED))


def test_providers_and_their_options(kind, layout):
    model = _model(layout)
    choices: list[dict[str, Any]] = [
        {"providers": [("CPUExecutionProvider", {"use_arena": "0"})]},
        {"providers": ["CPUExecutionProvider"], "provider_options": [{"use_arena": "0"}]},
        {"providers": []}]
    for arguments in choices:
        session = _session(kind, model, **arguments)
        want = ort.InferenceSession(_plain(model).SerializeToString(), **arguments)
        assert session.get_providers() == want.get_providers()
        assert session.get_provider_options() == want.get_provider_options()
        _same(session.run(None, FEED), want.run(None, FEED))


# --- run and its kin ------------------------------------------------------------------------

@pytest.mark.parametrize("names", [None, [], ["E", "C"], ["D", "C", "E"], ["D", "D"], ("E",),
                                   ["C"], {"C"}, "a generator"])
def test_run_gives_the_outputs_asked_for_in_their_order(kind, layout, names):
    session, reference = _pair(kind, layout)

    def asked() -> Any:
        return (name for name in ["E", "C"]) if names == "a generator" else names

    _same(session.run(asked(), FEED), reference.run(asked(), FEED))
    _same(session.run_with_ort_values(asked(), {n: ort.OrtValue.ortvalue_from_numpy(a)
                                                for n, a in FEED.items()}),
          reference.run_with_ort_values(asked(), {n: ort.OrtValue.ortvalue_from_numpy(a)
                                                  for n, a in FEED.items()}))


def test_run_options(kind, layout):
    """``None``; log tags and levels; a run config entry; ``terminate`` fails ``run``,
    ``run_with_ort_values`` and ``run_with_iobinding`` with onnxruntime's error types, and
    the session runs again once it is cleared."""
    session, reference = _pair(kind, layout)
    _same(session.run(None, FEED, None), reference.run(None, FEED, None))
    options = ort.RunOptions()
    options.logid, options.log_severity_level, options.log_verbosity_level = "mirror", 3, 0
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    _same(session.run(None, FEED, options), reference.run(None, FEED, options))
    options.terminate = True
    values = {name: ort.OrtValue.ortvalue_from_numpy(a) for name, a in FEED.items()}

    def bound(s: Any) -> Any:
        binding = s.io_binding()
        binding.bind_cpu_input("X", X)
        binding.bind_cpu_input("Y", Y)
        binding.bind_output("C")
        return lambda: s.run_with_iobinding(binding, options)

    for call in (lambda s: lambda: s.run(None, FEED, options),
                 lambda s: lambda: s.run_with_ort_values(["C"], values, options), bound):
        _raises_as(call(session), call(reference))
    options.terminate = False
    _same(session.run(None, FEED, options), reference.run(None, FEED, options))


def test_run_with_ort_values(kind, layout):
    session, reference = _pair(kind, layout)
    for names in (None, ["E", "C"]):
        values = {name: ort.OrtValue.ortvalue_from_numpy(a) for name, a in FEED.items()}
        got = session.run_with_ort_values(names, values)
        _same(got, reference.run_with_ort_values(names, values))
        kept = [value.numpy().copy() for value in got]
        session.run_with_ort_values(names, {"X": ort.OrtValue.ortvalue_from_numpy(-X),
                                            "Y": values["Y"]})
        for value, copy in zip(got, kept):  # a later run writes none of them
            np.testing.assert_array_equal(value.numpy(), copy)


def test_run_async_calls_back_with_the_outputs(kind, layout):
    session, reference = _pair(kind, layout)
    done = threading.Event()
    results: list[Any] = []

    def callback(outputs: Any, user_data: Any, error: str) -> None:
        results.append((outputs, user_data, error))
        done.set()

    session.run_async(["C", "E"], FEED, callback, "data")
    assert done.wait(30)
    outputs, user_data, error = results[0]
    assert (user_data, error) == ("data", "")
    _same(list(outputs), reference.run(["C", "E"], FEED))


def test_io_binding(kind, layout):
    """``bind_cpu_input``, ``bind_input`` (a pointer), ``bind_ortvalue_input``;
    ``bind_output`` by name and into a buffer, ``bind_ortvalue_output``; ``get_outputs``,
    ``get_outputs_as_ortvaluevector``, ``copy_outputs_to_cpu``; ``clear_binding_inputs`` and
    ``clear_binding_outputs``: the values the reference's binding gives."""
    session, reference = _pair(kind, layout)
    results = []
    for s in (session, reference):
        binding = s.io_binding()
        binding.bind_cpu_input("X", X)
        binding.bind_ortvalue_input("Y", ort.OrtValue.ortvalue_from_numpy(Y))
        binding.bind_output("C")
        into = ort.OrtValue.ortvalue_from_numpy(np.zeros_like(X))
        binding.bind_ortvalue_output("D", into)
        buffer = np.zeros(2, np.int64)
        binding.bind_output("E", "cpu", 0, np.int64, [2], buffer.ctypes.data)
        s.run_with_iobinding(binding)
        binding.synchronize_outputs()
        first = [value.numpy().copy() for value in binding.get_outputs()]
        assert binding.get_outputs()[1].data_ptr() == into.data_ptr()
        assert binding.get_outputs()[2].data_ptr() == buffer.ctypes.data
        vector = binding.get_outputs_as_ortvaluevector()
        assert len(vector) == 3
        np.testing.assert_array_equal(vector[2].numpy(), buffer)
        z = np.ascontiguousarray(2 * X)
        binding.clear_binding_inputs()
        binding.bind_input("X", "cpu", 0, np.float32, list(z.shape), z.ctypes.data)
        binding.bind_cpu_input("Y", Y)
        binding.synchronize_inputs()
        s.run_with_iobinding(binding, None)
        second = binding.copy_outputs_to_cpu()
        binding.clear_binding_outputs()
        binding.bind_output("E")
        s.run_with_iobinding(binding)
        third = binding.copy_outputs_to_cpu()
        results.append([first, second, third, buffer.copy(), into.numpy().copy()])
    _same(results[0], results[1])


BINDING_ERRORS = {
    "an array for an OrtValue input": lambda s, b: b.bind_ortvalue_input("X", X),
    "an array for an OrtValue output": lambda s, b: b.bind_ortvalue_output("C", X),
    "a list for an input": lambda s, b: b.bind_cpu_input("X", X.tolist()),
    "None for an input": lambda s, b: b.bind_cpu_input("X", None),
    "an unknown device": lambda s, b: b.bind_output("C", "nodevice"),
    "no binding": lambda s, b: s.run_with_iobinding(None),
    "a feed of another type": lambda s, b: (b.bind_cpu_input("X", X.astype(np.float64)),
                                            b.bind_cpu_input("Y", Y), b.bind_output("C"),
                                            s.run_with_iobinding(b)),
}


@pytest.mark.parametrize("case", list(BINDING_ERRORS))
def test_io_binding_errors_are_onnxruntimes(kind, layout, case):
    session, reference = _pair(kind, layout)
    call = BINDING_ERRORS[case]
    _raises_as(lambda: call(session, session.io_binding()),
               lambda: call(reference, reference.io_binding()))


def _sequence_model(layout: str) -> onnx.ModelProto:
    sequence = helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    optional = helper.make_optional_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    return _model(layout, (helper.make_node("SequenceConstruct", ["C", "X"], ["S"]),
                           helper.make_node("Optional", ["C"], ["O"])),
                  (helper.make_value_info("S", sequence), helper.make_value_info("O", optional)))


def test_sequence_and_optional_graph_outputs(kind, layout):
    model = _sequence_model(layout)
    session, reference = _session(kind, model), _reference(model)
    assert [(o.name, o.type) for o in session.get_outputs()] == \
        [(o.name, o.type) for o in reference.get_outputs()]
    for names in (None, ["O", "S"], ["S", "E"]):
        _same(session.run(names, FEED), reference.run(names, FEED))


@pytest.mark.parametrize("how", ["add_external_initializers",
                                 "add_external_initializers_from_files_in_memory"])
def test_external_initializers_from_the_session_options(kind, layout, how):
    weight = np.linspace(-1, 1, 75, dtype=np.float32).reshape(1, 3, 5, 5)
    tensor = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[1, 3, 5, 5],
                         data_location=TensorProto.EXTERNAL)
    tensor.external_data.add(key="location", value="W.bin")  # a file never written
    model = _model(layout, (helper.make_node("Add", ["X", "W"], ["F"]),), (_value("F"),),
                   (tensor,))

    def options() -> ort.SessionOptions:
        made = ort.SessionOptions()
        if how == "add_external_initializers":
            made.add_external_initializers(["W"], [ort.OrtValue.ortvalue_from_numpy(weight)])
        else:
            made.add_external_initializers_from_files_in_memory(
                ["W.bin"], [weight.view(np.uint8).ravel()], [weight.nbytes])
        return made

    session = _session(kind, model, options())
    _same(session.run(None, FEED), _reference(model, options()).run(None, FEED))


def test_outputs_are_the_callers_across_runs(kind, layout):
    """Outputs of 8.4 MB (blocks our kernels keep from run to run): a later run, a change of
    the feed after the run or of an earlier output change no output (the reference runs the
    first rows alone: each row of ``C`` and ``D`` is its own)."""
    session, reference = _pair(kind, layout)
    x = np.random.default_rng(3).standard_normal((28000, 3, 5, 5)).astype(np.float32)

    def check(got: list[np.ndarray], feed: np.ndarray) -> None:
        want = reference.run(None, {"X": feed[:50], "Y": Y})
        _same([got[0][:50], got[1][:50], got[2]], want)

    first = session.run(None, {"X": x, "Y": Y})
    head = x[:50].copy()
    x[...] = 1  # the feed, after the run
    second = session.run(None, {"X": x, "Y": Y})
    check(first, head)
    for output in first:
        output[...] = 0
    check(second, x)
    third = session.run(None, {"X": x, "Y": Y})
    _same(third, second)


def test_threads_running_one_session_at_once(kind, layout):
    session, reference = _pair(kind, layout)
    feeds = [{"X": X * (k + 1) - k, "Y": Y + k} for k in range(8)]
    want = [reference.run(None, feed) for feed in feeds]
    got: dict[int, Any] = {}

    def work(k: int) -> None:
        for _ in range(4):
            got[k] = session.run(None, feeds[k])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for k in range(8):
        _same(got[k], want[k])


# --- feeds ----------------------------------------------------------------------------------

def _feeds() -> dict[str, dict[str, Any]]:
    wide = np.arange(600, dtype=np.float32).reshape(2, 3, 10, 10) / 7
    unaligned = np.frombuffer(b"\0" + X.tobytes(), np.uint8)[1:].view(np.float32)
    read_only = X.copy()
    read_only.flags.writeable = False
    return {
        "strided view": {"X": wide[:, :, ::2, ::2], "Y": Y},
        "Fortran order": {"X": np.asfortranarray(X), "Y": Y},
        "negative strides": {"X": X[::-1, :, ::-1], "Y": Y[::-1]},
        "broadcast view": {"X": np.broadcast_to(X[:1], X.shape), "Y": Y},
        "read-only": {"X": read_only, "Y": Y},
        "unaligned": {"X": unaligned.reshape(X.shape), "Y": Y},
        "empty batch": {"X": np.zeros((0, 3, 5, 5), np.float32), "Y": Y},
        "one of a batch": {"X": X[1:], "Y": Y},
        "lists": {"X": X.tolist(), "Y": [1, 2]},
        "a list of arrays": {"X": list(X), "Y": Y},
        "a list of bools for int64": {"X": X, "Y": [True, False]},
        "a list of floats for int64": {"X": X, "Y": [1.5, 2.5]},
        "OrtValue": {"X": ort.OrtValue.ortvalue_from_numpy(X), "Y": Y},
        "masked array": {"X": np.ma.MaskedArray(X), "Y": Y},
        "NaN and infinities": {"X": np.where(X > 0, np.inf, np.nan).astype(np.float32),
                               "Y": Y},
    }


@pytest.mark.parametrize("feed", list(_feeds()))
def test_feeds_are_taken_as_onnxruntime_takes_them(kind, layout, feed):
    session, reference = _pair(kind, layout)
    given = _feeds()[feed]
    _same(session.run(None, given), reference.run(None, _feeds()[feed]))


RUN_ERRORS: dict[str, tuple[Any, Any]] = {  # output names, feed
    "missing input": (None, {"X": X}),
    "no input": (None, {}),
    "wrong element type": (None, {"X": X.astype(np.float64), "Y": Y}),
    "wrong rank": (None, {"X": X[0], "Y": Y}),
    "wrong dimension": (None, {"X": X[:, :2], "Y": Y}),
    "unknown output name": (["C", "nope"], FEED),
    "a value between nodes as output": (["A"], FEED),
    "unknown input name": (None, {**FEED, "nope": Y}),
    "wrong element type and unknown output": (["nope"], {"X": X.astype(np.float64), "Y": Y}),
    "a tuple": (None, {"X": X, "Y": (1, 2)}),
    "a numpy scalar": (None, {"X": X, "Y": np.int64(1)}),
    "a Python number": (None, {"X": 1.0, "Y": Y}),
    "a memoryview": (None, {"X": X.data, "Y": Y}),
    "an object array": (None, {"X": X.astype(object), "Y": Y}),
    "a string array": (None, {"X": np.full(X.shape, "a"), "Y": Y}),
    "None for a kernel's input": (None, {"X": None, "Y": Y}),
    "None for a standard node's input": (None, {"X": X, "Y": None}),
    "a tuple and an unknown output": (["nope"], {"X": X, "Y": (1, 2)}),
    "a name for the output names": ("C", FEED),
    "an output name not a str": ([1], FEED),
    "a feed name not a str": (None, {**FEED, 1: Y}),
    "a feed of pairs": (None, list(FEED.items())),
    "a ragged list": (None, {"X": X, "Y": [[1], [2, 3]]}),
    "a list of another rank": (None, {"X": X, "Y": [[1, 2]]}),
    "an OrtValue of another type": (None, {"X": ort.OrtValue.ortvalue_from_numpy(
        X.astype(np.float64)), "Y": Y}),
    "an OrtValue of another rank": (None, {"X": X, "Y": ort.OrtValue.ortvalue_from_numpy(
        Y[:1, None])}),
}


@pytest.mark.parametrize("case", list(RUN_ERRORS))
def test_run_errors_are_onnxruntimes(kind, layout, case):
    session, reference = _pair(kind, layout)
    names, feed = RUN_ERRORS[case]
    _raises_as(lambda: session.run(names, feed), lambda: reference.run(names, feed))
    ort_values_raise_as(session, reference, names, feed)
    _same(session.run(None, FEED), reference.run(None, FEED))  # and it goes on


def ort_values_raise_as(session: Any, reference: Any, names: Any, feed: Any) -> None:
    """``run_with_ort_values`` of ``feed``'s numeric arrays (a feed that is a dict) raises
    as the reference's."""
    if not isinstance(feed, dict):
        return
    values = {name: ort.OrtValue.ortvalue_from_numpy(np.asarray(value))
              for name, value in feed.items() if isinstance(value, np.ndarray)
              and value.dtype.kind not in "OSU"}
    _raises_as(lambda: session.run_with_ort_values(names, values),
               lambda: reference.run_with_ort_values(names, values))


# --- what the session says about itself -----------------------------------------------------

def _args(values: list[Any]) -> list[tuple[str, str, list]]:
    return [(value.name, value.type, value.shape) for value in values]


def test_inputs_outputs_metadata_and_providers(kind, layout):
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.log_severity_level = 1, 3
    model = _model(layout)
    session, reference = _session(kind, model, options), _reference(model, options)
    for getter in ("get_inputs", "get_outputs", "get_overridable_initializers"):
        assert _args(getattr(session, getter)()) == _args(getattr(reference, getter)()), getter
    meta, want = session.get_modelmeta(), reference.get_modelmeta()
    for field in ("producer_name", "graph_name", "domain", "description", "graph_description",
                  "version", "custom_metadata_map"):
        assert getattr(meta, field) == getattr(want, field), field
    assert session.get_providers() == reference.get_providers()
    assert session.get_provider_options() == reference.get_provider_options()
    given = session.get_session_options()
    assert isinstance(given, ort.SessionOptions)
    assert (given.intra_op_num_threads, given.log_severity_level, given.enable_profiling) == \
        (1, 3, False)
    assert session.get_profiling_start_time_ns() == reference.get_profiling_start_time_ns()


def test_overridable_initializers(kind, layout):
    """A graph input with an initializer (``s``): listed, and a feed overrides it."""
    scale = numpy_helper.from_array(np.array(3, np.float32), "s")
    model = _model(layout, (helper.make_node("Mul", ["D", "s"], ["F"]),), (_value("F"),),
                   (scale,))
    model.graph.input.append(_value("s", shape=[]))
    session, reference = _session(kind, model), _reference(model)
    assert _args(session.get_overridable_initializers()) == \
        _args(reference.get_overridable_initializers())
    assert _args(session.get_inputs()) == _args(reference.get_inputs())
    for feed in (FEED, {**FEED, "s": np.array(-1, np.float32)}):
        _same(session.run(None, feed), reference.run(None, feed))


def test_profiling_writes_a_json_trace(kind, layout, tmp_path):
    """``enable_profiling``: a start time; ``end_profiling`` returns the path of a JSON list
    of trace events under the prefix given; the session runs on after it, and a second
    ``end_profiling`` returns what onnxruntime's returns."""
    options = ort.SessionOptions()
    options.enable_profiling, options.profile_file_prefix = True, str(tmp_path / "trace")
    model = _model(layout)
    session, reference = _session(kind, model, options), _reference(model)
    _check_mode(session, kind, layout)
    assert session.get_profiling_start_time_ns() > 0
    assert session.get_session_options().enable_profiling
    _same(session.run(None, FEED), reference.run(None, FEED))
    path = Path(session.end_profiling())
    assert path.is_file() and str(path).startswith(str(tmp_path / "trace"))
    events = json.loads(path.read_text())
    assert isinstance(events, list) and events
    assert all({"name", "ph", "ts"} <= event.keys() for event in events)
    assert any(event["name"] == "model_run" for event in events)
    _same(session.run(None, FEED), reference.run(None, FEED))
    reference_options = ort.SessionOptions()
    reference_options.enable_profiling = True
    reference_options.profile_file_prefix = str(tmp_path / "reference")
    profiled = _reference(model, reference_options)
    profiled.end_profiling()
    assert session.end_profiling() == profiled.end_profiling()


def test_a_float16_model(kind, layout):
    half = TensorProto.FLOAT16
    if layout == "direct":  # a standard node beside it: one session
        nodes = [dml_onnx.lp_pooling("X", "C", **POOL), helper.make_node("Neg", ["X"], ["D"])]
    else:
        nodes = [helper.make_node("Neg", ["X"], ["A"]),
                 dml_onnx.lp_pooling("A", "B", **POOL) if layout == "split" else
                 helper.make_node("Relu", ["A"], ["B"]), helper.make_node("Abs", ["B"], ["C"])]
    model = dml_onnx.make_model(nodes, [_value("X", half, ["N", 3, 5, 5])],
                                [_value("C", half), *([_value("D", half)] if layout == "direct"
                                                      else [])])
    session, reference = _session(kind, model), _reference(model)
    _check_mode(session, kind, layout)
    x = X.astype(np.float16)
    _same(session.run(None, {"X": x}), reference.run(None, {"X": x}))
    _raises_as(lambda: session.run(None, {"X": X}), lambda: reference.run(None, {"X": X}))


def test_the_split_layout_runs_split():
    """The "split" layout is what split execution takes (and the others are not)."""
    split = dml_onnx.InferenceSession(_model("split"))._split
    assert split is not None and isinstance(split.steps[1], plan.Kernel)


# --- where our session does not follow onnxruntime --------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
def test_an_array_in_the_other_byte_order_is_read_as_numpy_reads_it(layout):
    """onnxruntime (1.32) reads a big-endian array's bytes as they are, so its results are not
    the array's; in our session its kernels read it as numpy does, which gave a run half right
    (the kernel's output) and half wrong. Now the whole run reads the array's values: the
    reference's results on the same values in this machine's order."""
    session, reference = _pair("dml_onnx", layout)
    swapped = {"X": X.astype(X.dtype.newbyteorder(">")), "Y": Y.astype(">i8")}
    _same(session.run(None, swapped), reference.run(None, FEED))
    binding = session.io_binding()
    binding.bind_cpu_input("X", swapped["X"])
    binding.bind_cpu_input("Y", swapped["Y"])
    binding.bind_output("C")
    session.run_with_iobinding(binding)
    _same(binding.copy_outputs_to_cpu(), reference.run(["C"], FEED))


def test_split_execution_checks_the_feed_with_onnxruntime_only_where_it_must(tmp_path):
    """A feed of arrays (subclasses and memory maps too) and lists runs the segments once;
    what onnxruntime converts otherwise goes through its run of the first segment first."""
    session, reference = _pair("dml_onnx", "split")
    assert session._split is not None
    checks: list[object] = []
    first = session._split.first
    original = first.run

    def counted(*args: Any) -> Any:
        checks.append(args)
        return original(*args)

    first.run = counted
    try:
        mapped = np.memmap(tmp_path / "x", np.float32, "w+", shape=X.shape)
        mapped[...] = X
        for feed in ({"X": mapped, "Y": Y}, {"X": np.ma.MaskedArray(X), "Y": Y},
                     {"X": X.tolist(), "Y": [1, 2]}):
            _same(session.run(None, feed), reference.run(None, FEED))
        assert checks == []
        _raises_as(lambda: session.run(None, {"X": X, "Y": (1, 2)}),
                   lambda: reference.run(None, {"X": X, "Y": (1, 2)}))
        assert len(checks) == 1
    finally:
        del first.run
