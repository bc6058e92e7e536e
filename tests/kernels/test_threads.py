"""The kernels' threads (dml_onnx._kernels._threads): at most the thread limit, compiled
launches that give what one thread gives, a forked child that computes on its own thread,
and GNU OpenMP's short spin while numba's threading layer or onnxruntime-extensions' torch
loads it."""

from __future__ import annotations

import functools
import json
import math
import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

from dml_onnx._kernels import _openmp, _threads


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


def _fold_input() -> tuple[np.ndarray, dict]:
    """A Fold of several bands of planes (more than two threads' grain of work)."""
    X = np.random.default_rng(5).standard_normal((4, 16 * 9, 32 * 32)).astype(np.float32)
    return X, {"window_sizes": (3, 3), "start_padding": (1, 1), "end_padding": (1, 1),
               "output_size": (32, 32)}


@pytest.mark.parametrize("op", ["LpPooling p=2", "LpPooling p=3", "Fold", "LpPooling p=2 float16",
                                "LpPooling p=3 float16", "Fold float16"])
def test_compiled_thread_launches_give_what_one_thread_gives(op, monkeypatch):
    """LpPooling and Fold start their threads from compiled code (run_bands), float16 too
    (LpPooling p > 2 rounds its float32 roots in a second launch): the result is the same, bit
    for bit, at any thread count; the launch asks numba for one thread a band."""
    from dml_onnx._kernels.fold import fold
    from dml_onnx._kernels.lp_pooling import lp_pooling
    name, _, dtype = op.partition(" float")
    if name == "Fold":
        X, attributes = _fold_input()
        run = functools.partial(fold, X.astype(f"float{dtype or 32}"), **attributes)
    else:
        X = np.random.default_rng(6).standard_normal((2, 8, 12, 20, 20))
        run = functools.partial(lp_pooling, X.astype(f"float{dtype or 32}"),
                                window_size=(3, 3, 3), strides=(2, 1, 1),
                                start_padding=(1, 0, 1), end_padding=(0, 1, 1),
                                dilations=(1, 2, 1), p=int(name[-1]))
    launches = []
    original = _threads.run_bands

    def recording(groups, band, launch):
        launches.append(len(groups))
        original(groups, band, launch)
    monkeypatch.setattr(_threads, "THREADS", 4)
    for module in ("dml_onnx._kernels.fold", "dml_onnx._kernels.lp_pooling"):
        monkeypatch.setattr(f"{module}.run_bands", recording)
    results = {}
    for limit in (1, 2, 3):
        token = _threads.thread_limit.set(limit)
        try:
            results[limit] = run()
        finally:
            _threads.thread_limit.reset(token)
    per_call = 2 if op == "LpPooling p=3 float16" else 1  # then the rounding's bands
    assert len(launches) == 3 * per_call and launches[::per_call] == [1, 2, 3]
    for limit in (2, 3):
        np.testing.assert_array_equal(results[limit], results[1])


def _fold_in_child(queue: multiprocessing.Queue) -> None:
    from dml_onnx._kernels.fold import fold
    X, attributes = _fold_input()
    queue.put(fold(X, **attributes))


def test_a_forked_child_computes_on_its_own_thread_after_the_parent_launched(monkeypatch):
    """GNU OpenMP (numba's usual threading layer on Linux) terminates a forked child at its
    first parallel launch when the parent has launched one: the child runs its bands itself."""
    from dml_onnx._kernels.fold import fold
    monkeypatch.setattr(_threads, "THREADS", 4)
    X, attributes = _fold_input()
    token = _threads.thread_limit.set(2)
    try:
        want = fold(X, **attributes)  # a launch of two bands
    finally:
        _threads.thread_limit.reset(token)
    assert _openmp._launch_pid == os.getpid()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_fold_in_child, args=(queue,))
    child.start()
    got = queue.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mapped", [False, True])
@pytest.mark.parametrize("user_setting", [None, ("OMP_WAIT_POLICY", "active"),
                                          ("GOMP_SPINCOUNT", "5")])
