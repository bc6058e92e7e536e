"""Errors and scalar checks of the kernels: :class:`KernelError`, the attribute and input checks,
the compute type, and :func:`takes_attributes`, which gives every kernel's ``prepare`` its
attribute names.

Plain numpy only. Every check raises :class:`KernelError` with the message shape the spec asks
for: ``"<Op> '<node>': <field> <value> <rule>"``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

UINT32_MAX = 4294967295
F = TypeVar("F", bound=Callable[..., Any])


class KernelError(ValueError, RuntimeError):
    """Invalid input or attribute of one node: a ``ValueError``, and a ``RuntimeError`` as
    torch's and torchvision's kernels raise for bad inputs.

    ``str(error)`` reads ``"RoiPooling 'pool1': rois[3] batch index 7 is outside [0, 2)"``;
    the parts are kept as attributes for programs.
    """

    __module__ = "dml_onnx"  # its public name: tracebacks, repr and pickle use it

    def __init__(self, op: str, node: str, field: str, value: object, rule: str):
        self.op, self.node, self.field, self.value, self.rule = op, node, field, value, rule
        super().__init__(f"{op} '{node}': {field} {_show(value)} {rule}")

    def __reduce__(self):  # keep the five-argument constructor picklable
        return (type(self), (self.op, self.node, self.field, self.value, self.rule))


def _show(value: object) -> str:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (np.generic,)):
        value = value.item()
    if isinstance(value, tuple):
        value = list(value)
    return repr(value) if isinstance(value, str) else str(value)


@functools.cache  # every kernel call asks: uncached, these two took 1.4 us of a tiny call
def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a float kernel computes in: float16 is computed in float32."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.float16 else np.dtype(dtype)


@functools.cache
def lowest(dtype: np.dtype) -> np.floating:
    """``lowest(T)`` of the specification, the element type's lowest finite value (-65504
    for float16), in the compute type: where a maximum starts."""
    return compute_dtype(dtype).type(np.finfo(dtype).min)


def check_ints(op: str, node: str, name: str, values: Sequence[int], *, minimum: int,
               length: int | None = None) -> tuple[int, ...]:
    """Check a list attribute: optional exact length, every value >= minimum."""
    values = tuple(int(v) for v in values)
    if length is not None and len(values) != length:
        raise KernelError(op, node, name, list(values),
                          f"must have {length} values, not {len(values)}")
    for i, v in enumerate(values):
        if v < minimum:
            raise KernelError(op, node, f"{name}[{i}]", v, f"is below {minimum}")
    return values


def check_int(op: str, node: str, name: str, value: int, *, minimum: int,
              maximum: int | None = None) -> int:
    value = int(value)
    if value < minimum:
        raise KernelError(op, node, name, value, f"is below {minimum}")
    if maximum is not None and value > maximum:
        raise KernelError(op, node, name, value, f"is above {maximum}")
    return value


def check_finite(op: str, node: str, name: str, value: float) -> float:
    value = float(value)
    if not np.isfinite(value):
        raise KernelError(op, node, name, value, "is not finite")
    return value


def check_choice(op: str, node: str, name: str, value: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise KernelError(op, node, name, value, f"is not one of {', '.join(map(repr, choices))}")
    return value


def _count_phrase(counts: Sequence[int]) -> str:
    counts = sorted(counts)
    if counts == list(range(counts[0], counts[-1] + 1)) and len(counts) > 1:
        return f"{counts[0]} to {counts[-1]}"
    return " or ".join(map(str, counts))


def check_rank(op: str, node: str, name: str, array: np.ndarray, ranks: Sequence[int]) -> None:
    if array.ndim not in ranks:
        raise KernelError(op, node, f"{name} rank", array.ndim,
                          f"is not {_count_phrase(ranks)} (shape {list(array.shape)})")


def check_float_input(op: str, node: str, name: str, array: np.ndarray) -> None:
    if array.dtype not in (np.float16, np.float32, np.float64):
        raise KernelError(op, node, f"{name} element type", array.dtype.name,
                          "is not float16, float32 or float64")


def attribute_parameters(*functions: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    """The keyword-only parameters of ``functions`` other than ``node``, in order: the
    attributes (and call options) of a kernel whose ``prepare`` is the first function and
    forwards the rest of its keywords to the others (a shared check such as
    ``dml_onnx._kernels._roi_grid.check_sampling``)."""
    parameters: dict[str, inspect.Parameter] = {}
    for function in functions:
        for name, parameter in inspect.signature(function).parameters.items():
            if parameter.kind is parameter.KEYWORD_ONLY and name != "node":
                parameters.setdefault(name, parameter)
    return parameters


def takes_attributes(op: str, *shared: Callable[..., Any]) -> Callable[[F], F]:
    """Decorate a kernel's ``prepare(*, node, <attributes>, **rest)``: its keyword-only
    parameters and those of the ``shared`` checks it forwards ``rest`` to are the operator's
    attributes (:func:`attribute_parameters`, kept as ``prepare.attributes``). A name not among
    them, or a required one missing, raises :class:`KernelError` before ``prepare`` runs."""
    def decorate(prepare: F) -> F:
        parameters = attribute_parameters(prepare, *shared)
        required = [n for n, p in parameters.items() if p.default is inspect.Parameter.empty]

        @functools.wraps(prepare)
        def checked(*, node: str = "", **attributes: Any) -> Any:
            unknown = sorted(set(attributes) - set(parameters))
            if unknown:
                raise KernelError(op, node, "attribute", unknown[0],
                                  f"is unknown (known: {', '.join(parameters)})")
            for name in required:
                if name not in attributes:
                    raise KernelError(op, node, "attribute", name, "is required but missing")
            return prepare(node=node, **attributes)
        checked.attributes = parameters  # type: ignore[attr-defined]
        return checked  # type: ignore[return-value]
    return decorate
