"""dml_onnx.torch.export: torch models written as ONNX with dml_onnx nodes (torchvision's
roi_align and roi_pool, unfold, fold and LP pools, the dml_onnx.torch operators, whole
torchvision detectors), on both exporter paths and with dynamic shapes, computing what torch
computes; and what it refuses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional
from torchvision.ops import roi_align, roi_pool

import dml_onnx.torch as dt
from tests._support.native import unraised_roi_aligns
from tests.torch_extra._tensors import GENERATOR, _boxes


# ------------------------------------------------------------------------------ export
class _Head(torch.nn.Module):
    """torchvision's roi_align (aligned False with adaptive sampling, and True) and roi_pool,
    F.fold of F.unfold, and dml_onnx.torch operators."""

    def forward(self, image: torch.Tensor, boxes: torch.Tensor, rois: torch.Tensor,
                batch: torch.Tensor) -> tuple[torch.Tensor, ...]:
        loose = roi_align(image, boxes, [4, 4], spatial_scale=0.5, sampling_ratio=0,
                          aligned=False)
        aligned = roi_align(image, boxes, [3, 3], spatial_scale=0.5, sampling_ratio=2,
                            aligned=True)
        pooled = roi_pool(image, boxes, [2, 2], spatial_scale=1.0)
        folded = functional.fold(functional.unfold(image, 3, padding=1), (8, 8), 3, padding=1)
        ours = dt.lp_pooling(dt.roi_align1(image, rois, batch, [4, 4],
                                           minimum_samples_per_output=2,
                                           maximum_samples_per_output=2), [2, 2], p=2)
        return loose, aligned, pooled, folded, ours


def _head_inputs() -> tuple[torch.Tensor, ...]:
    # boxes: plain, whole-image, and under one pixel (aligned=False widens it to one pixel);
    # whole-pixel corners for roi_pool, whose floating-point bin edges can differ from the
    # specification's integer ones for fractional corners
    boxes = torch.tensor([[0, 1.0, 1, 6, 5], [1, 0, 0, 7, 7], [1, 3, 3, 3, 3]])
    rois = _boxes(3, 8).float()
    return torch.randn(2, 3, 8, 8, generator=GENERATOR), boxes, rois, torch.tensor([0, 1, 1])


@pytest.mark.parametrize("dynamo", [False, True])
def test_export_writes_dml_onnx_nodes_that_compute_what_torch_computes(tmp_path, dynamo):
    import onnx
    import onnxruntime as ort

    import dml_onnx
    inputs = _head_inputs()
    path = tmp_path / "head.onnx"
    model = dt.export(_Head(), inputs, path, dynamo=dynamo)
    assert onnx.load(path) == model
    op_types = [n.op_type for n in model.graph.node]
    assert op_types.count("RoiAlign1") == 3
    assert {"RoiPooling", "Fold", "LpPooling"} <= set(op_types)
    assert not {"MaxRoiPool", "Col2Im"} & set(op_types) and not unraised_roi_aligns(model)
    assert dml_onnx.model_problems(model) == []
    dml_onnx.register_schemas()
    onnx.checker.check_model(model, full_check=True)
    want = [t.numpy() for t in _Head()(*inputs)]
    feeds = {i.name: t.numpy() for i, t in zip(model.graph.input, inputs)}
    for got in (dml_onnx.InferenceSession(model).run(None, feeds),
                ort.InferenceSession(model.SerializeToString(),  # through the functions
                                     providers=["CPUExecutionProvider"]).run(None, feeds)):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


class _PoolWithPositions(torch.nn.Module):
    def forward(self, image: torch.Tensor, boxes: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.ops.torchvision.roi_pool(image, boxes, 1.0, 2, 2)


def test_export_refuses_roi_pools_bin_positions():
    """torchvision's roi_pool operator also returns where each bin's maximum is (for its
    backward); ONNX has no form of it, so a model that reads it is refused, not mis-exported."""
    image, boxes = _head_inputs()[:2]
    with pytest.raises(ValueError, match="second output of torch.ops.torchvision.roi_pool"):
        dt.export(_PoolWithPositions(), (image, boxes), dynamo=True)


class _Align(torch.nn.Module):
    def forward(self, image: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        return roi_align(image, boxes, [2, 2], aligned=True)


def test_export_needs_an_opset_with_the_standard_forms():
    import dml_onnx
    image, boxes, _, _ = _head_inputs()
    with pytest.raises(dml_onnx.NotRaisable, match="default opset >= 16"):
        dt.export(_Align(), (image, boxes), opset_version=15)  # RoiAlign-10: no half_pixel mode
    # adaptive sampling: a RoiAlign1, then a Where that zeroes empty and inverted boxes (and
    # the regions with a sample on an image edge from RoiAlign itself, by ScatterND)
    model = dt.export(_Align(), (image, boxes), opset_version=16)
    op_types = [n.op_type for n in model.graph.node]
    with pytest.warns(DeprecationWarning, match=r"export\(opset=\.\.\.\) is deprecated.*"
                                                r"use opset_version=") as caught:
        earlier_name = dt.export(_Align(), (image, boxes), opset=16)
    assert caught[0].filename == __file__  # it points at the caller
    assert [n.op_type for n in earlier_name.graph.node] == op_types
    assert earlier_name.opset_import == model.opset_import
    assert not unraised_roi_aligns(model) and "RoiAlign1" in op_types
    assert "Where" in op_types and op_types[-1] == "ScatterND"


def _distinct_scores(model: torch.nn.Module) -> torch.nn.Module:
    """Random weights give nearly tied class scores; spread them so that the detections'
    order does not hang on rounding."""
    predictor = model.roi_heads.box_predictor
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in (predictor.cls_score, predictor.bbox_pred):
            layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator) * 0.01)
            layer.bias.copy_(torch.randn(layer.bias.shape, generator=generator) * 0.5)
    return model.eval()


@pytest.mark.parametrize(("builder", "size"), [
    ("fasterrcnn_mobilenet_v3_large_320_fpn", (3, 160, 200)),
    ("maskrcnn_resnet50_fpn", (3, 128, 160))])
def test_exported_torchvision_detector_detects_what_torch_detects(builder, size):
    """Every RoiAlign of MultiScaleRoIAlign (aligned=False, sampling_ratio 2) and of the mask
    head is raised; boxes, labels, scores (and masks) equal torch eager's."""
    import torchvision

    import dml_onnx
    torch.manual_seed(0)
    model = _distinct_scores(getattr(torchvision.models.detection, builder)(
        weights=None, weights_backbone=None, num_classes=5, box_score_thresh=0.0,
        min_size=size[1], max_size=size[2], box_detections_per_img=20))
    image = torch.rand(*size, generator=torch.Generator().manual_seed(2))
    exported = dt.export(model, ([image],))
    op_types = [n.op_type for n in exported.graph.node]
    assert not unraised_roi_aligns(exported) and op_types.count("RoiAlign1") >= 1
    feeds = {exported.graph.input[0].name: image.numpy()}
    got = dml_onnx.InferenceSession(exported).run(None, feeds)
    # dml-onnx raise on the file torch.onnx.export writes: every RoiAlign raised, and the
    # detections exactly those of plain onnxruntime on that file
    import onnx
    import onnxruntime as ort

    from benchmarks.models import onnx_bytes
    from dml_onnx.raising import raise_model
    from dml_onnx.runtime.plan import HostNode
    stock_file = onnx_bytes(model, image)
    stock = onnx.load_from_string(stock_file)
    raised = raise_model(stock)
    assert raised.kept == {} and len(raised.raised) == op_types.count("RoiAlign1")
    plain = ort.InferenceSession(stock_file, providers=["CPUExecutionProvider"])
    session = dml_onnx.InferenceSession(raised.model)
    assert session._split is not None  # torchvision's merge of the levels runs on the host
    assert {"ConstantOfShape", "Expand", "ScatterElements"} <= {
        step.node.op_type for step in session._split.steps if isinstance(step, HostNode)}
    for g, w in zip(session.run(None, feeds), plain.run(None, feeds), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4)
    with torch.no_grad():
        want = model([image])[0]
    names = ["boxes", "labels", "scores", "masks"][:len(got)]
    assert set(names) == set(want)
    unmatched = list(range(len(want["scores"])))
    assert len(got[0]) == len(unmatched) > 0
    for i in range(len(got[0])):  # each detection pairs with one of torch's
        match = next(j for j in unmatched
                     if got[1][i] == want["labels"][j]
                     and abs(got[2][i] - want["scores"][j]) < 1e-4
                     and np.abs(got[0][i] - want["boxes"][j].numpy()).max() < 1e-2)
        unmatched.remove(match)
        if "masks" in want:
            np.testing.assert_allclose(got[3][i], want["masks"][match].numpy(), atol=1e-2)


