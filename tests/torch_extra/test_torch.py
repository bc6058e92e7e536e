"""dml_onnx.torch (the ``torch`` extra): every operator as a torch custom operator, equal to the
kernels, differentiable (checked by finite differences in float64), and usable under
``torch.compile`` and ``torch.export``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck
from torch.nn import functional
from torchvision.ops import roi_align, roi_pool

import dml_onnx.torch as dt
from dml_onnx import calls
from dml_onnx.ops import OPERATORS
from dml_onnx.torch._ops import _EXACT_ROI_GRADIENT, OPS, arguments
from tests._support.native import unraised_roi_aligns

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = torch.Generator().manual_seed(7)


def _random(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64, generator=GENERATOR)


def _boxes(count: int, size: float) -> torch.Tensor:
    """Random corners (some regions inverted, some partly outside): sample positions land on
    whole pixels with probability 0, where the bilinear map has kinks."""
    return torch.rand(count, 4, dtype=torch.float64, generator=GENERATOR) * (size + 2) - 1


EXAMPLES = [pytest.param(d, e, id=f"{d.name}-{e.name}")
            for d in OPERATORS for e in d.examples() if not e.error and all(e.outputs)]


@pytest.mark.parametrize(("definition", "example"), EXAMPLES)
def test_torch_operator_returns_what_the_kernel_returns(definition, example):
    want = calls.run_kernel(definition, list(example.inputs), {
        a.name: example.attributes.get(a.name, a.kernel_default) for a in definition.attributes},
        "torch", list(example.outputs))
    tensors = [None if a is None else torch.from_numpy(np.ascontiguousarray(a))
               for a in example.inputs]
    values = [example.attributes.get(a.name, a.kernel_default) for a in definition.attributes]
    got = OPS[definition.name](*tensors, *[list(v) if isinstance(v, (list, tuple)) else v
                                           for v in values])
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want):
        assert g.dtype == torch.from_numpy(w).dtype
        np.testing.assert_array_equal(g.numpy(), w)


def test_public_functions_fill_the_specification_defaults_and_name_bad_attributes():
    x = _random(1, 2, 6, 6)
    assert dt.unfold(x, [3, 3]).shape == (1, 18, 16)
    assert dt.fold(dt.unfold(x, [3, 3]), [3, 3], [6, 6]).shape == (1, 2, 6, 6)
    assert dt.lp_pooling(x, [2, 2], strides=[2, 2]).shape == (1, 2, 3, 3)
    assert dt.roi_align1(x, _boxes(3, 6), torch.zeros(3, dtype=torch.int64), [2, 2]).shape == \
        (3, 2, 2, 2)
    with pytest.raises(TypeError, match="LpPooling: unknown attribute 'stride'"):
        dt.lp_pooling(x, [2, 2], stride=[2, 2])
    with pytest.raises(ValueError, match="LpPooling 'torch.ops.dml_onnx.LpPooling': p 0"):
        dt.lp_pooling(x, [2, 2], p=0)


@pytest.mark.parametrize("reduction", ["average", "max"])
@pytest.mark.parametrize("interpolation", ["linear", "nearest_neighbor"])
@pytest.mark.parametrize("samples", [(2, 2), (1, 4)])
def test_roi_align1_gradients_in_x_and_the_roi_corners(reduction, interpolation, samples):
    x = _random(2, 3, 7, 8).requires_grad_()
    rois = _boxes(5, 7).requires_grad_()
    batch = torch.tensor([0, 1, 1, 0, 1])

    def align(image: torch.Tensor, corners: torch.Tensor) -> torch.Tensor:
        # sample counts change with the ROI size only between min and max: hold them fixed
        count = samples[0] if samples[0] == samples[1] else 2
        return dt.roi_align1(image, corners, batch, [2, 3], reduction_function=reduction,
                             interpolation_mode=interpolation, spatial_scale_x=0.9,
                             spatial_scale_y=1.1, minimum_samples_per_output=count,
                             maximum_samples_per_output=count)
    assert gradcheck(align, (x, rois))


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pooling_gradient(p):
    x = _random(2, 2, 5, 6).requires_grad_()
    assert gradcheck(lambda t: dt.lp_pooling(t, [2, 3], strides=[1, 2], dilations=[2, 1],
                                             start_padding=[1, 0], end_padding=[0, 1], p=p),
                     (x,))


def test_lp_pooling_gradient_is_zero_where_a_window_is_all_zero():
    x = torch.zeros(1, 1, 3, 3, dtype=torch.float64, requires_grad=True)
    dt.lp_pooling(x, [2, 2]).sum().backward()
    assert not x.grad.any()


def test_unfold_and_fold_gradients_are_each_other():
    x = _random(2, 2, 5, 6).requires_grad_()
    window = {"strides": [2, 1], "dilations": [1, 2], "start_padding": [1, 2],
              "end_padding": [0, 1]}
    assert gradcheck(lambda t: dt.unfold(t, [2, 3], **window), (x,))
    columns = dt.unfold(x, [2, 3], **window).detach().requires_grad_()
    assert gradcheck(lambda t: dt.fold(t, [2, 3], [5, 6], **window), (columns,))


def test_roi_pooling_gradient_goes_to_each_bin_maximum():
    x = _random(2, 3, 7, 8).requires_grad_()
    rois = torch.tensor([[0, 0.2, 0.4, 5.1, 6.3], [1, 1, 2, 7, 4], [1, 6, 6, 2, 2],
                         [0, 3, 3, 3, 3]], dtype=torch.float64)
    assert gradcheck(lambda t: dt.roi_pooling(t, rois, [2, 3], 0.9), (x,))


def test_compile_and_export_take_the_operators():
    """The fake implementations give shapes, and autograd runs through torch.compile."""
    class Head(torch.nn.Module):
        def forward(self, image: torch.Tensor, rois: torch.Tensor,
                    batch: torch.Tensor) -> torch.Tensor:
            aligned = dt.roi_align1(image, rois, batch, [4, 4], minimum_samples_per_output=2,
                                    maximum_samples_per_output=2)
            pooled = dt.lp_pooling(aligned, [2, 2], p=2)
            return dt.fold(dt.unfold(pooled, [2, 2]), [2, 2], [3, 3])

    image, rois, batch = _random(2, 3, 9, 9).requires_grad_(), _boxes(4, 9), \
        torch.tensor([0, 1, 0, 1])
    eager = Head()(image, rois, batch)
    compiled = torch.compile(Head(), backend="aot_eager", fullgraph=True)(image, rois, batch)
    torch.testing.assert_close(compiled, eager)
    (grad,) = torch.autograd.grad(compiled.sum(), image)
    (want,) = torch.autograd.grad(eager.sum(), image)
    torch.testing.assert_close(grad, want)
    exported = torch.export.export(Head(), (image.detach(), rois, batch))
    targets = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    assert {"dml_onnx.RoiAlign1.default", "dml_onnx.LpPooling.default",
            "dml_onnx.Unfold.default", "dml_onnx.Fold.default"} <= targets
    torch.testing.assert_close(exported.module()(image.detach(), rois, batch), eager.detach())


def test_without_torch_the_import_names_the_extra_and_the_rest_runs(python_child):
    done = python_child("import sys; sys.modules['torch'] = None\n"
                   "try:\n    import dml_onnx.torch\nexcept ImportError as e:\n    print(e)")
    assert "pip install 'dml-onnx[torch]'" in done.stdout, done.stderr
    done = python_child("import sys; sys.modules['torch'] = None\n"
                   "import numpy as np, dml_onnx, dml_onnx.builders, dml_onnx.conformance\n"
                   "from dml_onnx.ops import OPERATORS_BY_NAME\n"
                   "model = dml_onnx.builders.single_node_model(\n"
                   "    OPERATORS_BY_NAME['Unfold'], (np.ones((1, 1, 3, 3), np.float32),),\n"
                   "    {'window_sizes': [2, 2]}, (True,))\n"
                   "print(dml_onnx.InferenceSession(model).run(None, {'X': np.ones((1, 1, 3, 3),"
                   " np.float32)})[0].shape)")
    assert done.stdout.strip() == "(1, 4, 4)", done.stderr


def test_only_dml_onnx_torch_imports_torch():
    import ast
    for path in [*(ROOT / "dml_onnx").rglob("*.py"), *(ROOT / "custom_ops").rglob("*.py")]:
        if "torch" in path.relative_to(ROOT).parts[1:2] or path.parent.name == "torch":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] in ("torch", "torchvision") for n in names), path


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
    assert dml_onnx.check_model(model) == []
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
    earlier_name = dt.export(_Align(), (image, boxes), opset=16)
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
    stock_file = onnx_bytes(model, image)
    stock = onnx.load_from_string(stock_file)
    raised = raise_model(stock)
    assert raised.kept == {} and len(raised.raised) == op_types.count("RoiAlign1")
    plain = ort.InferenceSession(stock_file, providers=["CPUExecutionProvider"])
    for g, w in zip(dml_onnx.InferenceSession(raised.model).run(None, feeds),
                    plain.run(None, feeds), strict=True):
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


# ------------------------------------------------------------------------------ opcheck, dynamic
def _samples() -> dict[str, list[tuple[tuple, dict]]]:
    """Several inputs per operator (float64; X padded, strided, dilated, both reductions)."""
    image, rois, batch = _random(2, 3, 9, 9), _boxes(4, 9), torch.tensor([0, 1, 0, 1])
    window = {"strides": [2, 1], "dilations": [1, 2], "start_padding": [1, 0],
              "end_padding": [0, 1]}
    return {
        "LpPooling": [((image,), {"window_size": [3, 3]}),
                      ((_random(1, 2, 7, 8),), {"window_size": [2, 3], **window, "p": 3})],
        "Unfold": [((image,), {"window_sizes": [3, 3]}),
                   ((_random(1, 2, 7, 8),), {"window_sizes": [2, 3], **window})],
        "Fold": [((_random(2, 27, 49),), {"window_sizes": [3, 3], "output_size": [9, 9]}),
                 ((_random(1, 12, 20),), {"window_sizes": [2, 3], "output_size": [7, 8],
                                          **window})],
        "RoiAlign1": [((image, rois, batch), {"output_size": [3, 3]}),
                      ((image, rois, batch), {"output_size": [2, 3], "reduction_function": "max",
                                              "interpolation_mode": "nearest_neighbor"})],
        "RoiAlignGrad": [((image, _random(4, 3, 3, 3), rois, batch), {}),
                         ((image, _random(4, 3, 2, 2), rois, batch),
                          {"minimum_samples_per_output": 2, "maximum_samples_per_output": 2,
                           "align_regions_to_corners": 1})],
        "RoiPooling": [((image, torch.cat([batch[:, None].double(), rois * 2], 1)),
                        {"pooled_size": [3, 3]}),
                       ((image, torch.cat([batch[:, None].double(), rois], 1)),
                        {"pooled_size": [2, 1], "spatial_scale": 0.5})],
    }


OPCHECK = [pytest.param(op, name, tensors, attributes, id=f"{label}-{k}")
           for name, samples in _samples().items()
           for op, label in [(OPS[name], name)] + ([(_EXACT_ROI_GRADIENT, "RoiAlignGradExact")]
                                                   if name == "RoiAlignGrad" else [])
           for k, (tensors, attributes) in enumerate(samples)]


@pytest.mark.parametrize(("op", "name", "tensors", "attributes"), OPCHECK)
def test_opcheck_passes_every_default_check(op, name, tensors, attributes):
    """Schema, autograd registration, fake tensors and AOT dispatch with dynamic shapes."""
    given = [t.clone().requires_grad_() if t.is_floating_point() else t for t in tensors]
    results = torch.library.opcheck(op, arguments(name, given, attributes))
    assert set(results.values()) == {"SUCCESS"}, results


def test_opcheck_passes_on_roi_poolings_bin_positions():
    from dml_onnx.torch._ops import _roi_pooling_argmax
    for (image, rows), attributes in _samples()["RoiPooling"]:
        results = torch.library.opcheck(_roi_pooling_argmax, (
            image, rows, attributes["pooled_size"], attributes.get("spatial_scale", 1.0)))
        assert set(results.values()) == {"SUCCESS"}, results


class _Windows(torch.nn.Module):
    def forward(self, x: torch.Tensor, blocks: torch.Tensor) -> tuple[torch.Tensor, ...]:
        pooled = dt.lp_pooling(x, [3, 3], start_padding=[1, 1], end_padding=[1, 1], p=2)
        return dt.unfold(pooled, [2, 2], strides=[2, 1]), dt.fold(blocks, [3, 3], [6, 6])


def test_every_operator_takes_symbolic_sizes_in_compile_and_export():
    """A model compiled with dynamic shapes, or exported with dynamic spatial dims, runs on
    other image sizes than its example (the fake implementations compute symbolically)."""
    compiled = torch.compile(_Windows(), dynamic=True, fullgraph=True, backend="aot_eager")
    height, width = torch.export.Dim("height", min=6, max=64), \
        torch.export.Dim("width", min=6, max=64)
    batch = torch.export.Dim("batch", min=2, max=8)
    exported = torch.export.export(
        _Windows(), (_random(1, 2, 9, 10), _random(2, 18, 16)),
        dynamic_shapes={"x": {2: height, 3: width}, "blocks": {0: batch}}).module()
    for size, count in [((9, 10), 2), ((7, 12), 3), ((16, 6), 5)]:
        x, blocks = _random(1, 2, *size), _random(count, 18, 16)
        want = _Windows()(x, blocks)
        torch.testing.assert_close(compiled(x, blocks), want)
        torch.testing.assert_close(exported(x, blocks), want)
    compiled = torch.compile(_Regions(), dynamic=True, fullgraph=True, backend="aot_eager")
    regions = torch.export.Dim("regions", min=2, max=64)
    exported = torch.export.export(
        _Regions(), (_random(2, 3, 9, 10), _boxes(4, 9), torch.tensor([0, 1, 0, 1])),
        dynamic_shapes={"x": {2: height, 3: width}, "rois": {0: regions},
                        "batch": {0: regions}}).module()
    for count, size in [(4, (9, 10)), (3, (11, 7)), (6, (8, 16))]:
        inputs = (_random(2, 3, *size), _boxes(count, 9), torch.tensor([0, 1] * 3)[:count])
        want = _Regions()(*inputs)
        torch.testing.assert_close(compiled(*inputs), want)
        torch.testing.assert_close(exported(*inputs), want)


class _Regions(torch.nn.Module):
    """RoiAlign1, RoiAlignGrad and RoiPooling: outputs sized by the region count."""

    def forward(self, x: torch.Tensor, rois: torch.Tensor,
                batch: torch.Tensor) -> tuple[torch.Tensor, ...]:
        aligned = dt.roi_align1(x, rois, batch, [2, 2])
        grads = OPS["RoiAlignGrad"](*arguments("RoiAlignGrad", (x, aligned, rois, batch), {}))
        rows = torch.cat([batch[:, None].to(x.dtype), rois], 1)
        return aligned, *grads, dt.roi_pooling(x, rows, [2, 3])


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


def test_roi_align_grad_needs_x_in_torch():
    """The torch op returns both outputs, and drois reads X: the schema says X is required,
    and None gets the operator's error naming X."""
    schema = str(torch.ops.dml_onnx.RoiAlignGrad.default._schema)
    assert "Tensor X," in schema and "Tensor? X" not in schema
    with pytest.raises(ValueError, match="RoiAlignGrad .*: X None is required"):
        OPS["RoiAlignGrad"](*arguments("RoiAlignGrad", [
            None, _random(1, 1, 2, 2), _boxes(1, 4), torch.tensor([0])],
            {"input_shape": [1, 1, 4, 4]}))


@pytest.mark.parametrize("exact", [False, True])
def test_roi_align_grad_is_differentiable_in_dy_and_the_corners(exact):
    """dX is linear in dY with RoiAlign1 as its derivative, and its derivative in the corners
    is the exact ROI gradient with the direction as the image: checked by finite
    differences; max has no second derivative and says so."""
    op = _EXACT_ROI_GRADIENT if exact else OPS["RoiAlignGrad"]
    image, batch = _random(2, 3, 7, 8), torch.tensor([0, 1, 1])
    dY, rois = _random(3, 3, 2, 2).requires_grad_(), _boxes(3, 8).requires_grad_()

    def dX(attributes: dict, dY: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        return op(*arguments("RoiAlignGrad", (image, dY, rois, batch), attributes))[0]

    for attributes in ({}, {"minimum_samples_per_output": 2, "maximum_samples_per_output": 2},
                       {"interpolation_mode": "nearest_neighbor", "align_regions_to_corners": 1}):
        assert gradcheck(lambda d, r, a=attributes: dX(a, d, r), (dY, rois))
    with pytest.raises(NotImplementedError, match="max"):
        dX({"reduction_function": "max"}, dY, rois).sum().backward()
