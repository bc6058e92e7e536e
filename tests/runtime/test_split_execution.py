"""Split execution: a model whose dml_onnx nodes read or write values between standard nodes
runs as onnxruntime segments with the kernels called between them, on the segments' arrays
as they are; it must compute what the one-session route (the PyOps of ``to_runtime_model``)
computes, check the feed as onnxruntime does, and report like onnxruntime."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument
from onnxruntime_extensions import get_library_path

import dml_onnx
from dml_onnx._kernels import KernelError, _threads
from dml_onnx.reference import ReferenceEvaluator
from dml_onnx.runtime import plan, private_api, segments
from tests.runtime.test_kernels_only import FEED as KERNELS_ONLY_FEED
from tests.runtime.test_kernels_only import _model as kernels_only_model

FLOAT, FLOAT16 = TensorProto.FLOAT, TensorProto.FLOAT16
POOL = {"window_size": [3, 3], "start_padding": [1, 1], "end_padding": [1, 1]}
STOP_SPINNING = "session.force_spinning_stop"
SPINNING = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")


def _value(name, elem=FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _one_session(model, feeds, output_names=None):
    """The one-session route: the guarded PyOps in a plain onnxruntime session."""
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    session = ort.InferenceSession(dml_onnx.to_runtime_model(model).SerializeToString(),
                                   options, providers=["CPUExecutionProvider"])
    return session.run(output_names, feeds)


def _detector_like(dtype=FLOAT):
    """Conv -> two RoiAlign1 on the same map (one on a Relu of it) -> Add -> LpPooling ->
    Neg: two levels of kernels, a kernel reading an initializer, a graph output made by a
    kernel and one by a segment, and a graph input only the last segment reads."""
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    rois = np.array([[0, 0, 5, 5], [1.5, 2, 7, 6], [0, 3, 7, 7]],
                    helper.tensor_dtype_to_np_dtype(dtype))
    align = {"output_size": [3, 3], "spatial_scale_x": 1.0, "spatial_scale_y": 1.0}
    nodes = [
        helper.make_node("Conv", ["X", "W"], ["F"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["F"], ["R"]),
        helper.make_node("Cast", ["F"], ["F_t"], to=dtype),
        helper.make_node("Cast", ["R"], ["R_t"], to=dtype),
        dml_onnx.roi_align1("F_t", "rois", "batch", "A", name="align_F", **align),
        dml_onnx.roi_align1("R_t", "rois", "batch", "B", name="align_R", **align),
        helper.make_node("Add", ["A", "B"], ["S"]),
        dml_onnx.lp_pooling("S", "P", name="pool", **POOL),
        helper.make_node("Cast", ["P"], ["P_f"], to=FLOAT),
        helper.make_node("Add", ["P_f", "bias"], ["Z"])]
    model = dml_onnx.make_model(
        nodes, [_value("X", FLOAT, [1, 3, 8, 8]), _value("bias", FLOAT, [1])],
        [_value("Z", FLOAT), _value("A", dtype)],
        initializers=[numpy_helper.from_array(weight, "W"), numpy_helper.from_array(rois, "rois"),
                      numpy_helper.from_array(np.zeros(3, np.int64), "batch")])
    feeds = {"X": rng.standard_normal((1, 3, 8, 8)).astype(np.float32),
             "bias": np.array([0.5], np.float32)}
    return model, feeds


@pytest.mark.parametrize("dtype", [FLOAT, FLOAT16])
def test_a_detector_like_graph_splits_and_equals_the_one_session_route(dtype):
    model, feeds = _detector_like(dtype)
    session = dml_onnx.InferenceSession(model)
    assert session._split is not None
    kinds = ["kernel" if isinstance(step, plan.Kernel) else "host" if isinstance(
        step, plan.HostNode) else "segment" for step in session._split.steps]
    # float32: the Cast of the last kernel's output to its own type is that array itself
    assert kinds == ["segment", "kernel", "kernel", "segment", "kernel",
                     *(["host"] if dtype == FLOAT else []), "segment"]
    got = session.run(None, feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    assert [g.dtype for g in got] == [w.dtype for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-3 if dtype == FLOAT16 else 1e-5, atol=1e-5)
    for g, w in zip(got, _one_session(model, feeds)):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(session.run(["A"], feeds)[0], got[1])


@pytest.mark.parametrize("threads_start", [True, False])
def test_segments_on_options_of_our_own_are_created_side_by_side(threads_start, monkeypatch):
    """Without the caller's options the segments' sessions are created on threads at the same
    time (each waits for another to start); where no thread can start, one after the other on
    the calling thread. Either way the run equals the reference's."""
    import os
    import threading

    model, feeds = _detector_like()
    side_by_side = threads_start and len(os.sched_getaffinity(0)) > 1
    meeting = threading.Barrier(2, timeout=30)
    seen: list[int] = []
    plain_session = ort.InferenceSession

    def created(*arguments, **keywords):
        seen.append(threading.get_ident())
        if side_by_side and len(seen) <= 2:
            meeting.wait()  # broken (an error) unless two creations overlap
        return plain_session(*arguments, **keywords)

    class NoThreads:
        def __init__(self, *arguments, **keywords):
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(ort, "InferenceSession", created)
    if not threads_start:
        monkeypatch.setattr(segments, "ThreadPoolExecutor", NoThreads)
    session = dml_onnx.InferenceSession(model)
    monkeypatch.setattr(ort, "InferenceSession", plain_session)
    assert len(seen) == 3
    assert (threading.get_ident() in seen) == (not side_by_side)
    for got, want in zip(session.run(None, feeds), ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_segment_that_onnxruntime_refuses_fails_the_session_with_its_error(monkeypatch):
    """Created side by side, a segment's failure is raised as onnxruntime raised it (the
    segments not yet started are left out), and the next session is created as usual."""
    model, feeds = _detector_like()
    plain_session = ort.InferenceSession
    made: list[bytes] = []

    def refusing(model_bytes, *arguments, **keywords):
        made.append(model_bytes)
        if len(made) == 2:
            raise ort.capi.onnxruntime_pybind11_state.InvalidGraph("segment refused")
        return plain_session(model_bytes, *arguments, **keywords)

    monkeypatch.setattr(ort, "InferenceSession", refusing)
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidGraph, match="refused"):
        dml_onnx.InferenceSession(model)
    assert len(made) >= 2
    monkeypatch.setattr(ort, "InferenceSession", plain_session)
    (got, _) = dml_onnx.InferenceSession(model).run(None, feeds)
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, feeds)[0], rtol=1e-5,
                               atol=1e-5)


