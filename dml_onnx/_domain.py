"""The domain's name and version, and the command line's default folders, in a module that
imports nothing heavy: the command line's ``--version`` and ``--help`` read them without loading
onnx (:mod:`dml_onnx.definition` re-exports the domain's)."""

from pathlib import Path

DOMAIN = "dml_onnx"
DOMAIN_VERSION = 1
"""The version of the ``dml_onnx`` domain (its opset import), not of the standard opset."""
MODELS = Path("models")
"""Where ``conformance export``, ``run`` and ``probe`` look without a folder argument."""
MEASUREMENTS = Path("tests", "directml")
"""Where ``conformance directml`` looks without a path: the project's measurements of the real
DirectML, in a checkout of its source (the wheel holds none)."""
