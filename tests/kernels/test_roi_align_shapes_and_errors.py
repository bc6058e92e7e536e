"""RoiAlign1 and RoiAlignGrad kernels: every layout of the regions and their batch indices,
no regions, the element types (float16 computed in float32 and rounded once), and the errors
of inputs and attributes, each message naming the operator, the node and the value."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dml_onnx._kernels.roi_align1 as forward_module
import dml_onnx._kernels.roi_align_grad as grad_module
from dml_onnx._kernels._checks import UINT32_MAX, KernelError
from dml_onnx._kernels.roi_align1 import roi_align1
from tests.kernels._roi_align import DEFAULTS, backward, forward, random_case

# ----------------------------------------------------------------------------------------------
# shapes and types


@pytest.mark.parametrize("index_type", [np.int64, np.int32, np.uint32, np.uint64])
def test_every_region_and_index_layout(index_type):
    rng, X, rois, batch = random_case(31, dtype=np.float32)
    g = rng.standard_normal((5, 2, 2, 2)).astype(np.float32)
    Y0 = forward(X, rois, batch, (2, 2))
    dX0, dr0 = backward(X, g, rois, batch)
    for roi_shape in [(5, 4), (1, 5, 4), (1, 1, 5, 4)]:
        for index_shape in [(5,), (1, 5), (1, 1, 5), (1, 1, 1, 5)]:
            r, b = rois.reshape(roi_shape), batch.astype(index_type).reshape(index_shape)
            np.testing.assert_array_equal(forward(X, r, b, (2, 2)), Y0)
            dX, drois = backward(X, g, r, b)
            np.testing.assert_array_equal(dX, dX0)
            assert drois.shape == roi_shape
            np.testing.assert_array_equal(drois.reshape(5, 4), dr0)


@pytest.mark.parametrize("roi_shape", [(0, 4), (1, 0, 4), (1, 1, 0, 4)])
def test_no_regions(roi_shape):
    X = np.ones((2, 3, 4, 5), np.float32)
    rois = np.zeros(roi_shape, np.float32)
    batch = np.zeros(0, np.int32)
    Y = forward(X, rois, batch, (2, 3), reduction_function="max")
    assert Y.shape == (0, 3, 2, 3) and Y.dtype == np.float32
    dX, drois = backward(X, np.zeros((0, 3, 2, 3), np.float32), rois, batch)
    assert dX.shape == X.shape and not dX.any() and drois.shape == roi_shape


@pytest.mark.parametrize("reduction", ["average", "max"])
def test_float16_is_computed_in_float32_and_rounded_once(reduction):
    rng, X, rois, batch = random_case(32, dtype=np.float16)
    Y = forward(X, rois, batch, (3, 2), reduction_function=reduction)
    assert Y.dtype == np.float16
    wide = forward(X.astype(np.float32), rois.astype(np.float32), batch, (3, 2),
                   reduction_function=reduction)
    np.testing.assert_array_equal(Y, wide.astype(np.float16))
    g = rng.standard_normal((5, 2, 3, 2)).astype(np.float16)
    dX, drois = backward(X, g, rois, batch, reduction_function=reduction)
    assert dX.dtype == np.float16 and drois.dtype == np.float16
    wide_dx, wide_drois = backward(X.astype(np.float32), g.astype(np.float32),
                                   rois.astype(np.float32), batch, reduction_function=reduction)
    np.testing.assert_array_equal(dX, wide_dx.astype(np.float16))
    np.testing.assert_array_equal(drois, wide_drois.astype(np.float16))


def test_float64_stays_float64():
    rng, X, rois, batch = random_case(33)
    assert forward(X, rois, batch, (2, 2)).dtype == np.float64
    dX, drois = backward(X, rng.standard_normal((5, 2, 2, 2)), rois, batch)
    assert dX.dtype == np.float64 and drois.dtype == np.float64


# ----------------------------------------------------------------------------------------------
# errors


def raises(call, *fragments):
    with pytest.raises(ValueError) as info:
        call()
    assert isinstance(info.value, KernelError)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


def test_error_message_shape():
    X = np.zeros((2, 1, 4, 4), np.float32)
    rois = np.zeros((3, 4), np.float32)
    with pytest.raises(ValueError, match=r"^RoiAlign1 'ra': batch_indices\[2\] 5 is outside "
                                         r"\[0, 2\)$"):
        forward(X, rois, np.array([0, 1, 5]), (1, 1))


FX = np.zeros((2, 3, 4, 5), np.float32)
FROIS = np.array([[0, 0, 2, 2], [1, 1, 3, 3]], np.float32)
FBATCH = np.array([0, 1], np.int64)


@pytest.mark.parametrize("args, fragments", [
    ((FX[0], FROIS, FBATCH), ["X rank", "3"]),
    ((FX.astype(np.int32), FROIS, FBATCH), ["X element type", "int32"]),
    ((FX[:, :, :0], FROIS, FBATCH), ["X shape", "[2, 3, 0, 5]"]),
    ((FX, FROIS[:, :3], FBATCH), ["rois shape", "[2, 3]"]),
    ((FX, FROIS.reshape(2, 1, 4), FBATCH), ["rois shape", "[2, 1, 4]"]),
    ((FX, FROIS.reshape(1, 1, 1, 2, 4), FBATCH), ["rois rank", "5"]),
    ((FX, FROIS[0], FBATCH), ["rois rank", "1"]),
    ((FX, FROIS.astype(np.float64), FBATCH), ["rois element type", "float64"]),
    ((FX, FROIS, FBATCH.astype(np.float32)), ["batch_indices element type", "float32"]),
    ((FX, FROIS, FBATCH.astype(np.int16)), ["batch_indices element type", "int16"]),
    ((FX, FROIS, FBATCH.reshape(2, 1)), ["batch_indices shape", "[2, 1]"]),
    ((FX, FROIS, FBATCH.reshape(1, 1, 1, 1, 2)), ["batch_indices rank", "5"]),
    ((FX, FROIS, FBATCH[:1]), ["batch_indices length", "1", "2 regions"]),
    ((FX, FROIS, np.array([0, 2])), ["batch_indices[1]", " 2 ", "[0, 2)"]),
    ((FX, FROIS, np.array([-1, 0])), ["batch_indices[0]", "-1", "[0, 2)"]),
    ((FX, FROIS, np.array([0, 2**63], np.uint64)), ["batch_indices[1]", str(2**63)]),
    ((FX, np.array([[0, 0, 2, 2], [1, np.nan, 3, 3]], np.float32), FBATCH),
     ["rois[1]", "nan", "not finite"]),
    ((FX, np.array([[0, 0, np.inf, 2], [1, 1, 3, 3]], np.float32), FBATCH),
     ["rois[0]", "inf", "not finite"]),
])
def test_input_errors(args, fragments):
    raises(lambda: forward(*args, (2, 2)), "RoiAlign1", "'ra'", *fragments)


@pytest.mark.parametrize("attrs, fragments", [
    (dict(output_size=[2]), ["output_size", "[2]", "2 values"]),
    (dict(output_size=[2, 0]), ["output_size[1]", "0"]),
    (dict(reduction_function="sum"), ["reduction_function", "'sum'"]),
    (dict(interpolation_mode="cubic"), ["interpolation_mode", "'cubic'"]),
    (dict(minimum_samples_per_output=0), ["minimum_samples_per_output", "0"]),
    (dict(minimum_samples_per_output=3, maximum_samples_per_output=2),
     ["maximum_samples_per_output", "2", "minimum_samples_per_output 3"]),
    (dict(maximum_samples_per_output=UINT32_MAX + 1), ["maximum_samples_per_output",
                                                        str(UINT32_MAX + 1)]),
    (dict(spatial_scale_x=math.inf), ["spatial_scale_x", "inf"]),
    (dict(spatial_scale_y=math.nan), ["spatial_scale_y", "nan"]),
    (dict(input_pixel_offset=math.inf), ["input_pixel_offset", "inf"]),
    (dict(output_pixel_offset=-math.inf), ["output_pixel_offset", "-inf"]),
    (dict(align_regions_to_corners=2), ["align_regions_to_corners", "2"]),
])
def test_attribute_errors(attrs, fragments):
    attrs = {"output_size": [2, 2], "out_of_bounds_input_value": 0.0, **DEFAULTS, **attrs}
    raises(lambda: forward_module.prepare(node="ra", **attrs),
           "RoiAlign1", "'ra'", *fragments)
    raises(lambda: roi_align1(FX, FROIS, FBATCH, node="ra", **attrs),
           "RoiAlign1", "'ra'", *fragments)
    if "output_size" not in fragments[0] and "out_of_bounds" not in fragments[0]:
        grad_attrs = {k: v for k, v in attrs.items()
                      if k not in ("output_size", "out_of_bounds_input_value")}
        raises(lambda: grad_module.prepare(node="g", input_shape=[], compute_dx=True,
                                           compute_drois=False, **grad_attrs),
               "RoiAlignGrad", "'g'", *fragments)


def test_scaled_region_overflow_and_sample_limit_errors():
    rois = np.array([[0, 0, 2, 2], [0, 0, 3e38, 2]], np.float32)
    raises(lambda: forward(FX, rois, FBATCH, (2, 2), spatial_scale_x=10.0),
           "rois[1]", "overflows float32")
    rois = np.array([[0, 0, 2, 2], [0, 0, 2, 1e9]], np.float32)
    raises(lambda: forward(FX, rois, FBATCH, (2, 2)), "rois[1] samples along y",
           "maximum_samples_per_output")
    raises(lambda: backward(FX, np.zeros((2, 3, 2, 2), np.float32), rois, FBATCH),
           "RoiAlignGrad", "rois[1] samples along y")
    # a capped count makes the same region fine
    forward(FX, rois, FBATCH, (2, 2), maximum_samples_per_output=4)


GDY = np.zeros((2, 3, 2, 2), np.float32)


@pytest.mark.parametrize("call, fragments", [
    (lambda: backward(FX, GDY, FROIS, FBATCH, dx=False, drois=False),
     ["requested outputs", "dX or drois"]),
    (lambda: backward(None, GDY, FROIS, FBATCH, dx=False, input_shape=FX.shape),
     ["X None", "required"]),
    (lambda: backward(None, GDY, FROIS, FBATCH, drois=False, reduction_function="max",
                      input_shape=FX.shape), ["X None", "'max'"]),
    (lambda: backward(None, GDY, FROIS, FBATCH, drois=False), ["input_shape []", "omitted"]),
    (lambda: backward(FX, GDY, FROIS, FBATCH, input_shape=(2, 3, 4, 6)),
     ["input_shape [2, 3, 4, 6]", "[2, 3, 4, 5]"]),
    (lambda: backward(None, GDY, FROIS, FBATCH, drois=False, input_shape=(2, 3, 4)),
     ["input_shape", "4 values"]),
    (lambda: backward(None, GDY, FROIS, FBATCH, drois=False, input_shape=(2, 3, -4, 5)),
     ["input_shape[2]", "-4"]),
    (lambda: backward(FX, GDY[:1], FROIS, FBATCH), ["dY shape", "[1, 3, 2, 2]", "[2, 3]"]),
    (lambda: backward(FX, GDY[:, :2], FROIS, FBATCH), ["dY shape", "[2, 2, 2, 2]"]),
    (lambda: backward(None, GDY[:, :2], FROIS, FBATCH, drois=False, input_shape=FX.shape),
     ["dY shape", "[2, 2, 2, 2]"]),
    (lambda: backward(FX, GDY[:, :, :0], FROIS, FBATCH), ["dY shape", "[2, 3, 0, 2]"]),
    (lambda: backward(FX, GDY[0], FROIS, FBATCH), ["dY rank", "3"]),
    (lambda: backward(FX, GDY.astype(np.float64), FROIS, FBATCH),
     ["dY element type", "float64"]),
    (lambda: backward(FX, GDY.astype(np.int32), FROIS, FBATCH), ["dY element type", "int32"]),
    (lambda: backward(FX[0], GDY, FROIS, FBATCH), ["X rank", "3"]),
    (lambda: backward(FX, GDY, FROIS, np.array([0, 3])), ["batch_indices[1]", "3", "[0, 2)"]),
    (lambda: backward(FX, GDY, FROIS[:1], FBATCH), ["batch_indices length"]),
    (lambda: backward(FX, GDY, FROIS.astype(np.float64), FBATCH),
     ["rois element type", "float64"]),
    (lambda: backward(FX, GDY, np.array([[0, 0, 2, 2], [1, np.nan, 3, 3]], np.float32),
                      FBATCH), ["rois[1]", "not finite"]),
    (lambda: backward(FX, GDY, FROIS, FBATCH, minimum_samples_per_output=0),
     ["minimum_samples_per_output", "0"]),
    (lambda: backward(FX, GDY, FROIS, FBATCH, interpolation_mode="area"),
     ["interpolation_mode", "'area'"]),
])
def test_gradient_errors(call, fragments):
    raises(call, "RoiAlignGrad", "'rag'", *fragments)
