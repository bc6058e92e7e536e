"""numpy kernels of the ``dml_onnx`` operators, one module per operator.

Each module has ``check_attributes(node=..., **attributes)`` and the kernel itself, named after
the module, which takes the input arrays positionally and every attribute by keyword. The
kernels are run by onnxruntime through onnxruntime-extensions (see ``dml_onnx.runtime``) and by
``dml_onnx.ReferenceEvaluator``; they can also be called directly.
"""

from custom_ops._checks import KernelError

__all__ = ["KernelError"]
