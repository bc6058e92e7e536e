"""onnxruntime's DirectML execution provider (``DmlExecutionProvider``) and the suite's forms:
which standard ops it registers, and what it was measured to do with each form.

The measurements: onnxruntime 1.24.4 with its DirectML execution provider (the
``onnxruntime-directml`` wheel, ``DirectML.dll`` 1.15.4) ran every ``_expanded`` twin of the
suite and the ``_decomposed`` form of every model that has one, on its stored inputs, compared
at the case's tolerance. A form changed since it was measured is a candidate
(:data:`CANDIDATES`), kept apart from the measured forms until it is measured.
"""

from __future__ import annotations

import onnx

from dml_onnx.form import op_version

PROVIDER = "DmlExecutionProvider"

REGISTERED: dict[str, tuple[int, ...]] = {
    "Abs": (7, 13), "Add": (7, 13, 14), "And": (7,), "Cast": (7, 9, 13), "Ceil": (7, 13),
    "Clip": (7, 11, 12, 13), "Concat": (7, 11, 13), "ConstantOfShape": (9,),
    "Div": (7, 13, 14), "Equal": (7, 11, 13), "Expand": (8, 13), "Floor": (7, 13),
    "Gather": (7, 11, 13), "Greater": (7, 9, 13), "GreaterOrEqual": (12, 16),
    "Identity": (7, 13, 14, 16), "IsInf": (10,), "IsNaN": (9, 13), "Less": (7, 9, 13),
    "LessOrEqual": (12, 16), "Max": (7, 8, 12, 13), "Min": (7, 8, 12, 13), "Mul": (7, 13, 14),
    "Neg": (7, 13), "Not": (7,), "Or": (7,), "Pad": (7, 11, 13, 18), "Pow": (7, 12, 13, 15),
    "Range": (11,), "ReduceMax": (7, 11, 12, 13, 18), "ReduceMin": (7, 11, 12, 13, 18),
    "ReduceProd": (7, 11, 13, 18), "ReduceSum": (7, 11, 13), "Reshape": (7, 13, 14),
    "Round": (11,), "ScatterElements": (11, 13, 16), "ScatterND": (11, 13, 16),
    "Shape": (7, 13, 15), "Slice": (7, 10, 11, 13), "Split": (7, 11, 13, 18),
    "Sqrt": (7, 13), "Squeeze": (7, 11, 13), "Sub": (7, 13, 14), "Transpose": (7, 13),
    "Unsqueeze": (7, 11, 13), "Where": (9, 16),
}
"""The standard ops the decomposed forms use, each with the opsets of its rows in the
provider's registration table (``operatorRegistrationInformationTable`` in onnxruntime's
``onnxruntime/core/providers/dml/DmlExecutionProvider/src/Operators/OperatorRegistration.cpp``:
``REG_INFO(13, Gather, ...)`` registers the version of Gather current in opset 13). A node is
the provider's when its version is one of those; onnxruntime gives any other node to the CPU
provider, so a form of registered ops only runs wholly as DirectML computes."""

AT_LOAD = frozenset({"Constant"})
"""Ops no provider runs: onnxruntime makes a ``Constant`` node an initializer as it loads."""


def unregistered(model: onnx.ModelProto) -> list[str]:
    """The ops of ``model`` (``Op-version``) whose version at its default-domain opset the
    provider does not register (:data:`REGISTERED`); empty for a form it runs whole."""
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    missing = []
    for op in sorted({n.op_type for n in model.graph.node} - AT_LOAD):
        version = op_version(op, opset)
        if version not in {op_version(op, row) for row in REGISTERED.get(op, ())}:
            missing.append(f"{op}-{version}")
    return missing


REGISTRY = "refused at session creation by the provider's operator registry"
FUSION = "refused at session creation by the provider's graph fusion"

