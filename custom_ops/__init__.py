"""numpy kernels of the ``dml_onnx`` operators, one module per operator: the private package
``dml_onnx._kernels``, whose files are the repository's top-level ``custom_ops/`` folder (the
link ``dml_onnx/_kernels``; the wheel holds them under ``dml_onnx/_kernels/`` and installs no
top-level ``custom_ops``, so that a user's own module of that name shadows nothing). They import
one another relatively and never import onnx or the rest of ``dml_onnx``.

Each module has ``prepare(node=..., **attributes)``, which checks a node's attributes once and
returns ``run(*inputs)`` (a name it does not take raises :class:`KernelError`), and the
kernel's one-shot call, named after the module: ``<op>(*inputs, node=..., **attributes)`` is
``prepare(node=..., **attributes)(*inputs)``. The kernels are run by onnxruntime through
onnxruntime-extensions (see ``dml_onnx.runtime``) and by ``dml_onnx.ReferenceEvaluator``; they
can also be called directly.
"""

from ._checks import KernelError

__all__ = ["KernelError"]
