"""Sphinx configuration of the dml_onnx documentation (the ``docs`` extra).

Build it as CI does, warnings as errors::

    pip install -e '.[docs]'
    python -m sphinx -W --keep-going -b html docs docs/_build/html

The pages are Markdown (MyST); ``api.md`` documents the package from its docstrings.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's package, installed or not

import dml_onnx  # noqa: E402

project = "dml_onnx"
author = "the dml_onnx authors"
copyright = "the dml_onnx authors"  # noqa: A001 - Sphinx's name
release = version = dml_onnx.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

myst_heading_anchors = 4
"""Anchors for headings down to ``####``, as GitHub makes them, so that links such as
``specification.md#4-lppooling--...`` work on both."""

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_inherit_docstrings = False
"""``InferenceSession`` is onnxruntime's: its own methods keep onnxruntime's documentation
there, not here."""

_DEFAULT_IN_TYPE = re.compile(r"^(\s+\w+ \([^():]*), default: ")


def _docstring(app, what, name, obj, options, lines: list[str]) -> None:
    """Docstrings as napoleon reads them: a builder's ``name (type, default: value):`` loses the
    colon inside the parentheses (napoleon would split the line there), and a constant
    (``DOMAIN``, ``IR_VERSION`` ...) shows the text under its directive, not the docstring of
    its type (``int``, ``str``, ``tuple``)."""
    if what == "data" and obj.__doc__ == type(obj).__doc__:
        lines.clear()
        return
    lines[:] = [_DEFAULT_IN_TYPE.sub(r"\1, default ", line) for line in lines]


def setup(app) -> None:
    app.connect("autodoc-process-docstring", _docstring, priority=100)  # before napoleon


html_theme = "alabaster"
html_title = f"dml_onnx {release}"
html_static_path: list[str] = []