EXPANDED_NOT_GOOD: dict[str, str] = {
    **{f"test_fold_{name}": REGISTRY for name in (
        "3d_undilated", "end_padding", "everything", "one_pixel_padded",
        "padding_beyond_window", "start_padding", "type_float16",
        "window_fills_padded_input")},
    **{f"test_roi_pooling_{name}": REGISTRY for name in (
        "float16_half_coordinates", "float16_outside", "half_coordinates", "outside",
        "pooled_1x4", "pooled_5x1", "pooled_larger_than_rois", "rank4_rois_outside_inverted")},
    "test_roi_align1_average_sampling_2_scaled": "disagrees: its RoiAlign, up to 0.911",
    "test_roi_align1_fixed_samples_3_one_scale": "disagrees: its RoiAlign, up to 1.09",
    "test_roi_align1_samples_1": "disagrees: its RoiAlign, up to 1.19",
    "test_roi_align1_non_finite_average": "disagrees: 3 of 60 values by 5.96e-08",
}
"""The models whose ``_expanded`` twin the provider did not load or computed wrong, with what
it did (the 149 others loaded and agreed, 25 of them in a form changed since; those and the 20
more it refused or computed wrong, whose form has changed since, are :data:`CANDIDATES`)."""

MAX_ROI_ALIGN1 = tuple(f"test_roi_align1_{name}" for name in (
    "corners_max_2_samples", "float16_int32_max", "half_boundaries_linear_max", "max",
    "max_nearest", "max_out_of_bounds_value", "non_finite_max_infinite_out_of_bounds",
    "one_image"))
MAX_ROI_ALIGN_GRAD = tuple(f"test_roi_align_grad_{name}" for name in (
    "corners_max_2_samples", "drois_max_float32_uint64", "float16_uint32_max_dx",
    "half_boundaries_max_nearest", "max_dx_only", "max", "max_nearest", "non_finite_max",
    "one_image"))
"""The ``max`` RoiAlign1 and RoiAlignGrad models (``one_image`` uses max) whose measured
``_expanded`` twin the provider's graph fusion refused (the float64 ones loaded)."""

DX_LOADED = tuple(f"test_roi_align_grad_{name}" for name in (
    "both_gradients_float64", "corners", "corners_single_sample", "defaults", "dx_float16",
    "dx_only", "fixed_samples_3_one_scale", "float16_int64_both", "float64_int32_scales_differ",
    "half_boundaries", "input_pixel_offset_0", "nearest", "non_finite_average",
    "one_pixel_image", "output_pixel_offset_0_25", "samples_1", "samples_2_to_3",
    "samples_at_most_2", "scales_differ", "seed_dx_without_x", "x_omitted",
    "x_omitted_nearest_corners"))
"""The average RoiAlignGrad models computing dX whose measured ``_expanded`` twin loaded and
agreed, with at least one region (``zero_rois`` is apart)."""

LOADED = "loaded and agreed"
UNFOLD_CHANGE = ("one Gather per spatial axis, tensors of rank up to 14",
                 "one Gather of flat positions, every tensor of rank at most 8, DirectML's limit")
DX_CHANGE = ("dX as ScatterND into zeros", "dX selects zeros where R == 0 whatever the "
             "scatters give, a Where on a scalar condition from the shape")


def _max_change(first: bool) -> tuple[str, str]:
    """The change to the max of a RoiAlign1 (``first`` false) or RoiAlignGrad twin."""
    ops = ("the max and its first hit as GreaterOrEqual, Equal, Greater, Where, ReduceMax and "
           "ReduceMin" if first else "the max as GreaterOrEqual, Where and ReduceMax")
    return (f"{ops} over axes 2 and 4 of rank-6 tensors"
            + ("" if first else ", then a rank-6 Squeeze"),
            "each output's samples transposed and reshaped into one axis of a rank-3 tensor: "
            "every comparison, Where and reduction of the max of rank at most 3, over that one "
            "axis" + (", the first hit reshaped and transposed back" if first
                      else ", no Squeeze"))


def _candidate(outcome: str, *changes: tuple[str, str]) -> str:
    """A candidate's reading from what its measured form did (``outcome``) and the
    ``changes`` (measured, present) made to it since."""
    measured_form, present_form = ("; ".join(part) for part in zip(*changes))
    return (f"its measured form ({measured_form}) {outcome}; the present one "
            f"({present_form}) is a candidate awaiting measurement")


