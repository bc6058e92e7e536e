"""InferenceSession's direct inputs and outputs: graph inputs reach the kernels as the caller's
arrays and graph outputs leave as the kernels' arrays, whatever else the graph does with them."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime_extensions import get_library_path

import dml_onnx
from dml_onnx._kernels.fold import fold
from dml_onnx._kernels.lp_pooling import lp_pooling
from dml_onnx._kernels.roi_align1 import roi_align1
from dml_onnx._kernels.unfold import unfold
from dml_onnx.graphs import element_types
from dml_onnx.model_files import load_model
from dml_onnx.runtime import RUNTIME_DOMAIN
from dml_onnx.runtime.rewrite import plan_node, runtime_model

WINDOW = {"window_sizes": [2, 2], "start_padding": [1, 0], "end_padding": [0, 1]}


def _model(nodes, inputs, outputs, initializers=()):
    return dml_onnx.make_model(nodes, inputs, outputs, initializers=initializers)


def _value(name, elem, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _plain_session(model) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    return ort.InferenceSession(dml_onnx.to_runtime_model(model).SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def _unfold_attributes():
    return {k: tuple(v) for k, v in WINDOW.items()}


def test_an_input_read_by_other_nodes_and_an_output_read_by_other_nodes():
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    model = _model(
        [dml_onnx.unfold("X", "U", **WINDOW), helper.make_node("Neg", ["X"], ["minus_X"]),
         helper.make_node("Relu", ["U"], ["relu_U"])],
        [_value("X", TensorProto.FLOAT, list(x.shape))],
        [_value("U", TensorProto.FLOAT), _value("minus_X", TensorProto.FLOAT),
         _value("relu_U", TensorProto.FLOAT)])
    want = unfold(x, **_unfold_attributes())
    session = dml_onnx.InferenceSession(model)
    got_u, got_minus, got_relu = session.run(None, {"X": x})
    np.testing.assert_array_equal(got_u, want)
    np.testing.assert_array_equal(got_minus, -x)
    np.testing.assert_array_equal(got_relu, np.maximum(want, 0))
    for got, plain in zip(session.run(None, {"X": x}), _plain_session(model).run(None, {"X": x})):
        np.testing.assert_array_equal(got, plain)


def test_an_output_listed_by_name_in_any_order_and_subset():
    x = np.random.default_rng(1).standard_normal((1, 2, 5, 5)).astype(np.float32)
    model = _model(
        [dml_onnx.unfold("X", "U", **WINDOW),
         dml_onnx.lp_pooling("X", "P", window_size=[3, 3], p=3)],
        [_value("X", TensorProto.FLOAT, list(x.shape))],
        [_value("U", TensorProto.FLOAT), _value("P", TensorProto.FLOAT)])
    session = dml_onnx.InferenceSession(model)
    want_u = unfold(x, **_unfold_attributes())
    want_p = lp_pooling(x, window_size=(3, 3), strides=(), start_padding=(), end_padding=(),
                        dilations=(), p=3)
    got_p, got_u = session.run(["P", "U"], {"X": x})
    np.testing.assert_array_equal(got_p, want_p)
    np.testing.assert_array_equal(got_u, want_u)
    (got_p,) = session.run(["P"], {"X": x})
    np.testing.assert_array_equal(got_p, want_p)


def test_the_caller_arrays_are_read_not_written_and_outputs_are_new():
    x = np.random.default_rng(2).standard_normal((1, 1, 4, 4)).astype(np.float32)
    x.flags.writeable = False  # a kernel writing into its input would fail here
    model = _model([dml_onnx.unfold("X", "U", window_sizes=[1, 1])],
                   [_value("X", TensorProto.FLOAT, [1, 1, 4, 4])], [_value("U", TensorProto.FLOAT)])
    (got,) = dml_onnx.InferenceSession(model).run(None, {"X": x})
    np.testing.assert_array_equal(got, x.reshape(1, 1, 16))
    assert not np.shares_memory(got, x)


def test_inputs_that_are_not_graph_inputs_still_arrive():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float16)
    rois = np.array([[0.5, 1, 4.5, 5], [1, 0, 3, 2]], np.float16)
    batch = np.zeros(2, np.int64)
    model = _model(
        [helper.make_node("Identity", ["rois_in"], ["rois"]),
         dml_onnx.roi_align1("X", "rois", "batch", "Y", output_size=[2, 3])],
        [_value("X", TensorProto.FLOAT16, list(x.shape))],
        [_value("Y", TensorProto.FLOAT16)],
        [numpy_helper.from_array(rois, "rois_in"), numpy_helper.from_array(batch, "batch")])
    (got,) = dml_onnx.InferenceSession(model).run(None, {"X": x})
    want = roi_align1(x.astype(np.float32), rois.astype(np.float32), batch, output_size=(2, 3),
                      reduction_function="average", interpolation_mode="linear",
                      spatial_scale_x=1.0, spatial_scale_y=1.0, input_pixel_offset=0.5,
                      output_pixel_offset=-0.5, out_of_bounds_input_value=0.0,
                      minimum_samples_per_output=1, maximum_samples_per_output=4294967295,
                      align_regions_to_corners=0)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want.astype(np.float16))


@pytest.mark.parametrize("shape", [(1, 3, 8, 8), (4, 16, 40, 40)])  # both sides of the casts
def test_float16_through_the_session_is_float32_rounded_once(shape):
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float16)
    model = _model([dml_onnx.lp_pooling("X", "Y", window_size=[3, 3], start_padding=[1, 1],
                                        end_padding=[1, 1])],
                   [_value("X", TensorProto.FLOAT16, list(shape))],
                   [_value("Y", TensorProto.FLOAT16)])
    (got,) = dml_onnx.InferenceSession(model).run(None, {"X": x})
    want = lp_pooling(x.astype(np.float32), window_size=(3, 3), strides=(), dilations=(),
                      start_padding=(1, 1), end_padding=(1, 1), p=2).astype(np.float16)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)
    (plain,) = _plain_session(model).run(None, {"X": x})
    np.testing.assert_array_equal(got, plain)


def _watched_conversions(monkeypatch, threads_for_float16: int) -> list:
    """Set FLOAT16_THREADS; the list that records every conversion the hook makes, as
    ``(from dtype, to dtype)``."""
    from dml_onnx.runtime import hook
    monkeypatch.setattr(hook, "FLOAT16_THREADS", threads_for_float16)
    conversions: list = []
    convert = hook._convert
    monkeypatch.setattr(hook, "_convert", lambda array, dtype: (
        conversions.append((array.dtype, np.dtype(dtype))), convert(array, dtype))[1])
    return conversions


@pytest.mark.parametrize("threads_for_float16", [1, 10 ** 6])  # float16 kept / cast to float32
def test_float16_converting_kernels_equal_float32_rounded_once(threads_for_float16,
                                                               monkeypatch):
    """LpPooling, RoiAlign1 and RoiPooling take direct float16 inputs as they are where the
    kernels have FLOAT16_THREADS threads (their compiled conversions), else as float32 from
    onnxruntime's Cast: either way the outputs are the float32 computation rounded once (the
    spec's float16 rule), as a plain session gives them."""
    conversions = _watched_conversions(monkeypatch, threads_for_float16)
    rng = np.random.default_rng(6)
    rois = np.concatenate([rng.uniform(0, 20, (40, 2)), rng.uniform(22, 60, (40, 2))],
                          1).astype(np.float16)
    batch = rng.integers(0, 2, 40)

    def models(elem):
        align = _model([dml_onnx.roi_align1("X", "rois", "batch", "Y", output_size=[7, 7])],
                       [_value("X", elem, list(image.shape)), _value("rois", elem, [40, 4]),
                        _value("batch", TensorProto.INT64, [40])], [_value("Y", elem)])
        pool = _model([dml_onnx.roi_pooling("X", "boxes", "Y", pooled_size=[3, 3])],
                      [_value("X", elem, list(image.shape)), _value("boxes", elem, [40, 5])],
                      [_value("Y", elem)])
        lp_pools = [_model([dml_onnx.lp_pooling("X", "Y", window_size=[3, 3], strides=[1, 2],
                                                start_padding=[1, 1], end_padding=[1, 1], p=p)],
                           [_value("X", elem, list(image.shape))], [_value("Y", elem)])
                    for p in (2, 3)]
        return align, pool, *lp_pools

    image = rng.standard_normal((2, 4, 64, 64)).astype(np.float16)  # above the grain
    boxes = np.concatenate([batch[:, None].astype(np.float16), rois], 1)
    feeds = ({"X": image, "rois": rois, "batch": batch}, {"X": image, "boxes": boxes},
             {"X": image}, {"X": image})
    for half, wide, feed in zip(models(TensorProto.FLOAT16), models(TensorProto.FLOAT), feeds,
                                strict=True):
        conversions.clear()
        (got,) = dml_onnx.InferenceSession(half).run(None, feed)
        widened = (np.dtype(np.float16), np.dtype(np.float32)) in conversions
        assert widened == (threads_for_float16 > 1), (half.graph.node, conversions)
        wide_feed = {k: v.astype(np.float32) if v.dtype == np.float16 else v
                     for k, v in feed.items()}
        (want,) = dml_onnx.InferenceSession(wide).run(None, wide_feed)
        assert got.dtype == np.float16
        np.testing.assert_array_equal(got, want.astype(np.float16))
        np.testing.assert_array_equal(got, _plain_session(half).run(None, feed)[0])


