"""What the dml_onnx.torch tests share: one seeded generator, random float64 tensors and
random region corners drawn from it."""

from __future__ import annotations

import torch

GENERATOR = torch.Generator().manual_seed(7)


def _random(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64, generator=GENERATOR)


def _boxes(count: int, size: float) -> torch.Tensor:
    """Random corners (some regions inverted, some partly outside): sample positions land on
    whole pixels with probability 0, where the bilinear map has kinks."""
    return torch.rand(count, 4, dtype=torch.float64, generator=GENERATOR) * (size + 2) - 1