def test_segments_on_the_callers_options_are_created_one_at_a_time(monkeypatch):
    """With the caller's options (onnxruntime copies the weights there) the segments are
    created one after the other on the calling thread."""
    import threading

    model, feeds = _detector_like()
    seen: list[int] = []
    plain_session = ort.InferenceSession

    def created(*arguments, **keywords):
        seen.append(threading.get_ident())
        return plain_session(*arguments, **keywords)

    monkeypatch.setattr(ort, "InferenceSession", created)
    session = dml_onnx.InferenceSession(model, ort.SessionOptions())
    monkeypatch.setattr(ort, "InferenceSession", plain_session)
    assert seen == [threading.get_ident()] * 3
    for got, want in zip(session.run(None, feeds), ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_kernels_read_the_segments_arrays_without_a_copy(monkeypatch):
    """onnxruntime-extensions would hand the kernel a new array (it owns its data); here it
    gets a view of onnxruntime's output."""
    model, feeds = _detector_like()
    session = dml_onnx.InferenceSession(model)
    seen = []
    run_fetching = segments.run_fetching

    def spy(call, given, variant):
        seen.append(dict(given))
        return run_fetching(call, given, variant)
    monkeypatch.setattr(segments, "run_fetching", spy)
    session.run(None, feeds)
    assert [sorted(s) for s in seen] == [["F_t", "batch", "rois"], ["R_t", "batch", "rois"],
                                        ["S"]]
    for name in ("F_t", "R_t", "S"):
        array = next(s[name] for s in seen if name in s)
        assert not array.flags.owndata and array.base is not None, name


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["Relu", "Neg", "LpPooling", "LpPooling1"]), min_size=1,
                max_size=6),
       st.lists(st.booleans(), min_size=7, max_size=7), st.integers(0, 2**32 - 1))
def test_random_chains_equal_the_one_session_route(ops, exposed, seed):
    """A chain of standard and dml_onnx nodes with any intermediate values as graph outputs."""
    nodes, names = [], ["X"]
    for k, op in enumerate(ops):
        out = f"v{k}"
        if op.startswith("LpPooling"):
            nodes.append(dml_onnx.lp_pooling(names[-1], out, name=f"pool{k}",
                                             p=1 if op.endswith("1") else 2, **POOL))
        else:
            nodes.append(helper.make_node(op, [names[-1]], [out]))
        names.append(out)
    outputs = [n for n, keep in zip(names[1:], exposed) if keep] or [names[-1]]
    if names[-1] not in outputs:
        outputs.append(names[-1])
    model = dml_onnx.make_model(nodes, [_value("X", FLOAT, [2, 3, 5, 6])],
                                [_value(n) for n in outputs])
    feeds = {"X": np.random.default_rng(seed).standard_normal((2, 3, 5, 6)).astype(np.float32)}
    session = dml_onnx.InferenceSession(model)
    for got, want in zip(session.run(None, feeds), _one_session(model, feeds)):
        np.testing.assert_array_equal(got, want)


