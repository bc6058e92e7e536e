"""``python -m dml_onnx``: the same as the ``dml-onnx`` command."""

import sys

from dml_onnx.cli import main

sys.exit(main())
