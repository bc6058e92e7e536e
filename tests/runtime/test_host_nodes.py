"""Host nodes: the standard nodes a split run computes in numpy between its kernels
(``dml_onnx.runtime.host_nodes``). Each must give onnxruntime's own kernel's result bit for
bit and refuse what it refuses, naming the node; in a model, torchvision's merge of pooled
levels must run on the host, write into one array, and leave the results unchanged."""

from __future__ import annotations

import itertools

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import dml_onnx
from dml_onnx.runtime import host_nodes, plan
from tests.runtime._adversarial import plain_session
from tests.runtime.test_split_execution import (
    _fails_as_onnxruntime_and_goes_on,
    _one_session,
    _scatter_after_kernel,
    _value,
)

INT64 = TensorProto.INT64


def _onnxruntime(node, inputs):
    """``node`` run alone by onnxruntime (opset 18) on ``inputs``: its output has the first
    input's type, or ``ConstantOfShape``'s value's."""
    value = next((a.t for a in node.attribute if a.name == "value"), None)
    out_type = value.data_type if value is not None else TensorProto.FLOAT if \
        node.op_type == "ConstantOfShape" else helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
    names = [f"in{k}" for k in range(len(inputs))]
    node = helper.make_node(node.op_type, names, ["out"], name=node.name,
                            **{a.name: helper.get_attribute_value(a) for a in node.attribute})
    model = helper.make_model(helper.make_graph(
        [node], "one", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(
            a.dtype), a.shape) for n, a in zip(names, inputs)],
        [helper.make_tensor_value_info("out", out_type, None)]),
        ir_version=8, opset_imports=[helper.make_opsetid("", 18)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip(names, (np.ascontiguousarray(a) for a in inputs))))[0]


def _both(node, inputs):
    """(ours, onnxruntime's): each the result, or the exception raised."""
    results = []
    for compute in (host_nodes.compute, _onnxruntime):
        try:
            results.append(compute(node, [np.array(a) if k == 0 else a
                                          for k, a in enumerate(inputs)]))
        except Exception as error:  # compared below: both must refuse, or neither
            results.append(error)
    return results


def _agree(node, inputs):
    ours, theirs = _both(node, inputs)
    if isinstance(theirs, Exception):
        assert isinstance(ours, host_nodes.HostNodeError), (ours, theirs)
        assert f"{node.op_type} node '{node.name}'" in str(ours)
    else:
        assert not isinstance(ours, Exception), (ours, theirs)
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        np.testing.assert_array_equal(ours, theirs)
        assert ours.tobytes() == theirs.tobytes()  # bit for bit: -0.0 is not 0.0


@st.composite
def _scatter_elements_case(draw):
    rank = draw(st.integers(1, 4))
    shape = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    axis = draw(st.integers(-rank, rank - 1))
    size = shape[axis]
    count = draw(st.integers(0, 6))
    index_shape = [count if k == axis % rank else draw(st.integers(1, shape[k]))
                   for k in range(rank)]
    index_shape = [n if k == axis % rank or draw(st.integers(0, 9)) else n + 1  # too big
                   for k, n in enumerate(index_shape)]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    low, high = (-size, size) if draw(st.integers(0, 7)) else (-size - 2, size + 2)
    if draw(st.booleans()):  # one index per slice along the axis, broadcast: the row path
        rows = rng.integers(low, high, count).reshape(
            [count if k == axis % rank else 1 for k in range(rank)])
        indices = np.broadcast_to(rows, index_shape)
    else:
        indices = rng.integers(low, high, index_shape)
    indices = indices.astype(draw(st.sampled_from([np.int64, np.int32])))
    updates = rng.standard_normal(index_shape).astype(np.float32)
    data = rng.standard_normal(shape).astype(np.float32)
    return axis, data, indices, updates


@settings(max_examples=150, deadline=None)
@given(_scatter_elements_case())
def test_scatter_elements_equals_onnxruntimes(case):
    """Broadcast (row) and general indices, repeated and negative ones, indices larger than
    the data or outside it, int32 and int64."""
    axis, data, indices, updates = case
    node = helper.make_node("ScatterElements", ["d", "i", "u"], ["o"], name="merge",
                            axis=axis)
    _agree(node, [data, indices, updates])


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 3), st.integers(0, 3), st.integers(0, 6), st.integers(0, 2**32 - 1),
       st.booleans())
