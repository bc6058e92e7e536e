"""Models without their weights (dml_onnx.runtime.weights): every initializer either becomes a stub
whose array holds exactly its values, or stays in the model as it was; whatever the source
(path, bytes, ModelProto), wire layout or damage."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import dml_onnx
from dml_onnx.graphs import WEIGHT_ELEMENTS, load_model
from dml_onnx.runtime.weights import _FileData, load_without_weights, serialized_with_weights

RNG = np.random.default_rng(11)
FOLDER_KEY = "session.model_external_initializers_file_folder_path"
BIG = WEIGHT_ELEMENTS + 1


def _tensor(name: str, array: np.ndarray, *, raw: bool = True) -> TensorProto:
    tensor = numpy_helper.from_array(array, name)
    if not raw:  # the typed field (float_data, int64_data ...) instead of raw_data
        tensor = helper.make_tensor(name, tensor.data_type, array.shape, array.reshape(-1))
    return tensor


def _initializers() -> list[TensorProto]:
    """One of each kind: handed over, or kept for a reason named in its name."""
    bfloat16 = helper.make_tensor("kept_bfloat16", TensorProto.BFLOAT16, [BIG],
                                  RNG.integers(0, 2 ** 16, BIG, dtype=np.uint16).tobytes(),
                                  raw=True)
    wrong_size = _tensor("kept_wrong_size", np.ones(BIG, np.float32))
    wrong_size.raw_data = wrong_size.raw_data[:-4]
    return [
        _tensor("f32", RNG.standard_normal((BIG // 4 + 1, 4)).astype(np.float32)),
        _tensor("f64", RNG.standard_normal(BIG)),
        _tensor("f16", RNG.standard_normal(BIG).astype(np.float16)),
        _tensor("i64", RNG.integers(-2 ** 62, 2 ** 62, BIG)),
        _tensor("u8", RNG.integers(0, 255, (3, BIG), dtype=np.uint8)),
        _tensor("flag", RNG.random(BIG) < 0.5),
        _tensor("typed_f32", RNG.standard_normal(BIG).astype(np.float32), raw=False),
        _tensor("kept_small", RNG.standard_normal(WEIGHT_ELEMENTS).astype(np.float32)),
        _tensor("kept_small_many_bytes", RNG.standard_normal(WEIGHT_ELEMENTS)),
        helper.make_tensor("kept_strings", TensorProto.STRING, [BIG], [b"a"] * BIG),
        bfloat16, wrong_size,
    ]


def _model(initializers: list[TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Identity", [t.name], [f"out_{t.name}"]) for t in initializers],
        "weights", [], [helper.make_tensor_value_info(f"out_{t.name}", t.data_type, None)
                        for t in initializers], initializer=initializers, doc_string="kept")
    model = dml_onnx.make_model([], [], [])
    model.graph.CopyFrom(graph)
    model.producer_name = "tests"
    helper.set_model_props(model, {"key": "value"})
    return model


def _check_split(original: onnx.ModelProto, light: onnx.ModelProto,
                 arrays: dict[str, np.ndarray]) -> None:
    """Every initializer of ``light`` is the original or a stub whose array holds its values;
    everything else of the model is unchanged; serialized_with_weights undoes the split."""
    assert len(light.graph.initializer) == len(original.graph.initializer)
    for before, after in zip(original.graph.initializer, light.graph.initializer, strict=True):
        if after.name in arrays:
            assert after.data_location == TensorProto.EXTERNAL and not after.raw_data
            assert list(after.dims) == list(before.dims)
            assert after.data_type == before.data_type
            array = arrays[after.name]
            assert array.flags.c_contiguous and array.dtype.isnative
            assert np.array_equal(array, numpy_helper.to_array(before)), before.name
        else:
            assert after == before, before.name
    rest = onnx.ModelProto.FromString(original.SerializeToString())
    rest.graph.ClearField("initializer")
    whole = onnx.ModelProto.FromString(serialized_with_weights(_copy(light), arrays))
    moved = [t for t in original.graph.initializer if t.name in arrays]  # each moved last
    order = [t for t in original.graph.initializer if t.name not in arrays] + moved
    for before, after in zip(order, whole.graph.initializer, strict=True):
        assert after == before or (
            (after.name, after.data_type, after.dims, after.data_location)
            == (before.name, before.data_type, before.dims, before.data_location)
            and np.array_equal(numpy_helper.to_array(after), numpy_helper.to_array(before)))
    for model in (light, whole):
        model.graph.ClearField("initializer")
        assert model == rest


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copied = onnx.ModelProto()
    copied.CopyFrom(model)
    return copied


@pytest.mark.parametrize("source", ["path", "bytes", "bytearray", "model"])
def test_large_numeric_raw_and_typed_initializers_are_handed_over_and_the_rest_kept(
        source, tmp_path):
    model = _model(_initializers())
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    given_as = {"path": path, "bytes": path.read_bytes(), "bytearray": bytearray(
        path.read_bytes()), "model": model}[source]
    light, arrays = load_without_weights(given_as)
    assert sorted(arrays) == ["f16", "f32", "f64", "flag", "i64", "typed_f32", "u8"]
    _check_split(model, light, arrays)


@pytest.mark.parametrize("options", [False, True])
def test_a_session_on_bytes_gives_what_plain_onnxruntime_gives(options, tmp_path):
    """Without options the weights reach onnxruntime as arrays, with the caller's options
    inside the serialized model (its options must not keep them)."""
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


def test_external_data_files_are_read_as_onnx_load_reads_them(tmp_path):
    model = _model([_tensor("outside", RNG.standard_normal(BIG).astype(np.float32)),
                    _tensor("inside", RNG.standard_normal(BIG).astype(np.float32))])
    onnx.save(model, tmp_path / "model.onnx", save_as_external_data=True,
              all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    assert model.graph.initializer[0].data_location == TensorProto.EXTERNAL  # save moved it
    loaded = onnx.load(tmp_path / "model.onnx")
    light, arrays = load_without_weights(tmp_path / "model.onnx")
    assert sorted(arrays) == ["inside", "outside"]
    _check_split(loaded, light, arrays)
    _check_split(loaded, *load_without_weights(loaded))
    (tmp_path / "elsewhere").mkdir()  # a link: onnx.load reads the data next to the link
    (tmp_path / "elsewhere" / "weights.bin").write_bytes(  # zeros there, not a link (refused)
        bytes((tmp_path / "weights.bin").stat().st_size))
    (tmp_path / "elsewhere" / "link.onnx").symlink_to(tmp_path / "model.onnx")
    for path in (tmp_path / "model.onnx", tmp_path / "elsewhere" / "link.onnx"):
        want = numpy_helper.to_array(onnx.load(path).graph.initializer[0])
        (Y,) = dml_onnx.InferenceSession(path).run(["out_outside"], {})
        assert np.array_equal(Y, want)
    assert not want.any()


def test_a_repeated_field_parses_as_protobuf_merges_it(tmp_path):
    """Serialized messages concatenate into their merge: a second graph field appends its
    initializers, a second raw_data field replaces the first."""
    first = _model([_tensor("a", RNG.standard_normal(BIG).astype(np.float32))])
    tail = onnx.ModelProto(graph=onnx.GraphProto(initializer=[
        _tensor("b", RNG.standard_normal(BIG).astype(np.float32))]))
    twice = _tensor("c", np.zeros(BIG, np.float32))
    twice_bytes = twice.SerializeToString() + TensorProto(
        raw_data=np.ones(BIG, np.float32).tobytes()).SerializeToString()
    data = first.SerializeToString() + tail.SerializeToString() + (
        b"\x3a" + _varint(len(b"\x2a" + _varint(len(twice_bytes)) + twice_bytes)) + b"\x2a"
        + _varint(len(twice_bytes)) + twice_bytes)
    merged = onnx.ModelProto.FromString(data)
    assert [t.name for t in merged.graph.initializer] == ["a", "b", "c"]
    assert np.array_equal(numpy_helper.to_array(merged.graph.initializer[2]), np.ones(BIG))
    light, arrays = load_without_weights(data)
    assert sorted(arrays) == ["a", "b", "c"]
    _check_split(merged, light, arrays)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes([*out, value])


def test_duplicate_initializer_names_keep_every_value_in_the_model():
    model = _model([_tensor("same", np.zeros(BIG, np.float32)),
                    _tensor("same", np.ones(BIG, np.float32))])
    for source in (model, model.SerializeToString()):
        light, arrays = load_without_weights(source)
        assert arrays == {}
        _check_split(model, light, arrays)


@settings(max_examples=40, deadline=None)
@given(kinds=st.lists(st.tuples(st.sampled_from(["float32", "int8", "float64", "bool"]),
                                st.integers(WEIGHT_ELEMENTS // 8 - 2, WEIGHT_ELEMENTS + 3),
                                st.booleans()), max_size=6),
       seed=st.integers(0, 2 ** 32 - 1))
def test_any_mix_of_sizes_around_the_threshold_splits_exactly(kinds, seed):
    """Sizes around WEIGHT_ELEMENTS in elements and in bytes, raw or typed fields."""
    rng = np.random.default_rng(seed)
    initializers = [_tensor(f"t{i}", (rng.standard_normal(size) * 100).astype(dtype), raw=raw)
                    for i, (dtype, size, raw) in enumerate(kinds)]
    model = _model(initializers)
    for source in (model.SerializeToString(), model):
        light, arrays = load_without_weights(source)
        assert sorted(arrays) == sorted(t.name for t in initializers
                                        if math.prod(t.dims) > WEIGHT_ELEMENTS)
        _check_split(model, light, arrays)


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(1, 10 ** 9), flip=st.integers(0, 10 ** 9), byte=st.integers(0, 255))
def test_damaged_bytes_raise_what_load_model_raises_or_parse_alike(cut, flip, byte):
    """A truncated or altered model: the same error as load_model, or the same model."""
    data = bytearray(_model(_initializers()[:3]).SerializeToString())
    data[flip % len(data)] = byte
    data = bytes(data[:len(data) - cut % (len(data) // 4)])
    try:
        want = load_model(data)
    except ValueError as error:
        with pytest.raises(ValueError) as raised:
            load_without_weights(data)
        assert str(raised.value).split(" (")[0] == str(error).split(" (")[0]
        return
    light, arrays = load_without_weights(data)
    _check_split(want, light, arrays)


def test_files_that_are_not_models_fail_the_session_naming_the_file(tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    (tmp_path / "random.onnx").write_bytes(np.random.default_rng(5).bytes(3000))
    (tmp_path / "text.onnx").write_bytes(b"ir_version: 10\n")
    (tmp_path / "folder.onnx").mkdir()
    os.mkfifo(tmp_path / "fifo.onnx")
    for name in ("empty.onnx", "random.onnx", "text.onnx", "folder.onnx", "fifo.onnx"):
        with pytest.raises(ValueError, match=str(tmp_path / name)):
            dml_onnx.InferenceSession(tmp_path / name)
        if (tmp_path / name).is_file():
            with pytest.raises(ValueError, match="bytes"):
                dml_onnx.InferenceSession((tmp_path / name).read_bytes())
    with pytest.raises(OSError):
        dml_onnx.InferenceSession(tmp_path / "missing.onnx")


def test_a_text_format_file_loads_as_onnx_load_loads_it(tmp_path):
    model = _model(_initializers()[:2])
    onnx.save(model, tmp_path / "model.onnxtxt")
    light, arrays = load_without_weights(tmp_path / "model.onnxtxt")
    _check_split(onnx.load(tmp_path / "model.onnxtxt"), light, arrays)
    assert sorted(arrays) == ["f32", "f64"]


def test_a_file_cut_short_while_it_is_read_raises_and_a_truncated_one_is_no_model(tmp_path):
    """Reads, not a memory mapping: a file that shrinks under the split raises OSError (a
    mapping would end the process with SIGBUS); one cut short before is not a model."""
    path = tmp_path / "model.onnx"
    onnx.save(_model(_initializers()[:3]), path)
    data = path.read_bytes()
    with _FileData(path) as reader:
        assert reader[5] == data[5] and reader.read(10, 20) == data[10:30]
        os.truncate(path, len(data) // 2)
        with pytest.raises(OSError, match="ended at byte"):
            reader.read_into(np.empty(len(data) - 100, np.uint8), 100)
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match="is not an ONNX model"):
        load_without_weights(path)


def test_negative_dims_keep_the_tensor_in_the_model():
    """Dims whose product matches the bytes but that are negative: no array is made (numpy
    would refuse the shape), the tensor stays for onnxruntime to reject."""
    crafted = TensorProto(name="crafted", data_type=TensorProto.FLOAT, dims=[-2, -BIG],
                          raw_data=np.zeros(2 * BIG, np.float32).tobytes())
    model = _model([crafted])
    for source in (model.SerializeToString(), model):
        light, arrays = load_without_weights(source)
        assert arrays == {}
        _check_split(model, light, arrays)


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


def test_unpacked_repeated_values_are_walked_without_listing_them(tmp_path):
    """float_data written unpacked (a tag before each value: 5 bytes a float) is legal wire
    format; the split stops at the first typed value instead of listing a million fields."""
    import tracemalloc
    values = RNG.standard_normal(1 << 20).astype(np.float32)
    body = TensorProto(name="unpacked", data_type=TensorProto.FLOAT,
                       dims=[values.size]).SerializeToString()
    body += b"".join(b"\x25" + v.tobytes() for v in values)  # field 4, wire type 5
    model = _model([_tensor("unpacked", np.zeros(1, np.float32))])
    del model.graph.initializer[:]
    data = model.SerializeToString() + b"\x3a" + _varint(len(body) + 1 + len(_varint(len(
        body)))) + b"\x2a" + _varint(len(body)) + body  # graph { initializer { ... } }
    path = tmp_path / "unpacked.onnx"
    path.write_bytes(data)
    tracemalloc.start()
    light, arrays = load_without_weights(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert np.array_equal(arrays["unpacked"], values)
    assert peak < 4 * len(data), peak  # listing the fields took 30 times the file
