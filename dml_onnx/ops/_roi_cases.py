"""The case tables of the region-of-interest operators (RoiPooling, RoiAlign1, RoiAlignGrad):
their ``examples``, which the conformance suite and the layer tests run, and the fixtures they
share (the DirectML seed example, a small image batch with awkward regions, the sampling
variations). Images are ``[N, C, H, W]``; RoiAlign regions ``[R, 4]`` rows
``[x1, y1, x2, y2]`` with batch indices ``[R]``, RoiPooling regions ``[R, 5]`` rows
``[batch_id, x1, y1, x2, y2]``."""

from __future__ import annotations

from typing import Any

import numpy as np

from dml_onnx.definition import Example

# The worked example of the DirectML ROI_ALIGN_GRAD page (spec sections 2 and 3).
SEED_X = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
SEED_ROIS = np.array([[0, 0, 2, 2], [2, 0, 4, 2], [0, 2, 2, 4], [2, 2, 4, 4]], np.float32)
SEED_BATCH = np.zeros(4, np.int64)
SEED_ATTRIBUTES = {"output_size": [1, 3], "interpolation_mode": "nearest_neighbor",
                   "minimum_samples_per_output": 1, "maximum_samples_per_output": 1,
                   "input_pixel_offset": 0.5, "output_pixel_offset": 0.0}

# Shared by the case tables of RoiAlign1 and RoiAlignGrad: a small image batch, regions that
# are plain, inverted, empty, partly and wholly outside it, and one attribute set per variation.
CASE_IMAGE = np.random.default_rng(5).standard_normal((2, 2, 5, 6)).astype(np.float32)
CASE_ROIS = np.array([[0.6, 0.9, 4.2, 3.7], [4.8, 3.9, 1.1, 0.4], [2.5, 2, 2.5, 2],
                      [-3.2, -2.6, 8.1, 1.4], [7, 6, 9.5, 8.5]], np.float32)
CASE_BATCH = np.array([0, 1, 1, 0, 1], np.int64)
# On a 4x4 image with output [2, 2], samples fall on integers, on .5 (nearest ties) and exactly
# on the out-of-bounds edges -1 and 4.
HALF_IMAGE = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
HALF_ROIS = np.array([[-1, 1.5, 3, 5.5], [1, -1.5, 5, 2.5], [1.5, -1, 5.5, 3],
                      [-1.5, 1, 2.5, 5]], np.float32)
SAMPLING_VARIATIONS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "max": {"reduction_function": "max"},
    "nearest": {"interpolation_mode": "nearest_neighbor"},
    "max_nearest": {"reduction_function": "max", "interpolation_mode": "nearest_neighbor"},
    "scales_differ": {"spatial_scale_x": 0.5, "spatial_scale_y": 1.25},
    "fixed_samples_3_one_scale": {"spatial_scale_x": 0.75, "spatial_scale_y": 0.75,
                                  "minimum_samples_per_output": 3,
                                  "maximum_samples_per_output": 3},
    "input_pixel_offset_0": {"input_pixel_offset": 0.0},
    "output_pixel_offset_0_25": {"output_pixel_offset": 0.25},
    "samples_1": {"minimum_samples_per_output": 1, "maximum_samples_per_output": 1},
    "samples_2_to_3": {"minimum_samples_per_output": 2, "maximum_samples_per_output": 3},
    "samples_at_most_2": {"maximum_samples_per_output": 2},
    "corners": {"align_regions_to_corners": 1},
    "corners_max_2_samples": {"align_regions_to_corners": 1, "reduction_function": "max",
                              "minimum_samples_per_output": 2, "maximum_samples_per_output": 2},
}
"""Sampling attributes varied one (or two) at a time over ``CASE_*``."""
NON_FINITE_IMAGE = CASE_IMAGE.copy()
NON_FINITE_IMAGE[0, 0, 1, 2], NON_FINITE_IMAGE[1, 1, 2, 2] = np.nan, np.inf
NON_FINITE_IMAGE[0, 1, 3, 1] = -np.inf