def test_scatter_nd_equals_onnxruntimes(rank, depth_less, count, seed, outside):
    """Indices of every depth, repeated rows, negative ones and ones outside. Depth 0 (each
    row writes the whole data) against the specification's loop: onnxruntime 1.28's kernel
    ends the process there (a floating-point exception; 1.32's is right)."""
    rng = np.random.default_rng(seed)
    shape = list(rng.integers(1, 4, rank))
    depth = max(rank - depth_less, 0)
    sizes = np.array(shape[:depth])
    span = sizes + 2 if outside else sizes
    indices = rng.integers(-span, span, (count, depth))  # repeated rows too
    updates = rng.standard_normal((count, *shape[depth:])).astype(np.float32)
    data = rng.standard_normal(shape).astype(np.float32)
    node = helper.make_node("ScatterND", ["d", "i", "u"], ["o"], name="edges")
    if depth:
        _agree(node, [data, indices, updates])
        return
    want = data.copy()
    for row, update in zip(indices, updates, strict=True):  # in order: the last one stays
        want[tuple(row)] = update
    np.testing.assert_array_equal(host_nodes.compute(node, [data.copy(), indices, updates]),
                                  want)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 3), max_size=3), st.lists(st.integers(0, 3), max_size=4))
def test_expand_equals_onnxruntimes(shape, wanted):
    """Shapes that broadcast both ways, ones that do not, and zero dimensions."""
    node = helper.make_node("Expand", ["d", "s"], ["o"], name="grow")
    data = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    _agree(node, [data, np.array(wanted, np.int64)])


@pytest.mark.parametrize("value", [None, np.array([0], np.float32), np.array([7], np.int64),
                                   np.array([-1.5], np.float16), np.array([1], np.bool_),
                                   *(np.array([-0.0], t) for t in (np.float16, np.float32,
                                                                   np.float64))])
@pytest.mark.parametrize("shape", [[2, 3], [0, 4], [], [1, 1, 2]])
def test_constant_of_shape_equals_onnxruntimes(value, shape):
    attributes = {} if value is None else {"value": numpy_helper.from_array(value)}
    node = helper.make_node("ConstantOfShape", ["s"], ["o"], name="zeros", **attributes)
    _agree(node, [np.array(shape, np.int64)])


def test_bad_shapes_are_refused_naming_the_node():
    for op_type, inputs in (("ConstantOfShape", [np.array([2, -1], np.int64)]),
                            ("Expand", [np.ones((2, 3), np.float32), np.array([4, 3])])):
        node = helper.make_node(op_type, ["a", "b"][:len(inputs)], ["o"], name="bad")
        _agree(node, inputs)
        with pytest.raises(host_nodes.HostNodeError, match=f"{op_type} node 'bad': "):
            host_nodes.compute(node, inputs)


@pytest.mark.parametrize(("shape", "error", "match"), [
    ([2**62, 2**62], host_nodes.HostNodeError, "too large"),
    ([2**45], MemoryError, "no memory")])
def test_a_fill_larger_than_memory_is_refused_naming_the_node(shape, error, match):
    node = helper.make_node("ConstantOfShape", ["s"], ["o"], name="zeros")
    with pytest.raises(error, match=f"ConstantOfShape node 'zeros': .*{match}"):
        host_nodes.compute(node, [np.array(shape, np.int64)])


