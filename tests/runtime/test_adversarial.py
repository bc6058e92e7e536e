"""What a hostile user tries beyond the catalogue of bad inputs
(``tests/_support/bad_inputs.py``), through models and the binding: models that reach the
binding's private domain, chains of failing nodes, onnxruntime's other run methods, extreme
but valid attributes, invalid opset imports and nesting, value names that look like the
binding's own, the memory limit on float16 outputs, and bounded work. Interrupts, signals,
exits and numba's cache are in ``test_adversarial_processes``; files that are not models in
``test_adversarial_files``. Whatever could end the process runs in a child process."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dml_onnx
import dml_onnx.conformance
from tests._support.native import assert_matches_reference
from tests.runtime._adversarial import (
    INT64_MAX,
    POOL,
    ROIS,
    X,
    child,
    plain_session,
    tensor,
)


# ------------------------------------------------------------------ the private runtime domain
def test_private_domain_nodes_are_refused_before_their_config_is_read():
    out = child("""
        import numpy as np
        from onnx import TensorProto, helper
        import dml_onnx
        from dml_onnx.definition import RUNTIME_DOMAIN
        node = helper.make_node("RoiPooling_float", ["X", "rois"], ["Y", "s"], name="crafted",
                                domain=RUNTIME_DOMAIN)
        node.attribute.append(helper.make_attribute("config", b"\\xff\\xfe"))
        model = helper.make_model(
            helper.make_graph([node], "g", [helper.make_tensor_value_info(n, 1, None)
                                            for n in ("X", "rois")],
                              [helper.make_tensor_value_info("Y", 1, None)]),
            ir_version=10, opset_imports=[helper.make_opsetid("", 18),
                                          helper.make_opsetid(RUNTIME_DOMAIN, 1)])
        for make in (dml_onnx.InferenceSession, dml_onnx.to_runtime_model):
            try:
                make(model)
            except ValueError as error:
                print(error)
        print(dml_onnx.check_model(model)[0])
    """)
    lines = out.splitlines()
    assert len(lines) == 3
    for line in lines:
        assert line.startswith("RoiPooling_float 'crafted': domain dml_onnx.runtime is private")


# ------------------------------------------------------------------ chains and run methods
def test_the_first_failing_node_of_a_chain_is_reported():
    model = dml_onnx.make_model(
        [dml_onnx.roi_pooling("X", "rois", "P", pooled_size=[2, 2], name="pool"),
         dml_onnx.unfold("P", "Y", window_sizes=[1, 1], name="im2col")],
        [tensor("X", [1, 1, 4, 4]), tensor("rois", [1, 5])], [tensor("Y")])
    bad = {"X": X, "rois": np.array([[7, 0, 0, 1, 1]], np.float32)}
    session = dml_onnx.InferenceSession(model)
    with pytest.raises(dml_onnx.KernelError,
                       match=r"^RoiPooling 'pool': rois\[0\] batch index 7 is outside"):
        session.run(None, bad)
    with pytest.raises(Exception, match="RoiPooling 'pool' output Y"):
        plain_session(model).run(None, bad)
    (Y,) = session.run(None, {"X": X, "rois": ROIS})
    assert Y.shape == (1, 1, 4)


def test_run_with_ort_values_run_async_and_io_binding_work():
    session = dml_onnx.InferenceSession(POOL)
    (want,) = session.run(None, {"X": X, "rois": ROIS})
    (got,) = session.run_with_ort_values(
        None, {"X": ort.OrtValue.ortvalue_from_numpy(X),
               "rois": ort.OrtValue.ortvalue_from_numpy(ROIS)})
    assert np.array_equal(got.numpy(), want)
    results: list = []
    done = threading.Event()

    def callback(outputs, user_data, error):
        results.append((outputs, user_data, error))
        done.set()
    for rois, expected in ((ROIS, ""), (ROIS + np.float32([[4, 0, 0, 0, 0]]), "batch index 4")):
        done.clear()
        session.run_async(None, {"X": X, "rois": rois}, callback, "data")
        assert done.wait(30)
        outputs, user_data, error = results[-1]
        assert user_data == "data" and expected in error
        if not expected:
            assert np.array_equal(outputs[0], want)
        else:
            assert outputs is None and error.startswith("RoiPooling 'pool'")
    binding = session.io_binding()
    binding.bind_cpu_input("X", X)
    binding.bind_cpu_input("rois", ROIS)
    binding.bind_output("Y")
    session.run_with_iobinding(binding)
    assert np.array_equal(binding.copy_outputs_to_cpu()[0], want)
    with pytest.raises(NotImplementedError, match="does not support run_with_ortvaluevector"):
        session.run_with_ortvaluevector()


@pytest.mark.parametrize("layout", ["one session", "split", "kernels only"])
def test_a_view_of_a_large_ort_value_output_outlives_its_wrapper(layout):
    """``run_with_ort_values(...)[0].numpy()`` keeps the C value alone, not the wrapper: the
    kernel's output (a kept block, 9 MB) must stay with the view, not be written by the next
    run, as plain onnxruntime's output is not."""
    nodes = [dml_onnx.unfold("X", "Y", window_sizes=[3, 3], name="im2col")]
    outputs = [tensor("Y")]
    if layout == "split":
        nodes.insert(0, helper.make_node("Relu", ["X0"], ["X"]))
    elif layout == "one session":
        nodes.append(helper.make_node("Neg", ["X"], ["Z"]))
        outputs.append(tensor("Z"))
    model = dml_onnx.make_model(nodes, [tensor("X0" if layout == "split" else "X",
                                               [1, 4, 256, 256])], outputs)
    session = dml_onnx.InferenceSession(model)
    assert (session._split is not None) == (layout != "one session")
    ones = np.ones((1, 4, 256, 256), np.float32)
    feeds = {session.get_inputs()[0].name: ort.OrtValue.ortvalue_from_numpy(ones)}
    for run in (session.run_with_ort_values, plain_session(model).run_with_ort_values):
        kept = run(None, feeds)[0].numpy()
        assert kept.nbytes >= 1 << 23
        session.run(None, {name: 2 * ones for name in feeds})
        assert (kept == 1).all()

