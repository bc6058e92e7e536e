"""dml_onnx.torch (the ``torch`` extra): every operator as a torch custom operator, equal to the
kernels, differentiable (checked by finite differences in float64), passing torch's opcheck,
and taking symbolic sizes under ``torch.compile`` and ``torch.export``. Writing ONNX from torch
(``dml_onnx.torch.export`` and raising what torch's exporters decompose) is in
``test_torch_export``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck

import dml_onnx.torch as dt
from dml_onnx import calls
from dml_onnx.ops import OPERATORS
from dml_onnx.torch._ops import _EXACT_ROI_GRADIENT, OPS, arguments
from tests.torch_extra._tensors import _boxes, _random

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.parametrize("dilations", [[0, 2], [1, 0], [0, 0]])
def test_unfold_and_fold_gradients_with_a_dilation_of_zero(dilations):
    """Unfold read literally (every tap of the axis at one position) has an exact gradient;
    Fold is DirectML's zeros there, so its gradient is zero."""
    x = _random(2, 2, 5, 6).requires_grad_()
    window = {"strides": [2, 1], "dilations": dilations, "start_padding": [1, 2],
              "end_padding": [0, 1]}
    assert gradcheck(lambda t: dt.unfold(t, [2, 3], **window), (x,))
    columns = dt.unfold(x, [2, 3], **window).detach().requires_grad_()
    assert not dt.fold(columns, [2, 3], [5, 6], **window).any()
    assert gradcheck(lambda t: dt.fold(t, [2, 3], [5, 6], **window), (columns,))
    dt.fold(columns, [2, 3], [5, 6], **window).sum().backward()
    assert columns.grad is not None and not columns.grad.any()


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
