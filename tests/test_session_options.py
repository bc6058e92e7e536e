"""What dml_onnx.InferenceSession sets on the session options it is given: no spinning of
onnxruntime's idle workers unless asked for, and its intra-op thread count as our kernels'
thread limit."""

from __future__ import annotations

import functools
import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dml_onnx
from custom_ops import _threads
from dml_onnx.graphs import WEIGHT_ELEMENTS

MODEL = dml_onnx.make_model(
    [dml_onnx.unfold("X", "Y", window_sizes=[2, 2], name="u")],
    [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 64, 8, 8])],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
FEEDS = {"X": np.ones((1, 64, 8, 8), np.float32)}
SPINNING = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")


def test_idle_workers_do_not_spin_unless_the_caller_says_so():
    options = ort.SessionOptions()
    dml_onnx.InferenceSession(MODEL, options)
    assert [options.get_session_config_entry(k) for k in SPINNING] == ["0", "0"]
    mine = ort.SessionOptions()
    mine.add_session_config_entry(SPINNING[0], "1")
    dml_onnx.InferenceSession(MODEL, mine)
    assert [mine.get_session_config_entry(k) for k in SPINNING] == ["1", "0"]


@pytest.mark.parametrize("threads", [0, 1, 2])
def test_kernels_see_the_sessions_intra_op_thread_count(threads):
    definition = dml_onnx.OPERATORS_BY_NAME["Unfold"]
    kernel, seen = definition.kernel, []

    def recording(*args, **kwargs):
        seen.append(_threads.thread_limit.get())
        return kernel(*args, **kwargs)
    object.__setattr__(definition, "kernel", recording)
    try:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        node = dml_onnx.unfold("X", "Y", window_sizes=[2, 2], name=f"threads_{threads}")
        model = dml_onnx.make_model([node], list(MODEL.graph.input), list(MODEL.graph.output))
        dml_onnx.InferenceSession(model, options).run(None, FEEDS)
    finally:
        object.__setattr__(definition, "kernel", kernel)
    assert seen == [threads]
    assert _threads.thread_limit.get() == 0  # set for the run only


@pytest.mark.parametrize("limit", [1, 2])
def test_run_parallel_uses_at_most_the_thread_limit(limit, monkeypatch):
    monkeypatch.setattr(_threads, "THREADS", 4)
    threads: set[int] = set()
    token = _threads.thread_limit.set(limit)
    try:
        _threads.run_parallel([lambda: threads.add(threading.get_ident()) for _ in range(64)])
    finally:
        _threads.thread_limit.reset(token)
    assert 1 <= len(threads) <= limit


def test_large_initializers_reach_onnxruntime_as_values_with_the_same_result():
    """Weights above dml_onnx.graphs.WEIGHT_ELEMENTS are handed over as OrtValues (the
    serialized model keeps stubs); on options of the caller's they stay in the model."""
    rng = np.random.default_rng(4)
    weight = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    assert weight.size > WEIGHT_ELEMENTS
    model = dml_onnx.make_model(
        [helper.make_node("Conv", ["X", "W"], ["F"], pads=[1, 1, 1, 1]),
         dml_onnx.unfold("F", "Y", window_sizes=[2, 2], name="u")],
        list(MODEL.graph.input), list(MODEL.graph.output))
    model.graph.initializer.append(numpy_helper.from_array(weight, "W"))
    feeds = {"X": rng.standard_normal((1, 64, 8, 8)).astype(np.float32)}
    handed = dml_onnx.InferenceSession(model)
    assert len(handed._weights) == 1
    options = ort.SessionOptions()
    kept = dml_onnx.InferenceSession(model, options)
    assert kept._weights == []
    (want,) = kept.run(None, feeds)
    np.testing.assert_array_equal(handed.run(None, feeds)[0], want)
    assert model.graph.initializer[0].raw_data  # the caller's model keeps its weights


def _fold_input() -> tuple[np.ndarray, dict]:
    """A Fold of several bands of planes (more than two threads' grain of work)."""
    X = np.random.default_rng(5).standard_normal((4, 16 * 9, 32 * 32)).astype(np.float32)
    return X, {"window_sizes": (3, 3), "start_padding": (1, 1), "end_padding": (1, 1),
               "output_size": (32, 32)}