@pytest.mark.parametrize("threads_for_float16", [1, 10 ** 6])
@pytest.mark.parametrize("reduction", ["average", "max"])
def test_roi_align_grad_takes_direct_float16_as_it_is_at_any_thread_count(
        reduction, threads_for_float16, monkeypatch):
    """RoiAlignGrad's dX by average reads dY's float16 bits and writes dX's; its other kinds
    convert as fast as onnxruntime's Cast: its direct float16 inputs are never widened by the
    hook, whatever FLOAT16_THREADS says, and dX is the float32 computation rounded once, as a
    plain session gives it."""
    conversions = _watched_conversions(monkeypatch, threads_for_float16)
    rng = np.random.default_rng(6)
    gradient = rng.standard_normal((40, 4, 7, 7)).astype(np.float16)
    image = rng.standard_normal((2, 4, 64, 64)).astype(np.float16)
    rois = np.concatenate([rng.uniform(0, 20, (40, 2)), rng.uniform(22, 60, (40, 2))],
                          1).astype(np.float16)
    batch = rng.integers(0, 2, 40)

    def model(elem):
        return _model([dml_onnx.roi_align_grad("X", "dY", "rois", "batch", "dX",
                                               reduction_function=reduction)],
                      [_value("X", elem, list(image.shape)),
                       _value("dY", elem, list(gradient.shape)),
                       _value("rois", elem, list(rois.shape)),
                       _value("batch", TensorProto.INT64, list(batch.shape))],
                      [_value("dX", elem)])

    feed = {"X": image, "dY": gradient, "rois": rois, "batch": batch}
    (got,) = dml_onnx.InferenceSession(model(TensorProto.FLOAT16)).run(None, feed)
    assert conversions and all(source == target for source, target in conversions)
    wide_feed = {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in feed.items()}
    (want,) = dml_onnx.InferenceSession(model(TensorProto.FLOAT)).run(None, wide_feed)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want.astype(np.float16))
    plain = _plain_session(model(TensorProto.FLOAT16))
    np.testing.assert_array_equal(got, plain.run(None, feed)[0])