def _merge_levels(reduction=None, zeros_read_twice=False, index_read_twice=False,
                  fill=None):
    """torchvision's ``_onnx_merge_levels`` over two levels: each level's regions (chosen by
    the ``level`` input) pooled by RoiAlign1 from its map and ``Cast``, then scattered along
    axis 0 into ``ConstantOfShape`` zeros at their rows, the rows ``Expand``-ed to the pooled
    shape; ``offset`` shifts level 1's rows (0 in a valid run). ``zeros_read_twice`` /
    ``index_read_twice``: the zeros / level 0's expanded rows are graph outputs too; ``fill``
    the ``ConstantOfShape``'s value (float32 0 where None)."""
    rng = np.random.default_rng(7)
    channels, out = 3, 2
    align = {"output_size": [out, out], "spatial_scale_x": 1.0, "spatial_scale_y": 1.0}
    nodes = [helper.make_node("Shape", ["rois"], ["count"], start=0, end=1),
             helper.make_node("Concat", ["count", "pooled"], ["zeros_shape"], axis=0),
             helper.make_node("ConstantOfShape", ["zeros_shape"], ["zeros"], name="zeros",
                              value=numpy_helper.from_array(
                                  np.zeros(1, np.float32) if fill is None else fill))]
    merged = "zeros"
    for level in (0, 1):
        at, rows, pooled, same = (f"{name}{level}" for name in ("at", "rows", "A", "C"))
        nodes += [
            helper.make_node("Equal", ["level", f"L{level}"], [f"is{level}"]),
            helper.make_node("NonZero", [f"is{level}"], [f"nz{level}"]),
            helper.make_node("Reshape", [f"nz{level}", "flat"], [at]),
            helper.make_node("Gather", ["rois", at], [f"rois{level}"], axis=0),
            helper.make_node("Gather", ["batch", at], [f"batch{level}"], axis=0),
            dml_onnx.roi_align1(f"X{level}", f"rois{level}", f"batch{level}", pooled,
                                name=f"align{level}", **align),
            helper.make_node("Cast", [pooled], [same], to=TensorProto.FLOAT),
            helper.make_node("Add", [at, "offset" if level else "zero"], [rows]),
            helper.make_node("Reshape", [rows, "column"], [f"col{level}"]),
            helper.make_node("Shape", [same], [f"shape{level}"]),
            helper.make_node("Expand", [f"col{level}", f"shape{level}"], [f"E{level}"]),
            helper.make_node("ScatterElements", [merged, f"E{level}", same], [f"S{level}"],
                             name=f"merge{level}", axis=0,
                             **({"reduction": reduction} if reduction else {}))]
        merged = f"S{level}"
    nodes.append(helper.make_node("Neg", [merged], ["Y"]))
    outputs = [_value("Y")] + ([_value("zeros")] if zeros_read_twice else []) + (
        [_value("E0", INT64)] if index_read_twice else [])
    regions = 5
    model = dml_onnx.make_model(
        nodes, [_value("X0", TensorProto.FLOAT, [1, channels, 8, 8]),
                _value("X1", TensorProto.FLOAT, [1, channels, 4, 4]),
                _value("level", INT64, [None]), _value("offset", INT64, [])],
        outputs, initializers=[numpy_helper.from_array(v, name) for name, v in {
            "rois": np.array([[0, 0, 3, 3], [1, 1, 6, 5], [0, 2, 7, 7], [2, 0, 4, 4],
                              [1, 1, 2, 3]], np.float32),
            "batch": np.zeros(regions, np.int64), "pooled": np.array([channels, out, out]),
            "L0": np.array(0), "L1": np.array(1), "flat": np.array([-1]),
            "column": np.array([-1, 1, 1, 1]), "zero": np.array(0)}.items()])
    feeds = {"X0": rng.standard_normal((1, channels, 8, 8)).astype(np.float32),
             "X1": rng.standard_normal((1, channels, 4, 4)).astype(np.float32),
             "level": np.array([1, 0, 0, 1, 0], np.int64), "offset": np.array(0, np.int64)}
    return model, feeds


def _host_ops(session):
    return sorted(step.node.op_type for step in session._split.steps
                  if isinstance(step, plan.HostNode))


def test_the_merge_of_pooled_levels_runs_on_the_host_in_one_array(monkeypatch):
    """The zeros, both expanded rows and both scatters run on the host, the scatters write
    into the zeros (no copy), and the results equal the one-session route's; a level with
    no region, and every region in one level, too."""
    model, feeds = _merge_levels()
    session = dml_onnx.InferenceSession(model)
    assert _host_ops(session) == ["Cast", "Cast", "ConstantOfShape", "Expand", "Expand",
                                  "ScatterElements", "ScatterElements"]
    copies = []
    writable = host_nodes._writable

    def spy(data, *others):
        result = writable(data, *others)
        copies.append(result is not data)
        return result

    monkeypatch.setattr(host_nodes, "_writable", spy)
    for level in ([1, 0, 0, 1, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]):
        fed = {**feeds, "level": np.array(level, np.int64)}
        np.testing.assert_array_equal(session.run(None, fed)[0], _one_session(model, fed)[0])
    assert copies == [False] * 6


