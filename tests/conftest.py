"""What every test module may use: the ``cli`` fixture runs ``python -m dml_onnx`` and the
``python_child`` fixture runs Python code, each in a fresh interpreter at the project's root
(never inheriting this process's state: loaded kernels, registered schemas, signal handlers);
the ``schemas`` fixture registers the domain's schemas with onnx for a module's tests; ``-n
auto`` runs the suite on a worker process per usable CPU, up to :data:`MOST_WORKERS`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest

from tests._support import ROOT

Run = Callable[..., subprocess.CompletedProcess]
MOST_WORKERS = 4
"""``-n auto`` (pyproject.toml) runs a worker per usable CPU up to this many: each holds the
kernels and onnxruntime (about 1 GB), and a cold compile takes its own hundreds of MB."""


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    usable = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
              else os.cpu_count() or 1)
    return min(MOST_WORKERS, usable)


@pytest.fixture
def cli() -> Run:
    """``cli(*arguments, timeout=300)``: the command line's result (output captured as text)."""
    def run(*arguments: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dml_onnx", *arguments],
                              capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    return run


@pytest.fixture
def python_child() -> Run:
    """``python_child(code, timeout=120)``: the result of ``code`` (dedented) in a fresh
    interpreter (output captured as text)."""
    def run(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                              capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    return run


@pytest.fixture(scope="module")
def schemas() -> None:
    """The domain's schemas registered with onnx (the checker and shape inference see the
    operators); a module asks for it with ``pytestmark = pytest.mark.usefixtures("schemas")``."""
    import dml_onnx
    dml_onnx.register_schemas()


@pytest.fixture(autouse=True)
def split_wherever_it_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests' models run split wherever split execution applies: they are small, and would
    otherwise run as one session (:func:`dml_onnx.runtime.plan.split_pays`); the choice itself
    is tested where a test sets the limits back (``tests/runtime/test_split_execution.py``)."""
    from dml_onnx.runtime import plan
    monkeypatch.setattr(plan, "ONE_SESSION_COPIES", -1)
    monkeypatch.setattr(plan, "ONE_SESSION_WEIGHTS", -1)