def test_the_threading_layer_loads_with_short_spinning_unless_the_user_chose(
        user_setting, mapped, monkeypatch):
    """numba's threading layer loads (and GNU OpenMP reads its environment) in the first
    launch's get_num_threads: with GOMP_SPINCOUNT set unless the user chose, the variable
    removed afterwards; bound deep (its own libgomp first) where a libgomp is mapped already,
    the process's dlopen flags restored afterwards."""
    import numba
    for name in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
        monkeypatch.delenv(name, raising=False)
    if user_setting:
        monkeypatch.setenv(*user_setting)
    seen = []
    layer: list[str | None] = [None]

    def load():
        seen.append((os.environ.get("GOMP_SPINCOUNT"), sys.getdlopenflags()))
        layer[0] = "omp"
    flags = sys.getdlopenflags()
    monkeypatch.setattr(_openmp, "_openmp_spin", None)
    monkeypatch.setattr(_openmp, "_launch_pid", None)
    monkeypatch.setattr(_openmp, "_threading_layer", lambda: layer[0])
    monkeypatch.setattr(_openmp, "_openmp_libraries",
                        lambda: frozenset({("08:01", "12")} if mapped else ()))
    monkeypatch.setattr(_openmp, "_numba_openmp", lambda deep: ("08:01", "11"))
    monkeypatch.setattr(numba, "get_num_threads", load)
    monkeypatch.setattr(numba, "set_num_threads", lambda n: None)
    monkeypatch.setattr(numba, "threading_layer", lambda: "omp")
    for _ in range(2):
        assert _openmp.run_compiled(2, 2, lambda: None)
    want = user_setting[1] if user_setting and user_setting[0] == "GOMP_SPINCOUNT" else None
    deep = flags | os.RTLD_DEEPBIND if mapped else flags
    assert seen == [(want if user_setting else _openmp.SPIN_COUNT, deep)]
    assert os.environ.get("GOMP_SPINCOUNT") == want
    assert sys.getdlopenflags() == flags
    assert _openmp._openmp_spin == "short"


@pytest.mark.parametrize("limit", [0, 5])
@pytest.mark.parametrize("long_spin", [False, True])
def test_every_launch_uses_the_whole_team_however_few_groups(limit, long_spin, monkeypatch):
    """GNU OpenMP ends the threads a smaller team leaves out and starts them again for the
    next larger one: the team is every thread a call may use, whatever its group count. Where
    numba's GNU OpenMP was loaded before us and spins long after every launch, nothing is
    launched: the caller runs its groups on the Python pool."""
    import numba
    teams = []
    monkeypatch.setattr(_threads, "THREADS", 8)
    monkeypatch.setattr(_openmp, "_openmp_spin", "long" if long_spin else "short")
    monkeypatch.setattr(_openmp, "_launch_pid", None)
    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", 8)
    monkeypatch.setattr(numba, "set_num_threads", teams.append)
    monkeypatch.setattr(numba, "threading_layer", lambda: "omp")
    launched = []
    token = _threads.thread_limit.set(limit)
    try:
        for groups in (2, 3, 8):
            team = _threads.workers()
            assert _openmp.run_compiled(groups, team, lambda g=groups: launched.append(g)) \
                is not long_spin
    finally:
        _threads.thread_limit.reset(token)
    assert teams == ([] if long_spin else [limit or 8] * 3)
    assert launched == ([] if long_spin else [2, 3, 8])


def test_bands_run_on_the_python_pool_where_no_compiled_launch_may_run(monkeypatch):
    """With numba's GNU OpenMP spinning long, run_bands hands its bands to the Python pool:
    every band runs, on more than one thread."""
    monkeypatch.setattr(_threads, "THREADS", 4)
    monkeypatch.setattr(_openmp, "_openmp_spin", "long")
    ran: dict[tuple[int, int], int] = {}
    barrier = threading.Barrier(2, timeout=30)  # fails unless two bands run at once

    def band(start, stop):
        if start < 2:
            barrier.wait()
        ran[start, stop] = threading.get_ident()
    _threads.run_bands([(0, 1), (1, 2), (2, 3), (3, 4)], band,
                       lambda cuts: pytest.fail("launched"))
    assert sorted(ran) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert len(set(ran.values())) >= 2


