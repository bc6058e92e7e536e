"""The plan of split execution: the steps a model runs as (:func:`split`), where its
``dml_onnx`` nodes pass values between standard nodes: onnxruntime sessions over the standard
nodes (:class:`Segment`), the kernels (:class:`Kernel`) and the standard nodes computed on the
host (:class:`HostNode`). This stage decides the steps and builds nothing: the steps are kept
for the next session of the same graph (:mod:`~dml_onnx.runtime.prepare`), and
:mod:`~dml_onnx.runtime.segments` creates their sessions and runs them.

Steps are ordered by level: a node's level is the highest of its producers' levels, plus one
after a producer run on the host (a kernel, or a host node below); each level runs its
standard nodes as one segment, then its host steps in the graph's order. So Faster R-CNN runs
as segment, 4 kernels, a segment of the merge's shapes, the merge (host nodes), segment; Mask
R-CNN as five segments. The first segment declares
every graph input, so that onnxruntime checks the whole feed before anything runs (where
kernels come first, it is one ``Size`` node).

A few standard nodes run on the host too (:mod:`~dml_onnx.runtime.host_nodes`), where
onnxruntime would copy or write out what is already there: a scatter (``ScatterND``, or
``ScatterElements`` whose indices an ``Expand`` makes, no reduction) into data that nothing
else reads, made by a kernel, by a host node or by a ``ConstantOfShape`` that only it reads
(its value one number), where a kernel feeds it; that ``Expand`` and ``ConstantOfShape``;
and a ``Cast`` of a host value to the type it has (that array, copied where another graph
output has it); each only where onnxruntime takes its input types
(:func:`~dml_onnx.runtime.host_nodes.takes`), else it stays in its segment, which onnxruntime
refuses when the session is created, as it refuses the model. A host node runs at the
highest of its producers' levels. These are
the raise's replacement of edge regions (in a segment, onnxruntime copied a fed array before
it scattered into it: Faster R-CNN's four copies took 2.3-2.6 ms a run at 16 threads on the
server, against 4 ms for the kernels) and torchvision's merge of its poolers' levels.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import TensorProto, helper

from dml_onnx.definition import DOMAIN
from dml_onnx.graphs import Dims, subgraphs, unused_prefix, walk_nodes
from dml_onnx.runtime import host_nodes
from dml_onnx.runtime.hook import Variant
from dml_onnx.runtime.rewrite import plan_node
from dml_onnx.runtime.stubs import read_by_onnxruntime


@dataclass(frozen=True)
class Segment:
    """Standard nodes run as one onnxruntime session: it reads ``inputs`` and returns
    ``outputs`` (values later steps read, or graph outputs)."""

    model: onnx.ModelProto  # its initializers that are weights are stubs
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    checks_only: bool = False  # a first segment that only checks the feed (one Size node)
    work: int | None = None  # multiply-adds and values written (:func:`work`); None: unknown


@dataclass(frozen=True)
class Kernel:
    """One ``dml_onnx`` node, all its inputs and outputs passed as arrays."""

    node: onnx.NodeProto
    config: bytes  # the hook's config: every present input a feed, every output a fetch
    variant: Variant
    inputs: tuple[str, ...]  # the node's present inputs (a protobuf field is slow to read)


@dataclass(frozen=True)
class HostNode:
    """A standard node computed in numpy (:mod:`~dml_onnx.runtime.host_nodes`); a scatter
    writes into its data, which nothing else reads."""

    node: onnx.NodeProto
    copy: bool = False  # its result copied: a Cast whose array another graph output has


def split(model: onnx.ModelProto, elem_types: dict[str, int], dims: Dims
          ) -> list[Segment | Kernel | HostNode] | None:
    """The steps of ``model`` (its ``dml_onnx`` nodes checked; ``elem_types`` and ``dims`` of
    its values as inferred), or ``None`` where split execution does not apply or gains
    nothing: the model has standard nodes and no ``dml_onnx`` node reads or writes a value
    between them (the PyOps then copy nothing: :mod:`~dml_onnx.runtime.rewrite`'s direct
    values; a model of ``dml_onnx`` nodes alone runs split, which skips onnxruntime's call
    of a PyOp, some 13 µs a node), one sits in a
    subgraph or function, onnxruntime reads an initializer itself
    (:func:`~dml_onnx.runtime.stubs.read_by_onnxruntime`: its values may come from the
    session options, whose external initializers each session must have, and no kernel can
    read them), a graph input has an initializer (onnxruntime lets a feed override
    it) or is a string tensor (the segments take their feeds as ``OrtValue`` tensors, which
    onnxruntime makes of no string array), a graph output is no node's (onnxruntime refuses
    the model), the nodes are not in topological order, or a value
    between steps is not a tensor of a known element type. Where kernels run first, a first
    segment of one ``Size`` node checks the feed. Whether the steps pay for their sessions
    is :func:`split_pays`'s to say, per session (the kept steps know no weights' sizes)."""
    graph = model.graph
    initializers = {tensor.name for tensor in graph.initializer}
    inputs = [value.name for value in graph.input]
    outputs = [value.name for value in graph.output]
    ends = set(inputs) | set(outputs)
    custom = [node.domain == DOMAIN for node in graph.node]
    held = [tuple(subgraphs(node)) for node in graph.node]  # each node's, walked once
    kernels_only = all(custom) and bool(graph.input)
    if (not kernels_only and not any(c and any(v and v not in ends for v in (*n.input, *n.output))
                                     for c, n in zip(custom, graph.node))
            or any(n.domain == DOMAIN for graphs in held for g in graphs
                   for n in walk_nodes(g))
            or any(n.domain == DOMAIN for f in model.functions for n in walk_nodes(f))
            or initializers & set(inputs) or len(initializers) != len(graph.initializer)
            or len(set(outputs)) != len(outputs) or set(outputs) & (initializers | set(inputs))
            or not set(outputs) <= {name for node in graph.node for name in node.output}
            or not all(v.type.HasField("tensor_type") for v in (*graph.input, *graph.output))
            or any(v.type.tensor_type.elem_type == TensorProto.STRING for v in graph.input)
            or any(read_by_onnxruntime(tensor) for tensor in graph.initializer)):
        return None
    wiring = _Wiring(model, custom, held, elem_types, dims)
    if not wiring.sorted:
        return None
    host = _host_nodes(wiring)
    for index in host:
        custom[index] = True  # the wiring's: its output comes from a host step
        wiring.from_kernels.update(graph.node[index].output)
    levels = _levels(graph.node, wiring.reads, custom, host)
    copied = _shared_casts(graph, host)
    steps: list[Segment | Kernel | HostNode] = []
    for level in range(max(levels) + 1):
        members = [i for i, lv in enumerate(levels) if lv == level and not custom[i]]
        if members or not steps:
            segment = wiring.segment(members, first=not steps) if members else \
                wiring.feed_check()
            if segment is None:
                return None
            steps.append(segment)
        steps += [HostNode(graph.node[i], i in copied) if i in host else
                  _kernel(graph.node[i], elem_types)
                  for i, lv in enumerate(levels) if lv == level and custom[i]]
    return steps


def _host_nodes(wiring: _Wiring) -> set[int]:
    """The standard nodes run on the host (see the module's docstring), in the graph's
    order: each scatter decides its ``Expand`` and ``ConstantOfShape`` with it."""
    graph, custom, producer = wiring.graph, wiring.custom, wiring.producer
    on_host = {index for index, is_custom in enumerate(custom) if is_custom}
    host: set[int] = set()

    def only_for(name: str, reader: int) -> bool:
        return name not in wiring.declared and wiring.readers.get(name) == {reader}

    def made_here(name: str, op_type: str, reader: int) -> int | None:
        """The standard ``op_type`` node that makes ``name`` for ``reader`` alone."""
        index = producer.get(name)
        if index is None or index in on_host or not only_for(name, reader):
            return None
        node = graph.node[index]
        return index if node.domain in ("", "ai.onnx") and node.op_type == op_type and \
            len(node.output) == 1 and host_nodes.takes(node, wiring.elem_types) else None

    for index, node in enumerate(graph.node):
        if (custom[index] or node.domain not in ("", "ai.onnx") or len(node.output) != 1
                or not node.output[0] or not all(node.input)):
            continue
        sources = [producer.get(name) for name in node.input]
        pulled: list[int | None] = []
        if node.op_type == "Cast" and len(node.input) == 1:
            taken = sources[0] in on_host and host_nodes.cast_to(node) == \
                wiring.elem_types.get(node.input[0])
        elif node.op_type in host_nodes.SCATTERS and len(node.input) == 3 and \
                host_nodes.no_reduction(node):
            data = sources[0]
            fill = None if data in on_host else made_here(node.input[0], "ConstantOfShape",
                                                          index)
            pulled = [fill if fill is None or host_nodes.plain_fill(graph.node[fill]) else None]
            if node.op_type == "ScatterElements":
                pulled.append(made_here(node.input[1], "Expand", index))
            written = pulled[0] is not None or (
                data in on_host and graph.node[data].op_type not in host_nodes.VIEWS
                and only_for(node.input[0], index))
            taken = written and None not in pulled[1:] and any(
                source in on_host for source in sources)
        else:
            continue
        if taken and host_nodes.takes(node, wiring.elem_types):  # else onnxruntime refuses it
            chosen = [index, *(p for p in pulled if p is not None)]
            on_host.update(chosen)
            host.update(chosen)
    return host


def _shared_casts(graph: onnx.GraphProto, host: set[int]) -> set[int]:
    """The host ``Cast`` nodes (of ``host``) that must copy: a host ``Cast`` gives its input's
    array, and a graph output would then be the array of another graph output, where
    onnxruntime returns a buffer for each."""
    outputs = {value.name for value in graph.output}
    array_of: dict[str, str] = {}  # a host Cast's value -> the value whose array it gives
    returned: set[str] = set()  # values whose arrays a graph output is
    copied = set()
    for index, node in enumerate(graph.node):
        if index not in host or node.op_type != "Cast":
            returned.update(name for name in node.output if name in outputs)
            continue
        name = node.output[0]
        array_of[name] = array_of.get(node.input[0], node.input[0])
        if name in outputs:
            if array_of[name] in returned:
                copied.add(index)
                array_of[name] = name
            returned.add(array_of[name])
    return copied


def _reads(node: onnx.NodeProto, held: Sequence[onnx.GraphProto]) -> set[str]:
    """The values ``node`` reads: its inputs and what its subgraphs (``held``) read by name (a
    superset: names a subgraph defines itself match no value of the main graph)."""
    names = {name for name in node.input if name}
    for graph in held:
        names.update(name for inner in walk_nodes(graph) for name in inner.input)
        names.update(value.name for value in graph.output)
    return names


def _levels(nodes: Sequence[onnx.NodeProto], reads: Sequence[set[str]],
            custom: Sequence[bool], host: set[int]) -> list[int]:
    """Each node's level (see the module's docstring); a host node in ``host`` runs at the
    highest of its producers' levels."""
    produced_by: dict[str, int] = {}
    levels: list[int] = []
    for index, node in enumerate(nodes):
        producers = [p for p in map(produced_by.get, reads[index]) if p is not None]
        levels.append(max((levels[p] + (index not in host and custom[p]) for p in producers),
                          default=0))
        produced_by.update((name, index) for name in node.output if name)
    return levels