def test_models_that_gain_nothing_or_cannot_split_keep_one_session(tmp_path):
    value = _value("X", FLOAT, [1, 3, 5, 5])
    only_ends = dml_onnx.make_model(  # a standard node beside: onnxruntime runs anyway
        [dml_onnx.lp_pooling("X", "Y", **POOL), helper.make_node("Neg", ["X"], ["Z"])],
        [value], [_value("Y"), _value("Z")])
    assert dml_onnx.InferenceSession(only_ends)._split is None
    unsorted = dml_onnx.make_model(  # onnxruntime sorts the nodes; one session keeps that
        [helper.make_node("Relu", ["B"], ["Y"]), helper.make_node("Neg", ["X"], ["A"]),
         dml_onnx.lp_pooling("A", "B", **POOL)], [value], [_value("Y")])
    session = dml_onnx.InferenceSession(unsorted)
    assert session._split is None
    x = np.ones((1, 3, 5, 5), np.float32)
    np.testing.assert_array_equal(session.run(None, {"X": x})[0],
                                  _one_session(unsorted, {"X": x})[0])
    options = ort.SessionOptions()
    model, feeds = _detector_like()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    assert dml_onnx.InferenceSession(model, options)._split is None
    assert (tmp_path / "optimized.onnx").exists()


def test_the_feed_is_checked_before_any_kernel_runs(monkeypatch):
    model, feeds = _detector_like()
    session = dml_onnx.InferenceSession(model)
    monkeypatch.setattr(segments, "run_fetching", lambda *a: pytest.fail("a kernel ran"))
    with pytest.raises(Exception, match="bias"):  # only the last segment reads it
        session.run(None, {"X": feeds["X"]})
    with pytest.raises(Exception, match="(?i)data type"):
        session.run(None, {**feeds, "bias": feeds["bias"].astype(np.float64)})
    with pytest.raises(Exception, match="(?i)dimensions|shape"):
        session.run(None, {**feeds, "bias": np.zeros(2, np.float32)})
    with pytest.raises(InvalidArgument, match="Invalid output name:nope"):  # onnxruntime's
        session.run(["nope"], feeds)
    monkeypatch.undo()
    as_lists = session.run(None, {"X": feeds["X"].tolist(), "bias": [0.5]})  # as onnxruntime
    for got, want in zip(as_lists, session.run(None, feeds)):
        np.testing.assert_array_equal(got, want)


def test_a_failed_kernel_raises_kernel_error_and_the_session_goes_on():
    model, feeds = _detector_like()
    rois = numpy_helper.from_array(np.array([[0, 0, 5, 5]] * 3, np.float32), "rois")
    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    bad.graph.initializer[2].CopyFrom(numpy_helper.from_array(np.array([0, 0, 7]), "batch"))
    bad.graph.initializer[1].CopyFrom(rois)
    session = dml_onnx.InferenceSession(bad)
    with pytest.raises(KernelError, match="RoiAlign1 'align_F'.*batch"):
        session.run(None, feeds)
    good = dml_onnx.InferenceSession(model)
    assert len(good.run(None, feeds)) == 2


def test_a_graph_output_no_node_makes_fails_the_session_as_onnxruntime_fails_it():
    """Split execution left such a model to ``run()``, which raised ``KeyError``."""
    model = dml_onnx.make_model(
        [helper.make_node("Neg", ["X"], ["A"]), dml_onnx.lp_pooling("A", "B", **POOL),
         helper.make_node("Relu", ["B"], ["C"])], [_value("X", FLOAT, [1, 3, 5, 5])],
        [_value("C"), _value("nothing")])
    with pytest.raises(Exception) as expected:  # noqa: PT011 - the type is compared
        ort.InferenceSession(dml_onnx.with_functions(model).SerializeToString(),
                             providers=["CPUExecutionProvider"])
    with pytest.raises(type(expected.value), match="nothing"):
        dml_onnx.InferenceSession(model)


def test_inputs_and_outputs_are_described_as_onnxruntime_describes_them():
    """As plain onnxruntime describes the model with its nodes' standard forms: an output
    after a kernel has its inferred shape (the one-session route's PyOps give none)."""
    model, _ = _detector_like()
    plain = ort.InferenceSession(dml_onnx.with_functions(model).SerializeToString(),
                                 providers=["CPUExecutionProvider"])
    session = dml_onnx.InferenceSession(model)
    for mine, theirs in ((session.get_inputs(), plain.get_inputs()),
                         (session.get_outputs(), plain.get_outputs())):
        assert [(a.name, a.type, a.shape) for a in mine] == \
            [(a.name, a.type, a.shape) for a in theirs]
    assert session.get_overridable_initializers() == []
    assert session.get_providers() == ["CPUExecutionProvider"]