def test_run_async_queues_many_calls_on_a_few_threads():
    """2,000 calls used to start a thread each; now they queue on ASYNC_THREADS shared
    threads, every callback runs, and one that raises stops no later one."""
    import dml_onnx.runtime as runtime

    session = dml_onnx.InferenceSession(POOL)
    (want,) = session.run(None, {"X": X, "rois": ROIS})
    before = threading.active_count()
    calls, results, done = 300, [], threading.Semaphore(0)

    def callback(outputs, user_data, error):
        results.append((user_data, error, outputs and np.array_equal(outputs[0], want)))
        done.release()
        if user_data == 0:
            raise RuntimeError("a callback that fails")
    for k in range(calls):
        session.run_async(None, {"X": X, "rois": ROIS}, callback, k)
    assert threading.active_count() <= before + runtime.ASYNC_THREADS
    for _ in range(calls):
        assert done.acquire(timeout=60)
    assert sorted(r[0] for r in results) == list(range(calls))
    assert all(error == "" and same for _, error, same in results)
    assert threading.active_count() <= before + runtime.ASYNC_THREADS


# ------------------------------------------------------------------ extreme valid attributes
@pytest.mark.parametrize("op, attributes, shape", [
    ("unfold", {"window_sizes": [1, 1], "strides": [INT64_MAX, 1]}, [1, 2, 4, 4]),
    ("unfold", {"window_sizes": [1, 2], "dilations": [INT64_MAX, 1],
                "strides": [1, INT64_MAX]}, [1, 2, 4, 4]),
    ("lp_pooling", {"window_size": [1, 2], "strides": [INT64_MAX, INT64_MAX], "p": 3},
     [1, 2, 4, 4]),
    ("fold", {"window_sizes": [1, 1], "output_size": [4, 4], "strides": [INT64_MAX, 1],
              "dilations": [INT64_MAX, INT64_MAX]}, [1, 2, 4]),
])
def test_int64_max_strides_and_dilations_run_like_the_reference(op, attributes, shape):
    model = dml_onnx.make_model([dml_onnx.BUILDERS[op]("X", "Y", name="n", **attributes)],
                                [tensor("X", shape)], [tensor("Y")])
    feeds = {"X": np.random.default_rng(3).standard_normal(shape).astype(np.float32)}
    want = dml_onnx.ReferenceEvaluator(model).run(None, feeds)
    assert_matches_reference(dml_onnx.InferenceSession(model).run(None, feeds), want)
    assert_matches_reference(plain_session(model).run(None, feeds), want)