def roi_align1_examples() -> tuple[Example, ...]:
    """RoiAlign1's case table: the seed, a few mixed cases, every sampling variation, edge
    cases and element types over ``CASE_*``, and one invalid batch index."""
    rng = np.random.default_rng(2)
    image = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    rois = np.array([[0.7, 1.3, 6.1, 5.4], [2.2, -1.4, 9.9, 7.6], [5.6, 6.3, 1.2, 2.7],
                     [3, 3, 3, 3], [-4, -4, -2, -1]], np.float32)
    batch = np.array([1, 0, 1, 0, 1], np.int64)
    odd = {"output_size": [3, 2], "reduction_function": "max",
           "interpolation_mode": "nearest_neighbor", "spatial_scale_x": 0.75,
           "spatial_scale_y": 1.25, "input_pixel_offset": 0.0, "output_pixel_offset": 0.25,
           "out_of_bounds_input_value": -1.5, "minimum_samples_per_output": 2,
           "maximum_samples_per_output": 3, "align_regions_to_corners": 1}
    cases = (CASE_IMAGE, CASE_ROIS, CASE_BATCH)
    size = {"output_size": [2, 3]}
    max_nearest = SAMPLING_VARIATIONS["max_nearest"]
    edges: dict[str, tuple[tuple[np.ndarray, ...], dict[str, Any]]] = {  # (inputs, attributes)
        "out_of_bounds_value": (cases, {**size, "out_of_bounds_input_value": -2.5}),
        "max_out_of_bounds_value": (cases, {**size, "reduction_function": "max",
                                            "out_of_bounds_input_value": 3.5}),
        "corners_single_sample": (cases, {"output_size": [1, 1], "align_regions_to_corners": 1,
                                          "maximum_samples_per_output": 1}),
        "one_pixel_image": ((CASE_IMAGE[:, :, 2:3, 4:5], CASE_ROIS, CASE_BATCH),
                            {"output_size": [2, 2]}),
        "one_image": ((CASE_IMAGE[:1], CASE_ROIS, np.zeros(5, np.int64)),
                      {"output_size": [3, 2], "reduction_function": "max"}),
        "half_boundaries_nearest": ((HALF_IMAGE, HALF_ROIS, np.zeros(4, np.int64)),
                                    {"output_size": [2, 2], "out_of_bounds_input_value": 50.0,
                                     "interpolation_mode": "nearest_neighbor"}),
        "half_boundaries_linear_max": ((HALF_IMAGE, HALF_ROIS, np.zeros(4, np.int64)),
                                       {"output_size": [2, 2], "out_of_bounds_input_value": -9.0,
                                        "reduction_function": "max"}),
        "non_finite_average": ((NON_FINITE_IMAGE, CASE_ROIS, CASE_BATCH), size),
        "non_finite_max_infinite_out_of_bounds": ((NON_FINITE_IMAGE, CASE_ROIS, CASE_BATCH),
                                             {**size, "reduction_function": "max",
                                              "out_of_bounds_input_value": -np.inf}),
    }
    types: dict[str, tuple[Any, Any, tuple[int, ...], tuple[int, ...], dict[str, Any]]] = {
        # name: (T, TI, rois shape, batch_indices shape, attributes)
        "float16_int32_max": (np.float16, np.int32, (5, 4), (5,),
                              SAMPLING_VARIATIONS["max"]),
        "float16_uint64_rank3": (np.float16, np.uint64, (1, 5, 4), (1, 1, 5), {}),
        "float32_uint64_rank4_nearest": (np.float32, np.uint64, (1, 1, 5, 4), (1, 1, 1, 5),
                                         SAMPLING_VARIATIONS["nearest"]),
        "float64_int64_fixed_samples": (np.float64, np.int64, (5, 4), (5,),
                                        SAMPLING_VARIATIONS["fixed_samples_3_one_scale"]),
        "float64_uint32_rank3_max_nearest": (np.float64, np.uint32, (1, 5, 4), (1, 5),
                                             max_nearest),
    }
    return (
        Example("seed_nearest", (SEED_X, SEED_ROIS, SEED_BATCH), SEED_ATTRIBUTES,
                expected=(np.array([[[[1, 1, 2]]], [[[3, 3, 4]]], [[[9, 9, 10]]],
                                    [[[11, 11, 12]]]], np.float32),)),
        Example("average_half_pixel_adaptive", (image, rois, batch), {"output_size": [4, 3]}),
        Example("average_sampling_2_scaled", (image, rois * 2, batch),
                {"output_size": [2, 2], "spatial_scale_x": 0.5, "spatial_scale_y": 0.5,
                 "minimum_samples_per_output": 2, "maximum_samples_per_output": 2}),
        Example("max_nearest_corners_float64_int32",
                (image.astype(np.float64), rois.astype(np.float64), batch.astype(np.int32)),
                odd),
        Example("float16_rank4_uint32", (image.astype(np.float16),
                                         rois.astype(np.float16)[None, None],
                                         batch.astype(np.uint32)[None]),
                {"output_size": [2, 3], "interpolation_mode": "nearest_neighbor"}),
        Example("zero_rois", (image, np.zeros((0, 4), np.float32), np.zeros(0, np.int64)),
                {"output_size": [4, 3]}),
        *(Example(name, cases, {**size, **attributes})
          for name, attributes in SAMPLING_VARIATIONS.items()),
        *(Example(name, inputs, attributes) for name, (inputs, attributes) in edges.items()),
        *(Example(name, (CASE_IMAGE.astype(t), CASE_ROIS.astype(t).reshape(rois_shape),
                         CASE_BATCH.astype(ti).reshape(batch_shape)), {**size, **attributes})
          for name, (t, ti, rois_shape, batch_shape, attributes) in types.items()),
        Example("batch_index_outside", (image, rois[:1], np.array([2])),
                {"output_size": [4, 3]}, error="batch_indices[0] 2 is outside [0, 2)"),
    )


