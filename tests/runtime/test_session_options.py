"""What dml_onnx.InferenceSession sets on the session options it is given: no spinning of
onnxruntime's idle workers unless asked for, and its intra-op thread count as our kernels'
thread limit."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dml_onnx
from dml_onnx._kernels import _threads
from dml_onnx.model_files import WEIGHT_ELEMENTS

MODEL = dml_onnx.make_model(
    [dml_onnx.unfold("X", "Y", window_sizes=[2, 2], name="u")],
    [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 64, 8, 8])],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
FEEDS = {"X": np.ones((1, 64, 8, 8), np.float32)}
SPINNING = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")


def test_idle_workers_do_not_spin_unless_the_caller_says_so():
    """Where the kernels run inside onnxruntime's run (one session: a standard node beside
    them)."""
    one_session = dml_onnx.make_model(
        [*MODEL.graph.node, helper.make_node("Neg", ["X"], ["Z"])], list(MODEL.graph.input),
        [*MODEL.graph.output, helper.make_tensor_value_info("Z", TensorProto.FLOAT, None)])
    options = ort.SessionOptions()
    assert dml_onnx.InferenceSession(one_session, options)._split is None
    assert [options.get_session_config_entry(k) for k in SPINNING] == ["0", "0"]
    mine = ort.SessionOptions()
    mine.add_session_config_entry(SPINNING[0], "1")
    dml_onnx.InferenceSession(one_session, mine)
    assert [mine.get_session_config_entry(k) for k in SPINNING] == ["1", "0"]


@pytest.mark.parametrize("threads", [0, 1, 2])
def test_kernels_see_the_sessions_intra_op_thread_count(threads):
    definition = dml_onnx.OPERATORS_BY_NAME["Unfold"]
    prepare, seen = definition.prepare, []

    def recording(**attributes):
        run = prepare(**attributes)

        def recorded(*inputs):
            seen.append(_threads.thread_limit.get())
            return run(*inputs)
        return recorded
    object.__setattr__(definition, "prepare", recording)
    try:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        node = dml_onnx.unfold("X", "Y", window_sizes=[2, 2], name=f"threads_{threads}")
        model = dml_onnx.make_model([node], list(MODEL.graph.input), list(MODEL.graph.output))
        dml_onnx.InferenceSession(model, options).run(None, FEEDS)
    finally:
        object.__setattr__(definition, "prepare", prepare)
    assert seen == [threads]
    assert _threads.thread_limit.get() == 0  # set for the run only


def test_large_initializers_reach_onnxruntime_as_values_with_the_same_result():
    """Weights above dml_onnx.model_files.WEIGHT_ELEMENTS are handed over as OrtValues (the
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
                          cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(1,", "4,", "4)"]


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
                          cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "False", "True", "True", "True"]


def test_quiet_session_options_for_the_users_other_sessions():
    """One call gives plain sessions workers that stop spinning when a run ends; a value the
    user set stays, and spinning during runs stays onnxruntime's default."""
    options = dml_onnx.quiet_session_options()
    assert options.get_session_config_entry("session.force_spinning_stop") == "1"
    with pytest.raises(RuntimeError):
        options.get_session_config_entry("session.intra_op.allow_spinning")
    mine = ort.SessionOptions()
    mine.add_session_config_entry("session.force_spinning_stop", "0")
    assert dml_onnx.quiet_session_options(mine) is mine
    assert mine.get_session_config_entry("session.force_spinning_stop") == "0"