class _Wiring:
    """Who makes and reads each value of the main graph, for cutting it into segments.

    Constant nodes (a ``Constant``; a ``Shape`` or ``Size`` of a graph input whose dimensions
    are all fixed, which onnxruntime checks; a standard node that reads only initializers and
    constant nodes' outputs, such as TorchScript's ``Identity`` of a shared weight) go into
    every segment that reads them, so that onnxruntime still folds what depends on them and
    sees weights as weights (passed between segments, Mask R-CNN's mask head biases kept its
    convolutions out of the NCHWc form: 3x slower)."""

    def __init__(self, model: onnx.ModelProto, custom: Sequence[bool],
                 held: Sequence[Sequence[onnx.GraphProto]], elem_types: Mapping[str, int],
                 dims: Dims):
        graph = self.graph = model.graph
        self.model, self.custom, self.elem_types, self.dims = model, custom, elem_types, dims
        self.declared = {value.name: value for value in (*graph.input, *graph.output)}
        self.graph_inputs = {value.name for value in graph.input}
        self.initializers = {tensor.name: tensor for tensor in graph.initializer}
        static = {value.name for value in graph.input if _static(value)}
        self.producer: dict[str, int] = {}
        self.readers: dict[str, set[int]] = {}
        self.constant: set[int] = set()
        self.reads = [_reads(node, graphs) for node, graphs in zip(graph.node, held)]
        made = {name for node in graph.node for name in node.output if name}
        self.sorted = True  # every value made before it is read (onnxruntime sorts otherwise)
        for index, (node, reads) in enumerate(zip(graph.node, self.reads)):
            for name in reads:
                self.readers.setdefault(name, set()).add(index)
                self.sorted &= name not in made or name in self.producer
            if not custom[index] and not held[index] and (all(
                    name in self.initializers or self.producer.get(name) in self.constant
                    for name in reads) or _static_shape_of(node, static)):
                self.constant.add(index)
            self.producer.update((name, index) for name in node.output if name)
        self.from_kernels = {name for i, node in enumerate(graph.node) if custom[i]
                             for name in node.output}

    def _with_constants(self, members: list[int]) -> list[int]:
        """``members`` and the constant nodes whose values they read, at any depth."""
        chosen, pending = set(members), list(members)
        while pending:
            for name in self.reads[pending.pop()]:
                source = self.producer.get(name)
                if source in self.constant and source not in chosen:
                    chosen.add(source)
                    pending.append(source)
        return sorted(chosen)

    def _passed(self, name: str, inside: set[int]) -> bool:
        """Whether a value made inside a segment leaves it: a graph output, or read by a
        kernel or by a later segment's node (a constant one is made there again)."""
        return name in self.declared or any(
            self.custom[r] or self.producer[name] not in self.constant
            for r in self.readers.get(name, set()) - inside)

    def segment(self, members: list[int], first: bool) -> Segment | None:
        """The segment of the standard nodes ``members``. Values from earlier steps are
        declared with their element type and the rank a kernel's schema gives (onnxruntime's
        layout optimizer wants it), dimensions unknown (an exporter's recorded shapes may be
        wrong, and onnxruntime refuses a feed that differs); outputs with the element type
        only."""
        graph, elem_types = self.graph, self.elem_types
        # a constant node of the level that only later segments read is made there again:
        # here it would be dead, and onnxruntime warns of each such value as it loads
        inside = set(self._with_constants([i for i in members if i not in self.constant]))
        inside = set(self._with_constants([*inside, *(
            i for i in members if i in self.constant and i not in inside
            and any(name and self._passed(name, inside) for name in graph.node[i].output))]))
        nodes = [graph.node[i] for i in sorted(inside)]
        produced = {name for node in nodes for name in node.output if name}
        read = set().union(*(self.reads[i] for i in inside))
        inputs = [value.name for value in graph.input] if first else []
        inputs += sorted(name for name in read - produced - set(inputs)
                         - self.initializers.keys()
                         if name in self.producer or name in self.graph_inputs)
        outputs = [name for i in members if i in inside for name in graph.node[i].output
                   if name and self._passed(name, inside)]
        if not outputs or any(name not in elem_types for name in (
                *(n for n in inputs if n not in self.graph_inputs),
                *(n for n in outputs if n not in self.declared))):
            return None

        def value(name: str, rank: int | None = None) -> onnx.ValueInfoProto:
            return helper.make_tensor_value_info(
                name, elem_types[name], None if rank is None else [None] * rank)
        return self._build(
            nodes,
            [self.declared[name] if name in self.graph_inputs else
             value(name, len(self.dims[name]) if name in self.from_kernels and name in self.dims
                   else None)
             for name in inputs],
            [self.declared.get(name) or value(name) for name in outputs],
            [self.initializers[name] for name in sorted(read & self.initializers.keys())],
            first, work(nodes, self.dims))

    def feed_check(self) -> Segment | None:
        """A first segment for a model whose first nodes are kernels: every graph input and
        one ``Size`` node, so that onnxruntime checks the whole feed before any kernel runs
        (``None`` for a model without inputs)."""
        graph = self.graph
        if not graph.input:
            return None
        size = unused_prefix(graph, "_dml_onnx_feed_check")
        segment = self._build([helper.make_node("Size", [graph.input[0].name], [size])],
                              list(graph.input),
                              [helper.make_tensor_value_info(size, TensorProto.INT64, [])], [],
                              first=True)
        return replace(segment, checks_only=True)

    def _build(self, nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
               outputs: list[onnx.ValueInfoProto], initializers: list[onnx.TensorProto],
               first: bool, work: int | None = 0) -> Segment:
        result = helper.make_model(
            helper.make_graph(nodes, self.graph.name, inputs, outputs, initializer=initializers),
            ir_version=self.model.ir_version, functions=self.model.functions,
            opset_imports=[o for o in self.model.opset_import if o.domain != DOMAIN])
        if first:  # the session's metadata
            for field in ("producer_name", "producer_version", "domain", "model_version",
                          "doc_string"):
                setattr(result, field, getattr(self.model, field))
            result.metadata_props.extend(self.model.metadata_props)
            result.graph.doc_string = self.graph.doc_string  # its graph_description
        return Segment(result, tuple(v.name for v in inputs), tuple(v.name for v in outputs),
                       work=work)