def roi_align_grad_examples() -> tuple[Example, ...]:
    """RoiAlignGrad's case table: the seed without X, a few mixed cases, every sampling
    variation, edge cases and element types over ``CASE_*``, and one shape mismatch."""
    rng = np.random.default_rng(3)
    seed_attributes = {k: v for k, v in SEED_ATTRIBUTES.items() if k != "output_size"}
    seed_dy = np.arange(1, 13, dtype=np.float32).reshape(4, 1, 1, 3)
    image = rng.standard_normal((2, 3, 9, 8))
    rois = np.array([[0.7, 1.3, 6.1, 5.4], [2.2, 0.4, 3.9, 7.6], [5.6, 6.3, 1.2, 2.7]])
    batch = np.array([1, 0, 1], np.int32)
    grad = rng.standard_normal((3, 3, 2, 3))
    linear = {"spatial_scale_x": 0.9, "spatial_scale_y": 1.1, "minimum_samples_per_output": 2,
              "maximum_samples_per_output": 2}
    both, dx, drois = (True, True), (True, False), (False, True)
    dy = rng.standard_normal((5, 2, 2, 3)).astype(np.float32)  # for CASE_ROIS, output [2, 3]
    cases = (CASE_IMAGE, dy, CASE_ROIS, CASE_BATCH)
    image_shape = {"input_shape": list(CASE_IMAGE.shape)}
    half = (HALF_IMAGE, rng.standard_normal((4, 1, 2, 2)).astype(np.float32), HALF_ROIS,
            np.zeros(4, np.int64))
    edges: dict[str, tuple[tuple[np.ndarray | None, ...], dict[str, Any], tuple[bool, ...]]] = {
        # name: (inputs, attributes, outputs)
        "dx_only": (cases, {}, dx),
        "drois_only": (cases, {}, drois),
        "max_dx_only": (cases, SAMPLING_VARIATIONS["max"], dx),
        "x_omitted": ((None, *cases[1:]), image_shape, dx),
        "x_omitted_nearest_corners": ((None, *cases[1:]), {
            **image_shape, "interpolation_mode": "nearest_neighbor",
            "align_regions_to_corners": 1}, dx),
        "corners_single_sample": ((CASE_IMAGE, dy[:, :, :1, :1], CASE_ROIS, CASE_BATCH),
                                  {"align_regions_to_corners": 1,
                                   "maximum_samples_per_output": 1}, both),
        "one_pixel_image": ((CASE_IMAGE[:, :, 2:3, 4:5], *cases[1:]), {}, both),
        "one_image": ((CASE_IMAGE[:1], dy, CASE_ROIS, np.zeros(5, np.int64)),
                      SAMPLING_VARIATIONS["max"], both),
        "zero_rois": ((CASE_IMAGE, dy[:0], CASE_ROIS[:0], CASE_BATCH[:0]), {}, both),
        "half_boundaries": (half, {}, both),
        "half_boundaries_max_nearest": (half, SAMPLING_VARIATIONS["max_nearest"], dx),
        "non_finite_max": ((NON_FINITE_IMAGE, *cases[1:]), SAMPLING_VARIATIONS["max"], both),
        "non_finite_average": ((NON_FINITE_IMAGE, *cases[1:]), {}, both),
    }
    types: dict[str, tuple[Any, Any, tuple[int, ...], tuple[int, ...], dict[str, Any],
                           tuple[bool, ...]]] = {
        # name: (T, TI, rois shape, batch_indices shape, attributes, outputs)
        "float16_int64_both": (np.float16, np.int64, (5, 4), (5,), {}, both),
        "float16_uint32_max_dx": (np.float16, np.uint32, (5, 4), (1, 5),
                                  SAMPLING_VARIATIONS["max"], dx),
        "float32_int32_rank3_drois": (np.float32, np.int32, (1, 5, 4), (1, 1, 5), {}, drois),
        "float64_uint64_rank4_max": (np.float64, np.uint64, (1, 1, 5, 4), (1, 1, 1, 5),
                                     SAMPLING_VARIATIONS["max"], both),
        "float64_int32_scales_differ": (np.float64, np.int32, (5, 4), (5,),
                                        SAMPLING_VARIATIONS["scales_differ"], both),
    }
    return (
        Example("seed_dx_without_x", (None, seed_dy, SEED_ROIS, SEED_BATCH),
                {**seed_attributes, "input_shape": [1, 1, 4, 4]}, outputs=dx,
                expected=(np.array([[[[3, 3, 9, 6], [0, 0, 0, 0], [15, 9, 21, 12],
                                      [0, 0, 0, 0]]]], np.float32),)),
        Example("both_gradients_float64", (image, grad, rois, batch), linear, outputs=both),
        Example("drois_max_float32_uint64",
                (image.astype(np.float32), grad.astype(np.float32), rois.astype(np.float32),
                 batch.astype(np.uint64)),
                {"reduction_function": "max", "align_regions_to_corners": 1}, outputs=drois),
        Example("dx_float16", (image.astype(np.float16), grad.astype(np.float16),
                               rois.astype(np.float16), batch), {}, outputs=dx),
        *(Example(name, cases, attributes, outputs=both)
          for name, attributes in SAMPLING_VARIATIONS.items()),
        *(Example(name, inputs, attributes, outputs=outputs)
          for name, (inputs, attributes, outputs) in edges.items()),
        *(Example(name, (CASE_IMAGE.astype(t), dy.astype(t),
                         CASE_ROIS.astype(t).reshape(rois_shape),
                         CASE_BATCH.astype(ti).reshape(batch_shape)), attributes,
                  outputs=outputs)
          for name, (t, ti, rois_shape, batch_shape, attributes, outputs) in types.items()),
        Example("dy_rows_disagree_with_rois", (image, grad[:2], rois, batch), linear,
                outputs=both, error="dY shape [2, 3, 2, 3] does not start with"),
    )


