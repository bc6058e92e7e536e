"""The window attributes shared by LpPooling, Unfold and Fold, with their defaults filled in: a
neutral module that the operator definitions (``dml_onnx.ops``) and the references
(``dml_onnx.reference_ops``) both read, so that neither imports the other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from custom_ops._common import filled


class Window(NamedTuple):
    """The window attributes of one node with their defaults filled in (k values each)."""

    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    start: tuple[int, ...]
    end: tuple[int, ...]

    @classmethod
    def of(cls, sizes: Sequence[int], attributes: dict[str, Any]) -> Window:
        """The window ``sizes`` with the other attributes of a node (or a case)."""
        k = len(sizes)
        return cls(tuple(int(v) for v in sizes), filled(attributes.get("strides"), k, 1),
                   filled(attributes.get("dilations"), k, 1),
                   filled(attributes.get("start_padding"), k, 0),
                   filled(attributes.get("end_padding"), k, 0))

    @property
    def k(self) -> int:
        return len(self.sizes)

    @property
    def padded(self) -> bool:
        return any(self.start) or any(self.end)

    @property
    def spans(self) -> tuple[int, ...]:
        """``dilation * (window - 1)`` per axis: how far the last tap lies from the first."""
        return tuple(d * (w - 1) for w, d in zip(self.sizes, self.dilations))
