"""dml_onnx.torch's torchvision drop-ins (roi_align, roi_pool, RoIAlign, RoIPool,
MultiScaleRoIAlign): torchvision's signatures, defaults, box formats and errors, DirectML's
numerics. What torchvision's own tests check for these classes (forward against a slow
reference, gradients, box lists, empty boxes, scripting, torch.compile, bad box shapes),
written here for this project; quantized inputs are not taken (the kernels compute in
floating point)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
import torchvision
from torch.autograd import gradcheck, gradgradcheck

import dml_onnx
import dml_onnx.torch as dt
from dml_onnx._kernels._checks import KernelError

GENERATOR = torch.Generator().manual_seed(11)


def _image(n: int = 2, c: int = 3, h: int = 10, w: int = 12,
           dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(n, c, h, w, dtype=dtype, generator=GENERATOR)


def _rois(count: int, n: int, size: float, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``[count, 5]``: random batch ids and corners, some boxes inverted or partly outside
    (samples land on pixel centres or the image edges with probability 0)."""
    corners = torch.rand(count, 4, dtype=dtype, generator=GENERATOR) * (size + 4) - 2
    ids = torch.randint(0, n, (count, 1), generator=GENERATOR).to(dtype)
    return torch.cat([ids, corners], dim=1)


def _slow_roi_align(image: torch.Tensor, rois: torch.Tensor, output_size: tuple[int, int],
                    spatial_scale: float, sampling_ratio: int, aligned: bool) -> torch.Tensor:
    """torchvision's roi_align written as plain loops, with DirectML's open bounds (a sample
    at or beyond -1 or the size reads 0) and its bilinear weights."""
    _, c, height, width = image.shape
    oh, ow = output_size
    out = torch.zeros(len(rois), c, oh, ow, dtype=image.dtype)
    offset = 0.5 if aligned else 0.0
    for r, (b, x1, y1, x2, y2) in enumerate(rois.tolist()):
        start_x, start_y = x1 * spatial_scale - offset, y1 * spatial_scale - offset
        size_x = x2 * spatial_scale - offset - start_x
        size_y = y2 * spatial_scale - offset - start_y
        if not aligned:
            size_x, size_y = max(size_x, 1.0), max(size_y, 1.0)
        grid_y = sampling_ratio if sampling_ratio > 0 else math.ceil(size_y / oh)
        grid_x = sampling_ratio if sampling_ratio > 0 else math.ceil(size_x / ow)
        if grid_y <= 0 or grid_x <= 0:
            continue
        plane = image[int(b)]
        for py in range(oh):
            for px in range(ow):
                total = torch.zeros(c, dtype=image.dtype)
                for iy in range(grid_y):
                    y = start_y + (py + (iy + 0.5) / grid_y) * size_y / oh
                    for ix in range(grid_x):
                        x = start_x + (px + (ix + 0.5) / grid_x) * size_x / ow
                        if not (-1 < y < height and -1 < x < width):
                            continue
                        y, x = max(y, 0.0), max(x, 0.0)
                        y0, x0 = min(int(y), height - 1), min(int(x), width - 1)
                        y1_, x1_ = min(y0 + 1, height - 1), min(x0 + 1, width - 1)
                        fy, fx = (y - y0 if y0 < height - 1 else 0.0), \
                            (x - x0 if x0 < width - 1 else 0.0)
                        top = plane[:, y0, x0] + fx * (plane[:, y0, x1_] - plane[:, y0, x0])
                        bottom = plane[:, y1_, x0] + fx * (plane[:, y1_, x1_] - plane[:, y1_, x0])
                        total += top + fy * (bottom - top)
                out[r, :, py, px] = total / (grid_y * grid_x)
    return out


def _ordered(rois: torch.Tensor) -> torch.Tensor:
    """``rois`` with ``x1 <= x2`` and ``y1 <= y2``: torchvision's domain (adaptive sampling of
    an inverted aligned box fails there, "cannot create std::vector larger than max_size()";
    the drop-in gives 0)."""
    return torch.cat([rois[:, :1], torch.minimum(rois[:, 1:3], rois[:, 3:]),
                      torch.maximum(rois[:, 1:3], rois[:, 3:])], 1)


