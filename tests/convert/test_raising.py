"""Raising: standard nodes (MaxRoiPool, RoiAlign, LpPool, Col2Im, the exporters' unfold and
lp_pool chains) into dml_onnx nodes, exactly or not at all, on multi-node models."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dml_onnx
from dml_onnx.raising import raise_model
from tests._support.native import unraised_roi_aligns
from tests.convert._models import (
    FEEDS,
    assert_same,
    feeds_for,
    op_types,
    plain_outputs,
    standard_model,
    value_info,
)


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
    assert len(result.raised) == 1 and "RoiPooling" in op_types(result.model)
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
    model = standard_model()
    result = raise_model(model)
    assert result.raised == ["align", "lp", "pool", "col2im"] and result.kept == {}
    ops = op_types(result.model)
    assert [t for t in ops if t in {"Conv", *dml_onnx.OPERATORS_BY_NAME}] == [
        "Conv", "RoiAlign1", "LpPooling", "RoiPooling", "Fold"]
    assert not unraised_roi_aligns(result.model)
    # Col2Im's constant sizes became attributes: the Constant and the initializer are gone
    assert [t.name for t in result.model.graph.initializer] == ["w"]
    dml_onnx.register_schemas()
    onnx.checker.check_model(result.model, full_check=True)
    want = plain_outputs(model)
    assert_same(dml_onnx.InferenceSession(result.model).run(None, feeds_for(model)), want)
    # the new nodes carry their standard forms: plain onnxruntime still runs the model
    assert {f.name for f in result.model.functions} == {"RoiAlign1", "LpPooling", "RoiPooling",
                                                        "Fold"}
    assert_same(plain_outputs(result.model), want)


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
            model = standard_model()
            lp = next(n for n in model.graph.node if n.name == "lp")
            del lp.attribute[:]
            lp.attribute.extend([helper.make_attribute("kernel_shape", [2, 2]),
                                 helper.make_attribute("auto_pad", "SAME_UPPER")])
        else:
            model = standard_model(**variation)
    else:
        model = standard_model(**variation)
    result = raise_model(model)
    assert node in result.kept and reason in result.kept[node]
    assert node not in result.raised
    assert_same(dml_onnx.InferenceSession(result.model).run(None, feeds_for(model)),
                 plain_outputs(model))


def test_raise_keeps_a_col2im_of_dilation_zero():
    """Col2Im with a dilation of 0 adds every tap of that axis at one position; Fold of
    dilation 0 is DirectML's zeros, so the node stays."""
    node = helper.make_node("Col2Im", ["columns", "image_shape", "block_shape"], ["folded"],
                            name="col2im", dilations=[0, 1])
    sizes = [numpy_helper.from_array(np.array(v, np.int64), name)
             for name, v in (("image_shape", [3, 3]), ("block_shape", [2, 2]))]
    graph = helper.make_graph(
        [node], "fold", [value_info("columns", TensorProto.FLOAT, [1, 4, 6])],
        [value_info("folded", TensorProto.FLOAT, [1, 1, 3, 3])], initializer=sizes)
    model = helper.make_model(graph, ir_version=dml_onnx.IR_VERSION,
                              opset_imports=[helper.make_opsetid("", 18)])
    result = raise_model(model)
    assert result.raised == [] and "dilations [0, 1]" in result.kept["col2im"]


def test_raise_with_positive_rois_takes_adaptive_sampling():
    model = standard_model(roi_align={"sampling_ratio": 0})
    result = raise_model(model, positive_rois=True)
    assert "align" in result.raised
    aligned = next(n for n in result.model.graph.node if n.op_type == "RoiAlign1")
    attributes = {a.name: helper.get_attribute_value(a) for a in aligned.attribute}
    assert attributes["minimum_samples_per_output"] == 1
    assert attributes["maximum_samples_per_output"] == 4294967295
    assert_same(dml_onnx.InferenceSession(result.model).run(None, feeds_for(model)),
                 plain_outputs(model))


def test_raise_takes_col2im_sizes_given_as_overridable_graph_inputs():
    """Sizes as initializers also listed as graph inputs (defaults a caller may override):
    raised, and the input goes, so that feeding it fails instead of being ignored."""
    model = standard_model()
    image_shape = next(t for t in model.graph.initializer if t.name == "image_shape")
    model.graph.input.append(value_info("image_shape", TensorProto.INT64, [2]))
    result = raise_model(model)
    assert "col2im" in result.raised
    assert "image_shape" not in {i.name for i in result.model.graph.input} | {
        t.name for t in result.model.graph.initializer}
    session = dml_onnx.InferenceSession(result.model)
    assert_same(session.run(None, FEEDS), plain_outputs(model))
    with pytest.raises(Exception, match="image_shape"):
        session.run(None, FEEDS | {"image_shape": numpy_helper.to_array(image_shape)})


