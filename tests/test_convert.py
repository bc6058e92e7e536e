"""Model conversion: raising standard nodes into dml_onnx ones, lowering dml_onnx nodes into
standard ones, and model-local functions, on multi-node models; the CLI commands behind them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dml_onnx
from dml_onnx.raising import raise_model
from tests.native import unraised_roi_aligns

ROOT = Path(__file__).resolve().parent.parent
RNG = np.random.default_rng(11)
FEEDS = {
    "image": RNG.standard_normal((2, 3, 12, 12)).astype(np.float32),
    "boxes": np.array([[0, 0, 6, 6], [2.5, 1, 11, 9], [4, 4, 5.5, 8]], np.float32),
    "box_batch": np.array([0, 1, 1], np.int64),
    "pool_boxes": np.array([[0, 0, 0, 5, 5], [1, 2, 4, 10, 9], [1, 6, 0, 11, 11]], np.float32),
    "columns": RNG.standard_normal((1, 16, 16)).astype(np.float32),
}


def _value(name: str, elem: int, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _standard_model(*, roi_align: dict | None = None, lp_pool: dict | None = None,
                    col2im_constant: bool = True, opset: int = 18) -> onnx.ModelProto:
    """Conv -> RoiAlign -> LpPool head, Conv -> MaxRoiPool head, and a Col2Im."""
    weight = numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    image_shape = numpy_helper.from_array(np.array([5, 5], np.int64), "image_shape")
    nodes = [
        helper.make_node("Conv", ["image", "w"], ["features"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("RoiAlign", ["features", "boxes", "box_batch"], ["aligned"],
                         name="align", **({"output_height": 4, "output_width": 4,
                                           "sampling_ratio": 2, "spatial_scale": 0.5}
                                          | (roi_align or {}))),
        helper.make_node("LpPool", ["aligned"], ["head"], name="lp",
                         **({"kernel_shape": [2, 2], "pads": [1, 0, 1, 1], "p": 2}
                            | (lp_pool or {}))),
        helper.make_node("MaxRoiPool", ["features", "pool_boxes"], ["pooled"], name="pool",
                         pooled_shape=[3, 2], spatial_scale=1.0),
        helper.make_node("Constant", [], ["block_shape"], name="block",
                         value=numpy_helper.from_array(np.array([2, 2], np.int64))),
        helper.make_node("Col2Im", ["columns", "image_shape", "block_shape"], ["folded"],
                         name="col2im"),
    ]
    inputs = [_value("image", TensorProto.FLOAT, [2, 3, 12, 12]),
              _value("boxes", TensorProto.FLOAT, ["R", 4]),
              _value("box_batch", TensorProto.INT64, ["R"]),
              _value("pool_boxes", TensorProto.FLOAT, ["P", 5]),
              _value("columns", TensorProto.FLOAT, [1, 16, 16])]
    if not col2im_constant:
        inputs.append(_value("image_shape", TensorProto.INT64, [2]))
    outputs = [_value("head", TensorProto.FLOAT, ["R", 4, 5, 4]),
               _value("pooled", TensorProto.FLOAT, ["P", 4, 3, 2]),
               _value("folded", TensorProto.FLOAT, [1, 4, 5, 5])]
    graph = helper.make_graph(nodes, "heads", inputs, outputs,
                              initializer=[weight] + ([image_shape] if col2im_constant else []))
    return helper.make_model(graph, ir_version=dml_onnx.IR_VERSION,
                             opset_imports=[helper.make_opsetid("", opset)])


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    feeds = dict(FEEDS)
    if any(i.name == "image_shape" for i in model.graph.input):
        feeds["image_shape"] = np.array([5, 5], np.int64)
    return feeds


def _plain(model: onnx.ModelProto) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, _feeds(model))


def _assert_same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        scale = float(np.max(np.abs(w[np.isfinite(w)]), initial=1.0))
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=2e-6 * scale)


def _op_types(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


# ----------------------------------------------------------------------------- raising
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_raised_max_roi_pool_keeps_rounding_half_away(dtype):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node("MaxRoiPool", ["X", "rois"], ["Y"], pooled_shape=[1, 2],
                            spatial_scale=0.5)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", elem, None),
                                            helper.make_tensor_value_info("rois", elem, None)],
                              [helper.make_tensor_value_info("Y", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)],
                              ir_version=10)
    X = np.arange(1, 26, dtype=dtype).reshape(1, 1, 5, 5)
    # scaled corners on .5: 0.5 -> 1 and 2.5 -> 3 half away, 0 and 2 half to even
    rois = np.array([[0, 1, 3, 5, 5], [0, -1, 5, 7, 9]], dtype)
    feeds = {"X": X, "rois": rois}
    result = raise_model(model)
    assert len(result.raised) == 1 and "RoiPooling" in _op_types(result.model)
    as_float = helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                      for n in ("X", "rois")],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 16)], ir_version=10)
    want = [y.astype(dtype) for y in ort.InferenceSession(as_float.SerializeToString()).run(
        None, {k: v.astype(np.float32) for k, v in feeds.items()})]  # max is exact
    got = dml_onnx.InferenceSession(result.model).run(None, feeds)
    np.testing.assert_array_equal(got[0], want[0])
    unrounded = dml_onnx.InferenceSession(dml_onnx.make_model(
        [dml_onnx.roi_pooling("X", "rois", "Y", pooled_size=[1, 2], spatial_scale=0.5)],
        list(graph.input), list(graph.output))).run(None, feeds)
    assert not np.array_equal(unrounded[0], want[0])


def test_raise_rewrites_every_exactly_equivalent_node_and_keeps_the_outputs():
    model = _standard_model()
    result = raise_model(model)
    assert result.raised == ["align", "lp", "pool", "col2im"] and result.kept == {}
    ops = _op_types(result.model)
    assert [t for t in ops if t in {"Conv", *dml_onnx.OPERATORS_BY_NAME}] == [
        "Conv", "RoiAlign1", "LpPooling", "RoiPooling", "Fold"]
    assert not unraised_roi_aligns(result.model)
    # Col2Im's constant sizes became attributes: the Constant and the initializer are gone
    assert [t.name for t in result.model.graph.initializer] == ["w"]
    dml_onnx.register_schemas()
    onnx.checker.check_model(result.model, full_check=True)
    want = _plain(model)
    _assert_same(dml_onnx.InferenceSession(result.model).run(None, _feeds(model)), want)
    # the new nodes carry their standard forms: plain onnxruntime still runs the model
    assert {f.name for f in result.model.functions} == {"RoiAlign1", "LpPooling", "RoiPooling",
                                                        "Fold"}
    _assert_same(_plain(result.model), want)


@pytest.mark.parametrize(("variation", "node", "reason"), [
    ({"roi_align": {"mode": "max"}}, "align", "weighted corner"),
    ({"lp_pool": {"ceil_mode": 1}}, "lp", "ceil_mode"),
    ({"lp_pool": {"auto_pad": "SAME_UPPER", "pads": None}}, "lp", "depends on sizes"),
    ({"lp_pool": {"p": 0}}, "lp", "p 0"),
    ({"col2im_constant": False}, "col2im", "image_shape is not a constant"),
])
def test_raise_keeps_what_is_not_exactly_equivalent_and_says_why(variation, node, reason):
    if "lp_pool" in variation:
        variation = {"lp_pool": {k: v for k, v in variation["lp_pool"].items() if v is not None}}
        if "auto_pad" in variation["lp_pool"]:
            model = _standard_model()
            lp = next(n for n in model.graph.node if n.name == "lp")
            del lp.attribute[:]
            lp.attribute.extend([helper.make_attribute("kernel_shape", [2, 2]),
                                 helper.make_attribute("auto_pad", "SAME_UPPER")])
        else:
            model = _standard_model(**variation)
    else:
        model = _standard_model(**variation)
    result = raise_model(model)
    assert node in result.kept and reason in result.kept[node]
    assert node not in result.raised
    _assert_same(dml_onnx.InferenceSession(result.model).run(None, _feeds(model)),
                 _plain(model))


def test_raise_with_positive_rois_takes_adaptive_sampling():
    model = _standard_model(roi_align={"sampling_ratio": 0})
    result = raise_model(model, positive_rois=True)
    assert "align" in result.raised
    aligned = next(n for n in result.model.graph.node if n.op_type == "RoiAlign1")
    attributes = {a.name: helper.get_attribute_value(a) for a in aligned.attribute}
    assert attributes["minimum_samples_per_output"] == 1
    assert attributes["maximum_samples_per_output"] == 4294967295
    _assert_same(dml_onnx.InferenceSession(result.model).run(None, _feeds(model)),
                 _plain(model))


def test_raise_takes_col2im_sizes_given_as_overridable_graph_inputs():
    """Sizes as initializers also listed as graph inputs (defaults a caller may override):
    raised, and the input goes, so that feeding it fails instead of being ignored."""
    model = _standard_model()
    image_shape = next(t for t in model.graph.initializer if t.name == "image_shape")
    model.graph.input.append(_value("image_shape", TensorProto.INT64, [2]))
    result = raise_model(model)
    assert "col2im" in result.raised
    assert "image_shape" not in {i.name for i in result.model.graph.input} | {
        t.name for t in result.model.graph.initializer}
    session = dml_onnx.InferenceSession(result.model)
    _assert_same(session.run(None, FEEDS), _plain(model))
    with pytest.raises(Exception, match="image_shape"):
        session.run(None, FEEDS | {"image_shape": numpy_helper.to_array(image_shape)})


def test_raise_keeps_the_constants_a_subgraph_still_reads():
    """Col2Im's block shape becomes an attribute, but an If branch also reads the Constant by
    name: it stays, and the model still runs."""
    model = _standard_model()
    branch = helper.make_graph([helper.make_node("Identity", ["block_shape"], ["branch"])],
                               "branch", [], [_value("branch", TensorProto.INT64, None)])
    model.graph.node.extend([
        helper.make_node("Constant", [], ["yes"], value=numpy_helper.from_array(np.array(True))),
        helper.make_node("If", ["yes"], ["block_again"], then_branch=branch,
                         else_branch=branch)])
    model.graph.output.append(_value("block_again", TensorProto.INT64, None))
    result = raise_model(model)
    assert "col2im" in result.raised
    assert "block_shape" in {o for n in result.model.graph.node for o in n.output}
    _assert_same(dml_onnx.InferenceSession(result.model).run(None, FEEDS), _plain(model))


def _unfold_chain_model(*, rows: np.ndarray | None = None, perm: tuple = (0, 1, 2, 4, 3, 5),
                        shape: tuple = (2, 3 * 6, -1), pad_read_twice: bool = False,
                        pad_inputs: tuple = (), read_in_subgraph: bool = False
                        ) -> onnx.ModelProto:
    """The chain torch's exporters write for F.unfold(image, (2, 3), dilation=(1, 2),
    padding=(1, 0), stride=(2, 1)) over image [2, 3, 12, 12]: taps x blocks index tensors.
    ``pad_inputs``: the Pad's constant value and axes (None: left out); ``read_in_subgraph``:
    an If branch also reads the padded image."""
    if rows is None:
        rows = np.arange(2)[:, None] * 1 + np.arange(7) * 2  # 12 + 2 pad rows, 7 blocks
    columns = np.arange(3)[:, None] * 2 + np.arange(8) * 1  # 12 columns, 8 blocks
    constants = {"pads": np.array([0, 0, 1, 0, 0, 0, 1, 0], np.int64), "rows": rows,
                 "columns": columns, "shape": np.array(shape, np.int64)}
    nodes = [helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
        np.asarray(value, np.int64))) for name, value in constants.items()]
    extra = [f"pad_input_{k}" if value is not None else "" for k, value in enumerate(pad_inputs)]
    nodes += [helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value))
              for name, value in zip(extra, pad_inputs) if value is not None]
    nodes += [
        helper.make_node("Pad", ["image", "pads", *extra], ["padded"], name="pad"),
        helper.make_node("Gather", ["padded", "rows"], ["by_rows"], axis=2),
        helper.make_node("Gather", ["by_rows", "columns"], ["blocks"], axis=4),
        helper.make_node("Transpose", ["blocks"], ["taps_first"], perm=list(perm)),
        helper.make_node("Reshape", ["taps_first", "shape"], ["unfolded"], name="unfold")]
    outputs = [_value("unfolded", TensorProto.FLOAT, None)]
    if pad_read_twice:
        nodes.append(helper.make_node("Identity", ["padded"], ["padded_too"]))
        outputs.append(_value("padded_too", TensorProto.FLOAT, None))
    if read_in_subgraph:
        branch = helper.make_graph([helper.make_node("Identity", ["padded"], ["branch"])],
                                   "branch", [], [_value("branch", TensorProto.FLOAT, None)])
        nodes += [helper.make_node("Constant", [], ["yes"],
                                   value=numpy_helper.from_array(np.array(True))),
                  helper.make_node("If", ["yes"], ["branched"], then_branch=branch,
                                   else_branch=branch)]
        outputs.append(_value("branched", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "unfold", [_value("image", TensorProto.FLOAT,
                                                        [2, 3, 12, 12])], outputs)
    return helper.make_model(graph, ir_version=dml_onnx.IR_VERSION,
                             opset_imports=[helper.make_opsetid("", 18)])


def _plain_image(model: onnx.ModelProto) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"image": FEEDS["image"]})


def test_raise_turns_the_exporters_unfold_chain_into_unfold():
    model = _unfold_chain_model()
    result = raise_model(model)
    assert result.raised == ["unfold"] and _op_types(result.model) == ["Unfold"]
    (node,) = result.model.graph.node
    assert {a.name: helper.get_attribute_value(a) for a in node.attribute} == {
        "window_sizes": [2, 3], "dilations": [1, 2], "strides": [2, 1],
        "start_padding": [1, 0], "end_padding": [1, 0]}
    got = dml_onnx.InferenceSession(result.model).run(None, {"image": FEEDS["image"]})
    assert got[0].shape == (2, 18, 56)
    np.testing.assert_array_equal(got[0], _plain_image(model)[0])


@pytest.mark.parametrize("variation", [
    {"shape": (2, 3 * 2, -1)},  # taps of one axis flattened with the blocks: not an unfold
    {"shape": (1, 3 * 6, -1)},  # the batch folded into the blocks
    {"perm": (0, 1, 2, 3, 4, 5)},
    {"rows": np.array([[0, 2, 4, 6, 8, 10, 13], [1, 3, 5, 7, 9, 11, 12]])},  # not a window
    {"pad_read_twice": True},
    {"read_in_subgraph": True},  # an If branch reads the padded image by name
    {"rows": np.arange(2)[:, None] + np.arange(3) * 2},  # only the first 3 of the 7 blocks
    {"pad_inputs": (np.array(0.5, np.float32),)},  # padding with 0.5, not 0
    {"pad_inputs": (None, np.array([0, 1, 2, 3], np.int64))},  # axes (could reorder pads)
])
def test_raise_leaves_a_gather_chain_that_is_not_exactly_an_unfold(variation):
    model = _unfold_chain_model(**variation)
    result = raise_model(model)
    assert result.raised == [] and "Unfold" not in _op_types(result.model)
    np.testing.assert_array_equal(_plain_image(result.model)[0], _plain_image(model)[0])


# ROIs under one pixel, empty, inverted, partly outside, and plain ones (spatial scale 0.5)
SMALL_ROIS = np.array([[3, 3, 3.8, 3.5], [5, 5, 5, 5], [9, 2, 4, 7], [2.2, 6, 2.2, 14],
                       [-3, -2, 4, 5], [0, 0, 22, 22], [10, 10, 10.4, 30], [7, 8, 1, 1]],
                      np.float32)


def _roi_align_model(**attributes: Any) -> onnx.ModelProto:
    node = helper.make_node("RoiAlign", ["image", "boxes", "box_batch"], ["aligned"],
                            name="align", output_height=3, output_width=2, spatial_scale=0.5,
                            **attributes)
    graph = helper.make_graph([node], "align", [
        _value("image", TensorProto.FLOAT, [2, 3, 12, 12]),
        _value("boxes", TensorProto.FLOAT, ["R", 4]),
        _value("box_batch", TensorProto.INT64, ["R"])],
        [_value("aligned", TensorProto.FLOAT, ["R", 3, 3, 2])])
    return helper.make_model(graph, ir_version=dml_onnx.IR_VERSION,
                             opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 1, 2])
def test_raise_converts_every_roi_align_mode_of_avg_exactly(transform, ratio):
    """output_half_pixel (sizes clamped to 1) and sampling_ratio 0 (no sample for an empty or
    inverted ROI) come with the standard nodes that do what RoiAlign1 does not, so the
    outputs stay onnxruntime's for ROIs under one pixel, empty and inverted ones too."""
    model = _roi_align_model(coordinate_transformation_mode=transform, sampling_ratio=ratio)
    result = raise_model(model)
    assert result.raised == ["align"] and result.kept == {}
    assert _op_types(result.model).count("RoiAlign1") == 1
    assert not unraised_roi_aligns(result.model)
    dml_onnx.register_schemas()
    onnx.checker.check_model(result.model, full_check=True)
    feeds = {"image": FEEDS["image"], "boxes": SMALL_ROIS,
             "box_batch": np.arange(len(SMALL_ROIS)) % 2}
    got = dml_onnx.InferenceSession(result.model).run(None, feeds)[0]
    plain = ort.InferenceSession(result.model.SerializeToString(),
                                 providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    _assert_same([plain], [got])  # the model's functions compute the same without the kernels
    # the oracle: onnxruntime's own RoiAlign. With sampling_ratio 0 and half_pixel it stops
    # ("Integer overflow") on a ROI inverted along one axis only (row 2), which by onnx's
    # definition takes no samples (ceil of a negative size): 0, like the empty and inverted
    # rows 1, 3 and 7.
    runs = [0, 1, 3, 4, 5, 6, 7] if ratio == 0 and transform == "half_pixel" else slice(None)
    rows = {"image": feeds["image"], "boxes": SMALL_ROIS[runs],
            "box_batch": feeds["box_batch"][runs]}
    native = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = native.run(None, rows)[0]
    _assert_same([got[runs]], [want])
    if ratio == 0 and transform == "half_pixel":
        assert not got[[1, 2, 3, 7]].any() and got[[0, 4, 5, 6]].all()


def test_raise_leaves_old_roi_align_and_other_element_types():
    old = _standard_model(opset=16)
    old.opset_import[0].version = 10  # RoiAlign-10 has no half_pixel mode
    # ... and opset 10 is below what the standard forms need, so raising refuses the model
    with pytest.raises(dml_onnx.NotRaisable, match="default opset >= 16"):
        raise_model(old)
    model = _standard_model()
    col2im = next(n for n in model.graph.node if n.op_type == "Col2Im")
    model.graph.node.insert(0, helper.make_node("Cast", ["columns"], ["columns_bool"],
                                                to=TensorProto.BOOL))
    model.graph.node.append(helper.make_node("Col2Im", ["columns_bool", *col2im.input[1:]],
                                             ["folded_bool"], name="bool_col2im"))
    model.graph.output.append(_value("folded_bool", TensorProto.BOOL, [1, 4, 5, 5]))
    result = raise_model(model)
    assert "element type BOOL" in result.kept["bool_col2im"]


# ----------------------------------------------------------------------------- lowering
def _dml_model() -> onnx.ModelProto:
    """Conv -> RoiAlign1 -> LpPooling, Conv -> RoiPooling, Unfold -> Fold: a dml_onnx model."""
    raised = raise_model(_standard_model(), functions=False).model
    unfold = dml_onnx.unfold("image", "patches", window_sizes=[3, 3], strides=[2, 2],
                             start_padding=[1, 0], name="unfold")
    fold = dml_onnx.fold("patches", "refolded", window_sizes=[3, 3], strides=[2, 2],
                         start_padding=[1, 0], output_size=[12, 12], name="fold")
    raised.graph.node.extend([unfold, fold])
    raised.graph.output.append(_value("refolded", TensorProto.FLOAT, [2, 3, 12, 12]))
    return raised


@pytest.mark.parametrize("native", [True, False])
def test_lower_gives_standard_ops_with_the_same_outputs(native):
    model = _dml_model()
    want = dml_onnx.InferenceSession(model).run(None, _feeds(model))
    lowered = dml_onnx.lower_model(model, native=native)
    assert all(n.domain in ("", "ai.onnx") for n in lowered.graph.node)
    assert [o.domain for o in lowered.opset_import] == [""]
    assert lowered.opset_import[0].version == model.opset_import[0].version
    onnx.checker.check_model(lowered, full_check=True)
    names = [o for n in lowered.graph.node for o in n.output]
    assert len(names) == len(set(names))
    natives = {"LpPool", "MaxRoiPool", "Col2Im"} & set(_op_types(lowered))
    assert natives == ({"LpPool", "MaxRoiPool", "Col2Im"} if native else set())
    assert bool(unraised_roi_aligns(lowered)) == native
    _assert_same(_plain(lowered), want)


def test_raising_a_lowered_model_gives_back_the_native_nodes():
    model = _dml_model()
    again = raise_model(dml_onnx.lower_model(model), functions=False).model
    # Unfold has no native op: its decomposition stays standard
    assert [t for t in _op_types(again) if t in dml_onnx.OPERATORS_BY_NAME] == [
        "RoiAlign1", "LpPooling", "RoiPooling", "Fold", "Fold"]


def test_lowering_needs_known_types_and_a_recent_opset():
    model = _dml_model()
    old = onnx.ModelProto()
    old.CopyFrom(model)
    old.opset_import[0].version = 13
    with pytest.raises(dml_onnx.NotEquivalent, match="default opset >= 16, the model imports 13"):
        dml_onnx.lower_model(old)
    untyped = onnx.ModelProto()
    untyped.CopyFrom(model)
    untyped.graph.input[0].type.tensor_type.elem_type = 0
    with pytest.raises(dml_onnx.NotEquivalent, match="element type of input 'features' is unknown"):
        dml_onnx.lower_model(untyped)


# ----------------------------------------------------------------------------- functions
def test_functions_make_a_dml_onnx_model_portable():
    model = dml_onnx.with_functions(_dml_model())
    overloads = [n.overload for n in model.graph.node if n.domain == dml_onnx.DOMAIN]
    assert all(overloads)
    # the two Fold nodes differ in their attributes: two functions; every node has its own
    assert sorted((f.name, f.overload) for f in model.functions) == sorted(
        (n.op_type, n.overload) for n in model.graph.node if n.domain == dml_onnx.DOMAIN)
    onnx.checker.check_model(model, full_check=True)
    want = dml_onnx.InferenceSession(model).run(None, _feeds(model))
    _assert_same(_plain(model), want)  # plain onnxruntime inlines the functions
    assert dml_onnx.with_functions(model).SerializeToString(deterministic=True) == \
        model.SerializeToString(deterministic=True)


def test_nodes_with_equal_forms_share_one_function():
    model = _dml_model()
    twin = onnx.NodeProto()
    twin.CopyFrom(next(n for n in model.graph.node if n.op_type == "Unfold"))
    twin.name, twin.output[0] = "unfold_twin", "patches_twin"
    model.graph.node.append(twin)
    model.graph.output.append(_value("patches_twin", TensorProto.FLOAT, [2, 27, 30]))
    with_functions = dml_onnx.with_functions(model)
    assert sum(f.name == "Unfold" for f in with_functions.functions) == 1
    outputs = _plain(with_functions)
    np.testing.assert_array_equal(
        outputs[-1], dml_onnx.InferenceSession(model).run(["patches_twin"], _feeds(model))[0])


# ----------------------------------------------------------------------------- CLI
def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dml_onnx", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


def test_cli_raise_then_lower(tmp_path):
    source, raised, lowered = (tmp_path / f"{n}.onnx" for n in ("source", "raised", "lowered"))
    onnx.save(_standard_model(roi_align={"mode": "max"}), source)
    result = _cli("raise", str(source), str(raised))
    assert result.returncode == 0, result.stderr
    assert "raised lp" in result.stdout and "kept align: mode 'max'" in result.stdout
    assert "3 raised, 1 kept" in result.stdout
    result = _cli("lower", str(raised), str(lowered), "--decompose")
    assert result.returncode == 0, result.stderr
    model = onnx.load(lowered)
    assert not {"LpPool", "MaxRoiPool", "Col2Im"} & set(_op_types(model))
    _assert_same(_plain(model), _plain(onnx.load(source)))


def test_cli_check_of_a_standard_model_lists_what_raise_would_convert(tmp_path):
    source = tmp_path / "standard.onnx"
    onnx.save(_standard_model(roi_align={"mode": "max"}), source)
    result = _cli("check", str(source))
    assert result.returncode == 0, result.stderr
    assert "0 problem(s)" in result.stdout
    assert "has no dml_onnx nodes; dml-onnx raise would convert 3 and keep 1" in result.stdout
    assert "would raise col2im" in result.stdout
    assert "would keep align: mode 'max'" in result.stdout
    onnx.save(_dml_model(), source)  # a dml_onnx model: nothing about raising
    result = _cli("check", str(source))
    assert result.returncode == 0 and "raise" not in result.stdout


def test_cli_reports_a_model_it_cannot_convert(tmp_path):
    source = tmp_path / "old.onnx"
    model = _dml_model()
    model.opset_import[0].version = 13
    onnx.save(model, source)
    result = _cli("lower", str(source), str(tmp_path / "out.onnx"))
    assert result.returncode == 1
    assert "dml-onnx lower: the standard forms need the default opset >= 16" in result.stderr


def test_generated_names_are_new_in_every_scope():
    """A branch of an If that defines a value named like one lowering or raising generates:
    the generated names avoid it (both results pass onnx's full check, whose single static
    assignment spans the scopes, and run in onnxruntime)."""
    from onnx import TensorProto, helper

    from dml_onnx.raising import raise_model

    def model_with(branch_value: str) -> onnx.ModelProto:
        unfold = dml_onnx.unfold("X", "Y", window_sizes=[2, 2], start_padding=[1, 1],
                                 end_padding=[1, 1], name="unfold")
        branch = helper.make_graph(
            [helper.make_node("Identity", ["X"], [branch_value]),
             helper.make_node("Neg", [branch_value], ["branch_out"])], "then", [],
            [helper.make_tensor_value_info("branch_out", TensorProto.FLOAT, [1, 2, 4, 4])])
        choose = helper.make_node("If", ["flag"], ["Z"], then_branch=branch, else_branch=branch)
        return dml_onnx.make_model(
            [unfold, choose],
            [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 2, 4, 4]),
             helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 8, 25]),
             helper.make_tensor_value_info("Z", TensorProto.FLOAT, [1, 2, 4, 4])])

    plain = dml_onnx.lower_model(model_with("unrelated"))
    generated = [o for n in plain.graph.node if n.op_type != "If" for o in n.output
                 if o.startswith("_dml_onnx")]
    assert generated
    model = model_with(generated[0])
    feeds = {"X": np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4),
             "flag": np.array(True)}
    want = dml_onnx.InferenceSession(model).run(None, feeds)
    lowered = dml_onnx.lower_model(model)
    onnx.checker.check_model(lowered, full_check=True)
    session = ort.InferenceSession(lowered.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for got, value in zip(session.run(None, feeds), want, strict=True):
        np.testing.assert_array_equal(got, value)
    # raising the lowered model again: its generated names avoid the branch's too
    branch_names = {o for n in lowered.graph.node if n.op_type == "If"
                    for a in n.attribute for b in [a.g] for m in b.node for o in m.output}
    raised = raise_model(lowered).model
    dml_onnx.register_schemas()
    onnx.checker.check_model(raised, full_check=True)
    top = {o for n in raised.graph.node for o in n.output}
    assert not top & branch_names


def test_model_functions_take_a_path_bytes_or_a_model_proto(tmp_path):
    """lower_model, raise_model (exported beside it, with its frozen report), with_functions
    and to_runtime_model read a model however it is given."""
    import dataclasses

    model = _dml_model()
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    for call in (dml_onnx.lower_model, dml_onnx.with_functions, dml_onnx.to_runtime_model):
        want = call(model).SerializeToString(deterministic=True)
        for given in (path, str(path), path.read_bytes()):
            assert call(given).SerializeToString(deterministic=True) == want, call
    lowered = dml_onnx.lower_model(model)
    onnx.save(lowered, path)
    raised = dml_onnx.raise_model(path)
    assert isinstance(raised, dml_onnx.Raised) and raised.raised
    assert raised == dml_onnx.raise_model(lowered.SerializeToString())
    with pytest.raises(dataclasses.FrozenInstanceError):
        raised.model = lowered
