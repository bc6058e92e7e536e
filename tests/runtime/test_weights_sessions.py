"""Sessions on models whose weights are split off (dml_onnx.runtime.weights): what plain
onnxruntime gives, from bytes or a file (a link too), with or without the caller's options
(which gain no entry); a live session owns its weights whatever later happens to its file;
a file changed or cut short while it is read is refused; files that are not models, duplicate
names and stale external-data entries fail or run as plain onnxruntime does."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

import dml_onnx
from dml_onnx.reference import ReferenceEvaluator
from dml_onnx.runtime.weights import load_without_weights
from dml_onnx.runtime.wire import FileData
from tests.runtime._weights import BIG, RNG, _initializers, _model, _tensor

FOLDER_KEY = "session.model_external_initializers_file_folder_path"


@pytest.mark.parametrize("options", [False, True])
def test_a_session_on_bytes_gives_what_plain_onnxruntime_gives(options, tmp_path):
    """Without options the weights reach onnxruntime as arrays, with the caller's options as
    files in memory that it copies (its options must not keep them)."""
    initializers = [t for t in _initializers()  # numpy has no bfloat16 output
                    if t.name not in ("kept_wrong_size", "kept_bfloat16")]
    model = _model(initializers)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    given = ort.SessionOptions() if options else None
    session = dml_onnx.InferenceSession(path.read_bytes(), given)
    assert len(session._weights) == (0 if options else 7)
    if given is not None:  # the options hold no initializer: they make a second session
        dml_onnx.InferenceSession(path.read_bytes(), given)
    plain = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for got, want in zip(session.run(None, {}), plain.run(None, {}), strict=True):
        assert np.array_equal(got, want)


_LIVE = """
import os, sys, numpy as np, onnx, onnxruntime
import dml_onnx
path, how, other, options = sys.argv[1:]
source = f"/proc/self/fd/{os.open(path, os.O_RDONLY)}" if how == "fd" else path
session = dml_onnx.InferenceSession(source, onnxruntime.SessionOptions() if options else None)
before = session.run(None, {})
data = open(path, "rb").read()
if how == "truncate":
    os.truncate(path, 100)
elif how == "overwrite":  # the same file, other bytes
    with open(path, "r+b") as f:
        f.write(bytes(b ^ 0x55 for b in data))
elif how == "replace":  # onnx.save over it
    onnx.save(onnx.load(other), path)
elif how == "delete":
    os.remove(path)