def test_raise_keeps_the_constants_a_subgraph_still_reads():
    """Col2Im's block shape becomes an attribute, but an If branch also reads the Constant by
    name: it stays, and the model still runs."""
    model = standard_model()
    branch = helper.make_graph([helper.make_node("Identity", ["block_shape"], ["branch"])],
                               "branch", [], [value_info("branch", TensorProto.INT64, None)])
    model.graph.node.extend([
        helper.make_node("Constant", [], ["yes"], value=numpy_helper.from_array(np.array(True))),
        helper.make_node("If", ["yes"], ["block_again"], then_branch=branch,
                         else_branch=branch)])
    model.graph.output.append(value_info("block_again", TensorProto.INT64, None))
    result = raise_model(model)
    assert "col2im" in result.raised
    assert "block_shape" in {o for n in result.model.graph.node for o in n.output}
    assert_same(dml_onnx.InferenceSession(result.model).run(None, FEEDS), plain_outputs(model))


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
    outputs = [value_info("unfolded", TensorProto.FLOAT, None)]
    if pad_read_twice:
        nodes.append(helper.make_node("Identity", ["padded"], ["padded_too"]))
        outputs.append(value_info("padded_too", TensorProto.FLOAT, None))
    if read_in_subgraph:
        branch = helper.make_graph([helper.make_node("Identity", ["padded"], ["branch"])],
                                   "branch", [], [value_info("branch", TensorProto.FLOAT, None)])
        nodes += [helper.make_node("Constant", [], ["yes"],
                                   value=numpy_helper.from_array(np.array(True))),
                  helper.make_node("If", ["yes"], ["branched"], then_branch=branch,
                                   else_branch=branch)]
        outputs.append(value_info("branched", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "unfold", [value_info("image", TensorProto.FLOAT,
                                                        [2, 3, 12, 12])], outputs)
    return helper.make_model(graph, ir_version=dml_onnx.IR_VERSION,
                             opset_imports=[helper.make_opsetid("", 18)])


def _plain_image(model: onnx.ModelProto) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"image": FEEDS["image"]})


def test_raise_turns_the_exporters_unfold_chain_into_unfold():
    model = _unfold_chain_model()
    result = raise_model(model)
    assert result.raised == ["unfold"] and op_types(result.model) == ["Unfold"]
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
    assert result.raised == [] and "Unfold" not in op_types(result.model)
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
        value_info("image", TensorProto.FLOAT, [2, 3, 12, 12]),
        value_info("boxes", TensorProto.FLOAT, ["R", 4]),
        value_info("box_batch", TensorProto.INT64, ["R"])],
        [value_info("aligned", TensorProto.FLOAT, ["R", 3, 3, 2])])
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
    assert op_types(result.model).count("RoiAlign1") == 1
    assert not unraised_roi_aligns(result.model)
    dml_onnx.register_schemas()
    onnx.checker.check_model(result.model, full_check=True)
    feeds = {"image": FEEDS["image"], "boxes": SMALL_ROIS,
             "box_batch": np.arange(len(SMALL_ROIS)) % 2}
    got = dml_onnx.InferenceSession(result.model).run(None, feeds)[0]
    plain = ort.InferenceSession(result.model.SerializeToString(),
                                 providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert_same([plain], [got])  # the model's functions compute the same without the kernels
    # the oracle: onnxruntime's own RoiAlign. With sampling_ratio 0 and half_pixel it stops
    # ("Integer overflow") on a ROI inverted along one axis only (row 2), which by onnx's
    # definition takes no samples (ceil of a negative size): 0, like the empty and inverted
    # rows 1, 3 and 7.
    runs = [0, 1, 3, 4, 5, 6, 7] if ratio == 0 and transform == "half_pixel" else slice(None)
    rows = {"image": feeds["image"], "boxes": SMALL_ROIS[runs],
            "box_batch": feeds["box_batch"][runs]}
    native = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = native.run(None, rows)[0]
    assert_same([got[runs]], [want])
    if ratio == 0 and transform == "half_pixel":
        assert not got[[1, 2, 3, 7]].any() and got[[0, 4, 5, 6]].all()


def test_raise_leaves_old_roi_align_and_other_element_types():
    old = standard_model(opset=16)
    old.opset_import[0].version = 10  # RoiAlign-10 has no half_pixel mode
    # ... and opset 10 is below what the standard forms need, so raising refuses the model
    with pytest.raises(dml_onnx.NotRaisable, match="default opset >= 16"):
        raise_model(old)
    model = standard_model()
    col2im = next(n for n in model.graph.node if n.op_type == "Col2Im")
    model.graph.node.insert(0, helper.make_node("Cast", ["columns"], ["columns_bool"],
                                                to=TensorProto.BOOL))
    model.graph.node.append(helper.make_node("Col2Im", ["columns_bool", *col2im.input[1:]],
                                             ["folded_bool"], name="bool_col2im"))
    model.graph.output.append(value_info("folded_bool", TensorProto.BOOL, [1, 4, 5, 5]))
    result = raise_model(model)
    assert "element type BOOL" in result.kept["bool_col2im"]
