"""What ``dml-onnx conformance export`` wrote, and so may replace: a case folder holding only
the suite's files, a probe naming a probed point; anything else is the user's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from dml_onnx.conformance.points import POINTS
from dml_onnx.model_files import read_regular

SUITE_FILE = re.compile(r"model\.onnx|config\.txt|probe\.json|"
                        r"test_data_set_0/(input|output)_\d+\.pb|readings/\w+/output_0\.pb")
"""The paths, relative to a case folder, of everything the suite writes there."""
SUITE_MODEL_BYTES = 1 << 24
"""The suite's models are far smaller; a larger ``model.onnx`` is not one of them."""


def written_by_suite(folder: Path) -> bool:
    """Whether ``folder`` holds only what :func:`~dml_onnx.conformance.suite.export_suite`
    writes: a folder (not a link) of regular files at the suite's paths, with a
    ``model.onnx`` this project made (producer ``dml_onnx``) or, for a probe, a
    ``probe.json`` naming a probed point. Nothing else is opened (a FIFO or a device is
    never read)."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    for path in folder.rglob("*"):
        if path.is_symlink() or not (path.is_dir() or path.is_file()):
            return False
        if path.is_file() and not SUITE_FILE.fullmatch(path.relative_to(folder).as_posix()):
            return False
    model, probe = folder / "model.onnx", folder / "probe.json"
    if not model.is_file() or model.stat().st_size > SUITE_MODEL_BYTES:
        return False
    if probe.is_file():
        return names_a_point(probe)
    try:
        return onnx.load(model, load_external_data=False).producer_name == "dml_onnx"
    except (DecodeError, ValueError, OSError):
        return False


PROBE_FILE_BYTES = 1 << 16
"""The largest ``probe.json`` read."""


def names_a_point(path: Path) -> bool:
    """Whether ``path`` is a ``probe.json`` as
    :func:`~dml_onnx.conformance.probes.export_probes` writes it (a small file naming one of
    :data:`~dml_onnx.conformance.points.POINTS`)."""
    try:
        data = json.loads(read_regular(path, PROBE_FILE_BYTES))
    except (ValueError, OSError):
        return False
    return isinstance(data, dict) and data.get("point") in {p.name for p in POINTS}


def check_replaceable(directory: str | Path) -> None:
    """Raise ``ValueError`` unless ``directory`` is absent or holds only probes that
    :func:`~dml_onnx.conformance.probes.export_probes` wrote, which it may replace."""
    root = Path(directory)
    if not (root.exists() or root.is_symlink()):
        return
    if root.is_symlink() or not root.is_dir() or not all(
            entry.name.startswith("test_probe_") and written_by_suite(entry)
            for entry in root.iterdir()):
        raise ValueError(f"{root} holds what dml-onnx conformance export did not write: not "
                         "replaced (move it away, or export to another folder)")