after = session.run(None, {})
print(all(np.array_equal(a, b) for a, b in zip(before, after, strict=True)))
"""


@pytest.mark.parametrize("how", ["truncate", "overwrite", "replace", "delete", "fd"])
@pytest.mark.parametrize("options", [False, True])
def test_a_live_session_does_not_depend_on_its_file(how, options, tmp_path):
    """After creation the session's outputs are its own: the file cut short, overwritten in
    place, replaced by another model or deleted changes nothing (a memory-mapped file would
    end the process with SIGBUS or change the outputs); a /proc/self/fd path opens the
    file itself."""
    initializers = [t for t in _initializers() if t.name not in ("kept_wrong_size",
                                                                 "kept_bfloat16")]
    path, other = tmp_path / "model.onnx", tmp_path / "other.onnx"
    onnx.save(_model(initializers), path)
    onnx.save(_model([_tensor(t.name, np.zeros(BIG, np.float32)) for t in initializers
                      if t.data_type == TensorProto.FLOAT]), other)
    done = subprocess.run([sys.executable, "-c", _LIVE, str(path), how, str(other),
                           "1" if options else ""], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "True"


@pytest.mark.parametrize("options", [False, True])
@pytest.mark.parametrize("link", [False, True])
def test_a_session_on_a_file_owns_its_weights_and_leaves_the_options_as_they_were(
        options, link, tmp_path):
    """The weights are read once into the session's arrays (or, with the caller's options,
    into the serialized model); the caller's options gain no entry that would steer a later
    session (a folder to read weights from)."""
    initializers = [t for t in _initializers()  # numpy has no bfloat16 output
                    if t.name not in ("kept_wrong_size", "kept_bfloat16")]
    (tmp_path / "a").mkdir()
    onnx.save(_model(initializers), tmp_path / "a" / "model.onnx")
    path = tmp_path / "a" / "model.onnx"
    if link:
        (tmp_path / "b").mkdir()
        (tmp_path / "b" / "link.onnx").symlink_to(path)
        path = tmp_path / "b" / "link.onnx"
    given = ort.SessionOptions() if options else None
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {})
    session = dml_onnx.InferenceSession(path, given)
    assert len(session._weights) == (0 if options else 7)
    for got, value in zip(session.run(None, {}), want, strict=True):
        assert np.array_equal(got, value)
    if given is not None:
        with pytest.raises(RuntimeError):
            given.get_session_config_entry(FOLDER_KEY)


def test_a_file_changed_while_it_is_read_is_refused(tmp_path, monkeypatch):
    """A file written while the session reads it (its graph and weights may not fit) is
    refused with OSError naming it, never read half old, half new."""
    import dml_onnx.runtime.weights as weights
    path = tmp_path / "model.onnx"
    onnx.save(_model(_initializers()[:3]), path)
    take = weights._take_values

    def write_meanwhile(*args):
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) - 4)
            f.write(b"\0\0\0\0")
        os.utime(path, ns=(1, 1))  # a coarse clock: the change shows in the time too
        return take(*args)

    monkeypatch.setattr(weights, "_take_values", write_meanwhile)
    with pytest.raises(OSError, match="model.onnx changed while it was read"):
        load_without_weights(path)


def test_files_that_are_not_models_fail_the_session_as_in_onnxruntime_naming_the_file(
        tmp_path):
    """onnxruntime's error (its type and message) for a path or bytes that are no model, or
    a missing file, raised from ours, which names the file; a FIFO, which onnxruntime would
    wait on for ever, our ``ValueError`` alone."""
    (tmp_path / "empty.onnx").write_bytes(b"")
    (tmp_path / "random.onnx").write_bytes(np.random.default_rng(5).bytes(3000))
    (tmp_path / "text.onnx").write_bytes(b"ir_version: 10\n")
    (tmp_path / "folder.onnx").mkdir()
    os.mkfifo(tmp_path / "fifo.onnx")
    for name in ("empty.onnx", "random.onnx", "text.onnx", "folder.onnx", "missing.onnx"):
        path = tmp_path / name
        sources = [(str(path), path)]
        if path.is_file():
            sources.append((path.read_bytes(), bytearray(path.read_bytes())))
        for theirs, ours in sources:
            with pytest.raises(Exception) as expected:  # noqa: PT011 - the type is compared
                ort.InferenceSession(theirs, providers=["CPUExecutionProvider"])
            with pytest.raises(type(expected.value)) as got:
                dml_onnx.InferenceSession(ours)
            assert str(got.value) == str(expected.value)
            assert (str(path) if isinstance(theirs, str) else "bytes") in \
                str(got.value.__cause__)
    with pytest.raises(ValueError, match=str(tmp_path / "fifo.onnx")):
        dml_onnx.InferenceSession(tmp_path / "fifo.onnx")


def test_a_file_cut_short_while_it_is_read_raises_and_a_truncated_one_is_no_model(tmp_path):
    """Reads, not a memory mapping: a file that shrinks under the split raises OSError (a
    mapping would end the process with SIGBUS); one cut short before is not a model."""
    path = tmp_path / "model.onnx"
    onnx.save(_model(_initializers()[:3]), path)
    data = path.read_bytes()
    with FileData(path) as reader:
        assert reader[5] == data[5] and reader.read(10, 20) == data[10:30]
        os.truncate(path, len(data) // 2)
        with pytest.raises(OSError, match="ended at byte"):
            reader.read_into(np.empty(len(data) - 100, np.uint8), 100)
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match="is not an ONNX model"):
        load_without_weights(path)


def _same_outcome(path, **kwargs) -> None:
    """dml_onnx's session on ``path`` gives what plain onnxruntime gives, or both refuse."""
    try:
        want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {})
    except Exception:  # noqa: BLE001 - plain onnxruntime refuses: so must we
        with pytest.raises(Exception):  # noqa: B017
            dml_onnx.InferenceSession(path, **kwargs).run(None, {})
        return
    got = dml_onnx.InferenceSession(path, **kwargs).run(None, {})
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g, w)


