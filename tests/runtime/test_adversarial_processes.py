"""What a hostile user tries against the process around the kernels: an interrupt or exit
raised inside a kernel, signals during a kernel and while a loop compiles, a damaged or
missing numba cache, and the application's own parallel numba code beside the kernels. Each
runs in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.runtime._adversarial import ROOT, child


# ------------------------------------------------------------------ interrupts and exits
@pytest.mark.parametrize("stop", ["KeyboardInterrupt()", "SystemExit(3)"])
def test_an_interrupt_or_exit_inside_a_kernel_comes_out_of_run_as_itself(stop):
    out = child(f"""
        import numpy as np
        import dml_onnx
        from tests.runtime._adversarial import POOL, ROIS, X
        definition = dml_onnx.OPERATORS_BY_NAME["RoiPooling"]
        prepare, stop = definition.prepare, [True]
        def stopping(**attributes):
            kernel = prepare(**attributes)
            def run(*inputs):
                if stop[0]:
                    raise {stop}
                return kernel(*inputs)
            return run
        object.__setattr__(definition, "prepare", stopping)
        session = dml_onnx.InferenceSession(POOL)
        try:
            session.run(None, {{"X": X, "rois": ROIS}})
        except BaseException as error:
            print(type(error).__name__)
        stop[0] = False
        print(session.run(None, {{"X": X, "rois": ROIS}})[0].ravel().tolist())
    """)
    assert out.split() == [stop.split("(")[0], "[5.0,", "7.0,", "13.0,", "15.0]"]


@pytest.mark.parametrize("warm", [False, True])
def test_a_signal_during_a_kernel_raises_from_run_and_the_session_keeps_working(warm):
    """Cold: the signal lands while the first call imports numba and the compiled loops (an
    interrupted import would leave numba half-loaded). Warm (the loops loaded by a first
    small run): it lands while the kernel computes."""
    out = child(f"""
        import signal
        import numpy as np
        import dml_onnx
        from tests.runtime._adversarial import pooling_model
        def interrupt(*args):
            raise KeyboardInterrupt
        signal.signal(signal.SIGALRM, interrupt)
        session = dml_onnx.InferenceSession(pooling_model(64, 32))
        X = np.ones((1, 64, 512, 512), np.float32)
        rois = np.tile(np.array([[0, 0, 0, 511, 511]], np.float32), (200, 1))
        if {warm}:
            session.run(None, {{"X": X[:, :, :4, :4].copy(), "rois": rois[:8]}})
        signal.setitimer(signal.ITIMER_REAL, {0.2 if warm else 0.02})
        try:
            session.run(None, {{"X": X, "rois": rois}})
            print("finished")
        except KeyboardInterrupt:
            print("interrupted")
        print(session.run(None, {{"X": X[:, :, :4, :4].copy(), "rois": rois[:1]}})[0].shape)
    """)
    assert out.split() == ["interrupted", "(1,", "64,", "32,", "32)"]


def test_an_interrupt_while_a_kernel_starts_a_thread_leaves_the_interpreter_free_to_exit():
    """A signal handler that raises (Ctrl-C) just as a kernel's thread has started, while the
    caller waits for the start: run raises it, the next run works, and the process exits.
    (ThreadPoolExecutor registers a thread for the exit only after its start: the one so
    interrupted was never told to end, and the interpreter waited for it for ever; about one
    run in three on two cores.)"""
    out = child("""
        import threading
        import numpy as np
        import dml_onnx._kernels._threads
        import dml_onnx
        from tests.runtime._adversarial import pooling_model
        session = dml_onnx.InferenceSession(pooling_model(1, 2))
        X = np.ones((1, 1, 512, 512), np.float32)
        rois = np.tile(np.array([[0, 0, 0, 511, 511]], np.float32), (64, 1))
        small = {"X": X[:, :, :4, :4].copy(), "rois": rois[:1]}
        dml_onnx._kernels._threads.THREADS = 1  # the compiled loops loaded (their import starts a
        session.run(None, {"X": X, "rois": rois})  # thread), on the calling thread alone
        dml_onnx._kernels._threads.THREADS = 2  # then a pool of threads, on any machine
        start = threading.Thread.start
        def start_then_interrupt(self):
            threading.Thread.start = start
            start(self)
            raise KeyboardInterrupt
        threading.Thread.start = start_then_interrupt
        try:
            session.run(None, {"X": X, "rois": rois})
            print("finished")
        except KeyboardInterrupt:
            print("interrupted")
        print(session.run(None, small)[0].shape)
    """, timeout=60)
    assert out.split() == ["interrupted", "(1,", "1,", "2,", "2)"]


_SIGNAL_WHILE_COMPILING = """
    import os, signal, tempfile
    os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp()
    import numpy as np
    import dml_onnx
    from tests.runtime._adversarial import pooling_model
    def interrupt(*args):
        raise KeyboardInterrupt
    signal.signal(signal.SIGALRM, interrupt)
    {alarm}
    session = dml_onnx.InferenceSession(pooling_model(1, 2))
    feeds = {{"X": np.ones((1, 1, 8, 8), np.float32),
              "rois": np.array([[0, 0, 0, 7, 7]], np.float32)}}
    try:
        session.run(None, feeds)
        print("finished")
    except KeyboardInterrupt:
        print("interrupted")
    print(session.run(None, feeds)[0].tolist())
