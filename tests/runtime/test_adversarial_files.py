"""Files that are not models (empty, random bytes, text, undecodable names, a folder, a FIFO,
a missing file) given to every command of the command line, to the checker and the session,
and a conformance case without expected outputs: each fails with one line naming the file,
never a traceback, never blocking."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

import dml_onnx
import dml_onnx.conformance
from dml_onnx import cli
from tests.runtime._adversarial import POOL, X, child, tensor


# ------------------------------------------------------------------ files that are not models
@pytest.fixture
def not_models(tmp_path):
    """A file of each kind that is not a model, and the name its error must show."""
    (tmp_path / "empty.onnx").write_bytes(b"")
    (tmp_path / "random.onnx").write_bytes(np.random.default_rng(5).bytes(3000))
    (tmp_path / "text.onnx").write_bytes(b"ir_version: 10\n")  # parses, holds no graph
    (tmp_path / "latin1.onnx").write_bytes(POOL.SerializeToString().replace(b"pool", b"p\xf6l\xff"))
    (tmp_path / "folder.onnx").mkdir()
    os.mkfifo(tmp_path / "fifo.onnx")
    return tmp_path, ["empty.onnx", "random.onnx", "text.onnx", "latin1.onnx", "folder.onnx",
                      "fifo.onnx", "missing.onnx"]


@pytest.mark.parametrize("verb", [["check"], ["lower"], ["raise"], ["conformance", "run"]])
def test_every_command_gives_one_line_and_a_nonzero_exit_for_a_file_that_is_not_a_model(
        verb, not_models, capsys):
    folder, names = not_models
    for name in names:
        path = folder / name
        if verb == ["conformance", "run"]:  # a case folder holding the file as its model
            case = folder / f"suite_{name}" / "test_case"
            (case / "test_data_set_0").mkdir(parents=True)
            onnx.save_tensor(onnx.numpy_helper.from_array(X, "Y"),
                             case / "test_data_set_0" / "output_0.pb")
            if path.is_file():
                (case / "model.onnx").write_bytes(path.read_bytes())
            path = case.parent
        args = [*verb, str(path)] + ([str(folder / "out.onnx")] if verb[0] in ("lower", "raise")
                                     else [])
        status = cli.main(args)
        out, err = capsys.readouterr()
        assert status != 0, (verb, name)
        assert "Traceback" not in out + err
        problems = [line for line in (out + err).splitlines() if name in line or "test_case"
                    in line]
        assert problems, (verb, name, out, err)


def test_reading_a_fifo_never_blocks():
    out = child("""
        import os, tempfile
        import dml_onnx
        folder = tempfile.mkdtemp()
        os.mkfifo(os.path.join(folder, "model.onnx"))
        print(dml_onnx.check_model(os.path.join(folder, "model.onnx")))
        try:
            dml_onnx.InferenceSession(os.path.join(folder, "model.onnx"))
        except ValueError as error:
            print(error)
    """, timeout=60)
    assert out.count("is not a regular file") == 2


def test_a_case_without_expected_outputs_fails(tmp_path):
    case = tmp_path / "test_unfold_no_outputs"
    (case / "test_data_set_0").mkdir(parents=True)
    onnx.save(dml_onnx.make_model([dml_onnx.unfold("X", "Y", window_sizes=[1], name="u")],
                                  [tensor("X", [1, 1, 2])], [tensor("Y", [1, 1, 2])]),
              case / "model.onnx")
    onnx.save_tensor(onnx.numpy_helper.from_array(np.ones((1, 1, 2), np.float32), "X"),
                     case / "test_data_set_0" / "input_0.pb")
    (outcome,) = dml_onnx.conformance.run_suite(tmp_path)
    assert not outcome.passed
    assert outcome.problems == (f"{case / 'test_data_set_0'} holds no expected output "
                                "(output_*.pb)",)