@pytest.mark.parametrize("options", [False, True])
def test_duplicate_names_and_stale_external_data_entries_give_plain_onnxruntimes_answer(
        options, tmp_path):
    """Two initializers of one name; an initializer whose values are in the model but
    whose external_data entries (data_location DEFAULT) were left behind."""
    duplicated = _model([_tensor("same", np.zeros(BIG, np.float32)),
                         _tensor("same", np.ones(BIG, np.float32))])
    del duplicated.graph.node[1:], duplicated.graph.output[1:]
    stale = _model([_tensor("values", RNG.standard_normal(BIG).astype(np.float32))])
    for key, value in (("location", "gone.bin"), ("offset", "0"), ("length", "12")):
        stale.graph.initializer[0].external_data.add(key=key, value=value)
    for name, model in (("duplicated", duplicated), ("stale", stale)):
        onnx.save(model, tmp_path / f"{name}.onnx")
        _same_outcome(tmp_path / f"{name}.onnx",
                      sess_options=ort.SessionOptions() if options else None)


def _two_level_model(scale: float) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """X + W -> LpPooling -> * W2: a segment, a kernel and a segment, each segment with a
    weight of its own (values ``scale`` times a fixed pattern)."""
    shape = (1, 2, 48, 48)  # above WEIGHT_ELEMENTS values: weights
    pattern = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 7
    nodes = [onnx.helper.make_node("Add", ["X", "W"], ["S"]),
             dml_onnx.lp_pooling("S", "P", name="pool", window_size=[3, 3],
                                 start_padding=[1, 1], end_padding=[1, 1]),
             onnx.helper.make_node("Mul", ["P", "W2"], ["Y"])]
    value = onnx.helper.make_tensor_value_info
    model = dml_onnx.make_model(
        nodes, [value("X", TensorProto.FLOAT, list(shape))], [value("Y", TensorProto.FLOAT, None)],
        initializers=[onnx.numpy_helper.from_array(scale * pattern, "W"),
                      onnx.numpy_helper.from_array(-scale * pattern, "W2")])
    return model, {"X": np.ones(shape, np.float32)}


@pytest.mark.parametrize("split", [False, True])
def test_the_callers_options_get_the_weights_as_files_that_onnxruntime_copies(
        split, monkeypatch):
    """With the caller's options the weights reach onnxruntime as external-data files in
    memory, not inside the serialized model (which onnxruntime would parse into one more
    copy): every model onnxruntime gets is small and the session keeps no weights. The same
    options then make sessions of other models whose initializers have the same names, each
    with its own values, after the first session and its arrays are gone."""
    models = [_two_level_model(scale) if split else (_model([
        _tensor("w", scale * np.arange(BIG, dtype=np.float32))]), {}) for scale in (1.0, 3.0)]
    sizes: list[int] = []
    plain_session = ort.InferenceSession

    def recording(model: bytes | str, *arguments: object, **keywords: object):
        sizes.append(len(model))
        return plain_session(model, *arguments, **keywords)

    given = ort.SessionOptions()
    monkeypatch.setattr(ort, "InferenceSession", recording)
    first = dml_onnx.InferenceSession(models[0][0].SerializeToString(), given)
    assert len(sizes) == (2 if split else 1) and max(sizes) < BIG
    assert not first._weights
    monkeypatch.setattr(ort, "InferenceSession", plain_session)
    del first
    for model, feeds in models:
        session = dml_onnx.InferenceSession(model.SerializeToString(), given)
        want = ReferenceEvaluator(model).run(None, feeds)
        for got, expected in zip(session.run(None, feeds), want, strict=True):
            np.testing.assert_allclose(got, expected, rtol=1e-6)