@pytest.mark.parametrize("threads_for_float16", [1, 10 ** 6])
@pytest.mark.parametrize("op", ["Unfold", "Fold"])
def test_unfold_and_fold_take_direct_float16_as_it_is_at_any_thread_count(
        op, threads_for_float16, monkeypatch):
    """Unfold only copies values and Fold's loop reads float16 bits as it sums: their direct
    float16 input is never converted, whatever FLOAT16_THREADS says (that threshold is for the
    kernels that convert), and Fold's output is the float32 fold rounded once."""
    conversions = _watched_conversions(monkeypatch, threads_for_float16)
    rng = np.random.default_rng(7)
    if op == "Unfold":
        x = rng.standard_normal((2, 3, 40, 40)).astype(np.float16)
        node, want = dml_onnx.unfold("X", "Y", **WINDOW), unfold(x, **_unfold_attributes())
    else:
        x = rng.standard_normal((2, 36, 1600)).astype(np.float16)  # above the grain
        attributes = {"window_sizes": [3, 3], "start_padding": [1, 1], "end_padding": [1, 1],
                      "output_size": [40, 40]}
        node = dml_onnx.fold("X", "Y", **attributes)
        want = fold(x.astype(np.float32), **attributes).astype(np.float16)
    model = _model([node], [_value("X", TensorProto.FLOAT16, list(x.shape))],
                   [_value("Y", TensorProto.FLOAT16)])
    (got,) = dml_onnx.InferenceSession(model).run(None, {"X": x})
    assert got.dtype == np.float16 and conversions
    assert all(source == target for source, target in conversions)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, _plain_session(model).run(None, {"X": x})[0])


def test_feeds_that_are_not_arrays_of_the_graph_type():
    model = _model([dml_onnx.unfold("X", "U", window_sizes=[2])],
                   [_value("X", TensorProto.INT32, [1, 1, 3])], [_value("U", TensorProto.INT32)])
    session = dml_onnx.InferenceSession(model)
    with pytest.raises(Exception, match="data type"):  # onnxruntime still checks the feed
        session.run(None, {"X": np.zeros((1, 1, 3), np.float64)})
    with pytest.raises(Exception, match="dimensions"):
        session.run(None, {"X": np.zeros((1, 1, 4), np.int32)})
    (got,) = session.run(None, {"X": np.arange(3, dtype=np.int32).reshape(1, 1, 3)})
    np.testing.assert_array_equal(got, [[[0, 1], [1, 2]]])