CANDIDATES: dict[str, str] = {
    **dict.fromkeys(("test_unfold_6d", "test_unfold_6d_uint16"),
                    _candidate(f"was {REGISTRY}", UNFOLD_CHANGE)),
    **dict.fromkeys(MAX_ROI_ALIGN1, _candidate(f"was {FUSION}", _max_change(first=False))),
    **{name: _candidate(f"was {FUSION}", _max_change(first=True),
                        *(() if "_drois_" in name else (DX_CHANGE,)))  # drois only: no dX
       for name in MAX_ROI_ALIGN_GRAD},
    "test_roi_align_grad_zero_rois": _candidate(
        "computed dX wrong: the provider returned memory it never wrote (up to 2.95e38)",
        DX_CHANGE),
    **dict.fromkeys(("test_roi_align1_float64_uint32_rank3_max_nearest",
                     "test_roi_align1_max_nearest_corners_float64_int32"),
                    _candidate(LOADED, _max_change(first=False))),
    "test_roi_align_grad_float64_uint64_rank4_max": _candidate(
        LOADED, _max_change(first=True), DX_CHANGE),
    **dict.fromkeys(DX_LOADED, _candidate(LOADED, DX_CHANGE)),
}
"""The models whose ``_expanded`` twin has changed since it was measured: to avoid what the
provider refused or computed wrong, or (those that loaded and agreed) as the same change
reaches them. Unmeasured, neither known good nor known bad."""

DECOMPOSED_GOOD = frozenset(f"test_{name}" for name in (
    "fold_2d_float16", "fold_2d_padded", "fold_3d_undilated", "fold_defaults",
    "fold_dilated_window_fills_input", "fold_dilations", "fold_end_padding", "fold_everything",
    "fold_one_pixel", "fold_one_pixel_padded", "fold_padding_beyond_window",
    "fold_start_padding", "fold_stride_beyond_window", "fold_strides", "fold_type_float16",
    "fold_window_fills_padded_input", "lp_pooling_2d_float16",
    "lp_pooling_2d_p1_strided_asymmetric", "lp_pooling_2d_p2_padded",
    "lp_pooling_3d_undilated", "lp_pooling_defaults", "lp_pooling_one_pixel",
    "lp_pooling_one_pixel_padded", "lp_pooling_p1", "lp_pooling_p3", "lp_pooling_p4",
    "lp_pooling_p7", "lp_pooling_start_padding", "lp_pooling_stride_beyond_window",
    "lp_pooling_strides", "lp_pooling_window_fills_padded_input",
    "roi_align1_average_sampling_2_scaled", "roi_align1_fixed_samples_3_one_scale",
    "roi_align1_float64_int64_fixed_samples", "roi_align1_samples_1",
    "roi_pooling_batch_truncation", "roi_pooling_defaults", "roi_pooling_float16",
    "roi_pooling_float16_half_coordinates", "roi_pooling_float16_outside",
    "roi_pooling_float16_products_in_float32", "roi_pooling_float16_scale_third",
    "roi_pooling_half_coordinates", "roi_pooling_half_coordinates_scale_half",
    "roi_pooling_inverted", "roi_pooling_negative_values", "roi_pooling_one_pixel_image",
    "roi_pooling_outside", "roi_pooling_pooled_1x1", "roi_pooling_pooled_1x4",
    "roi_pooling_pooled_5x1", "roi_pooling_pooled_larger_than_rois",
    "roi_pooling_rank4_rois_outside_inverted", "roi_pooling_rank4_zero_rois",
    "roi_pooling_scale_large", "roi_pooling_scale_negative", "roi_pooling_scale_third",
    "roi_pooling_scale_tiny", "roi_pooling_scale_zero", "roi_pooling_zero_rois"))
"""The models whose decomposed form (``lower_model(..., native=False)``, a form apart from
the ``_expanded`` twin) the provider loaded and computed right: every one measured."""


def measured(model: str) -> str:
    """What the provider was measured to do with the suite's form of ``model`` (a case
    folder's name) that it should run: its ``_decomposed`` twin where that was measured good,
    else its ``_expanded`` twin, measured or (:data:`CANDIDATES`) awaiting measurement."""
    base = model.removesuffix("_expanded").removesuffix("_decomposed")
    if base in DECOMPOSED_GOOD:
        return "the _decomposed twin loads and agrees"
    if base in CANDIDATES:
        return f"the _expanded twin is unmeasured: {CANDIDATES[base]}"
    if base in EXPANDED_NOT_GOOD:
        return f"the _expanded twin is {EXPANDED_NOT_GOOD[base]}; no form of it is known good"
    return "the _expanded twin loads and agrees"