# ------------------------------------------------------------------ invalid models
@pytest.mark.parametrize("version", [0, 2, 99])
def test_an_opset_import_other_than_1_is_refused(version):
    model = onnx.ModelProto()
    model.CopyFrom(POOL)
    next(o for o in model.opset_import if o.domain == "dml_onnx").version = version
    message = f"model: opset import dml_onnx version {version} is not 1"
    for make in (dml_onnx.InferenceSession, dml_onnx.to_runtime_model, dml_onnx.lower_model):
        with pytest.raises(ValueError, match=message):
            make(model)
    assert dml_onnx.check_model(model) == [message]


def test_a_node_in_an_if_of_a_model_function_is_refused():
    branch = helper.make_graph([dml_onnx.unfold("x", "y", window_sizes=[1], name="inner")],
                               "branch", [], [tensor("y")])
    function = helper.make_function(
        "local", "Wrap", ["x", "c"], ["y"],
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)],
        [helper.make_opsetid("", 18), helper.make_opsetid("dml_onnx", 1)])
    model = dml_onnx.make_model(
        [helper.make_node("Wrap", ["X", "c"], ["Y"], domain="local", name="wrap")],
        [tensor("X", [1, 1, 2]), tensor("c", [], TensorProto.BOOL)], [tensor("Y")])
    model.functions.append(function)
    model.opset_import.append(helper.make_opsetid("local", 1))
    message = ("Unfold 'inner': dml_onnx nodes inside model function 'Wrap' are not "
               "supported by")
    for make in (dml_onnx.InferenceSession, dml_onnx.to_runtime_model):
        with pytest.raises(ValueError, match=message):
            make(model)
    assert dml_onnx.check_model(model) == [message + " dml_onnx"]


@pytest.mark.parametrize("where", ["input", "output"])
def test_value_names_like_the_bindings_own_do_not_clash(where):
    name = "_dml_onnx_0_out_0"
    if where == "input":
        nodes = [helper.make_node("Identity", ["X"], [name]),
                 dml_onnx.unfold(name, "Y", window_sizes=[1, 1], name="u")]
    else:
        nodes = [dml_onnx.unfold("X", name, window_sizes=[1, 1], name="u"),
                 helper.make_node("Identity", [name], ["Y"])]
    model = dml_onnx.make_model(nodes, [tensor("X", [1, 1, 4, 4])], [tensor("Y")])
    feeds = {"X": X}
    for session in (dml_onnx.InferenceSession(model), plain_session(model)):
        (Y,) = session.run(None, feeds)
        assert np.array_equal(Y, X.reshape(1, 1, 16))