def test_segments_workers_sleep_when_idle_unless_the_caller_says():
    """The segments' idle workers sleep (with spinning ones onnxruntime's GEMM took up to twice
    as long), on the caller's options and on options of our own."""
    model, feeds = _detector_like()
    options = ort.SessionOptions()
    dml_onnx.InferenceSession(model, options).run(None, feeds)
    assert options.get_session_config_entry(STOP_SPINNING) == "1"
    for key in SPINNING:
        assert options.get_session_config_entry(key) == "0"
    session = dml_onnx.InferenceSession(model)
    segments = [step[1] for step in session._split.steps if isinstance(step, tuple)]
    assert len(segments) >= 2
    for segment in segments:
        for key in SPINNING:
            assert segment.get_session_options().get_session_config_entry(key) == "0"
    mine = ort.SessionOptions()
    mine.add_session_config_entry(STOP_SPINNING, "0")
    mine.add_session_config_entry(SPINNING[0], "1")
    dml_onnx.InferenceSession(model, mine)
    assert mine.get_session_config_entry(STOP_SPINNING) == "0"
    assert mine.get_session_config_entry(SPINNING[0]) == "1"


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kernels_only", [False, True])
def test_kernels_see_the_sessions_intra_op_thread_count(threads, kernels_only, monkeypatch):
    model, feeds = (kernels_only_model(), KERNELS_ONLY_FEED) if kernels_only else \
        _detector_like()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = dml_onnx.InferenceSession(model, options)
    seen = []
    run_fetching = segments.run_fetching

    def spy(*args):
        seen.append(_threads.thread_limit.get())
        return run_fetching(*args)
    monkeypatch.setattr(segments, "run_fetching", spy)
    session.run(None, feeds)
    assert seen == [threads] * 3
    assert _threads.thread_limit.get() == 0


def test_profiling_gives_one_trace_with_the_kernels(tmp_path):
    model, feeds = _detector_like()
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "trace")
    session = dml_onnx.InferenceSession(model, options)
    for _ in range(3):
        session.run(None, feeds)
    path = session.end_profiling()
    assert options.profile_file_prefix == str(tmp_path / "trace")
    assert [p.name for p in tmp_path.iterdir()] == [Path(path).name]
    events = json.loads(Path(path).read_text())
    assert sum(e.get("name") == "model_run" for e in events) == 3
    kernels = [e for e in events if e.get("cat") == "Node"
               and e["args"].get("op_name") in ("RoiAlign1", "LpPooling")]
    assert sorted({e["name"] for e in kernels}) == ["align_F_kernel_time",
                                                     "align_R_kernel_time",
                                                     "pool_kernel_time"]
    assert len(kernels) == 9 and all(e["dur"] >= 0 for e in kernels)
    assert any(e.get("args", {}).get("op_name") == "Conv" for e in events)
    ends = [e["ts"] + e["dur"] for e in events]
    assert ends == sorted(ends)  # a run's nodes come before its model_run, as onnxruntime's
    runs = [k for k, e in enumerate(events) if e.get("name") == "model_run"]
    assert max(k for k, e in enumerate(events) if e in kernels) < runs[-1]


def test_later_segments_run_the_cpp_session_and_give_the_public_calls_values():
    """Every segment but the first runs through ``private_api.ort_values_run`` (the public
    wrapper iterates onnxruntime's result vector: 40-65 us a call), with the public call's
    values; the first keeps the public call, which checks the feed; without the C++ session
    the public call is used."""
    model, feeds = _detector_like()
    session = dml_onnx.InferenceSession(model)
    steps = [s for s in session._split.steps if isinstance(s, tuple)]
    assert steps[0][2] == steps[0][1].run_with_ort_values
    values = {name: ort.OrtValue.ortvalue_from_numpy(array) for name, array in feeds.items()}
    first = steps[0][1].run_with_ort_values(list(steps[0][0].outputs), values, None)
    values.update(zip(steps[0][0].outputs, first))
    for name in ("A", "B"):  # the kernels' outputs the second segment reads
        values[name] = ort.OrtValue.ortvalue_from_numpy(np.ones((3, 4, 3, 3), np.float32))
    segment, inner, run_values = steps[1]
    assert run_values != inner.run_with_ort_values
    feed = {name: values[name] for name in segment.inputs}
    got = run_values(list(segment.outputs), feed, None)
    want = inner.run_with_ort_values(list(segment.outputs), feed, None)
    assert [type(v) for v in got] == [ort.OrtValue] * len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())

    class Wrapper:  # an onnxruntime whose wrapper hides its C++ session
        run_with_ort_values = inner.run_with_ort_values
    assert private_api.ort_values_run(Wrapper()) == inner.run_with_ort_values


def test_a_kernels_output_reaches_the_next_segment_with_its_rank():
    """onnxruntime's layout optimizer needs the rank of a convolution's input; the dimensions
    stay unknown (an exporter's recorded ones may be wrong)."""
    model, _ = _detector_like()
    steps = dml_onnx.InferenceSession(model)._split.steps
    second = [s for s in steps if not isinstance(s, plan.Kernel)][1][0]
    declared = {v.name: v.type.tensor_type for v in second.model.graph.input}
    assert sorted(declared) == ["A", "B"]
    for tensor in declared.values():
        assert len(tensor.shape.dim) == 4
        assert not any(d.HasField("dim_value") or d.dim_param for d in tensor.shape.dim)
    assert all(not v.type.tensor_type.HasField("shape") for v in second.model.graph.output)


