"""What the RoiAlign1 and RoiAlignGrad kernel tests share: the two kernels and the package's
plain references (:mod:`dml_onnx.reference_ops.roi_align1` and ``.roi_align_grad``) called with
the defaults filled in, the data (random cases, the worked example of the DML page), the
attribute combinations, and the cases the property tests draw."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from dml_onnx._kernels._checks import UINT32_MAX
from dml_onnx._kernels.roi_align1 import roi_align1
from dml_onnx._kernels.roi_align_grad import roi_align_grad
from dml_onnx.reference_ops.roi_align1 import roi_align1 as reference_forward
from dml_onnx.reference_ops.roi_align_grad import roi_align_grad as reference_backward

DEFAULTS = dict(reduction_function="average", interpolation_mode="linear",
                spatial_scale_x=1.0, spatial_scale_y=1.0, input_pixel_offset=0.5,
                output_pixel_offset=-0.5, minimum_samples_per_output=1,
                maximum_samples_per_output=UINT32_MAX, align_regions_to_corners=0)


def forward(X, rois, batch, output_size, out_of_bounds_input_value=0.0, node="ra", *,
            implementation=roi_align1, **attrs):
    return implementation(X, rois, batch, output_size=list(output_size),
                          out_of_bounds_input_value=out_of_bounds_input_value, node=node,
                          **{**DEFAULTS, **attrs})


def backward(X, dY, rois, batch, *, dx=True, drois=True, input_shape=(), node="rag",
             implementation=roi_align_grad, **attrs):
    return implementation(X, dY, rois, batch, input_shape=list(input_shape), compute_dx=dx,
                          compute_drois=drois, node=node, **{**DEFAULTS, **attrs})


def ref_forward(*args, **kwargs):
    """:func:`forward` through the package reference."""
    return forward(*args, implementation=reference_forward, **kwargs)


def ref_backward(*args, **kwargs):
    """:func:`backward` through the package reference."""
    return backward(*args, implementation=reference_backward, **kwargs)


# ----------------------------------------------------------------------------------------------
# data


def random_case(seed, *, n=2, c=2, h=7, w=8, regions=5, dtype=np.float64, lo=-2.0, span=None):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, c, h, w)).astype(dtype)
    span = span or (w + 4, h + 4)
    x1 = rng.uniform(lo, lo + span[0], regions)
    y1 = rng.uniform(lo, lo + span[1], regions)
    x2 = rng.uniform(lo, lo + span[0], regions)
    y2 = rng.uniform(lo, lo + span[1], regions)
    rois = np.stack([x1, y1, x2, y2], axis=1).astype(dtype)
    batch = rng.integers(0, n, regions).astype(np.int64)
    return rng, X, rois, batch


SEED_X = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
SEED_ROIS = np.array([[0, 0, 2, 2], [2, 0, 4, 2], [0, 2, 2, 4], [2, 2, 4, 4]], np.float32)
SEED_BATCH = np.zeros(4, np.int64)
SEED_DY = np.arange(1, 13, dtype=np.float32).reshape(4, 1, 1, 3)
SEED_ATTRS = dict(interpolation_mode="nearest_neighbor", minimum_samples_per_output=1,
                  maximum_samples_per_output=1, input_pixel_offset=0.5)

ATTRIBUTE_SETS = [
    {},
    dict(interpolation_mode="nearest_neighbor"),
    dict(reduction_function="max"),
    dict(reduction_function="max", interpolation_mode="nearest_neighbor"),
    dict(align_regions_to_corners=1, input_pixel_offset=0.0, output_pixel_offset=0.0,
         minimum_samples_per_output=1, maximum_samples_per_output=1),
    dict(align_regions_to_corners=1, minimum_samples_per_output=2,
         maximum_samples_per_output=3, reduction_function="max"),
    dict(spatial_scale_x=0.75, spatial_scale_y=1.25, input_pixel_offset=0.25,
         output_pixel_offset=0.3, minimum_samples_per_output=2, maximum_samples_per_output=2),
    dict(spatial_scale_x=-0.5, spatial_scale_y=0.5, minimum_samples_per_output=1,
         maximum_samples_per_output=3, interpolation_mode="nearest_neighbor"),
    dict(input_pixel_offset=0.0, output_pixel_offset=0.0, minimum_samples_per_output=3,
         maximum_samples_per_output=3),
]


# ----------------------------------------------------------------------------------------------
# property tests against the reference


ATTRIBUTES = st.fixed_dictionaries({
    "reduction_function": st.sampled_from(["average", "max"]),
    "interpolation_mode": st.sampled_from(["linear", "nearest_neighbor"]),
    "spatial_scale_x": st.sampled_from([1.0, 0.5, 1.25, -0.75]),
    "spatial_scale_y": st.sampled_from([1.0, 0.75, 2.0]),
    "input_pixel_offset": st.sampled_from([0.5, 0.0, 0.25]),
    "output_pixel_offset": st.sampled_from([-0.5, 0.0, 0.375]),
    "samples": st.sampled_from([(1, 1), (2, 2), (1, 3), (1, UINT32_MAX), (2, 4)]),
    "align_regions_to_corners": st.sampled_from([0, 1]),
})

COORDINATE = st.one_of(st.floats(-4, 12, allow_nan=False, width=32),
                       st.integers(-3, 11).map(float), st.integers(-6, 22).map(lambda v: v / 2))


@st.composite
def cases(draw, grad=False):
    attrs = draw(ATTRIBUTES)
    low, high = attrs.pop("samples")
    attrs.update(minimum_samples_per_output=low, maximum_samples_per_output=high)
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    h, w = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    regions = draw(st.integers(1, 3))
    rois = np.array([[draw(COORDINATE) for _ in range(4)] for _ in range(regions)],
                    np.float64).reshape(regions, 4)
    batch = np.array([draw(st.integers(0, n - 1)) for _ in range(regions)], np.int64)
    size = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, c, h, w))
    out_of_bounds = draw(st.sampled_from([0.0, -1.5, 3.0]))
    return X, rois, batch, size, out_of_bounds, attrs, rng
