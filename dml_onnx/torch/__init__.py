"""The ``dml_onnx`` operators as differentiable PyTorch operators (the ``torch`` extra).

``roi_pooling``, ``roi_align1``, ``lp_pooling``, ``unfold`` and ``fold`` take CPU tensors of the
specification's types and return exactly what the ``dml_onnx`` kernels return; attributes keep
the specification's names and defaults. They are ``torch.library`` custom operators
(``torch.ops.dml_onnx.<Op>``), so they run in eager mode, under ``torch.export`` and in
``torch.compile``; their fake implementations take symbolic sizes (``dynamic=True``,
``torch.export`` with dynamic dims). ``roi_align``, ``roi_pool``, ``RoIAlign``, ``RoIPool`` and
``MultiScaleRoIAlign`` are torchvision's ROI operators with its signatures, on these kernels
(DirectML's numerics): ``import dml_onnx.torch as ops`` in place of ``torchvision.ops``.
Gradients: ``roi_align1`` with respect to X and the ROI corners (RoiAlignGrad's dX and the
exact drois), and twice for average (RoiAlignGrad is differentiable in dY and the corners);
the others with respect to X. :func:`export` writes PyTorch models (these
operators, torchvision's ``roi_align`` and ``roi_pool``, ``F.fold``) as ONNX graphs with
``dml_onnx`` nodes.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401 - the extra's presence
except ImportError as error:
    raise ImportError("dml_onnx.torch needs PyTorch: pip install 'dml-onnx[torch]'") from error

from dml_onnx.torch._export import export
from dml_onnx.torch._ops import fold, lp_pooling, roi_align1, roi_pooling, unfold
from dml_onnx.torch._torchvision import (
    MultiScaleRoIAlign,
    RoIAlign,
    RoIPool,
    roi_align,
    roi_pool,
)

__all__ = ["MultiScaleRoIAlign", "RoIAlign", "RoIPool", "export", "fold", "lp_pooling",
           "roi_align", "roi_align1", "roi_pool", "roi_pooling", "unfold"]