def test_a_scalar_feed_and_what_is_computed_from_it_stay_0_d():
    """A 0-d feed of a scalar input stays 0-d (``np.ascontiguousarray`` made it ``[1]``):
    scalars from the first segment and from one after a kernel come back ``()`` through
    ``run`` and ``run_with_ort_values``, as onnxruntime gives them."""
    nodes = [helper.make_node("Relu", ["X0"], ["X"]),
             dml_onnx.unfold("X", "Y", window_sizes=[1, 1], name="im2col"),
             helper.make_node("Mul", ["s", "s"], ["t"]),
             helper.make_node("ReduceSum", ["Y"], ["total"], keepdims=0),
             helper.make_node("Mul", ["total", "s"], ["u"])]
    model = dml_onnx.make_model(nodes, [_value("X0", FLOAT, [1, 1, 2, 2]), _value("s", FLOAT, [])],
                                [_value("t"), _value("u"), _value("Y")])
    session = dml_onnx.InferenceSession(model)
    assert session._split is not None
    feeds = {"X0": np.ones((1, 1, 2, 2), np.float32), "s": np.array(3, np.float32)}
    want = _one_session(model, feeds)
    assert [w.shape for w in want] == [(), (), (1, 1, 4)]
    for got in (session.run(None, feeds), [v.numpy() for v in session.run_with_ort_values(
            None, {name: ort.OrtValue.ortvalue_from_numpy(a) for name, a in feeds.items()})]):
        assert [g.shape for g in got] == [w.shape for w in want]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_constant_nodes_go_into_every_segment_that_reads_them():
    """A later segment makes a Constant, an Identity of a weight, or the Shape of a graph input
    of fixed shape again instead of reading it from an earlier one: onnxruntime then still
    folds it and sees the weight as a weight."""
    rng = np.random.default_rng(2)
    weight = numpy_helper.from_array(rng.standard_normal((3, 3, 1, 1)).astype(np.float32), "W")
    model = dml_onnx.make_model(
        [helper.make_node("Identity", ["W"], ["W_shared"]),
         helper.make_node("Constant", [], ["half"], value=numpy_helper.from_array(
             np.array(0.5, np.float32))),
         helper.make_node("Conv", ["X", "W_shared"], ["F"]),
         helper.make_node("Mul", ["F", "half"], ["G"]),
         dml_onnx.lp_pooling("G", "P", name="pool", **POOL),
         helper.make_node("Shape", ["X"], ["X_shape"]),
         helper.make_node("Conv", ["P", "W_shared"], ["Q"]),
         helper.make_node("Mul", ["Q", "half"], ["Q_half"]),
         helper.make_node("Reshape", ["Q_half", "X_shape"], ["Y"])],
        [_value("X", FLOAT, [1, 3, 6, 6])], [_value("Y")], initializers=[weight])
    session = dml_onnx.InferenceSession(model)
    first, last = [s[0] for s in session._split.steps if not isinstance(s, plan.Kernel)]
    assert first.outputs == ("G",) and last.inputs == ("P", "X")
    assert [n.op_type for n in last.model.graph.node] == [
        "Identity", "Constant", "Shape", "Conv", "Mul", "Reshape"]
    assert last.model.graph.input[1] == model.graph.input[0]  # its fixed shape: folded
    feeds = {"X": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    np.testing.assert_array_equal(session.run(None, feeds)[0], _one_session(model, feeds)[0])


def test_a_segment_leaves_out_the_constants_only_later_segments_read(capfd):
    """A constant node of the first level that only a segment after a kernel reads is made
    there, not in the first segment too: there it would be dead, and onnxruntime warned of
    each such value as the session loaded ("Removing initializer ...": 125 warnings for a
    raised Faster R-CNN, none for the stock model)."""
    rng = np.random.default_rng(3)
    model = dml_onnx.make_model(
        [helper.make_node("Constant", [], ["later"], value=numpy_helper.from_array(
             np.array([2.0], np.float32))),
         helper.make_node("Relu", ["X"], ["R"]),
         dml_onnx.lp_pooling("R", "P", name="pool", **POOL),
         helper.make_node("Mul", ["P", "later"], ["Y"])],
        [_value("X", FLOAT, [1, 3, 6, 6])], [_value("Y")])
    session = dml_onnx.InferenceSession(model)
    first, last = [s[0] for s in session._split.steps if not isinstance(s, plan.Kernel)]
    assert [n.op_type for n in first.model.graph.node] == ["Relu"]
    assert [n.op_type for n in last.model.graph.node] == ["Constant", "Mul"]
    assert "Removing initializer" not in capfd.readouterr().err
    feeds = {"X": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    np.testing.assert_array_equal(session.run(None, feeds)[0], _one_session(model, feeds)[0])


def test_a_kernels_output_read_by_name_inside_a_later_if_branch():
    """A subgraph's reads of outer values count as its node's inputs: the If runs in the
    segment after the kernel, and its branch gets the kernel's array."""
    then = helper.make_graph([helper.make_node("Neg", ["P"], ["branch"])], "then", [],
                             [_value("branch")])
    other = helper.make_graph([helper.make_node("Abs", ["P"], ["branch"])], "other", [],
                              [_value("branch")])
    model = dml_onnx.make_model(
        [helper.make_node("Relu", ["X"], ["R"]),
         dml_onnx.lp_pooling("R", "P", name="pool", **POOL),
         helper.make_node("If", ["flag"], ["Y"], then_branch=then, else_branch=other)],
        [_value("X", FLOAT, [1, 2, 4, 4]), _value("flag", TensorProto.BOOL, [])],
        [_value("Y")])
    session = dml_onnx.InferenceSession(model)
    assert [type(s).__name__ for s in session._split.steps] == ["tuple", "Kernel", "tuple"]
    x = np.random.default_rng(3).standard_normal((1, 2, 4, 4)).astype(np.float32)
    for flag in (True, False):
        feeds = {"X": x, "flag": np.array(flag)}
        np.testing.assert_array_equal(session.run(None, feeds)[0],
                                      _one_session(model, feeds)[0])


def test_kernels_that_run_first_get_a_checked_feed():
    """Where a kernel reads the graph input first, a segment of one Size node checks the
    feed, and the kernel's output still reaches the next segment without a copy."""
    model = dml_onnx.make_model(
        [dml_onnx.lp_pooling("X", "P", name="pool", **POOL),
         helper.make_node("Relu", ["P"], ["Y"])],
        [_value("X", FLOAT, [1, 3, 5, 5]), _value("unused", FLOAT, [2])], [_value("Y")])
    session = dml_onnx.InferenceSession(model)
    check = session._split.steps[0][0]
    assert [n.op_type for n in check.model.graph.node] == ["Size"]
    assert list(check.model.graph.input) == list(model.graph.input)
    feeds = {"X": np.random.default_rng(5).standard_normal((1, 3, 5, 5)).astype(np.float32),
             "unused": np.zeros(2, np.float32)}
    np.testing.assert_array_equal(session.run(None, feeds)[0], _one_session(model, feeds)[0])
    for bad in ({"X": feeds["X"]}, {**feeds, "unused": np.zeros(3, np.float32)},
                {**feeds, "X": feeds["X"].astype(np.float64)}):
        with pytest.raises(Exception, match="unused|dimensions|data type"):
            session.run(None, bad)


def _scatter_after_kernel(reduction=None, second_reader=False, late_indices=False):
    """Conv -> RoiAlign1 -> ScatterND(its output, indices, updates) -> Neg: the indices are
    made in the first segment from a graph input (``late_indices``: clipped to the kernel's
    output's length, so made after the kernel), the updates are a graph input;
    ``second_reader``: a Relu reads the kernel's output too."""
    rng = np.random.default_rng(5)
    align = {"output_size": [2, 2], "spatial_scale_x": 1.0, "spatial_scale_y": 1.0}
    rows = [helper.make_node("Shape", ["A"], ["count"], start=0, end=1),
            helper.make_node("Sub", ["count", "one"], ["last"]),
            helper.make_node("Min", ["where_i", "last"], ["rows"])] if late_indices else \
        [helper.make_node("Identity", ["where_i"], ["rows"])]
    nodes = [
        helper.make_node("Conv", ["X", "W"], ["F"], pads=[1, 1, 1, 1]),
        dml_onnx.roi_align1("F", "rois", "batch", "A", name="align", **align),
        helper.make_node("Cast", ["where"], ["where_i"], to=TensorProto.INT64),
        *rows,
        helper.make_node("Reshape", ["rows", "column"], ["indices"]),
        helper.make_node("ScatterND", ["A", "indices", "updates"], ["S"], name="scatter",
                         **({"reduction": reduction} if reduction else {})),
        helper.make_node("Neg", ["S"], ["Y"])]
    outputs = [_value("Y")]
    if second_reader:
        nodes.append(helper.make_node("Relu", ["A"], ["R"]))
        outputs.append(_value("R"))
    model = dml_onnx.make_model(
        nodes, [_value("X", FLOAT, [1, 3, 6, 6]), _value("where", FLOAT, [None]),
                _value("updates", FLOAT, [None, 4, 2, 2])], outputs,
        initializers=[
            numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "W"),
            numpy_helper.from_array(np.array([[0, 0, 4, 4], [1, 1, 5, 5], [0, 2, 3, 5]],
                                             np.float32), "rois"),
            numpy_helper.from_array(np.zeros(3, np.int64), "batch"),
            numpy_helper.from_array(np.array([-1, 1], np.int64), "column"),
            numpy_helper.from_array(np.array([1], np.int64), "one")])
    feeds = {"X": rng.standard_normal((1, 3, 6, 6)).astype(np.float32),
             "where": np.array([2, -3], np.float32),  # rows 2 and 0 (negative: from the end)
             "updates": rng.standard_normal((2, 4, 2, 2)).astype(np.float32)}
    return model, feeds


def _kinds(session):
    return [type(step).__name__ for step in session._split.steps]


@pytest.mark.parametrize("reduction", [None, "none"])
def test_a_scatter_into_a_kernels_output_runs_on_its_array(reduction, monkeypatch):
    """A ScatterND (no reduction) into a kernel's output that nothing else reads runs right
    after the kernel on the kernel's own array, with a negative index as onnxruntime reads
    it; the result equals the one-session route's (onnxruntime's scatter)."""
    model, feeds = _scatter_after_kernel(reduction)
    session = dml_onnx.InferenceSession(model)
    assert _kinds(session) == ["tuple", "Kernel", "HostNode", "tuple"]
    written = []
    call = segments.SplitRun._call

    def spy(self, kernel, values):
        call(self, kernel, values)
        written.append(values["A"])

    monkeypatch.setattr(segments.SplitRun, "_call", spy)
    got = session.run(None, feeds)[0]
    np.testing.assert_array_equal(got, _one_session(model, feeds)[0])
    np.testing.assert_array_equal(written[0][[2, 0]], feeds["updates"])  # in the kernel's array
    empty = {**feeds, "where": np.zeros(0, np.float32),  # no row replaced
             "updates": np.zeros((0, 4, 2, 2), np.float32)}
    np.testing.assert_array_equal(session.run(None, empty)[0], _one_session(model, empty)[0])


@pytest.mark.parametrize("where", [[3, 0], [-4, 0], [0.0, 7]])
def test_a_scatter_index_outside_the_data_fails_as_onnxruntime_fails_it(where):
    """An index outside ``[-s, s)`` raises onnxruntime's InvalidArgument naming the node and
    the index, as onnxruntime's own ScatterND refuses it; the session goes on."""
    model, feeds = _scatter_after_kernel()
    _fails_as_onnxruntime_and_goes_on(
        model, feeds, {**feeds, "where": np.array(where, np.float32)},
        r"ScatterND node 'scatter': index \[-?\d+\] is outside the data's shape \[3, 4, 2, 2\]")


def _fails_as_onnxruntime_and_goes_on(model, feeds, bad, match):
    """The split session raises onnxruntime's InvalidArgument matching ``match`` on ``bad``,
    the one-session route fails too, and the session then runs ``feeds`` right."""
    session = dml_onnx.InferenceSession(model)
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument, match=match):
        session.run(None, bad)
    with pytest.raises(Exception, match="(?i)invalid|out of|bound"):
        _one_session(model, bad)
    np.testing.assert_array_equal(session.run(None, feeds)[0], _one_session(model, feeds)[0])