def test_openmp_libraries_are_files_of_the_memory_map(tmp_path):
    """Each libgomp file once, by device and inode, whatever its name; other mappings not."""
    maps = tmp_path / "maps"
    maps.write_text(
        "5600-5601 r--p 0 08:01 2 /usr/bin/python3\n7f02-7f03 rw-p 0 00:00 0\n"
        "7f00-7f01 r-xp 0 08:01 11 /usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0\n"
        "7f04-7f05 rw-p 0 08:01 11 /usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0\n"
        "7f06-7f07 r-xp 0 08:02 12 /venv/site-packages/torch/lib/libgomp.so.1\n")
    assert _openmp._openmp_libraries(str(maps)) == {("08:01", "11"), ("08:02", "12")}


SYSTEM, TORCH = ("08:01", "11"), ("08:02", "12")


@pytest.mark.parametrize("before, used, loaded_before, spin", [
    ((), SYSTEM, False, "short"),  # numba loaded it in our block
    ((TORCH,), SYSTEM, False, "short"),  # torch's copy is another file
    ((SYSTEM,), SYSTEM, False, "long"),  # loaded before us (ctypes, another package)
    ((TORCH,), TORCH, False, "long"),  # numba bound to torch's (no deep binding)
    ((), None, True, "long"),  # the application's numba code loaded the layer first
])
def test_numba_openmp_spins_long_only_where_it_was_loaded_before_us(
        before, used, loaded_before, spin, monkeypatch):
    """numba's GNU OpenMP spins long only where the library its pool calls was mapped before
    the layer loaded in our block: then one RuntimeWarning says what to set, once."""
    import numba
    layer: list[str | None] = ["omp" if loaded_before else None]
    monkeypatch.setattr(_openmp, "_openmp_spin", None)
    monkeypatch.setattr(_openmp, "_threading_layer", lambda: layer[0])
    monkeypatch.setattr(_openmp, "_openmp_libraries", lambda: frozenset(before))
    monkeypatch.setattr(_openmp, "_numba_openmp", lambda deep: used)
    monkeypatch.setattr(numba, "get_num_threads", lambda: layer.__setitem__(0, "omp"))
    for name in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
        monkeypatch.delenv(name, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _openmp.load_threading_layer()
        _openmp.load_threading_layer()
    messages = [str(w.message) for w in caught if w.category is RuntimeWarning]
    assert _openmp._openmp_spin == spin
    assert len(messages) == (spin == "long")
    if messages:
        assert "GOMP_SPINCOUNT=0" in messages[0] and "libgomp" in messages[0]


@pytest.mark.parametrize("layer", ["workqueue", "tbb"])
def test_a_layer_other_than_openmp_never_spins_long(layer, monkeypatch):
    import numba
    monkeypatch.setattr(_openmp, "_openmp_spin", None)
    monkeypatch.setattr(_openmp, "_threading_layer", lambda: layer)  # loaded before us
    monkeypatch.setattr(numba, "get_num_threads", lambda: pytest.fail("loaded again"))
    _openmp.load_threading_layer()
    assert _openmp._openmp_spin == "short"


def test_the_spin_hint_never_fails_a_kernel_under_error_filters(monkeypatch):
    monkeypatch.setattr(_openmp, "_openmp_spin", None)
    monkeypatch.setattr(_openmp, "_threading_layer", lambda: "omp")
    for name in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
        monkeypatch.delenv(name, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _openmp.load_threading_layer()  # no exception
    assert _openmp._openmp_spin == "long"


@pytest.mark.parametrize("loaded", ["first", "after our import", "by torch first",
                                    "by our kernels"])
def test_a_process_that_loaded_openmp_first_hears_of_it_at_its_first_kernel(loaded):
    """End to end, in a fresh interpreter: the GNU OpenMP that numba uses loaded before the
    first compiled kernel and outside our short-spin blocks (``ctypes``, before our import or
    between it and our first kernel) gives the hint at the first kernel, once, and the groups
    run on the Python pool; loaded by our kernels, or torch's own copy loaded first, none.
    Both give the same result."""
    code = textwrap.dedent(f"""
        import ctypes, ctypes.util, warnings
        import numpy as np
        if {loaded!r} == "by torch first":
            import torch
        from dml_onnx._kernels import _openmp, _threads
        from dml_onnx._kernels.lp_pooling import lp_pooling
        def load_openmp():
            ctypes.CDLL(ctypes.util.find_library("gomp"))
        X = np.random.default_rng(0).standard_normal((4, 64, 64, 64)).astype(np.float32)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if {loaded!r} == "first":
                load_openmp()
            with _openmp.short_openmp_spin():  # our import's block (onnxruntime-extensions')
                pass
            if {loaded!r} == "after our import":
                load_openmp()
            Y = [lp_pooling(X, window_size=[3, 3], strides=[1, 1], start_padding=[0, 0],
                            end_padding=[0, 0], dilations=[1, 1], p=2) for _ in range(2)]
        assert np.array_equal(Y[0], Y[1])
        torch_lib = {{key for key, path in _openmp._mappings() if "torch" in path}}
        assert _openmp._numba_openmp(_openmp._bound_deep) not in torch_lib  # numba: its own
        print(sum("GOMP_SPINCOUNT" in str(w.message) for w in caught), _openmp._openmp_spin,
              float(np.abs(Y[0]).sum()))
        """)
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    late = loaded in ("first", "after our import")
    count, spin, total = done.stdout.split()
    assert [count, spin] == (["1", "long"] if late else ["0", "short"])
    from dml_onnx._kernels.lp_pooling import lp_pooling
    X = np.random.default_rng(0).standard_normal((4, 64, 64, 64)).astype(np.float32)
    want = lp_pooling(X, window_size=[3, 3], strides=[1, 1], start_padding=[0, 0],
                      end_padding=[0, 0], dilations=[1, 1], p=2)
    assert float(total) == float(np.abs(want).sum())


def _run_with_openmp_setting(code: str, user_setting: str | None, timeout: float
                             ) -> tuple[str, str | None, str | None]:
    """Run ``code`` in a fresh interpreter whose environment has the user's OpenMP setting
    ``NAME=value`` alone (or none); its stdout, the GOMP_SPINCOUNT that OpenMP should load
    with, and the one that should be left afterwards."""
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    if user_setting:
        name, value = user_setting.split("=")
        env[name] = value
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=Path(__file__).resolve().parents[2], timeout=timeout, check=True)
    kept = user_setting.split("=")[1] if user_setting and "GOMP" in user_setting else None
    return done.stdout, kept if user_setting else _openmp.SPIN_COUNT, kept


@pytest.mark.parametrize("user_setting", [None, "OMP_WAIT_POLICY=passive", "GOMP_SPINCOUNT=7"])
def test_loading_the_compiled_layout_loops_loads_openmp_with_short_spinning(user_setting):
    """dml_onnx._kernels._layout_loops compiles its parallel drivers as it loads, which loads
    numba's threading layer (GNU OpenMP, which reads its environment then): that happens with
    GOMP_SPINCOUNT set, unless the user chose, and the variable is gone afterwards (else
    OpenMP's threads spun on the cores after each launch: float16 RoiAlign1 on a large map at
    2 cores 17.5-20 ms against 10.6-11.3 with the short spin)."""
    code = textwrap.dedent("""
        import importlib.abc, json, os, sys
        seen = []
        class Watch(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.startswith("numba.np.ufunc.") and name.endswith(("pool", "workqueue")):
                    seen.append(os.environ.get("GOMP_SPINCOUNT"))  # a threading layer loads
        sys.meta_path.insert(0, Watch())
        from dml_onnx._kernels._threads import compiled
        compiled("_layout_loops")
        print(json.dumps([seen, os.environ.get("GOMP_SPINCOUNT")]))
        """)
    out, during, kept = _run_with_openmp_setting(code, user_setting, timeout=300)
    seen, after = json.loads(out)
    assert seen and set(seen) == {during}
    assert after == kept


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
    out, during, kept = _run_with_openmp_setting(code, user_setting, timeout=120)
    assert out.split() == [f"[{during!r}]", str(kept)]


def test_a_child_forked_while_loops_load_loads_them_itself():
    """A fork while a compiled module is still loading on its helper thread: the child has
    no such thread, so its first call starts the import again instead of waiting for ever."""
    from concurrent.futures import Future
    _threads._imports["_never_loaded"] = Future()  # as if its import were still running
    try:
        pid = os.fork()
        if pid == 0:  # the child: the unfinished import is forgotten, the lock is free
            os._exit(0 if "_never_loaded" not in _threads._imports
                     and _threads._imports_lock.acquire(timeout=5) else 1)
        assert os.waitpid(pid, 0)[1] == 0
    finally:
        del _threads._imports["_never_loaded"]


@pytest.mark.parametrize("allowed, work, want", [
    (16, 8 * 32768, 16), (16, 8 * 32768 - 1, 1), (16, 5 * 32768, 1), (12, 8 * 32768, 12),
    (12, 8 * 32768 - 1, 1), (64, 32 * 32768, 64), (64, 32 * 32768 - 1, 1),
    (8, 8 * 32768, 8), (8, 8 * 32768 - 1, 1), (4, 4 * 32768, 4), (4, 4 * 32768 - 1, 1),
    (2, 2 * 32768, 2), (2, 65535, 1), (1, 10**9, 1), (4, None, 4)])
def test_a_call_uses_every_thread_it_may_or_one(allowed, work, want, monkeypatch):
    """A compiled launch wakes every thread a call may use: a call splits where each of them
    gets a grain of work, and with more than 8 threads from half a grain each, at least 8."""
    monkeypatch.setattr(_threads, "THREADS", allowed)
    assert _threads.workers(work) == want
    serial = math.inf if allowed == 1 else min(allowed, max(8, allowed // 2)) * 32768 - 1
    assert _threads.serial_work() == min(serial, _threads.work_limit())


@pytest.mark.parametrize("allowed, work, want", [
    (16, 16 * 8 * 32768, 16), (16, 16 * 8 * 32768 - 1, 1), (2, 2 * 8 * 32768, 2),
    (2, 2 * 8 * 32768 - 1, 1), (4, None, 4), (16, 10**9, 16)])
def test_the_pool_takes_a_task_only_for_its_grains_on_any_thread_count(allowed, work, want,
                                                                       monkeypatch):
    """A task handed to the Python pool costs the interpreter lock, so each group of
    :func:`interleaved` reads at least ``POOL_GRAINS`` grains, with 16 threads as with 2
    (unlike a compiled launch, which splits from 8 grains in all with more than 8)."""
    monkeypatch.setattr(_threads, "THREADS", allowed)
    assert len(_threads.interleaved(100, work)) == want


def test_run_interleaved_sizes_its_pool_groups_by_the_pool_work(monkeypatch):
    """Where no compiled launch may run, the pool's groups follow ``pool_work`` (the ROI
    kernels' sample reads), the launch's threads ``work`` (values read)."""
    monkeypatch.setattr(_threads, "THREADS", 16)
    monkeypatch.setattr(_threads, "run_compiled", lambda *args: False)
    work = 16 * 8 * 32768
    for pool_work, want in ((None, 16), (work // 4, 1)):
        groups: list[np.ndarray] = []
        _threads.run_interleaved(64, work, groups.append, lambda threads: None, pool_work)
        assert len(groups) == want
        assert sorted(np.concatenate(groups)) == list(range(64))