"""


def test_a_signal_while_a_loop_compiles_in_the_caller_waits_for_the_compiler():
    """A signal whose handler raises, landing inside numba's compiler on the calling thread
    (a loop's first call with new types, compiled in the caller as where numba has no
    cache): the handler runs once the compiler is done, and the loop works afterwards (an
    exception raised inside the compiler left it broken for the process: "no compiled
    object yet")."""
    out = child(_SIGNAL_WHILE_COMPILING.format(alarm="""
    import numba.core.caching as caching
    def read_only(self):
        raise PermissionError(13, "Read-only file system", self.get_cache_path())
    caching._CacheLocator.ensure_cache_path = read_only
    from numba.core import event
    class Alarm(event.Listener):  # a signal in the middle of every compilation
        def on_start(self, ev):
            signal.raise_signal(signal.SIGALRM)
        def on_end(self, ev):
            pass
    event.register("numba:compile", Alarm())"""), timeout=300)
    assert out.split("\n")[:2] == ["interrupted", "[[[[1.0, 1.0], [1.0, 1.0]]]]"]


def test_a_signal_while_the_compiler_process_compiles_waits_for_it():
    """The same signal landing while the caller waits for the compiler process (a cold
    cache): the handler runs once the loop is compiled, and the loop works afterwards."""
    out = child(_SIGNAL_WHILE_COMPILING.format(alarm="""
    from dml_onnx._kernels import _compiler_process
    compile = _compiler_process._CompilerProcess.compile
    def signalled(self, request):
        signal.raise_signal(signal.SIGALRM)
        return compile(self, request)
    _compiler_process._CompilerProcess.compile = signalled"""), timeout=300)
    assert out.split("\n")[:2] == ["interrupted", "[[[[1.0, 1.0], [1.0, 1.0]]]]"]


_FOLD_TWICE = """
import numpy as np
from dml_onnx._kernels._checks import KernelError
from dml_onnx._kernels.fold import fold
X = np.arange(16, dtype=np.float32).reshape(1, 4, 4)
try:
    fold(X, window_sizes=[2, 2], output_size=[3, 3], node="f")
except KernelError as error:
    print(error)
print(fold(X, window_sizes=[2, 2], output_size=[3, 3], node="f").ravel().tolist())
"""
"""A first Fold call that may fail (its error printed), then a second that must compute."""
_FOLDED = "[0.0, 5.0, 5.0, 10.0, 30.0, 20.0, 10.0, 25.0, 15.0]"


@pytest.mark.parametrize("how", ["SIGKILL", "SIGABRT"])
def test_a_compiler_process_that_dies_fails_one_call_and_the_next_compiles(how):
    """The compiler process dying in the middle (the kernel out of memory kills it, or LLVM
    aborts it): the call raises KernelError saying so, the caller lives, and the next call
    starts another process and computes."""
    out = child(textwrap.dedent(f"""
        import os, signal, tempfile, threading, time
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp()
        from dml_onnx._kernels import _compiler_process
        def kill():
            while _compiler_process._running is None:
                time.sleep(0.001)
            os.kill(_compiler_process._running.process.pid, signal.{how})
        threading.Thread(target=kill, daemon=True).start()
    """) + _FOLD_TWICE, timeout=300)
    died, computed = out.strip().split("\n")
    assert died.startswith(f"dml_onnx 'fold_planes': compiler process 'killed by {how}")
    assert "most often: memory ran out" in died
    assert computed == _FOLDED


def test_the_compiler_process_ends_when_idle_and_a_later_compile_starts_another():
    """The compiler process ends itself after IDLE_SECONDS without work (a request racing
    its end is sent again to a new one); the caller's next cold loop still compiles."""
    out = child("""
        import os, tempfile, time
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp()
        import numpy as np
        from dml_onnx._kernels import _compiler_process
        _compiler_process.IDLE_SECONDS = 0.5
        from dml_onnx._kernels.fold import fold
        X = np.arange(16, dtype=np.float32).reshape(1, 4, 4)
        fold(X, window_sizes=[2, 2], output_size=[3, 3])
        first = _compiler_process._running.process
        time.sleep(3)
        print(first.poll())
        print(fold(X.astype(np.float64), window_sizes=[2, 2], output_size=[3, 3]).sum())
        print(_compiler_process._running.process is not first)
    """, timeout=300)
    assert out.split() == ["0", "120.0", "True"]  # idle exit; Fold keeps the sum 0 + .. + 15


# ------------------------------------------------------------------ numba's cache and threads
_LP_POOL = """
import warnings
warnings.simplefilter("always")
import numpy as np
from dml_onnx._kernels.lp_pooling import lp_pooling
X = np.arange(2 * 9 * 9, dtype=np.float32).reshape(1, 2, 9, 9) / 100
Y = lp_pooling(X, window_size=[3, 3], strides=[1, 1], dilations=[1, 1], start_padding=[0, 0],
               end_padding=[0, 0], p=2, node="n")
print(f"sum {float(Y.sum()):.4f}")
"""


def _child_with(code: str, **environment: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, env={**os.environ, **environment})
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    return done


def test_a_damaged_numba_cache_is_named_replaced_and_never_fails_a_call(tmp_path):
    """Empty index files and garbage data files (a full disk, a killed writer): the next
    process warns, compiles afresh and repairs the cache; the one after reads it silently."""
    cache = str(tmp_path / "numba")
    want = _child_with(_LP_POOL, NUMBA_CACHE_DIR=cache).stdout
    files = sorted(Path(cache).rglob("*.nb[ic]"))
    assert files
    for path in files:
        path.write_bytes(b"" if path.suffix == ".nbi" else b"garbage")
    damaged = _child_with(_LP_POOL, NUMBA_CACHE_DIR=cache)
    assert damaged.stdout == want
    assert "cannot be read (EOFError: Ran out of input); it is compiled afresh" in \
        damaged.stderr
    repaired = _child_with(_LP_POOL, NUMBA_CACHE_DIR=cache)
    assert repaired.stdout == want and "cannot be read" not in repaired.stderr


_BLAS_PROBE = """
import sys
from dml_onnx._kernels._threads import compiled
compiled("_layout_loops")  # the kernels' set-up of numba, on its helper thread
import numba.np.arraymath as arraymath
before = "scipy.linalg" in sys.modules
found = bool(arraymath._HAVE_BLAS)
print(before, found, "scipy.linalg" in sys.modules, found == arraymath._check_blas())
"""


@pytest.mark.parametrize("blas", [True, False])
def test_numbas_blas_probe_waits_for_numbas_first_use_of_it(blas, tmp_path):
    """numba probes for BLAS as it sets itself up, by importing SciPy's linear algebra (0.1-0.15
    s of a cold start): the kernels' set-up leaves the probe for numba's first use of its
    answer, which is then the probe's own. A SciPy stand-in first on the path, with a linear
    algebra that imports and one that does not."""
    stand_in = tmp_path / "scipy"
    (stand_in / "linalg").mkdir(parents=True)
    (stand_in / "__init__.py").write_text('__version__ = "1.14.0"\n')
    (stand_in / "linalg" / "__init__.py").write_text(
        "" if blas else "raise ImportError('no BLAS here')\n")
    (stand_in / "linalg" / "cython_blas.py").write_text("")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    done = _child_with(_BLAS_PROBE, PYTHONPATH=path)
    assert done.stdout.split() == ["False", str(blas), str(blas), "True"]


def test_the_set_up_never_changes_the_import_finders_list_in_place():
    """Another thread's import iterates ``sys.meta_path`` as it is: the set-up swaps in new
    lists (a finder removed in place would make that import skip the next finder), the package's
    own hook for onnxruntime-extensions' import included; the finders stay as they were but
    for that hook."""
    done = _child_with("""
        import sys
        changed = []
        class Watched(list):
            def insert(self, *a): changed.append("insert"); super().insert(*a)
            def remove(self, *a): changed.append("remove"); super().remove(*a)
            def pop(self, *a): changed.append("pop"); return super().pop(*a)
            def __delitem__(self, *a): changed.append("del"); super().__delitem__(*a)
            def __setitem__(self, *a): changed.append("set"); super().__setitem__(*a)
        watched = Watched(sys.meta_path)
        sys.meta_path = watched
        from dml_onnx._kernels._threads import compiled
        compiled("_layout_loops")
        ours = [f for f in sys.meta_path if type(f).__name__ == "_AfterExtension"]
        print(changed, list(watched) == [f for f in sys.meta_path if f not in ours])
        """)
    assert done.stdout.split() == ["[]", "True"]


def test_the_deferred_blas_probe_refuses_no_other_import():
    """The finder refuses ``scipy.linalg`` only to numba's probe on the setting-up thread."""
    from dml_onnx._kernels._jit import _DeferBlasProbe

    finder = _DeferBlasProbe()

    def asked_by(module: str, function: str, name: str) -> None:
        space = {"__name__": module, "finder": finder}
        exec(f"def {function}(name):\n    return finder.find_spec(name, None)", space)
        return space[function](name)

    assert asked_by("numba.np.arraymath", "ensure_blas", "scipy.linalg") is None
    assert asked_by("application", "_check_blas", "scipy.linalg") is None
    assert asked_by("numba.np.arraymath", "_check_blas", "scipy") is None
    assert not finder.refused
    with ThreadPoolExecutor(1) as other:
        assert other.submit(asked_by, "numba.np.arraymath", "_check_blas",
                            "scipy.linalg").result() is None
    with pytest.raises(ModuleNotFoundError, match="BLAS probe"):
        asked_by("numba.np.arraymath", "_check_blas", "scipy.linalg")
    assert finder.refused


def test_a_loops_cache_goes_stale_when_a_module_it_calls_into_changes(tmp_path):
    """numba stamps a cache with its function's own file, while the cached code holds what it
    calls from other modules (the loops' float16 reads and writes): a change there alone
    compiles the callers afresh, where numba would load their stale code."""
    package = tmp_path / "stamped"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "caller.py").write_text(textwrap.dedent("""
        from dml_onnx._kernels._jit import jit
        from stamped.callee import value

        @jit
        def call():
            return value()
    """))
    code = "import stamped.caller; print(stamped.caller.call())"
    environment = {"NUMBA_CACHE_DIR": str(tmp_path / "numba"),
                   "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    for result in (1, 1, 2, 2):  # compiled, from the cache, compiled afresh, from the cache
        (package / "callee.py").write_text(textwrap.dedent(f"""
            from dml_onnx._kernels._jit import jit

            @jit
            def value():
                return {result}
        """))
        assert _child_with(code, **environment).stdout.strip() == str(result)


def test_without_a_place_for_numbas_cache_the_kernels_compile_and_say_so_once():
    """A read-only install and no writable home: numba finds no place for a cache ("no
    locator available"), which failed every compiled kernel."""
    done = _child_with(textwrap.dedent("""
        import numba.core.caching as caching
        def read_only(self):
            raise PermissionError(13, "Read-only file system", self.get_cache_path())
        caching._CacheLocator.ensure_cache_path = read_only
    """) + _LP_POOL)
    assert done.stdout.startswith("sum ")
    assert done.stderr.count("numba has no place for its cache") == 1, done.stderr


def test_the_kernels_beside_the_applications_parallel_numba_code_under_workqueue():
    """numba's workqueue threading layer (where neither OpenMP nor TBB is there) ends the
    process when two threads launch parallel code at once; the kernels then split their
    bands over threads of their own."""
    done = _child_with("""
        import threading
        import numba
        import numpy as np
        from dml_onnx._kernels.lp_pooling import lp_pooling
        @numba.njit(parallel=True, nogil=True)
        def theirs(a):
            total = 0.0
            for i in numba.prange(a.size):
                total += np.sin(a[i])
            return total
        values = np.linspace(0, 1, 1 << 20)
        theirs(values)
        stop = []
        def loop():
            while not stop:
                theirs(values)
        thread = threading.Thread(target=loop)
        thread.start()
        X = np.linspace(-1, 1, 8 * 64 * 56 * 56, dtype=np.float32).reshape(8, 64, 56, 56)
        for _ in range(20):
            Y = lp_pooling(X, window_size=[3, 3], strides=[1, 1], dilations=[1, 1],
                           start_padding=[1, 1], end_padding=[1, 1], p=2, node="n")
        stop.append(True)
        thread.join()
        print(numba.threading_layer(), Y.shape)
    """, NUMBA_THREADING_LAYER="workqueue")
    assert done.stdout.split()[0] == "workqueue"


@pytest.mark.parametrize("interpreter", ["/bin/false", "sys.executable"])
def test_a_compiler_process_that_cannot_start_leaves_the_compile_to_the_caller(
        interpreter, tmp_path):
    """An executable that is no Python (an embedding application) ends before it says it is
    ready: the loops compile in the caller. Folders named ``dml_onnx`` and ``custom_ops`` in
    the working directory (the user's own) are not on the compiler process's path: it compiles
    there."""
    for name in ("dml_onnx", "custom_ops"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ImportError('not ours')\n")
    out = child(f"""
        import os, sys, tempfile
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp()
        import numpy as np
        from dml_onnx._kernels import _compiler_process
        from dml_onnx._kernels.fold import fold
        os.chdir({str(tmp_path)!r})
        sys.executable = {interpreter if interpreter != "/bin/false" else repr(interpreter)}
        X = np.arange(16, dtype=np.float32).reshape(1, 4, 4)
        print(fold(X, window_sizes=[2, 2], output_size=[3, 3]).sum(),
              _compiler_process._running is not None)
    """, timeout=300)
    assert out.split() == ["120.0", str(interpreter == "sys.executable")]


def test_a_bundled_application_compiles_in_its_own_process():
    """Where the interpreter is a bundled (frozen) application, its executable would start the
    application again: the loops compile in the caller, and no process is started."""
    out = child("""
        import os, sys, tempfile
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp()
        sys.frozen = True
        import numpy as np
        from dml_onnx._kernels import _compiler_process
        from dml_onnx._kernels.fold import fold
        X = np.arange(16, dtype=np.float32).reshape(1, 4, 4)
        print(fold(X, window_sizes=[2, 2], output_size=[3, 3]).sum(), _compiler_process._running)
    """, timeout=300)
    assert out.split() == ["120.0", "None"]


@pytest.mark.parametrize("failing", ["numba.core.typing.templates", "llvmlite.binding.ffi"])
def test_a_first_import_that_fails_part_way_fails_one_call_and_the_next_imports_afresh(
        failing):
    """numba's import failing in the middle (memory ran out: a MemoryError, or llvmlite's
    library failing to load): the first call raises KernelError naming the import, and the
    next imports numba afresh and computes (a half-loaded numba failed every later call with
    "partially initialized module 'numba'")."""
    out = child(textwrap.dedent(f"""
        import sys
        class OutOfMemoryOnce:
            failed = False
            def find_spec(self, name, path=None, target=None):
                if name == {failing!r} and not self.failed:
                    self.failed = True
                    raise MemoryError
        sys.meta_path.insert(0, OutOfMemoryOnce())
    """) + _FOLD_TWICE, timeout=300)
    failed, computed = out.strip().split("\n")
    assert failed.startswith("dml_onnx 'dml_onnx._kernels._fold_loops': import 'MemoryError: '")
    assert "the next call tries again" in failed
    assert computed == _FOLDED