def test_a_scatter_with_updates_of_another_shape_fails_naming_both():
    """Updates whose shape is not ``indices.shape[:-1] + data.shape[k:]`` are refused, as
    onnxruntime refuses them."""
    model, feeds = _scatter_after_kernel()
    bad = {**feeds, "updates": feeds["updates"][:1]}
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument,
                       match=r"'scatter': updates of type float32 and shape \[1, 4, 2, 2\], "
                             r"not float32 \[2, 4, 2, 2\]"):
        dml_onnx.InferenceSession(model).run(None, bad)
    with pytest.raises(Exception, match="updates tensor should have shape"):
        _one_session(model, bad)


@pytest.mark.parametrize("case", ["second reader", "late indices", "reduction add"])
def test_a_scatter_stays_in_its_segment_where_it_cannot_run_in_place(case):
    """Where another node reads the kernel's output, the indices depend on the kernel, or
    the scatter reduces, the ScatterND stays in onnxruntime's segment, with the same
    results."""
    model, feeds = _scatter_after_kernel(
        reduction="add" if case == "reduction add" else None,
        second_reader=case == "second reader", late_indices=case == "late indices")
    session = dml_onnx.InferenceSession(model)
    assert "HostNode" not in _kinds(session) and "Kernel" in _kinds(session)
    for got, want in zip(session.run(None, feeds), _one_session(model, feeds), strict=True):
        np.testing.assert_array_equal(got, want)