class _Pools(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.even = torch.nn.LPPool2d(2, 3, stride=2)
        self.odd = torch.nn.LPPool2d(3, 2)

    def forward(self, image: torch.Tensor, line: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (self.even(image), self.odd(image), functional.lp_pool1d(line, 4, 2),
                functional.unfold(image, (2, 3), dilation=(1, 2), padding=(1, 0),
                                  stride=(2, 1)))


@pytest.mark.parametrize("dynamo", [False, True])
def test_export_writes_unfold_and_even_lp_pools_as_dml_onnx_nodes(dynamo):
    import dml_onnx
    image, line = torch.randn(2, 3, 9, 8, generator=GENERATOR), torch.randn(2, 3, 10)
    lp_pool2d = functional.lp_pool2d
    with pytest.warns(UserWarning, match=r"lp_pool2d stays as torch writes it: norm_type 3"):
        model = dt.export(_Pools(), (image, line), dynamo=dynamo)
    assert functional.lp_pool2d is lp_pool2d  # torch's own again after the export
    op_types = [n.op_type for n in model.graph.node]
    assert op_types.count("LpPooling") == 2 and op_types.count("Unfold") == 1
    assert "Pow" in op_types  # the odd p, as torch decomposes it
    got = dml_onnx.InferenceSession(model).run(None, {
        model.graph.input[0].name: image.numpy(), model.graph.input[1].name: line.numpy()})
    for g, w in zip(got, _Pools()(image, line), strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)


class _Aligned(torch.nn.Module):
    """What both exporter paths take: torchvision's roi_align, F.fold, dml_onnx.torch ops."""

    def forward(self, image: torch.Tensor, boxes: torch.Tensor, rois: torch.Tensor,
                batch: torch.Tensor) -> tuple[torch.Tensor, ...]:
        loose = roi_align(image, boxes, [4, 4], spatial_scale=0.5, sampling_ratio=0,
                          aligned=False)
        folded = functional.fold(functional.unfold(image, 3, padding=1), (8, 8), 3, padding=1)
        ours = dt.roi_align1(image, rois, batch, [3, 3], minimum_samples_per_output=2,
                             maximum_samples_per_output=2)
        return loose, folded, ours


@pytest.mark.parametrize("dynamo", [False, True])
def test_export_keeps_dynamic_shapes_on_both_exporter_paths(dynamo):
    import dml_onnx
    image, boxes, rois, batch = _head_inputs()
    count = torch.export.Dim("count", min=1)
    regions = torch.export.Dim("regions", min=1)
    model = dt.export(_Aligned(), (image, boxes, rois, batch), dynamo=dynamo,
                      dynamic_shapes={"image": None, "boxes": {0: count},
                                      "rois": {0: regions}, "batch": {0: regions}})
    op_types = [n.op_type for n in model.graph.node]
    assert op_types.count("RoiAlign1") == 2 and "Fold" in op_types
    assert not {"Col2Im", "Im2Col"} & set(op_types) and not unraised_roi_aligns(model)
    # other region counts than the example's
    boxes, rois, batch = boxes[:2], _boxes(5, 8).float(), torch.tensor([0, 1, 0, 0, 1])
    got = dml_onnx.InferenceSession(model).run(None, {
        i.name: t.numpy() for i, t in zip(model.graph.input, (image, boxes, rois, batch))})
    for g, w in zip(got, _Aligned()(image, boxes, rois, batch), strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5)


def _stock_export(module: torch.nn.Module, image: torch.Tensor, dynamo: bool) -> object:
    """``module`` on ``image`` through torch's own exporter (no dml_onnx symbolics), as an
    ``onnx.ModelProto``."""
    import io
    import warnings

    import onnx
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            return torch.onnx.export(module, (image,), dynamo=True, opset_version=18,
                                     verbose=False).model_proto
        buffer = io.BytesIO()
        torch.onnx.export(module, (image,), buffer, dynamo=False, opset_version=18)
        return onnx.load_from_string(buffer.getvalue())


class _TorchPools(torch.nn.Module):
    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (functional.lp_pool2d(image, 2, 3, stride=2),
                functional.lp_pool1d(image[:, :, 0], 4, 2),
                functional.lp_pool2d(image, 3, 2))


@pytest.mark.parametrize("dynamo", [False, True])
def test_raise_recognises_the_lp_pools_torch_exporters_decompose(dynamo):
    """torch.onnx.export writes F.lp_pool*d as Pow, AveragePool, Sign, Abs, Relu, Mul, Mul,
    Pow; raise turns the even-p ones into LpPooling and says why it keeps p = 3."""
    import dml_onnx
    from dml_onnx.raising import raise_model
    image = torch.randn(2, 3, 9, 8, generator=GENERATOR)
    result = raise_model(_stock_export(_TorchPools(), image, dynamo))
    assert len(result.raised) == 2 and len(result.kept) == 1
    assert "p 3: it sums x^p, LpPooling |x|^p" in next(iter(result.kept.values()))
    op_types = [n.op_type for n in result.model.graph.node]
    assert op_types.count("LpPooling") == 2 and op_types.count("AveragePool") == 1
    got = dml_onnx.InferenceSession(result.model).run(None, {
        result.model.graph.input[0].name: image.numpy()})
    for g, w in zip(got, _TorchPools()(image), strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)


class _TorchUnfolds(torch.nn.Module):
    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (functional.unfold(image, (2, 3), dilation=(1, 2), padding=(1, 0), stride=(2, 1)),
                functional.unfold(image, 3, padding=1))


@pytest.mark.parametrize("dynamo", [False, True])
def test_raise_recognises_the_unfolds_torch_exporters_decompose(dynamo):
    """torch.onnx.export writes F.unfold as Pad, Gather, Gather, Transpose, Reshape (index
    tensors as constants, or computed from the input's size); raise makes it Unfold."""
    import dml_onnx
    from dml_onnx.raising import raise_model
    image = torch.randn(2, 3, 9, 8, generator=GENERATOR)
    result = raise_model(_stock_export(_TorchUnfolds(), image, dynamo))
    assert len(result.raised) == 2 and result.kept == {}
    op_types = [n.op_type for n in result.model.graph.node]
    assert op_types.count("Unfold") == 2 and not {"Pad", "Transpose"} & set(op_types)
    got = dml_onnx.InferenceSession(result.model).run(None, {
        result.model.graph.input[0].name: image.numpy()})
    for g, w in zip(got, _TorchUnfolds()(image), strict=True):
        np.testing.assert_array_equal(g, w.numpy())


class _TorchWindows(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = torch.nn.LPPool2d(2, 3, stride=1)

    def forward(self, x: torch.Tensor, blocks: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (self.pool(x), functional.unfold(x, 3, padding=1),
                functional.fold(blocks, (6, 6), 3, padding=1))


def test_export_with_dynamo_and_dynamic_spatial_dims_writes_dml_onnx_nodes():
    import dml_onnx
    height, width = torch.export.Dim("height", min=4, max=64), \
        torch.export.Dim("width", min=4, max=64)
    blocks = torch.randn(1, 18, 36, generator=GENERATOR)
    model = dt.export(_TorchWindows(), (torch.randn(1, 2, 6, 6, generator=GENERATOR), blocks),
                      dynamo=True, dynamic_shapes={"x": {2: height, 3: width}, "blocks": None})
    assert sorted(n.op_type for n in model.graph.node if n.domain == "dml_onnx") == \
        ["Fold", "LpPooling", "Unfold"]
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == [1, 2, "height", "width"]
    session = dml_onnx.InferenceSession(model)
    for size in [(6, 6), (9, 5)]:
        x = torch.randn(1, 2, *size, generator=GENERATOR)
        got = session.run(None, {model.graph.input[0].name: x.numpy(),
                                 model.graph.input[1].name: blocks.numpy()})
        for g, w in zip(got, _TorchWindows()(x, blocks), strict=True):
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5)
