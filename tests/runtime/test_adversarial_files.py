"""Files that are not models (empty, random bytes, text, undecodable names, a folder, a FIFO,
a missing file) given to every command of the command line, to the checker and the session,
and a conformance case without expected outputs: each fails with one line naming the file,
never a traceback, never blocking."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import dml_onnx
import dml_onnx.conformance
import dml_onnx.model_files
from dml_onnx import _utf8, cli
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


_PLACES = ("graph name", "node name", "node input", "attribute s", "attribute strings",
           "subgraph node op_type", "subgraph tensor name", "value_info name", "doc_string",
           "metadata value", "opset domain")
_BYTES_PLACES = ("attribute s", "attribute strings")  # bytes fields: any bytes are valid


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(_PLACES), st.binary(min_size=1, max_size=6))
def test_the_fast_utf8_check_agrees_with_the_walk_over_every_field(place, text):
    """Any bytes as a string anywhere in a model (a subgraph's node and tensor, an
    attribute's list, the metadata ...): the check through a proto3 parse (1 ms on Mask
    R-CNN) says UTF-8 exactly where the walk over every field does, and a model that is not
    is refused naming the field."""
    placeholder = "\x07" * len(text)  # replaced in the bytes by ``text``, of the same length
    inner = helper.make_graph(
        [helper.make_node("Identity", ["t"], ["u"], name="inner")], "branch", [],
        [tensor("u", [1])], [helper.make_tensor("t", TensorProto.FLOAT, [1], [1.0])])
    node = helper.make_node("If", ["c"], ["y"], name="if", then_branch=inner,
                            else_branch=inner)
    node.attribute.append(helper.make_attribute("note", "n"))
    node.attribute.append(helper.make_attribute("notes", ["a", "b"]))
    model = helper.make_model(helper.make_graph(
        [node], "g", [tensor("c", [], TensorProto.BOOL)], [tensor("y", [1])],
        value_info=[tensor("v", [1])]), doc_string="d")
    helper.set_model_props(model, {"key": "value"})
    graph, attributes = model.graph, model.graph.node[0].attribute
    {"graph name": lambda: setattr(graph, "name", placeholder),
     "node name": lambda: setattr(graph.node[0], "name", placeholder),
     "node input": lambda: graph.node[0].input.append(placeholder),
     "attribute s": lambda: setattr(attributes[2], "s", placeholder.encode()),
     "attribute strings": lambda: attributes[3].strings.append(placeholder.encode()),
     "subgraph node op_type": lambda: setattr(attributes[0].g.node[0], "op_type", placeholder),
     "subgraph tensor name": lambda: setattr(attributes[1].g.initializer[0], "name",
                                             placeholder),
     "value_info name": lambda: setattr(graph.value_info[0], "name", placeholder),
     "doc_string": lambda: setattr(model, "doc_string", placeholder),
     "metadata value": lambda: setattr(model.metadata_props[0], "value", placeholder),
     "opset domain": lambda: setattr(model.opset_import[0], "domain", placeholder)}[place]()
    field = bytes([len(text)]) + placeholder.encode()
    assert model.SerializeToString().count(field) == 1
    serialized = model.SerializeToString().replace(field, bytes([len(text)]) + text)
    try:
        valid = bool(text.decode()) or True
    except UnicodeDecodeError:
        valid = place in _BYTES_PLACES
    assert _utf8.strings_are_utf8(serialized) == valid
    if valid:
        dml_onnx.model_files.parse_model(serialized, "m", None)
    else:
        with pytest.raises(ValueError, match=r"m is not an ONNX model \(field onnx\.\w+\.\w+ "):
            dml_onnx.model_files.parse_model(serialized, "m", None)