def _conv_pool_model(shape):
    """``Conv (3 -> 4, 3x3) -> LpPooling -> Relu`` on ``X`` of ``shape`` (None: unknown)."""
    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32) / 27, "W")
    return dml_onnx.make_model(
        [helper.make_node("Conv", ["X", "W"], ["F"], pads=[1, 1, 1, 1]),
         dml_onnx.lp_pooling("F", "P", **POOL), helper.make_node("Relu", ["P"], ["Y"])],
        [_value("X", shape=shape)], [_value("Y")], initializers=[weight])


@pytest.mark.parametrize("own_options", [False, True])
def test_segments_get_threads_by_their_work(own_options):
    """A segment of small known work gets fewer intra-op threads than the session (a pool of
    its own per segment); one whose work is unknown gets the session's; the caller's options
    keep their count."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 4
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    counts = {}
    for shape in ([1, 3, 8, 8], None):
        model = _conv_pool_model(shape)
        session = dml_onnx.InferenceSession(model, options if own_options else None)
        counts[str(shape)] = [s._sess.session_options.intra_op_num_threads  # as made
                              for s in session._split.sessions]
        assert session.get_session_options().intra_op_num_threads == (4 if own_options else 0)
        np.testing.assert_array_equal(session.run(None, {"X": x})[0],
                                      _one_session(model, {"X": x})[0])
    assert counts["[1, 3, 8, 8]"] == [1, 1]
    assert counts["None"] == ([4, 4] if own_options else [0, 0])  # 0: onnxruntime's default
    assert options.intra_op_num_threads == 4


def test_work_counts_multiply_adds_and_values_written():
    conv = helper.make_node("Conv", ["X", "W"], ["F"])
    matmul = helper.make_node("MatMul", ["F", "M"], ["G"])
    dims = {"X": (1, 3, 8, 8), "W": (4, 3, 3, 3), "F": (1, 4, 6, 6), "M": (6, 5),
            "G": (1, 4, 6, 5)}
    assert plan.work([conv], dims) == 144 * 27 + 144
    assert plan.work([conv, matmul], dims) == 144 * 28 + 120 * 7
    assert plan.work([conv], {**dims, "F": (None, 4, 6, 6)}) is None
    assert plan.work([matmul], {**dims, "M": (None, 5)}) is None
    assert plan.work([], dims) == 0
    unnamed = helper.make_node("Conv", ["X", "W"], [""])  # a crafted node: no known output
    assert plan.work([unnamed], dims) is None
    assert plan.work([helper.make_node("MatMul", ["F", "M"], [])], dims) is None


@pytest.mark.parametrize("work, threads, want", [
    (None, 4, 4), (None, 0, 0), (0, 4, 1), (segments.SEGMENT_GRAIN * 3, 4, 3),
    (segments.SEGMENT_GRAIN * 9, 4, 4), (segments.SEGMENT_GRAIN - 1, 0, 1),
])
def test_segment_threads(work, threads, want, monkeypatch):
    monkeypatch.setattr(segments.os, "sched_getaffinity", lambda pid: set(range(8)),
                        raising=False)
    assert segments.segment_threads(work, threads) == want
    assert segments.segment_threads(segments.SEGMENT_GRAIN * 8, 0) == 0  # every core



def _conv_pool_weighty(shape, channels=8):
    """``Conv (3 -> channels, 15x15, pad 7) -> LpPooling -> Relu``: a weight large enough to be
    held apart from the model (the session's weights)."""
    weight = np.ones((channels, 3, 15, 15), np.float32) / 675
    return dml_onnx.make_model(
        [helper.make_node("Conv", ["X", "W"], ["F"], pads=[7, 7, 7, 7]),
         dml_onnx.lp_pooling("F", "P", **POOL), helper.make_node("Relu", ["P"], ["Y"])],
        [_value("X", shape=shape)], [_value("Y")],
        initializers=[numpy_helper.from_array(weight, "W")])


@pytest.mark.parametrize("own_options", [False, True])
def test_a_model_runs_as_one_session_where_its_kernels_copy_little(own_options, monkeypatch):
    """Split execution pays for its sessions where the PyOps would copy more than
    ``ONE_SESSION_COPIES`` bytes a run, or, where those sizes are unknown, the weights are over
    ``ONE_SESSION_WEIGHTS``; ``dml_onnx`` nodes alone always run split. Either way the
    results are the one-session route's."""
    x = np.random.default_rng(4).standard_normal((1, 3, 8, 8)).astype(np.float32)
    copied = 2 * 8 * 8 * 8 * 4  # F into the LpPooling, P out of it: float32 [1, 8, 8, 8]
    weight_bytes = 8 * 3 * 15 * 15 * 4

    def route(copies, weights, model):
        monkeypatch.setattr(plan, "ONE_SESSION_COPIES", copies)
        monkeypatch.setattr(plan, "ONE_SESSION_WEIGHTS", weights)
        session = dml_onnx.InferenceSession(model, ort.SessionOptions() if own_options else None)
        if model.graph.node[0].domain != dml_onnx.DOMAIN:
            np.testing.assert_array_equal(session.run(None, {"X": x})[0],
                                          _one_session(model, {"X": x})[0])
        return "split" if session._split is not None else "one"

    known, unknown = _conv_pool_weighty([1, 3, 8, 8]), _conv_pool_weighty(None)
    assert route(copied, -1, known) == "one"
    assert route(copied - 1, 1 << 40, known) == "split"  # the weights do not count
    assert route(0, weight_bytes, unknown) == "one"
    assert route(1 << 40, weight_bytes - 1, unknown) == "split"
    assert route(1 << 40, 1 << 40, kernels_only_model()) == "split"


def test_small_graphs_run_as_one_session_and_detectors_split(python_child):
    """As shipped (a fresh process): a small layer with its input's shape unknown runs as one
    session, the same layer with weights of a detector's size (17 MB) splits."""
    done = python_child("""
        import dml_onnx
        from tests.runtime.test_split_execution import _conv_pool_weighty
        for channels in (8, 6400):
            print(dml_onnx.InferenceSession(_conv_pool_weighty(None, channels))._split is None)
    """)
    assert done.stdout.split() == ["True", "False"], done.stderr
