"""Models without their weights (dml_onnx.runtime.weights): every initializer either becomes a stub
whose array holds exactly its values, or stays in the model as it was; whatever the source
(path, bytes, ModelProto), wire layout or damage. Sessions built on the split, and the files
they read, are in ``test_weights_sessions``."""

from __future__ import annotations

import math
import os

import numpy as np
import onnx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, numpy_helper

import dml_onnx
from dml_onnx.model_files import WEIGHT_ELEMENTS, load_model
from dml_onnx.runtime.stubs import in_memory_files
from dml_onnx.runtime.weights import load_without_weights
from tests.runtime._weights import BIG, RNG, _initializers, _model, _tensor


def _check_split(original: onnx.ModelProto, light: onnx.ModelProto,
                 arrays: dict[str, np.ndarray]) -> None:
    """Every initializer of ``light`` is the original or a stub whose array holds its values;
    everything else of the model is unchanged; in_memory_files hands the values over."""
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
    _check_files_in_memory(original, _copy(light), arrays)
    rest = onnx.ModelProto.FromString(original.SerializeToString())
    rest.graph.ClearField("initializer")
    light.graph.ClearField("initializer")
    assert light == rest


def _check_files_in_memory(original: onnx.ModelProto, light: onnx.ModelProto,
                           arrays: dict[str, np.ndarray]) -> None:
    """in_memory_files points each stub at a file of its own that holds its raw_data's
    bytes, under names that no other call gives."""
    names, buffers = in_memory_files(light, arrays)
    again, _ = in_memory_files(_copy(light), arrays)
    assert len(set(names) | set(again)) == 2 * len(names) == 2 * len(arrays)
    files = dict(zip(names, buffers, strict=True))
    stubs = [t for t in light.graph.initializer if t.name in arrays]
    for stub, name in zip(stubs, names, strict=True):
        entries = {e.key: e.value for e in stub.external_data}
        assert entries == {"location": name, "length": str(files[name].size)}
        before = next(t for t in original.graph.initializer if t.name == stub.name)
        assert files[name].tobytes() == numpy_helper.to_array(before).astype(
            numpy_helper.to_array(before).dtype.newbyteorder("<")).tobytes(), stub.name


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


def _saved_for_small_pieces_on_four_threads(tmp_path, monkeypatch):
    """A model of every kind of initializer saved in ``tmp_path``, its weights read in pieces
    of 1001 bytes on four threads."""
    from dml_onnx.runtime import weights

    model = _model(_initializers())
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    monkeypatch.setattr(weights, "_READ_PIECE", 1001)
    monkeypatch.setattr(weights.os, "sched_getaffinity", lambda pid: set(range(4)),
                        raising=False)
    return model, path


@pytest.mark.parametrize("threads", ["several", "cannot start"])
@pytest.mark.parametrize("source", ["path", "bytes"])
def test_weights_read_in_small_pieces_on_threads_hold_exactly_their_values(
        threads, source, tmp_path, monkeypatch):
    """The block fills in pieces over threads (a weight spread over several pieces and
    threads, pieces ending inside values); where no thread can start (a memory limit), on the
    calling thread: every array holds exactly its values."""
    from concurrent.futures import ThreadPoolExecutor

    from dml_onnx.runtime import weights

    model, path = _saved_for_small_pieces_on_four_threads(tmp_path, monkeypatch)
    started = []

    class Pool(ThreadPoolExecutor):
        def submit(self, *args, **kwargs):
            if threads == "cannot start":
                raise RuntimeError("can't start new thread")
            started.append(1)
            return super().submit(*args, **kwargs)

    monkeypatch.setattr(weights, "ThreadPoolExecutor", Pool)
    light, arrays = load_without_weights(path if source == "path" else path.read_bytes())
    assert len(started) == (4 if threads == "several" else 0)
    _check_split(model, light, arrays)


def test_an_interrupt_while_a_reader_starts_ends_every_reader(tmp_path, monkeypatch):
    """A signal handler that raises (Ctrl-C) just as a reader thread has started: the load
    raises it, and every reader ends even while the exception, whose traceback holds the
    readers' pool, is kept (as the interpreter keeps an uncaught one until exit; a reader the
    pool had started but not registered waited for work for ever, and the exit for it)."""
    import threading
    import time

    _saved_for_small_pieces_on_four_threads(tmp_path, monkeypatch)
    start = threading.Thread.start

    def start_then_interrupt(thread):
        monkeypatch.setattr(threading.Thread, "start", start)
        start(thread)
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", start_then_interrupt)
    with pytest.raises(KeyboardInterrupt) as kept:
        load_without_weights(tmp_path / "model.onnx")
    deadline = time.monotonic() + 30
    while [t for t in threading.enumerate() if t.name.startswith("dml_onnx-weights")]:
        assert time.monotonic() < deadline, "a reader thread is still waiting for work"
        time.sleep(0.01)
    assert kept.value.__traceback__ is not None


