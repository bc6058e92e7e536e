"""The package takes no name of the user's: the kernels install as the private package
``dml_onnx._kernels`` (the repository's folder ``custom_ops/``), so that a user's own
``custom_ops`` module or folder shadows nothing, and the public errors and warnings are
``dml_onnx``'s by name (printed, in tracebacks, pickled)."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import textwrap
import traceback
import zipfile
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import dml_onnx

ROOT = Path(__file__).resolve().parent.parent

_USERS_OWN = """
import os, sys, tempfile, warnings
os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp()  # cold: the compiler process compiles
import numpy as np
from onnx import TensorProto, helper
import dml_onnx
from dml_onnx._kernels import _compiler_process

node = dml_onnx.fold("X", "Y", window_sizes=[2, 2], output_size=[3, 3], name="fold")
model = dml_onnx.make_model(
    [node], [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4, 4])],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 1, 3, 3])])
X = np.arange(16, dtype=np.float32).reshape(1, 4, 4)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", dml_onnx.CompilingWarning)
    (Y,) = dml_onnx.InferenceSession(model).run(None, {"X": X})
print(Y.sum(), _compiler_process._running is not None)
import custom_ops
here = os.path.realpath(os.getcwd()) + os.sep
print(custom_ops.MINE, os.path.realpath(custom_ops.__file__).startswith(here))
sys.stdout.flush()
dml_onnx.fold("X", "Y", window_sizes=[0, 2], output_size=[3, 3], name="bad")
"""


@pytest.mark.parametrize("form", ["folder", "module"])
def test_a_users_own_custom_ops_shadows_nothing(form, tmp_path):
    """A fresh interpreter whose working directory holds the user's own ``custom_ops`` runs a
    session with a dml_onnx node (compiling its loops cold, in the compiler process), gets
    the user's module from ``import custom_ops``, and an uncaught kernel error prints as
    ``dml_onnx.KernelError``."""
    own = "MINE = 'users'\n"
    if form == "folder":
        (tmp_path / "custom_ops").mkdir()
        (tmp_path / "custom_ops" / "__init__.py").write_text(own)
    else:
        (tmp_path / "custom_ops.py").write_text(own)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-c", _USERS_OWN], cwd=tmp_path, env=environment,
                          capture_output=True, text=True, timeout=300)
    assert done.stdout.split("\n")[:2] == ["120.0 True", "users True"], done.stderr
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "dml_onnx.KernelError: Fold 'bad': window_sizes[0] 0 is below 1")


def test_the_public_errors_and_warnings_are_dml_onnxs_by_name():
    for public in (dml_onnx.KernelError, dml_onnx.CompilingWarning):
        assert public.__module__ == "dml_onnx"
        assert public.__qualname__ == public.__name__
        assert getattr(dml_onnx, public.__name__) is public
    node = dml_onnx.roi_pooling("X", "rois", "Y", pooled_size=[2, 2], spatial_scale=0.5,
                                name="pool")
    model = dml_onnx.make_model(
        [node], [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 1, 4, 4]),
                 helper.make_tensor_value_info("rois", TensorProto.FLOAT, ["R", 5])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["R", 1, 2, 2])])
    X = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    rois = np.array([[0, 0, 0, np.nan, 6]], dtype=np.float32)
    with pytest.raises(dml_onnx.KernelError) as caught:
        dml_onnx.InferenceSession(model).run(None, {"X": X, "rois": rois})
    error = caught.value
    assert traceback.format_exception_only(error) == [
        "dml_onnx.KernelError: RoiPooling 'pool': rois[0] x2 nan is not finite\n"]
    assert repr(error) == """KernelError("RoiPooling 'pool': rois[0] x2 nan is not finite")"""
    assert b"dml_onnx\n" in pickle.dumps(error, protocol=0)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is dml_onnx.KernelError
    assert (str(again), again.op, again.node, again.field, again.rule) == (
        str(error), error.op, error.node, error.field, error.rule)
    warning = dml_onnx.CompilingWarning("compiling")
    assert type(pickle.loads(pickle.dumps(warning))) is dml_onnx.CompilingWarning


def _source_copy(into: Path) -> Path:
    """What a build reads: the project's metadata, the package and the kernels' folder (the
    link ``dml_onnx/_kernels`` kept a link)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("dml_onnx", "custom_ops"):
        shutil.copytree(ROOT / name, into / name, symlinks=True, ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, into / name)
    return into


def test_the_wheel_holds_the_kernels_inside_dml_onnx_and_no_top_level_custom_ops(tmp_path):
    pytest.importorskip("setuptools")
    source = _source_copy(tmp_path / "source")
    code = textwrap.dedent("""
        import sys
        from setuptools import build_meta
        print(build_meta.build_wheel(sys.argv[1]))
    """)
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "dist")], cwd=source,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    wheel = tmp_path / "dist" / done.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert archive.read(top_level).decode().split() == ["dml_onnx"]
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {
        "dml_onnx"}
    kernels = {p.name for p in (ROOT / "custom_ops").glob("*.py")}
    assert {n.rpartition("/")[2] for n in names if n.startswith("dml_onnx/_kernels/")} == kernels