def _times(rois: np.ndarray, factor: float) -> np.ndarray:
    """float32 ``rois`` ``[R, 5]`` with the corners (not the batch ids) times ``factor``."""
    return np.concatenate([rois[:, :1], rois[:, 1:] * np.float32(factor)], axis=1)


def roi_pooling_examples() -> tuple[Example, ...]:
    """The case table: the original examples, then the defaults, each attribute varied on its
    own, edge cases, special values and every element type (a few hundred values each)."""
    rng = np.random.default_rng(1)
    ramp = np.arange(72, dtype=np.float32).reshape(1, 2, 6, 6)
    halves = np.array([[0, 5, 5, 9, 11], [0, -1, 3, 4.9, 7], [0, 3, 1, 5, 3]], np.float32)
    image = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    rois = np.array([[[[1, 2, 1, 6, 7], [0, -3, -3, 3, 3], [1, 9, 9, 12, 12],
                       [0.9, 6, 5, 2, 1], [1.5, 0, 0, 7, 7]]]], np.float32)
    flat = rois[0, 0]
    special = image.copy()  # NaN, -inf and +inf, alone and with other values in a bin
    special[0, 0, 1:3, 2:4] = np.nan
    special[0, 1, :, :5] = -np.inf
    special[1, 2, 4, 4] = np.inf
    special[0, 2, 7, 7] = np.nan
    whole = np.array([[0, 0, 0, 7, 7], [1, 0, 0, 7, 7], [0, 1, 2, 6, 4], [1, 3, 3, 5, 5]],
                     np.float32)
    half_rois = np.array([[0, 0.5, 1.5, 2.5, 3.5], [1, -0.5, -1.5, 4.5, 6.5],
                          [0, -2.5, 5.5, 9.5, 7.5], [1, 2.5, 2.5, 2.5, 2.5]], np.float32)
    float32_cases: list[tuple[str, np.ndarray, np.ndarray, dict[str, Any]]] = [
        ("defaults", image, flat, {}),
        ("pooled_1x1", image, flat, {"pooled_size": [1, 1]}),
        ("pooled_1x4", image, flat, {"pooled_size": [1, 4]}),
        ("pooled_5x1", image, flat, {"pooled_size": [5, 1]}),
        ("pooled_larger_than_rois", image, np.array([[0, 2, 2, 3, 3], [1, 5, 1, 5, 3]],
                                                    np.float32), {"pooled_size": [5, 4]}),
        ("scale_zero", image, flat, {"spatial_scale": 0.0}),
        ("scale_negative", image, _times(flat, -1), {"spatial_scale": -0.5}),
        ("scale_tiny", image, _times(half_rois, 1000), {"spatial_scale": 1e-3}),
        ("scale_large", image, _times(flat, 1 / 16), {"spatial_scale": 16.0}),
        ("scale_third", image, _times(half_rois, 3), {"spatial_scale": 1 / 3}),
        ("half_coordinates", image, half_rois, {"pooled_size": [2, 3]}),
        ("inverted", image, np.array([[0, 5, 6, 1, 2], [1, 6, 1, 2, 6], [0, 2, 6, 5, 3]],
                                     np.float32), {}),
        ("outside", image, np.array([[0, -9, 2, -1, 5], [1, 8, 0, 12, 7], [0, 1, -7, 6, -1],
                                     [1, 0, 8, 7, 15], [0, 20, 20, 30, 30]], np.float32),
         {"pooled_size": [3, 2]}),
        ("one_pixel_image", image[:, :, :1, :1].copy(),
         np.array([[0, 0, 0, 0, 0], [1, -2, -1, 3, 2], [0, 1, 0, 4, 0], [1, 0.4, -0.4, 0.4, 0.49]],
                  np.float32), {}),
        ("batch_truncation", image, np.array([[0.999, 0, 0, 7, 7], [-0.75, 2, 1, 6, 5],
                                              [1.0, 1, 1, 7, 3], [1.999, 3, 0, 4, 7]],
                                             np.float32), {}),
        ("rank4_zero_rois", image, np.zeros((1, 1, 0, 5), np.float32), {}),
        ("negative_values", -np.abs(image) - 1, flat, {"pooled_size": [3, 3]}),
    ]
    typed = [(f"{np.dtype(t).name}_{name}", x.astype(t), r.astype(t), attributes)
             for t in (np.float16, np.float64)
             for name, x, r, attributes in float32_cases
             if name in ("half_coordinates", "outside", "scale_third")]
    # NaN and infinities in double only: its standard form is the decomposition, while
    # onnxruntime's MaxRoiPool (the float32 form) keeps a NaN scanned last in its bin.
    typed.append(("float64_nan_and_infinities", special.astype(np.float64),
                  whole.astype(np.float64), {"pooled_size": [4, 4]}))
    table = [Example(name, (x, r), {"pooled_size": [2, 2], **attributes})
             for name, x, r, attributes in float32_cases + typed]
    return (
        Example("half_coordinates_scale_half", (ramp, halves),
                {"pooled_size": [2, 2], "spatial_scale": 0.5}),
        Example("rank4_rois_outside_inverted", (image, rois), {"pooled_size": [3, 2]}),
        Example("float64_3x5", (image.astype(np.float64), flat.astype(np.float64)),
                {"pooled_size": [3, 5], "spatial_scale": 1.25}),
        Example("float16", (image.astype(np.float16), rois[0].astype(np.float16)),
                {"pooled_size": [2, 2]}),
        Example("zero_rois", (image, np.zeros((0, 5), np.float32)), {"pooled_size": [2, 2]}),
        *table,
        Example("float16_products_in_float32",  # 27.125 * float32(0.35) rounds to 9, not 10
                (np.arange(20, dtype=np.float16).reshape(1, 1, 1, 20),
                 np.array([[0, 27.125, 0, 27.125, 0], [0, 47.125, 0, 47.125, 0]], np.float16)),
                {"pooled_size": [1, 1], "spatial_scale": 0.35}),
        Example("batch_index_outside", (image, np.array([[2, 0, 0, 1, 1]], np.float32)),
                {"pooled_size": [2, 2]}, error="rois[0] batch index 2 is outside [0, 2)"),
        Example("batch_index_nan", (image, np.array([[np.nan, 0, 0, 1, 1]], np.float32)),
                {"pooled_size": [2, 2]}, error="rois[0] batch index nan is NaN, not in [0, 2)"),
        Example("coordinate_infinite", (image, np.array([[0, 0, 0, 1, np.inf]], np.float32)),
                {"pooled_size": [2, 2]}, error="rois[0] y2 inf is not finite"),
    )