@pytest.mark.parametrize("case", ["zeros read twice", "index read twice", "reduction add"])
def test_the_merge_stays_in_onnxruntime_where_it_cannot_write_in_place(case):
    """Where the zeros or the expanded rows are read by another node too, or the scatter
    adds, the scatters stay in onnxruntime's segment (and the zeros or rows with them), with
    the same results."""
    model, feeds = _merge_levels(
        reduction="add" if case == "reduction add" else None,
        zeros_read_twice=case == "zeros read twice",
        index_read_twice=case == "index read twice")
    session = dml_onnx.InferenceSession(model)
    assert _host_ops(session) == ["Cast", "Cast"]  # level 1's data then comes from a segment
    for got, want in zip(session.run(None, feeds), _one_session(model, feeds), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("offset", [5, -6])
def test_a_merge_row_outside_the_regions_fails_as_onnxruntime_fails_it(offset):
    """A row outside ``[-R, R)`` raises onnxruntime's InvalidArgument naming the scatter;
    the session goes on."""
    model, feeds = _merge_levels()
    _fails_as_onnxruntime_and_goes_on(
        model, feeds, {**feeds, "offset": np.array(offset, np.int64)},
        r"ScatterElements node 'merge1': index -?\d+ is outside axis 0 of size 5")


def test_host_nodes_read_initializers_and_constant_nodes():
    """A merge whose rows and expanded shape are initializers and whose fill (1.5) has its
    shape from a ``Constant`` node: all on the host, rows no region reaches keep the fill,
    as in the one-session route."""
    align = {"output_size": [2, 2], "spatial_scale_x": 1.0, "spatial_scale_y": 1.0}
    nodes = [
        dml_onnx.roi_align1("X", "rois", "batch", "A", name="align", **align),
        helper.make_node("Constant", [], ["zeros_shape"],
                         value=numpy_helper.from_array(np.array([4, 3, 2, 2]))),
        helper.make_node("ConstantOfShape", ["zeros_shape"], ["Z"],
                         value=numpy_helper.from_array(np.array([1.5], np.float32))),
        helper.make_node("Expand", ["rows", "expanded"], ["E"]),
        helper.make_node("ScatterElements", ["Z", "E", "A"], ["S"], axis=0, name="merge"),
        helper.make_node("Relu", ["S"], ["Y"])]
    model = dml_onnx.make_model(
        nodes, [_value("X", TensorProto.FLOAT, [1, 3, 6, 6])], [_value("Y")],
        initializers=[numpy_helper.from_array(v, name) for name, v in {
            "rois": np.array([[0, 0, 3, 3], [1, 1, 5, 5]], np.float32),
            "batch": np.zeros(2, np.int64), "rows": np.array([3, 0]).reshape(2, 1, 1, 1),
            "expanded": np.array([2, 3, 2, 2])}.items()])
    session = dml_onnx.InferenceSession(model)
    assert _host_ops(session) == ["ConstantOfShape", "Expand", "ScatterElements"]
    feeds = {"X": np.random.default_rng(3).standard_normal((1, 3, 6, 6)).astype(np.float32)}
    got = session.run(None, feeds)[0]
    np.testing.assert_array_equal(got, _one_session(model, feeds)[0])
    assert (got[1:3] == 1.5).all() and not (got[[0, 3]] == 1.5).all()


@pytest.mark.parametrize("fill", [np.zeros(2, np.float32), np.zeros((1, 1), np.float32),
                                  np.array(["0"])])
def test_a_fill_onnxruntime_refuses_stays_in_its_segment_and_is_refused(fill):
    """A ``ConstantOfShape`` value of more than one element, of another rank or of a type
    onnxruntime has no kernel for is not taken onto the host: the session is refused, as
    onnxruntime refuses the model."""
    model, feeds = _merge_levels(fill=fill)
    refused = "single-element|one-dim|implementation for ConstantOfShape|different types"
    with pytest.raises(Exception, match=refused):
        dml_onnx.InferenceSession(model)
    with pytest.raises(Exception, match=refused):
        _one_session(model, feeds)


def test_graph_outputs_that_a_host_cast_gives_one_array_are_distinct_arrays():
    """A host ``Cast`` gives its input's array: where that makes two graph outputs one array
    (a kernel's output and a Cast of it, a Cast of that Cast, two Casts of one value), all
    but the first are copies, as onnxruntime returns a buffer for each; a Cast whose array
    no other graph output has stays that array."""
    float_ = TensorProto.FLOAT

    def cast(source, target):
        return helper.make_node("Cast", [source], [target], to=float_)
    nodes = [helper.make_node("Relu", ["X0"], ["X"]),
             dml_onnx.unfold("X", "Y", window_sizes=[1, 1], name="im2col"),
             dml_onnx.unfold("X", "Z", window_sizes=[1, 1], name="im2col_z"),
             cast("Y", "C"), cast("C", "CC"), cast("Z", "D"), cast("Z", "E"),
             dml_onnx.unfold("X", "W", window_sizes=[1, 1], name="im2col_w"), cast("W", "F")]
    names = ["Y", "C", "CC", "D", "E", "F"]
    model = dml_onnx.make_model(nodes, [_value("X0", float_, [1, 1, 2, 2])],
                                [_value(name, float_) for name in names])
    session = dml_onnx.InferenceSession(model)
    assert [(s.node.output[0], s.copy) for s in session._split.steps
            if isinstance(s, plan.HostNode)] == [
        ("C", True), ("CC", True), ("D", False), ("E", True), ("F", False)]
    feeds = {"X0": np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)}
    want = _one_session(model, feeds)
    got = session.run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    for k, array in enumerate(got):
        array[...] = -k - 1  # onnxruntime's are distinct buffers: each keeps its own write
    assert [float(array.flat[0]) for array in got] == [-k - 1.0 for k in range(len(got))]