def test_meanwhile_runs_on_the_stubbed_model_while_the_weights_are_read(tmp_path, monkeypatch):
    """read_without_weights calls ``meanwhile`` with the model of stubs while the reads are
    under way (each read on the readers' threads waits until it has been called: read
    first, the load would fail), and returns its result with the filled arrays."""
    import threading

    from dml_onnx.runtime import weights, wire

    model, path = _saved_for_small_pieces_on_four_threads(tmp_path, monkeypatch)
    called = threading.Event()
    read_into = wire.FileData.read_into
    readers = set()

    def waiting(self, *args):
        if threading.current_thread().name.startswith("dml_onnx-weights"):
            readers.add(threading.current_thread().name)
            if not called.wait(timeout=30):
                raise AssertionError("read before meanwhile was called")
        return read_into(self, *args)

    monkeypatch.setattr(wire.FileData, "read_into", waiting)

    def meanwhile(light):
        assert {t.name for t in light.graph.initializer
                if t.data_location == TensorProto.EXTERNAL} >= {"f32", "f64", "i64"}
        called.set()
        return "done"

    light, arrays, result = weights.read_without_weights(path, meanwhile)
    assert result == "done" and len(readers) == 4
    _check_split(model, light, arrays)


def test_what_meanwhile_raises_is_raised_once_the_reads_have_ended(tmp_path, monkeypatch):
    import threading

    from dml_onnx.runtime import weights

    _, path = _saved_for_small_pieces_on_four_threads(tmp_path, monkeypatch)

    def meanwhile(light):
        raise ValueError("a bad model")

    with pytest.raises(ValueError, match="a bad model"):
        weights.read_without_weights(path, meanwhile)
    assert not [t for t in threading.enumerate() if t.name.startswith("dml_onnx-weights")]


def _mapping_flags(address: int) -> list[str]:
    """The ``VmFlags`` of the mapping that holds ``address`` (Linux's ``/proc/self/smaps``)."""
    mapping = None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(bound, 16) for bound in head.split("-"))
                mapping = start <= address < end
            elif head == "VmFlags:" and mapping:
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="Linux's map of memory")
def test_large_weights_lie_in_a_mapping_of_default_pages(tmp_path):
    """A model's weights of 4 MiB and more share an anonymous mapping that is not advised
    huge pages (numpy advises them for its own arrays from 4 MiB): how long huge pages take
    to fault depends on what the process freed before. The arrays are writable and hold
    exactly their values."""
    weights = [_tensor(f"w{k}", RNG.standard_normal(size, dtype=np.float32))
               for k, size in enumerate([1 << 20, BIG, 300_000])]
    model = _model(weights)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    light, arrays = load_without_weights(path)
    _check_split(model, light, arrays)
    for array in arrays.values():
        assert array.flags.writeable
        for address in array.ctypes.data, array.ctypes.data + array.nbytes - 1:
            assert "hg" not in _mapping_flags(address)
    try:  # numpy 2
        from numpy._core import multiarray
    except ImportError:
        from numpy.core import multiarray
    if multiarray._get_madvise_hugepage() and os.path.exists(
            "/sys/kernel/mm/transparent_hugepage/enabled"):  # the check sees numpy's advice
        own = np.empty(1 << 23, np.uint8)  # advised from its first whole page on
        assert "hg" in _mapping_flags(own.ctypes.data + own.nbytes - 1)


def test_a_block_the_system_cannot_map_raises_memory_error(monkeypatch):
    """Where the mapping fails (a memory limit), ``MemoryError`` names the size, as numpy's
    allocation does."""
    import errno
    import mmap

    from dml_onnx.runtime import weights

    def refuse(*args, **kwargs):
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(mmap, "mmap", refuse)
    with pytest.raises(MemoryError, match="cannot map 8388608 bytes for the weights"):
        weights._block(1 << 23)
    assert weights._block(1000).size == 1000  # small blocks: numpy's


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
@example(cut=14, flip=14, byte=14)  # the first node cut short: its op_type outside it, unknown
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


@pytest.mark.parametrize("source", ["bytes", "model"])
def test_fields_the_schema_does_not_know_are_kept_as_protobuf_keeps_them(source):
    """A newer onnx's fields (unknown to this one) in the model and its graph, of every wire
    type, stay in the split model as protobuf's parser keeps them."""
    model = _model(_initializers()[:2])
    unknown = (b"\xf8\x07\x05"  # field 127, varint
               b"\xf9\x07" + bytes(8)  # 64-bit
               + b"\xfa\x07\x03abc"  # length-delimited
               b"\xfd\x07\x01\x02\x03\x04")  # 32-bit
    data = model.SerializeToString() + b"\x3a" + bytes([len(unknown)]) + unknown + unknown
    whole = onnx.ModelProto.FromString(data)
    assert whole.graph.SerializeToString() != model.graph.SerializeToString()
    light, arrays = load_without_weights(data if source == "bytes" else whole)
    _check_split(whole, light, arrays)


def test_a_text_format_file_loads_as_onnx_load_loads_it(tmp_path):
    model = _model(_initializers()[:2])
    onnx.save(model, tmp_path / "model.onnxtxt")
    light, arrays = load_without_weights(tmp_path / "model.onnxtxt")
    _check_split(onnx.load(tmp_path / "model.onnxtxt"), light, arrays)
    assert sorted(arrays) == ["f32", "f64"]


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
