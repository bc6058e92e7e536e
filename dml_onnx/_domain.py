"""The domain's name and version, in a module that imports nothing: the command line's
``--version`` reads them without loading onnx (:mod:`dml_onnx.definition` re-exports them)."""

DOMAIN = "dml_onnx"
DOMAIN_VERSION = 1
"""The version of the ``dml_onnx`` domain (its opset import), not of the standard opset."""