def _merge_of(rows, zeros_shape, expanded):
    """RoiAlign1 -> ScatterElements into ``ConstantOfShape`` zeros along axis 0 at the
    ``Expand``-ed rows -> Relu, with these initializers (their types chosen)."""
    align = {"output_size": [2, 2], "spatial_scale_x": 1.0, "spatial_scale_y": 1.0}
    nodes = [dml_onnx.roi_align1("X", "rois", "batch", "A", name="align", **align),
             helper.make_node("ConstantOfShape", ["zeros_shape"], ["Z"], name="zeros"),
             helper.make_node("Expand", ["rows", "expanded"], ["E"], name="expand"),
             helper.make_node("ScatterElements", ["Z", "E", "A"], ["S"], axis=0, name="merge"),
             helper.make_node("Relu", ["S"], ["Y"])]
    return dml_onnx.make_model(
        nodes, [_value("X", TensorProto.FLOAT, [1, 3, 6, 6])], [_value("Y")],
        initializers=[numpy_helper.from_array(v, name) for name, v in {
            "rois": np.array([[0, 0, 3, 3], [1, 1, 5, 5]], np.float32),
            "batch": np.zeros(2, np.int64), "rows": rows.reshape(2, 1, 1, 1),
            "zeros_shape": zeros_shape, "expanded": expanded}.items()])


def _scatter_nd_of(indices, updates):
    """:func:`_scatter_after_kernel`'s model with indices and updates of these types."""
    model, _ = _scatter_after_kernel()
    next(n for n in model.graph.node if n.op_type == "Cast").attribute[0].i = indices
    model.graph.input[2].type.tensor_type.elem_type = updates
    return model


@pytest.mark.parametrize("model", [
    _scatter_nd_of(TensorProto.INT32, TensorProto.FLOAT),
    _scatter_nd_of(INT64, TensorProto.DOUBLE),
    _merge_of(np.array([3, 0], np.int16), np.array([4, 3, 2, 2]), np.array([2, 3, 2, 2])),
    _merge_of(np.array([3, 0]), np.array([4, 3, 2, 2], np.int32), np.array([2, 3, 2, 2])),
    _merge_of(np.array([3, 0]), np.array([4, 3, 2, 2]), np.array([2, 3, 2, 2], np.int32))],
    ids=["ScatterND int32 indices", "ScatterND double updates", "ScatterElements int16 indices",
         "ConstantOfShape int32 shape", "Expand int32 shape"])
def test_a_host_node_onnxruntime_refuses_is_refused_at_creation(model):
    """A would-be host node whose input types onnxruntime refuses when it creates a session
    stays in its segment: the session is refused there, with onnxruntime's error type, as
    plain onnxruntime refuses the model (on the host it failed only in ``run()``)."""
    with pytest.raises(Exception) as theirs:
        plain_session(model)
    with pytest.raises(Exception) as ours:
        dml_onnx.InferenceSession(model)
    assert type(ours.value) is type(theirs.value), (ours.value, theirs.value)


@pytest.mark.parametrize("op_type", sorted(host_nodes._INPUT_TYPES))
def test_the_host_node_types_are_types_onnxruntime_takes(op_type):
    """Every element type :func:`host_nodes.takes` takes, onnxruntime takes in a session of
    that node alone (opset 11 and 18): the table may be narrower, never wider."""
    rules = host_nodes._INPUT_TYPES[op_type]
    for opset in (11, 18):
        for kinds in itertools.product(*(
                [None] if isinstance(rule, int) else sorted(rule) for rule in rules)):
            types = [kinds[rule] if isinstance(rule, int) else kind
                     for kind, rule in zip(kinds, rules)]
            names = [f"in{k}" for k in range(len(types))]
            node = helper.make_node(op_type, names, ["out"], **(
                {"to": types[0]} if op_type == "Cast" else {}))
            assert host_nodes.takes(node, dict(zip(names, types)))
            out = TensorProto.FLOAT if op_type == "ConstantOfShape" else types[0]
            model = helper.make_model(helper.make_graph(
                [node], "one", [helper.make_tensor_value_info(n, t, None)
                                for n, t in zip(names, types)],
                [helper.make_tensor_value_info("out", out, None)]),
                ir_version=8, opset_imports=[helper.make_opsetid("", opset)])
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