ONE_SESSION_COPIES = 16 << 20
"""Where a model's kernels read and write at most this many bytes of values between standard
nodes in a run, it runs as one onnxruntime session of PyOps (:func:`split_pays`): their copies
cost less than the split run's sessions. On the 16-core server at 16 threads (runs 3-10 of new
sessions, ms, stock / split / one session): the LPPool CNN at batch 1 (4 MB copied) 6.07 /
6.35 / 4.22, the Unfold/Fold chain 1.37 / 1.17 / 1.10, the RoiAlign1 chain 1.67 / 1.65 / 1.44;
each of the split run's segments is a session with a pool of its own, which wakes for each of
its runs and takes 10-20 runs to reach its steady time (``benchmarks/results/graphs_server.md``).
A detector's poolers copy 22 MB of maps each and write up to 50 MB: those run split."""

ONE_SESSION_WEIGHTS = 16 << 20
"""Where the copies' sizes are not known before the run (a dimension that is not a fixed
number), a model with at most this many bytes of weights runs as one session: the two
detectors (160-170 MB) run split, graphs of a few small layers as one session."""


def split_pays(model: onnx.ModelProto, steps: Sequence[Segment | Kernel | HostNode],
               elem_types: Mapping[str, int], dims: Dims, weight_bytes: int) -> bool:
    """Whether ``model`` runs better as its split ``steps`` than as one onnxruntime session of
    PyOps, which copies what a kernel reads and writes inside the session: where ``dml_onnx``
    nodes alone make the model (no PyOp call, some 13 µs a node), or its kernels copy more than
    :data:`ONE_SESSION_COPIES` bytes a run (from the inferred ``dims`` and ``elem_types``; the
    graph's inputs and outputs are passed outside the session either way), or, where those
    sizes are not known, its weights (``weight_bytes``) are over :data:`ONE_SESSION_WEIGHTS`."""
    first = steps[0]
    if isinstance(first, Segment) and first.checks_only:
        return True
    ends = {value.name for value in (*model.graph.input, *model.graph.output)}
    copied = 0
    for step in steps:
        if not isinstance(step, Kernel):
            continue
        for name in (*step.inputs, *step.node.output):
            if not name or name in ends:
                continue
            shape = dims.get(name)
            if shape is None or None in shape:
                return weight_bytes > ONE_SESSION_WEIGHTS
            copied += math.prod(shape) * np.dtype(  # type: ignore[arg-type]
                helper.tensor_dtype_to_np_dtype(elem_types[name])).itemsize
    return copied > ONE_SESSION_COPIES