# ------------------------------------------------------------------ the memory limit and float16
@pytest.mark.parametrize("limit", [16 * 2 - 1, 16 * 2, 16 * 4 - 1, 16 * 4])
def test_check_model_and_run_agree_on_a_float16_output_at_the_memory_limit(limit):
    """A float16 output counts as float32, the type it is computed in, in both."""
    model = dml_onnx.make_model([dml_onnx.unfold("X", "Y", window_sizes=[1], name="u")],
                                [tensor("X", [1, 1, 16], TensorProto.FLOAT16)],
                                [tensor("Y", [1, 1, 16], TensorProto.FLOAT16)])
    previous = dml_onnx.set_memory_limit(limit)
    try:
        problems = dml_onnx.check_model(model)
        try:
            dml_onnx.InferenceSession(model).run(None, {"X": np.ones((1, 1, 16), np.float16)})
            failure = None
        except dml_onnx.KernelError as error:
            failure = str(error)
    finally:
        dml_onnx.set_memory_limit(previous)
    assert problems == ([] if failure is None else [failure])
    assert (failure is None) == (limit >= 16 * 4)


# ------------------------------------------------------------------ bounded work
def test_the_reported_slow_cases_finish_and_match_the_reference():
    """RoiAlign1 max over one huge ROI of a 1x1 image (84M samples: the samples of a bin are
    reduced in one numpy call), and LpPooling of one value with a 2e7 window over padding
    (the taps reading padding are skipped). A child with a time limit: a hang fails."""
    out = child("""
        import numpy as np
        import dml_onnx
        from onnx import TensorProto, helper
        value = lambda name, shape: helper.make_tensor_value_info(name, 1, shape)
        roi = dml_onnx.make_model(
            [dml_onnx.roi_align1("X", "rois", "b", "Y", output_size=[20, 1],
                                 reduction_function="max", name="ra")],
            [value("X", [1, 1, 1, 1]), value("rois", [1, 4]),
             helper.make_tensor_value_info("b", TensorProto.INT64, [1])], [value("Y", None)])
        (Y,) = dml_onnx.InferenceSession(roi).run(None, {
            "X": np.full((1, 1, 1, 1), 3, np.float32),
            "rois": np.array([[0, 0, 2048, 40960]], np.float32), "b": np.zeros(1, np.int64)})
        print(Y.ravel().tolist())
        lp = dml_onnx.make_model(
            [dml_onnx.lp_pooling("X", "Y", window_size=[20000000], start_padding=[10000000],
                                 end_padding=[10000000], p=2, name="lp")],
            [value("X", [1, 1, 1])], [value("Y", None)])
        print(dml_onnx.InferenceSession(lp).run(None, {"X": np.full((1, 1, 1), -2, np.float32)})[0]
              .ravel().tolist())
    """, timeout=120)
    roi_line, lp_line = out.splitlines()
    # bin 0 holds the samples on the one pixel (3) and beyond it (0); the others lie beyond
    assert eval(roi_line) == [3.0] + [0.0] * 19
    assert eval(lp_line) == [2.0, 2.0]


def test_the_work_limit_is_set_like_the_memory_limit():
    model = dml_onnx.make_model(
        [dml_onnx.lp_pooling("X", "Y", window_size=[3, 3], name="lp")],
        [tensor("X", [1, 2, 5, 5])], [tensor("Y")])
    session = dml_onnx.InferenceSession(model)
    feeds = {"X": np.ones((1, 2, 5, 5), np.float32)}
    assert dml_onnx.work_limit() == 1 << 31
    session.run(None, feeds)  # a plan made under the default limit is not reused under another
    previous = dml_onnx.set_work_limit(10)
    try:
        assert dml_onnx.work_limit() == 10
        with pytest.raises(dml_onnx.KernelError, match=r"^LpPooling 'lp': window tap reads \d+ "
                           r"are above the work limit of 10 \(dml_onnx.set_work_limit\)$"):
            session.run(None, feeds)
    finally:
        assert dml_onnx.set_work_limit(previous) == 10
    assert session.run(None, feeds)[0].shape == (1, 2, 3, 3)
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(ValueError, match="work limit"):
            dml_onnx.set_work_limit(bad)