SETTINGS = [pytest.param(aligned, ratio, id=f"aligned={aligned}-sampling_ratio={ratio}")
            for aligned in (False, True) for ratio in (-1, 0, 2)]


@pytest.mark.parametrize(("aligned", "sampling_ratio"), SETTINGS)
def test_roi_align_equals_a_slow_reference_and_torchvision(aligned, sampling_ratio):
    image, rois = _image(), _rois(9, 2, 24)
    got = dt.roi_align(image, rois, (3, 4), 0.5, sampling_ratio, aligned)
    torch.testing.assert_close(got, _slow_roi_align(image, rois, (3, 4), 0.5, sampling_ratio,
                                                    aligned), rtol=1e-12, atol=1e-12)
    # float64: torchvision's other operation order and closed bounds are rounding away
    ordered = _ordered(rois)
    torch.testing.assert_close(
        dt.roi_align(image, ordered, (3, 4), 0.5, sampling_ratio, aligned),
        torchvision.ops.roi_align(image, ordered, (3, 4), 0.5, sampling_ratio, aligned),
        rtol=1e-10, atol=1e-10)


def test_roi_align_has_directmls_open_bounds_where_torchvision_reads_the_edge():
    """A sample exactly on -1 reads 0 in DirectML; torchvision reads the edge pixel."""
    image = torch.ones(1, 1, 4, 4)
    rois = torch.tensor([[0.0, -1.0, 0.0, 0.0, 1.0]])  # aligned: the one sample at x = -1
    ours = dt.roi_align(image, rois, 1, sampling_ratio=1, aligned=True)
    theirs = torchvision.ops.roi_align(image, rois, 1, sampling_ratio=1, aligned=True)
    assert ours.item() == 0.0 and theirs.item() == 1.0