def work(nodes: Sequence[onnx.NodeProto], dims: Dims) -> int | None:
    """What ``nodes`` compute, in multiply-adds (a ``Conv``, ``ConvTranspose``, ``MatMul`` or
    ``Gemm``) and values written (every node), from their inferred ``dims``; ``None`` where a
    node's output or weight has a dimension that is not a fixed number, or a subgraph."""
    total = 0
    for node in nodes:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for a in node.attribute):
            return None
        for name in node.output:
            shape = dims.get(name) if name else ()
            if shape is None or None in shape:
                return None
            total += math.prod(shape)  # type: ignore[arg-type]
        read = [dims.get(name) if name else () for name in node.input]
        if node.op_type in ("Conv", "ConvTranspose", "MatMul", "Gemm") and \
                node.domain in ("", "ai.onnx"):
            factor = _reduction(node, read)
            made = dims.get(node.output[0]) if node.output and node.output[0] else None
            if factor is None or made is None:
                return None
            total += factor * math.prod(made)  # type: ignore[arg-type]
    return total


def _reduction(node: onnx.NodeProto, read: list[tuple[int | None, ...] | None]) -> int | None:
    """The multiply-adds per output value of a ``Conv``, ``ConvTranspose``, ``MatMul`` or
    ``Gemm`` whose inputs have the dimensions ``read`` (``None`` where not fixed)."""
    if len(read) < 2 or read[0] is None or read[1] is None or None in read[0] or \
            None in read[1] or not read[0] or not read[1]:
        return None
    data, weight = read[0], read[1]
    if node.op_type == "Conv":
        return math.prod(weight[1:])  # type: ignore[arg-type]
    if node.op_type == "ConvTranspose":  # at most C_in * kernel (group and stride ignored)
        return weight[0] * math.prod(weight[2:])  # type: ignore[operator,arg-type]
    if node.op_type == "Gemm":
        transposed = any(a.name == "transA" and a.i for a in node.attribute)
        return data[0] if transposed and len(data) == 2 else data[-1]
    return data[-1]  # MatMul


def _static(value: onnx.ValueInfoProto) -> bool:
    tensor = value.type.tensor_type
    return tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim)


def _static_shape_of(node: onnx.NodeProto, static: set[str]) -> bool:
    """Whether ``node`` is a ``Shape`` or ``Size`` of a graph input in ``static``."""
    return (node.domain in ("", "ai.onnx") and node.op_type in ("Shape", "Size")
            and len(node.input) == 1 and node.input[0] in static)


def _kernel(node: onnx.NodeProto, elem_types: dict[str, int]) -> Kernel:
    plan = plan_node(node, elem_types, set(node.input) - {""},
                      set(node.output) - {""})
    variant = Variant(plan.definition, tuple(
        np.dtype(helper.tensor_dtype_to_np_dtype(o.runtime_type)) for o in plan.outputs), False)
    return Kernel(node, json.dumps(plan.config, allow_nan=True).encode(), variant,
                  tuple(name for name in node.input if name))

