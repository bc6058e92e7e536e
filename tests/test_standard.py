"""Standard-op forms against onnxruntime's native kernels (MaxRoiPool, LpPool, Col2Im, RoiAlign,
Pad + Gather), or onnx's reference implementation where onnxruntime has no kernel or a known
bug."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnx.reference
import onnxruntime as ort
import pytest

import dml_onnx
from dml_onnx.conformance import example_case


def _has_equivalent(definition, example) -> bool:
    try:
        dml_onnx.to_standard_model(example_case(definition, example).model)
    except dml_onnx.NotEquivalent:
        return False
    return True


CASES = [(d, e) for d in dml_onnx.OPERATORS if d.standard_form is not None
         for e in d.examples() if not e.error and _has_equivalent(d, e)]
# Examples without an equivalent: Fold in 1-D (Col2Im has 2+ axes); RoiAlign1 with nearest,
# max, corner alignment or other offsets (RoiAlign cannot express them).
CONVERTIBLE = {"RoiPooling": 5, "RoiAlign1": 3, "LpPooling": 5, "Unfold": 7, "Fold": 4}


def test_the_examples_with_a_standard_form_are_the_expected_ones():
    counts = {}
    for definition, _ in CASES:
        counts[definition.name] = counts.get(definition.name, 0) + 1
    assert counts == CONVERTIBLE


def _as_float32(definition, example):
    """onnxruntime's MaxRoiPool, LpPool and Col2Im take float32 only (its Pad takes most types
    but not 16-bit integers): compare the mapping of the attributes on float32 copies."""
    if definition.name == "Unfold":
        inputs = tuple(a.astype(np.int32) if a.dtype in (np.int16, np.uint16) else a
                       for a in example.inputs)
        return dataclasses.replace(example, inputs=inputs)
    inputs = tuple(a.astype(np.float32) if a is not None and a.dtype.kind in "fiu" and
                   definition.inputs[i].type == "T" else a for i, a in enumerate(example.inputs))
    return dataclasses.replace(example, inputs=inputs, expected=())


def _native_runner(definition, example, standard):
    """onnxruntime, except where its kernel is wrong (Col2Im in 3-D with dilation > 1, see
    the research notes): there onnx's reference implementation."""
    dilated_3d = definition.name == "Fold" and len(example.attributes["window_sizes"]) == 3 \
        and any(d > 1 for d in example.attributes.get("dilations", []))
    if dilated_3d:
        return onnx.reference.ReferenceEvaluator(standard)
    return ort.InferenceSession(standard.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("pair", CASES, ids=lambda p: f"{p[0].name}-{p[1].name}")
def test_standard_form_computes_the_same(pair):
    definition, example = pair
    example = _as_float32(definition, example)
    case = example_case(definition, example)
    standard = dml_onnx.to_standard_model(case.model)
    assert all(n.domain in ("", "ai.onnx") for n in standard.graph.node)
    onnx.checker.check_model(standard, full_check=True)
    names = list(case.expected)
    ours = dml_onnx.InferenceSession(case.model).run(names, case.feeds)
    native = _native_runner(definition, example, standard).run(names, case.feeds)
    if _adaptive_align(definition, example):
        keep = _positive_regions(example)
        native, ours = [a[keep] for a in native], [a[keep] for a in ours]
    for got, want in zip(native, ours):
        assert got.shape == want.shape and got.dtype == want.dtype
        if want.dtype.kind == "f":
            tolerance = 1e-3 if want.dtype == np.float16 else 1e-5
            np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)
        else:
            np.testing.assert_array_equal(got, want)


def _adaptive_align(definition, example) -> bool:
    return definition.name == "RoiAlign1" and \
        example.attributes.get("maximum_samples_per_output", 2**32 - 1) == 2**32 - 1


def _positive_regions(example) -> np.ndarray:
    rois = example.inputs[1].reshape(-1, 4).astype(np.float64)
    return (rois[:, 2] > rois[:, 0]) & (rois[:, 3] > rois[:, 1])


def test_adaptive_sampling_differs_from_roialign_only_for_empty_or_inverted_regions():
    """The spec's sample count ceil(|size| / OW) >= 1 samples an empty or inverted region;
    ONNX RoiAlign's ceil(size / OW) is 0 or negative there and gives 0."""
    definition = dml_onnx.OPERATORS_BY_NAME["RoiAlign1"]
    example = next(e for e in definition.examples() if _adaptive_align(definition, e)
                   and not e.error and len(e.inputs[1]) and not _positive_regions(e).all())
    case = example_case(definition, example)
    ours = dml_onnx.InferenceSession(case.model).run(None, case.feeds)[0]
    standard = dml_onnx.to_standard_model(case.model)
    native = ort.InferenceSession(standard.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, case.feeds)[0]
    degenerate = ~_positive_regions(example)
    assert (native[degenerate] == 0).all()
    assert (ours[degenerate] != 0).any()
    np.testing.assert_allclose(native[~degenerate], ours[~degenerate], rtol=1e-5, atol=1e-5)


def test_operators_without_an_equivalent_say_so():
    fold = dml_onnx.OPERATORS_BY_NAME["Fold"]
    example = next(e for e in fold.examples() if not e.error and not _has_equivalent(fold, e))
    model = example_case(fold, example).model
    with pytest.raises(dml_onnx.NotEquivalent, match="Col2Im needs 2 or more spatial axes"):
        dml_onnx.to_standard_model(model)
