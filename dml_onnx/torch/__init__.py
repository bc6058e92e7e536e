"""The ``dml_onnx`` operators as differentiable PyTorch operators (the ``torch`` extra).

``roi_pooling``, ``roi_align1``, ``lp_pooling``, ``unfold`` and ``fold`` take CPU tensors of the
specification's types and return exactly what the ``dml_onnx`` kernels return; attributes keep
the specification's names and defaults. They are ``torch.library`` custom operators
(``torch.ops.dml_onnx.<Op>``), so they run in eager mode, under ``torch.export`` and in
``torch.compile``. Gradients: ``roi_align1`` with respect to X and the ROI corners (RoiAlignGrad's
dX and drois); the others with respect to X. :func:`export` writes PyTorch models (these
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

__all__ = ["export", "fold", "lp_pooling", "roi_align1", "roi_pooling", "unfold"]