def test_the_session_model_passes_graph_values_outside_onnxruntime():
    model = _model([dml_onnx.unfold("X", "U", window_sizes=[2])],
                   [_value("X", TensorProto.FLOAT, [1, 1, 3])],
                   [_value("U", TensorProto.FLOAT, [1, 2, 2])])
    direct = runtime_model(load_model(model), mode="direct", strings=True)
    (node,) = [n for n in direct.graph.node if n.domain == RUNTIME_DOMAIN]
    assert "X" not in node.input and node.output[0] == "U"
    assert node.op_type.endswith("_unguarded")
    assert not direct.graph.output[0].type.tensor_type.HasField("shape")
    assert [i.name for i in direct.graph.input] == ["X"]  # still checked by onnxruntime


def test_the_plan_of_a_node_decides_casts_feeds_and_fetches():
    """The plan needs no session: float16 reaches a kernel uncast when all its inputs of that
    type are direct (Unfold, LpPooling), and through a Cast to float32 otherwise (RoiAlign1 with
    its regions computed in the graph; LpPooling after another node)."""
    unfold = _model([dml_onnx.unfold("X", "U", window_sizes=[2])],
                    [_value("X", TensorProto.FLOAT16, [1, 1, 3])],
                    [_value("U", TensorProto.FLOAT16)])
    plan = plan_node(unfold.graph.node[0], element_types(unfold), {"X"}, {"U"})
    ((x,), (u,)) = plan.inputs, plan.outputs
    assert (x.direct, x.cast, x.runtime_type) == (True, False, TensorProto.FLOAT)
    assert (u.runtime_type, u.node_type) == (TensorProto.FLOAT, TensorProto.FLOAT16)
    assert plan.config["feeds"] == [["X", "float16", "float16"]]
    assert plan.config["fetches"] == [["U", "float16"]]

    pool = _model([dml_onnx.lp_pooling("X", "Y", window_size=[3, 3])],
                  [_value("X", TensorProto.FLOAT16, [1, 1, 4, 4])],
                  [_value("Y", TensorProto.FLOAT16)])
    plan = plan_node(pool.graph.node[0], element_types(pool), {"X"}, set())
    assert plan.config["feeds"] == [["X", "float16", "float16"]]
    assert "fetches" in plan.config and plan.config["fetches"] == [None]
    plan = plan_node(pool.graph.node[0], element_types(pool), set(), set())
    assert (plan.inputs[0].direct, plan.inputs[0].cast) == (False, True)
    assert "feeds" not in plan.config and plan.config["outputs"] == [True]

    align = _model([dml_onnx.roi_align1("X", "rois", "batch", "Y", output_size=[2, 2])],
                   [_value("X", TensorProto.FLOAT16, [1, 1, 4, 4]),
                    _value("rois", TensorProto.FLOAT16, [1, 4]),
                    _value("batch", TensorProto.INT64, [1])], [_value("Y", TensorProto.FLOAT16)])
    plan = plan_node(align.graph.node[0], element_types(align), {"X"}, set())
    assert plan.config["feeds"] == [["X", "float16", "float32"], None, None]
    assert [(i.direct, i.cast) for i in plan.inputs] == [(True, False), (False, True),
                                                        (False, False)]


def test_float16_between_standard_nodes_is_rounded_as_the_graph_says():
    """onnxruntime computes a float16 Add in float32 and drops the Cast pair between it and
    the rewrite's Cast to float32, and likewise after the PyOp: the kernel must see, and its
    consumers get, float16 values, as the reference computes them."""
    rng = np.random.default_rng(7)
    model = _model(
        [helper.make_node("Add", ["X", "X2"], ["S"]),
         dml_onnx.lp_pooling("S", "P", window_size=[3, 3], start_padding=[1, 1],
                             end_padding=[1, 1], name="pool"),
         helper.make_node("Cast", ["P"], ["P_float"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["P_float", "P_float"], ["Y"])],
        [_value("X", TensorProto.FLOAT16, [1, 4, 6, 6]),
         _value("X2", TensorProto.FLOAT16, [1, 4, 6, 6])],
        [_value("Y", TensorProto.FLOAT)])
    feeds = {name: rng.standard_normal((1, 4, 6, 6)).astype(np.float16) * 7
             for name in ("X", "X2")}
    (want,) = dml_onnx.ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_array_equal(_plain_session(model).run(None, feeds)[0], want)
    np.testing.assert_array_equal(dml_onnx.InferenceSession(model).run(None, feeds)[0], want)
