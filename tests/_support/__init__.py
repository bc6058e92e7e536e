"""Helpers of the tests, not tests: the catalogue of bad inputs (``bad_inputs``, its rows in
``bad_input_cases``), its child process (``run_bad_inputs``), onnxruntime's native kernels as
oracles (``native``), the rank of every value of a model (``ranks``)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The project's root."""