@pytest.mark.parametrize("op", ["LpPooling p=2", "LpPooling p=3", "Fold"])
def test_compiled_thread_launches_give_what_one_thread_gives(op, monkeypatch):
    """LpPooling and Fold start their threads from compiled code (run_bands): the result is
    the same, bit for bit, at any thread count; the launch asks numba for one thread a band."""
    from custom_ops.fold import fold
    from custom_ops.lp_pooling import lp_pooling
    if op == "Fold":
        X, attributes = _fold_input()
        run = functools.partial(fold, X, **attributes)
    else:
        X = np.random.default_rng(6).standard_normal((2, 8, 12, 20, 20)).astype(np.float32)
        run = functools.partial(lp_pooling, X, window_size=(3, 3, 3), strides=(2, 1, 1),
                                start_padding=(1, 0, 1), end_padding=(0, 1, 1),
                                dilations=(1, 2, 1), p=int(op[-1]))
    launches = []
    original = _threads.run_bands

    def recording(groups, band, launch):
        launches.append(len(groups))
        original(groups, band, launch)
    monkeypatch.setattr(_threads, "THREADS", 4)
    for module in ("custom_ops.fold", "custom_ops.lp_pooling"):
        monkeypatch.setattr(f"{module}.run_bands", recording)
    results = {}
    for limit in (1, 2, 3):
        token = _threads.thread_limit.set(limit)
        try:
            results[limit] = run()
        finally:
            _threads.thread_limit.reset(token)
    assert launches == [1, 2, 3]
    for limit in (2, 3):
        np.testing.assert_array_equal(results[limit], results[1])


def _fold_in_child(queue: multiprocessing.Queue) -> None:
    from custom_ops.fold import fold
    X, attributes = _fold_input()
    queue.put(fold(X, **attributes))


def test_a_forked_child_computes_on_its_own_thread_after_the_parent_launched(monkeypatch):
    """GNU OpenMP (numba's usual threading layer on Linux) terminates a forked child at its
    first parallel launch when the parent has launched one: the child runs its bands itself."""
    from custom_ops.fold import fold
    monkeypatch.setattr(_threads, "THREADS", 4)
    X, attributes = _fold_input()
    token = _threads.thread_limit.set(2)
    try:
        want = fold(X, **attributes)  # a launch of two bands
    finally:
        _threads.thread_limit.reset(token)
    assert _threads._launch_pid == os.getpid()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_fold_in_child, args=(queue,))
    child.start()
    got = queue.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("user_setting", [None, ("OMP_WAIT_POLICY", "active"),
                                          ("GOMP_SPINCOUNT", "5")])
def test_the_first_launch_shortens_openmp_spinning_unless_the_user_chose(user_setting,
                                                                         monkeypatch):
    """numba's threading layer loads (and GNU OpenMP reads its environment) in
    set_num_threads: the first launch sets GOMP_SPINCOUNT around it, then removes it."""
    import numba
    for name in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
        monkeypatch.delenv(name, raising=False)
    if user_setting:
        monkeypatch.setenv(*user_setting)
    seen = []
    monkeypatch.setattr(_threads, "_launch_pid", None)
    monkeypatch.setattr(numba, "set_num_threads",
                        lambda n: seen.append(os.environ.get("GOMP_SPINCOUNT")))
    for _ in range(2):
        assert _threads.run_compiled(2, lambda: None)
    want = user_setting[1] if user_setting and user_setting[0] == "GOMP_SPINCOUNT" else None
    assert seen == [want if user_setting else _threads.SPIN_COUNT, want]
    assert os.environ.get("GOMP_SPINCOUNT") == want


