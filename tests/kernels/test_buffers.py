"""The large arrays the kernels reuse (dml_onnx._kernels._buffers): a block is handed out again only
once nothing made from it is left, at most KEPT_BYTES of free blocks stay, threads never share
one, and every operator's outputs survive the next call while the caller holds them."""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dml_onnx
from dml_onnx import calls
from dml_onnx._kernels import _buffers
from dml_onnx.conformance import example_case
from tests._examples import EXAMPLES

BLOCK = 1 << 20
"""The bytes of the arrays these tests ask for (REUSED_BYTES is set to this)."""


@pytest.fixture(autouse=True)
def fresh_blocks(monkeypatch):
    monkeypatch.setattr(_buffers, "_blocks", [])
    monkeypatch.setattr(_buffers, "REUSED_BYTES", BLOCK)
    monkeypatch.setattr(_buffers, "_GRANULE", 1 << 16)


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


HOLDERS = {
    "the array": lambda a: a,
    "a reshaped view": lambda a: a.reshape(-1),
    "a slice of a view": lambda a: a.reshape(-1)[7:][::3],
    "a view as other bytes": lambda a: a.view(np.uint8),
    "a memoryview": memoryview,
    "np.frombuffer": lambda a: np.frombuffer(memoryview(a), np.uint8),
    "an OrtValue": lambda a: ort.OrtValue.ortvalue_from_numpy(a),
    "a list": lambda a: [a],
}


@pytest.mark.parametrize("holder", HOLDERS)
def test_a_block_is_handed_out_again_once_nothing_made_from_it_is_left(holder):
    first = _buffers.empty((BLOCK // 4,), np.float32)
    address = _address(first)
    first[:] = 1.0
    held = HOLDERS[holder](first)
    del first
    second = _buffers.empty((BLOCK // 4,), np.float32)
    second[:] = 2.0
    assert _address(second) != address
    assert _buffers.kept_bytes() == (0, 2 * BLOCK)
    del held
    third = _buffers.empty((BLOCK // 4,), np.float32)
    assert _address(third) == address  # reused, once nothing else refers to it


@given(st.lists(st.tuples(st.integers(BLOCK // 4, 3 * BLOCK // 4), st.booleans()),
                min_size=1, max_size=12))
@settings(max_examples=40, deadline=None)
def test_free_blocks_stay_within_kept_bytes_and_fit_what_they_serve(requests):
    """Requests of float32 counts, each held or dropped before the next; after each request
    the free blocks hold at most KEPT_BYTES, and a block serves an array of at most its size
    and at least two thirds of it (less the rounding of its size)."""
    kept_limit = _buffers.KEPT_BYTES
    try:
        _buffers.KEPT_BYTES = 3 * BLOCK
        held = []
        for count, hold in requests:
            array = _buffers.empty((count,), np.float32)
            assert array.nbytes <= array.base.size <= array.nbytes * 3 // 2 + (1 << 16)
            free, used = _buffers.kept_bytes()  # what each request leaves
            assert free <= _buffers.KEPT_BYTES
            assert used == sum(a.base.size for a in [*held, array])
            if hold:
                held.append(array)
            del array
    finally:
        _buffers.KEPT_BYTES = kept_limit
        _buffers._blocks.clear()


def test_drop_free_drops_the_free_blocks_only():
    held, dropped = (_buffers.empty((BLOCK // 4,), np.float32) for _ in range(2))
    del dropped
    assert _buffers.kept_bytes() == (BLOCK, BLOCK)
    _buffers.drop_free()
    assert _buffers.kept_bytes() == (0, BLOCK)
    held[:] = 3.0  # still its own


def test_small_arrays_are_not_kept():
    array = _buffers.empty((BLOCK // 4 - 1,), np.float32)
    assert array.base is None and _buffers.kept_bytes() == (0, 0)


def test_threads_asking_at_once_never_share_a_block():
    count, rounds = 8, 20
    barrier = threading.Barrier(count)
    clashes = []

    def ask(k: int) -> None:
        for _ in range(rounds):
            array = _buffers.empty((BLOCK // 4,), np.float32)
            array.fill(k)
            barrier.wait()  # every thread holds its array here
            if not (array == k).all():
                clashes.append(k)
            barrier.wait()
            del array

    threads = [threading.Thread(target=ask, args=(k,)) for k in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert clashes == []
    assert sum(_buffers.kept_bytes()) <= count * BLOCK + count * (1 << 16)


@pytest.mark.parametrize("pair", EXAMPLES, ids=lambda pair: f"{pair[0].name}-{pair[1].name}")
def test_outputs_the_caller_holds_are_never_written_by_the_next_call(pair, monkeypatch):
    """Every array the kernels make is kept (REUSED_BYTES 1): a second call of the same
    example gives the same values in arrays that share no memory with the first call's, and
    leaves the first call's as they were."""
    monkeypatch.setattr(_buffers, "REUSED_BYTES", 1)
    definition, example = pair
    attributes = definition.node_attributes(example_case(definition, example).model.graph.node[0])

    def call() -> list[np.ndarray]:
        return [o for o in calls.run_kernel(definition, list(example.inputs), attributes,
                                            "direct", example.outputs) if o is not None]

    first = call()
    copies = [o.copy() for o in first]
    second = call()
    for a, b, c in zip(first, second, copies):
        assert not np.shares_memory(a, b)
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, c)


@pytest.mark.parametrize("definition", dml_onnx.OPERATORS, ids=lambda d: d.name)
def test_every_operator_makes_its_outputs_from_kept_blocks(definition, monkeypatch):
    """So that the test above holds each operator's arrays from kept blocks."""
    monkeypatch.setattr(_buffers, "REUSED_BYTES", 1)
    made = 0
    for example in [e for d, e in EXAMPLES if d.name == definition.name]:
        node = example_case(definition, example).model.graph.node[0]
        outputs = calls.run_kernel(definition, list(example.inputs),
                                   definition.node_attributes(node), "direct", example.outputs)
        made += sum(any(o.base is block for block in _buffers._blocks)
                    for o in outputs if o is not None)
    assert made
