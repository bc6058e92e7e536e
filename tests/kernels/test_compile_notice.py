"""The first cold compilation of an operator's loops says so, once per operator and process,
with a ``CompilingWarning`` naming the operator and pointing at the application's line; a
process that finds the loops in numba's cache says nothing, and filters that make warnings
errors fail no kernel."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest

import dml_onnx
from dml_onnx._kernels import _compiler_process
from tests._support import ROOT

_FOLDS = textwrap.dedent("""
    import numpy as np
    from dml_onnx._kernels.fold import fold
    X = np.arange(16, dtype=np.float32).reshape(1, 4, 4)
    fold(X, window_sizes=[2, 2], output_size=[3, 3])  # the line the notice names
    fold(X.astype(np.float64), window_sizes=[2, 2], output_size=[3, 3])
    print("done")
""")


def _folds(cache: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-c", _FOLDS], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env={**os.environ, "NUMBA_CACHE_DIR": cache})
    assert done.returncode == 0 and done.stdout == "done\n", done.stderr[-2000:]
    return done


def test_a_cold_compile_says_so_once_and_a_cached_run_says_nothing(tmp_path):
    cache = str(tmp_path / "numba")
    cold = _folds(cache)
    assert cold.stderr.count("CompilingWarning") == 1, cold.stderr  # float64 compiles silently
    assert "<string>:5: CompilingWarning: dml_onnx: compiling the Fold kernel's loops for this " \
           "machine (a few seconds to half a minute, once: numba keeps them in its on-disk " \
           "cache" in cold.stderr
    warm = _folds(cache)
    assert "CompilingWarning" not in warm.stderr, warm.stderr


def test_the_notice_is_said_once_per_operator_and_never_fails_a_kernel(monkeypatch):
    monkeypatch.setattr(_compiler_process, "_announced", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _compiler_process.announce()
        _compiler_process.announce()
    assert [str(w.message) for w in caught] == [
        "dml_onnx: compiling the kernels' loops for this machine (a few seconds to half a "
        "minute, once: numba keeps them in its on-disk cache for later processes) ..."]
    assert caught[0].category is dml_onnx.CompilingWarning
    assert issubclass(dml_onnx.CompilingWarning, UserWarning)
    assert caught[0].filename == __file__  # the caller's line, past the kernels
    monkeypatch.setattr(_compiler_process, "_announced", set())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _compiler_process.announce()  # dropped, not raised


def test_the_notice_names_the_operator_whose_kernel_waits_on_another_thread(monkeypatch):
    """A loop module compiles as it loads, on a helper thread, while the kernel that asked
    for it waits: the notice names that kernel's operator."""
    monkeypatch.setattr(_compiler_process, "_announced", set())
    ready, release = threading.Event(), threading.Event()
    kernel_globals = {"__name__": "dml_onnx._kernels.lp_pooling", "OP": "LpPooling",
                      "ready": ready, "release": release}
    exec("def run():\n    ready.set()\n    release.wait(10)\n", kernel_globals)
    waiting = threading.Thread(target=kernel_globals["run"])
    waiting.start()
    try:
        ready.wait(10)
        with pytest.warns(dml_onnx.CompilingWarning, match="the LpPooling kernel's loops"):
            _compiler_process.announce()
    finally:
        release.set()
        waiting.join()
