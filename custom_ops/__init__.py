"""numpy kernels of the ``dml_onnx`` operators, one module per operator.

Each module has ``prepare(node=..., **attributes)``, which checks a node's attributes once and
returns ``run(*inputs)`` (a name it does not take raises :class:`KernelError`), and the
kernel's one-shot call, named after the module: ``<op>(*inputs, node=..., **attributes)`` is
``prepare(node=..., **attributes)(*inputs)``. The kernels are run by onnxruntime through
onnxruntime-extensions (see ``dml_onnx.runtime``) and by ``dml_onnx.ReferenceEvaluator``; they
can also be called directly.
"""

from custom_ops._checks import KernelError

__all__ = ["KernelError"]
