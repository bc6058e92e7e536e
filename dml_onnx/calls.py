"""Calling an operator's kernel or reference on arrays, as every layer that runs a node does:
the attributes as keyword arguments, the output-memory check before the call, and one entry
per declared output back.

``inputs`` has one array per declared input (``None`` where omitted); ``outputs_present`` one
boolean per declared output; ``node`` is the node's name, for errors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from dml_onnx._kernels._checks import KernelError, compute_dtype
from dml_onnx._kernels.limits import check_memory, memory_limit
from dml_onnx.definition import Shape, known

if TYPE_CHECKING:
    from dml_onnx.definition import OpDefinition

Outputs = tuple[np.ndarray | None, ...]


def run_kernel(definition: OpDefinition, inputs: Sequence[np.ndarray | None],
               attributes: dict[str, Any], node: str, outputs_present: Sequence[bool]
               ) -> Outputs:
    """Run the kernel; always returns one entry per declared output."""
    return bind_kernel(definition, attributes, node, outputs_present)(inputs)


def bind_kernel(definition: OpDefinition, attributes: dict[str, Any], node: str,
                outputs_present: Sequence[bool]
                ) -> Callable[[Sequence[np.ndarray | None]], Outputs]:
    """:func:`run_kernel` with the node fixed: ``run(inputs)`` for repeated calls.

    List attributes are passed as tuples, so that kernels can memoise on them.
    """
    options = _call_options(definition, attributes, node, outputs_present)
    fitted: object = None  # the last input shapes and memory limit that passed
    prepared: Callable[..., Any] | None = None

    def run(inputs: Sequence[np.ndarray | None]) -> Outputs:
        nonlocal fitted, prepared
        key = (memory_limit(), *(None if a is None else (a.shape, a.dtype) for a in inputs))
        if key != fitted:  # inline, not LayoutMemo: a call costs about a microsecond less
            check_output_memory(definition, inputs, attributes, node, outputs_present)
            fitted = key
        kernel = prepared
        if kernel is None:  # bad attributes raise here, on every call
            kernel = prepared = definition.prepare(**options)
        result = kernel(*inputs)
        return result if isinstance(result, tuple) else (result,)
    return run


def run_reference(definition: OpDefinition, inputs: Sequence[np.ndarray | None],
                  attributes: dict[str, Any], node: str, outputs_present: Sequence[bool]
                  ) -> Outputs:
    """:func:`run_kernel` with the plain :attr:`~OpDefinition.reference` implementation
    instead."""
    check_output_memory(definition, inputs, attributes, node, outputs_present)
    result = definition.compute_reference(*inputs, **_call_options(definition, attributes, node,
                                                           outputs_present))
    return result if isinstance(result, tuple) else (result,)


def _call_options(definition: OpDefinition, attributes: dict[str, Any], node: str,
                  outputs_present: Sequence[bool]) -> dict[str, Any]:
    """The keyword arguments of the kernel and the reference: attributes (lists as
    tuples), ``node`` and the options derived from the requested outputs."""
    return {"node": node, **definition.kernel_options(list(outputs_present)),
            **{name: tuple(value) if isinstance(value, list) else value
               for name, value in attributes.items()}}


# --------------------------------------------------------------------- output memory
def check_output_memory(definition: OpDefinition, inputs: Sequence[np.ndarray | None],
                        attributes: dict[str, Any], node: str,
                        outputs_present: Sequence[bool]) -> None:
    """Raise :class:`KernelError` before a kernel runs when one of its requested outputs
    (shapes from :attr:`~OpDefinition.infer_shapes`, at the type the kernel computes it in:
    float16 as float32) would exceed the memory limit. Inputs whose shapes do not fit are left
    to the kernel, which names the exact problem."""
    try:
        shapes = definition.infer_shapes([None if a is None else list(a.shape) for a in inputs],
                                         attributes, node)
    except ValueError:
        return
    dtypes = {p.type: a.dtype for p, a in zip(definition.inputs, inputs) if a is not None}
    errors = output_memory_errors(definition, node, shapes, dtypes, outputs_present)
    if errors:
        raise errors[0]


def output_memory_errors(definition: OpDefinition, node: str, shapes: Sequence[Shape],
                         dtypes: Mapping[str, np.dtype], outputs_present: Sequence[bool]
                         ) -> list[KernelError]:
    """The memory-limit error of each requested output (``shapes``: the output shapes;
    ``dtypes``: element types by type-constraint name) over the limit, at the type the kernel
    computes it in; outputs whose shape or type is not known are left out."""
    errors = []
    for parameter, shape, present in zip(definition.outputs, shapes, outputs_present):
        if (present and shape is not None and parameter.type in dtypes
                and all(known(d) for d in shape)):
            try:
                check_memory(definition.name, node, f"output {parameter.name}",
                             cast(list[int], shape),
                             compute_dtype(dtypes[parameter.type]))
            except KernelError as error:
                errors.append(error)
    return errors