def test_roi_align_equals_the_raised_export_of_torchvisions_bit_for_bit():
    """The drop-in computes what ``raise_model`` makes of torchvision's exported roi_align."""
    class Pools(torch.nn.Module):
        def forward(self, image: torch.Tensor, rois: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return tuple(torchvision.ops.roi_align(image, rois, (3, 2), 0.25, ratio, aligned)
                         for aligned in (False, True) for ratio in (0, 2))

    image, rois = _image(dtype=torch.float32), _ordered(_rois(12, 2, 40, torch.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = dt.export(Pools(), (image, rois))
    assert [n.op_type for n in model.graph.node].count("RoiAlign1") == 4
    got = dml_onnx.InferenceSession(model).run(None, {
        model.graph.input[0].name: image.numpy(), model.graph.input[1].name: rois.numpy()})
    want = [dt.roi_align(image, rois, (3, 2), 0.25, ratio, aligned)
            for aligned in (False, True) for ratio in (0, 2)]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w.numpy())


def test_roi_pool_equals_torchvision_on_whole_pixel_corners():
    """RoiPooling rounds half to even where torchvision rounds half away; scaled corners on
    whole pixels round alike."""
    image = _image(dtype=torch.float32)
    rois = _rois(10, 2, 24)
    rois = torch.cat([rois[:, :1], (rois[:, 1:] / 2).round() * 2], 1).float()  # even corners
    for module in (dt.RoIPool((2, 3), 0.5), dt.RoIPool(3, 1.0)):
        want = torchvision.ops.RoIPool(module.output_size, module.spatial_scale)(image, rois)
        torch.testing.assert_close(module(image, rois), want, rtol=0, atol=0)
    assert repr(dt.RoIPool(3, 0.5)) == repr(torchvision.ops.RoIPool(3, 0.5))
    half = torch.tensor([[0.0, 2.5, 0.0, 4.0, 3.0]])  # x1 = 2.5: DirectML starts at 2
    assert not torch.equal(dt.roi_pool(image, half, 1),
                           torchvision.ops.roi_pool(image, half, 1))


@pytest.mark.parametrize(("aligned", "sampling_ratio"), SETTINGS)
def test_roi_align_gradients_twice_and_against_torchvision(aligned, sampling_ratio):
    image, rois = _image(1, 2, 6, 7).requires_grad_(), _rois(4, 1, 14)

    def pooled(x: torch.Tensor) -> torch.Tensor:
        return dt.roi_align(x, rois, 2, 0.5, sampling_ratio, aligned)

    assert gradcheck(pooled, (image,))
    assert gradgradcheck(pooled, (image,))
    grad = torch.randn(4, 2, 2, 2, dtype=torch.float64, generator=GENERATOR)
    ordered = _ordered(rois)
    (ours,) = torch.autograd.grad(dt.roi_align(image, ordered, 2, 0.5, sampling_ratio,
                                               aligned), image, grad)
    (theirs,) = torch.autograd.grad(torchvision.ops.roi_align(
        image, ordered, 2, 0.5, sampling_ratio, aligned), image, grad)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)


def test_roi_align_box_gradient_is_the_derivative():
    """torchvision has none; here it is the derivative of the DirectML forward."""
    image, rois = _image(1, 2, 6, 7), _rois(3, 1, 14)
    corners = rois[:, 1:].clone().requires_grad_()
    assert gradcheck(lambda b: dt.roi_align(image, torch.cat([rois[:, :1], b], 1), 2, 0.5, 2,
                                            True), (corners,))


def test_roi_pool_gradient():
    image, rois = _image(1, 2, 6, 7).requires_grad_(), _rois(4, 1, 7)
    assert gradcheck(lambda x: dt.roi_pool(x, rois, 2, 1.0), (image,))


@pytest.mark.parametrize("op", [dt.roi_align, dt.roi_pool])
def test_box_lists_equal_the_batch_column_form_and_empty_boxes_work(op):
    image = _image(3)
    boxes = [_rois(3, 1, 20)[:, 1:], torch.zeros(0, 4, dtype=torch.float64),
             _rois(2, 1, 20)[:, 1:]]
    rows = torch.cat([torch.tensor([[0.0]] * 3 + [[2.0]] * 2, dtype=torch.float64),
                      torch.cat(boxes)], 1)
    torch.testing.assert_close(op(image, boxes, 2, 0.5), op(image, rows, 2, 0.5), rtol=0,
                               atol=0)
    empty = op(image.requires_grad_(), torch.zeros(0, 5, dtype=torch.float64), [2, 3])
    assert empty.shape == (0, 3, 2, 3)
    empty.sum().backward()
    assert torch.count_nonzero(image.grad) == 0


def test_float_batch_ids_are_truncated_as_torchvision_does():
    image = _image(2, dtype=torch.float32)
    rois = torch.tensor([[0.9, 1.0, 1.0, 6.0, 5.0], [1.7, 1.0, 1.0, 6.0, 5.0]])
    torch.testing.assert_close(dt.roi_align(image, rois, 2), dt.roi_align(
        image, torch.cat([torch.tensor([[0.0], [1.0]]), rois[:, 1:]], 1), 2), rtol=0, atol=0)


@pytest.mark.parametrize("op", [dt.roi_align, dt.roi_pool])
def test_bad_boxes_raise_what_torchvision_raises(op):
    image = _image()
    for boxes in (torch.zeros(2, 4), [torch.zeros(2, 5)], 3):
        with pytest.raises(AssertionError):
            torchvision.ops.roi_align(image, boxes, 2)
        with pytest.raises(AssertionError):
            op(image, boxes, 2)
    outside = torch.tensor([[5.0, 1.0, 1.0, 4.0, 4.0]], dtype=torch.float64)  # batch 5 of 2
    with pytest.raises(RuntimeError, match="batch") as raised:
        op(image, outside, 2)
    assert isinstance(raised.value, KernelError)


def test_modules_and_functions_script_and_compile():
    image, rois = _image(dtype=torch.float32), _rois(6, 2, 24, torch.float32)
    boxes = [rois[:3, 1:], rois[3:, 1:]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script is deprecated, still used
        for module in (dt.RoIAlign(3, 0.5, 2), dt.RoIAlign((2, 3), 0.5, -1, aligned=True),
                       dt.RoIPool(3, 0.5)):
            scripted = torch.jit.script(module)
            for given in (rois, boxes):
                torch.testing.assert_close(scripted(image, given), module(image, given),
                                           rtol=0, atol=0)
        scripted = torch.jit.script(dt.roi_align)
        torch.testing.assert_close(scripted(image, rois, 2, 0.5, 0, True),
                                   dt.roi_align(image, rois, 2, 0.5, 0, True), rtol=0, atol=0)
    assert repr(dt.RoIAlign(3, 0.5, 2)) == repr(torchvision.ops.RoIAlign(3, 0.5, 2))
    for module in (dt.RoIAlign(3, 0.5, 2, aligned=True), dt.RoIPool(2, 0.5)):
        compiled = torch.compile(module, fullgraph=True, dynamic=True, backend="aot_eager")
        for count in (6, 4):
            torch.testing.assert_close(compiled(image, rois[:count]),
                                       module(image, rois[:count]), rtol=0, atol=0)
        traced = torch.fx.symbolic_trace(module)  # the function stays one leaf node
        assert [n.target for n in traced.graph.nodes if n.op == "call_function"] == \
            [dt.roi_align if isinstance(module, dt.RoIAlign) else dt.roi_pool]


def _pyramid() -> tuple[dict[str, torch.Tensor], list[torch.Tensor], list[tuple[int, int]]]:
    features = {"p2": _image(2, 4, 32, 40), "p3": _image(2, 4, 16, 20), "skip": _image(2, 4, 4, 5),
                "p4": _image(2, 4, 8, 10)}
    corners = torch.rand(12, 2, dtype=torch.float64, generator=GENERATOR) * 100
    sides = torch.rand(12, 2, dtype=torch.float64, generator=GENERATOR) * 120 + 4
    boxes = torch.cat([corners, corners + sides], 1)
    return features, [boxes[:7], boxes[7:]], [(128, 160), (120, 150)]


def test_multi_scale_roi_align_equals_torchvision_and_scripts():
    features, boxes, shapes = _pyramid()
    for names in (["p2", "p3", "p4"], ["p3"]):
        ours, theirs = dt.MultiScaleRoIAlign(names, 3, 2), \
            torchvision.ops.MultiScaleRoIAlign(names, 3, 2)
        got = ours(features, boxes, shapes)
        torch.testing.assert_close(got, theirs(features, boxes, shapes), rtol=1e-10,
                                   atol=1e-10)
        assert ours.scales == theirs.scales and repr(ours) == repr(theirs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scripted = torch.jit.script(dt.MultiScaleRoIAlign(names, 3, 2))
        torch.testing.assert_close(scripted(features, boxes, shapes), got, rtol=0, atol=0)
    levels = dt.MultiScaleRoIAlign(["p2", "p3", "p4"], 3, 2)
    levels(features, boxes, shapes)
    with pytest.raises(ValueError, match="images list should not be empty"):
        dt.MultiScaleRoIAlign(["p2"], 3, 2)(features, boxes, [])


def test_drop_ins_export_as_dml_onnx_nodes():
    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.align = dt.RoIAlign(3, 0.5, 2)
            self.pool = dt.RoIPool(2, 1.0)

        def forward(self, image: torch.Tensor, rois: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return self.align(image, rois), self.pool(image, rois)

    image, rois = _image(dtype=torch.float32), _rois(5, 2, 20, torch.float32)
    model = dt.export(Head(), (image, rois))
    assert {"RoiAlign1", "RoiPooling"} <= {n.op_type for n in model.graph.node}
    got = dml_onnx.InferenceSession(model).run(None, {
        model.graph.input[0].name: image.numpy(), model.graph.input[1].name: rois.numpy()})
    for g, w in zip(got, Head()(image, rois), strict=True):
        np.testing.assert_array_equal(g, w.numpy())