@pytest.mark.parametrize("reference", ["roi_align1", "roi_align_grad", "lp_pooling"])
def test_the_references_refuse_work_above_the_limit_before_their_loops(reference):
    """The plain references (ReferenceEvaluator, conformance run --runtime reference) apply
    the kernels' work limit before they start: a call the kernel refuses never loops for
    hours in the reference."""
    from dml_onnx.reference_ops import lp_pooling, roi_align1, roi_align_grad

    image = np.zeros((1, 2, 8, 8), np.float32)
    boxes, batch = np.array([[0, 0, 7, 7]], np.float32), np.zeros(1, np.int64)
    sampling = dict(reduction_function="average", interpolation_mode="linear",
                    spatial_scale_x=1.0, spatial_scale_y=1.0, input_pixel_offset=0.5,
                    output_pixel_offset=-0.5, minimum_samples_per_output=64,
                    maximum_samples_per_output=64, align_regions_to_corners=0)
    calls = {
        "roi_align1": lambda: roi_align1.roi_align1(
            image, boxes, batch, output_size=[2, 2], out_of_bounds_input_value=0.0,
            **sampling),
        "roi_align_grad": lambda: roi_align_grad.roi_align_grad(
            image, np.ones((1, 2, 2, 2), np.float32), boxes, batch, input_shape=None,
            compute_dx=True, compute_drois=True, **sampling),
        "lp_pooling": lambda: lp_pooling.lp_pooling(
            np.zeros((1, 2, 64, 64), np.float32), window_size=[8, 8], strides=[1, 1],
            start_padding=[0, 0], end_padding=[0, 0], dilations=[1, 1], p=2)}
    previous = dml_onnx.set_work_limit(10_000)  # 2 x (2 x 64)^2 samples, 2 x 57^2 x 64 taps
    try:
        with pytest.raises(dml_onnx.KernelError, match="above the work limit of 10000"):
            calls[reference]()
    finally:
        dml_onnx.set_work_limit(previous)
    calls[reference]()  # the default limit: it runs


def test_a_crafted_runtime_node_with_a_config_that_is_not_utf8_fails_without_ending_the_process():
    """Our PyOps carry no string attribute (onnxruntime-extensions converts those in C++,
    and one that is not UTF-8 ended the process there); the config is a uint8 input, decoded
    in Python. A crafted node with bad bytes there (and a bad string attribute, which the
    extension ignores) fails the run of a plain onnxruntime session, which lives on."""
    out = child("""
        import numpy as np
        import onnxruntime as ort
        import onnxruntime_extensions
        from onnx import TensorProto, helper, numpy_helper
        import dml_onnx
        from dml_onnx.definition import RUNTIME_DOMAIN
        from tests.runtime._adversarial import POOL, ROIS, X
        model = dml_onnx.to_runtime_model(POOL)
        (config,) = [n for n in model.graph.node if n.op_type == "Constant"
                     and n.output[0].endswith("_config")]
        config.attribute[0].t.CopyFrom(numpy_helper.from_array(
            np.frombuffer(b"\\xff\\xfe{", np.uint8)))
        kernel = next(n for n in model.graph.node if n.domain == RUNTIME_DOMAIN)
        kernel.attribute.append(helper.make_attribute("config", b"\\xff\\xfe"))
        options = ort.SessionOptions()
        options.register_custom_ops_library(onnxruntime_extensions.get_library_path())
        options.log_severity_level = 4
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        try:
            session.run(None, {"X": X, "rois": ROIS})
        except Exception as error:
            print("refused:", type(error).__name__)
        import dml_onnx.runtime
        print("error:", dml_onnx.runtime.take_error())
        good = dml_onnx.to_runtime_model(POOL)
        print("alive:", ort.InferenceSession(good.SerializeToString(), options,
              providers=["CPUExecutionProvider"]).run(None, {"X": X, "rois": ROIS})[0].ravel())
    """)
    assert "refused:" in out and "alive: [ 5.  7. 13. 15.]" in out, out
    assert "RoiPooling '<unreadable config>': kernel 'UnicodeDecodeError' raised" in out, out