@pytest.mark.parametrize("extension_first", [False, True])
def test_a_plain_session_runs_the_kernels_whichever_package_is_imported_first(extension_first):
    """The options may register the extension library before ``to_runtime_model`` is
    called: the kernels are declared as soon as both packages are imported."""
    imports = ["import dml_onnx", "from onnxruntime_extensions import get_library_path"]
    code = "\n".join([*(imports[::-1] if extension_first else imports), textwrap.dedent("""
        import sys
        import numpy as np
        import onnxruntime as ort
        from onnx import TensorProto, helper
        assert "dml_onnx.runtime" in sys.modules
        options = ort.SessionOptions()
        options.register_custom_ops_library(get_library_path())
        value = helper.make_tensor_value_info
        model = dml_onnx.make_model([dml_onnx.unfold("X", "Y", window_sizes=[2, 2])],
                                    [value("X", TensorProto.FLOAT, [1, 1, 3, 3])],
                                    [value("Y", TensorProto.FLOAT, None)])
        session = ort.InferenceSession(dml_onnx.to_runtime_model(model).SerializeToString(),
                                       options)
        print(session.run(None, {"X": np.ones((1, 1, 3, 3), np.float32)})[0].shape)
        """)])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(1,", "4,", "4)"]


@pytest.mark.parametrize("importer", ["import dml_onnx.runtime",
                                      "import dml_onnx, onnxruntime_extensions"])
@pytest.mark.parametrize("user_setting", [None, "OMP_WAIT_POLICY=passive", "GOMP_SPINCOUNT=7"])
def test_onnxruntime_extensions_loads_with_short_openmp_spinning(user_setting, importer):
    """onnxruntime-extensions imports torch where installed, which loads torch's OpenMP (that
    numba then shares): it loads with GOMP_SPINCOUNT set, unless the user chose, whether the
    binding imports it or the user does after ``import dml_onnx`` (which then declares the
    kernels); a fresh interpreter records the variable as the extension's import runs."""
    code = textwrap.dedent(f"""
        import importlib.abc, os, sys
        seen = []
        class Watch(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "onnxruntime_extensions._ocos":  # imported by the extension
                    seen.append(os.environ.get("GOMP_SPINCOUNT"))
        sys.meta_path.insert(0, Watch())
        {importer}
        assert "dml_onnx.runtime" in sys.modules
        print(seen, os.environ.get("GOMP_SPINCOUNT"))
        """)
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    if user_setting:
        name, value = user_setting.split("=")
        env[name] = value
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=Path(__file__).resolve().parents[1], timeout=120, check=True)
    kept = user_setting.split("=")[1] if user_setting and "GOMP" in user_setting else None
    during = kept if user_setting else _threads.SPIN_COUNT
    assert done.stdout.split() == [f"[{during!r}]", str(kept)]


@pytest.mark.parametrize("importer", ["import dml_onnx.runtime",
                                      "import dml_onnx, onnxruntime_extensions"])
def test_the_extension_loads_without_its_converters_and_they_still_work(importer):
    """onnxruntime-extensions' package imports its converters (``cvt``), which import
    transformers and torch where installed: the binding defers them, whoever imports the
    extension, and the user's own ``onnxruntime_extensions.cvt`` and
    ``gen_processing_models`` still reach the real module."""
    code = textwrap.dedent(f"""
        import sys
        {importer}
        print("dml_onnx.runtime" in sys.modules, "onnxruntime_extensions.cvt" in sys.modules,
              "torch" in sys.modules)
        import onnxruntime_extensions as extensions
        converter = extensions.cvt.HFTokenizerConverter  # the real module, loaded now
        from onnxruntime_extensions import cvt
        print(cvt is sys.modules["onnxruntime_extensions.cvt"] is extensions.cvt,
              converter is cvt.HFTokenizerConverter, callable(extensions.gen_processing_models))
        """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "False", "True", "True", "True"]


def test_quiet_session_options_for_the_users_other_sessions():
    """One call gives plain sessions sleeping idle workers; a value the user set stays."""
    options = dml_onnx.quiet_session_options()
    assert [options.get_session_config_entry(k) for k in (
        "session.intra_op.allow_spinning", "session.inter_op.allow_spinning")] == ["0", "0"]
    mine = ort.SessionOptions()
    mine.add_session_config_entry("session.inter_op.allow_spinning", "1")
    assert dml_onnx.quiet_session_options(mine) is mine
    assert mine.get_session_config_entry("session.inter_op.allow_spinning") == "1"
    assert mine.get_session_config_entry("session.intra_op.allow_spinning") == "0"
