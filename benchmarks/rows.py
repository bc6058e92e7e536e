"""The benchmark rows: one ``dml_onnx`` node on fixed inputs (seeded), with the peers it is
compared with and how their outputs must agree with ours.

A peer's ``make(threads)`` builds its call on ``threads`` intra-op threads (0: its library's
default), or returns ``None`` where the library it needs is missing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort

import dml_onnx
from benchmarks.harness import session_options, torch_threads
from dml_onnx.builders import single_node_model


@dataclass(frozen=True)
class Agreement:
    """How our output must compare with a peer's: exactly, or within a tolerance."""

    rtol: float = 0.0
    atol: float = 0.0

    def check(self, ours: np.ndarray, peer: np.ndarray) -> tuple[bool, float]:
        """(agrees, largest absolute difference)."""
        ours, peer = np.asarray(ours), np.asarray(peer)
        if ours.shape != peer.shape:
            return False, math.inf
        diff = float(np.max(np.abs(ours.astype(np.float64) - peer.astype(np.float64)),
                            initial=0.0))
        if not self.rtol and not self.atol:
            return bool(np.array_equal(ours, peer)), diff
        return bool(np.allclose(ours, peer, rtol=self.rtol, atol=self.atol)), diff

    def describe(self) -> str:
        return "exact" if not self.rtol and not self.atol else f"rtol {self.rtol:g}"


EXACT = Agreement()


@dataclass
class Peer:
    """A peer of a row: ``make(threads)`` returns its call (returning its output) or ``None``
    when the library it needs is missing (``missing`` says which); ``comparable`` turns its output
    into what ours is compared with (outside the timing)."""

    label: str
    make: Callable[[int], Callable[[], np.ndarray] | None]
    agreement: Agreement
    missing: str = ""
    comparable: Callable[[np.ndarray], np.ndarray] = np.asarray


@dataclass
class Row:
    """One benchmark row: a node of ``op`` on ``inputs`` and the peers it is compared with."""

    name: str
    op: str
    inputs: tuple[np.ndarray | None, ...]
    attributes: dict
    target: float
    peers: list[Peer] = field(default_factory=list)
    outputs: tuple[bool, ...] = (True,)
    tiny: bool = False
    onnxruntime: tuple[str, Agreement] | None = None
    """Add onnxruntime on the node's standard form as a peer: (its main ops, agreement)."""

    def model(self):
        definition = dml_onnx.OPERATORS_BY_NAME[self.op]
        return single_node_model(definition, self.inputs, self.attributes, self.outputs)

    def feeds(self) -> dict[str, np.ndarray]:
        definition = dml_onnx.OPERATORS_BY_NAME[self.op]
        return {p.name: a for p, a in zip(definition.inputs, self.inputs) if a is not None}


def onnxruntime_peer(row: Row, ops: str, agreement: Agreement) -> Peer:
    def make(threads: int) -> Callable[[], np.ndarray]:
        standard = dml_onnx.lower_model(row.model())
        session = ort.InferenceSession(standard.SerializeToString(), session_options(threads),
                                       providers=["CPUExecutionProvider"])
        feeds = row.feeds()
        return lambda: session.run(None, feeds)[0]
    return Peer(f"onnxruntime {ops}", make, agreement)


def _torch_unfold_peer(x: np.ndarray, window: int, padding: int) -> Peer:
    def make(threads: int) -> Callable[[], np.ndarray] | None:
        try:
            torch = torch_threads(threads)
        except ImportError:
            return None
        tensor = torch.from_numpy(x)
        return lambda: torch.nn.functional.unfold(tensor, window, padding=padding).numpy()
    return Peer("torch unfold", make, EXACT, missing="torch")


def _torchvision_backward_peer(x: np.ndarray, boxes: np.ndarray, batch: np.ndarray,
                               gradient: np.ndarray, output: int, scale: float,
                               sampling: int) -> Peer:
    def make(threads: int) -> Callable[[], np.ndarray] | None:
        try:
            torch = torch_threads(threads)
            import torchvision
        except ImportError:
            return None
        image = torch.from_numpy(x).requires_grad_(True)
        regions = torch.from_numpy(np.concatenate([batch[:, None], boxes], 1).astype(x.dtype))
        y = torchvision.ops.roi_align(image, regions, output, scale, sampling, aligned=True)
        g = torch.from_numpy(gradient)
        # the backward alone: the forward graph is kept
        return lambda: torch.autograd.grad(y, image, g, retain_graph=True)[0].numpy()
    return Peer("torchvision roi_align backward", make, Agreement(1e-4, 1e-4),
                missing="torch, torchvision")


def _float32_peer(row: Row) -> Peer:
    """Ours on the same values in float32, rounded to float16 afterwards: the spec's float16
    rule (compute in float32, round once) makes the two equal."""
    def make(threads: int) -> Callable[[], np.ndarray]:
        wide = tuple(a.astype(np.float32) if a is not None and a.dtype == np.float16 else a
                     for a in row.inputs)
        wide_row = Row(row.name, row.op, wide, row.attributes, row.target, outputs=row.outputs)
        session = dml_onnx.InferenceSession(wide_row.model(), session_options(threads))
        feeds = wide_row.feeds()
        return lambda: session.run(None, feeds)[0]
    return Peer("ours float32", make, EXACT, comparable=lambda y: y.astype(np.float16))


def _rois(rng: np.random.Generator, count: int, image: int) -> np.ndarray:
    """ROIs ``[x1, y1, x2, y2]`` in an ``image``-pixel square, 16 to 512 pixels across."""
    size = rng.uniform(16, 512, (count, 2))
    corner = rng.uniform(0, image - size)
    return np.concatenate([corner, corner + size], axis=1).astype(np.float32)


FPN_LEVELS = ((2, 200, 272), (3, 100, 136), (4, 50, 68), (5, 25, 34))
"""(level k, H, W) of an FPN's P2-P5 maps for an 800x1088 image (spatial scale 2 ** -k)."""


def _fpn_rows(rng: np.random.Generator, align: dict, agreement: tuple) -> list[Row]:
    """RoiAlign1 on each FPN level of an 800x1088 image, as a detector's box head calls it:
    1000 proposals (16 to 512 pixels across) dealt to the levels by torchvision's level mapper
    (``floor(4 + log2(sqrt(area) / 224))`` clamped to 2..5), each level's share on its map."""
    size = rng.uniform(16, 512, (1000, 2))
    corner = rng.uniform(0, np.array([1088, 800]) - size)
    boxes = np.concatenate([corner, corner + size], axis=1).astype(np.float32)
    levels = np.clip(np.floor(4 + np.log2(np.sqrt(size.prod(axis=1)) / 224) + 1e-6), 2, 5)
    result = []
    for k, height, width in FPN_LEVELS:
        chosen = boxes[levels == k]
        feature = rng.standard_normal((1, 256, height, width)).astype(np.float32)
        attributes = {**align, "spatial_scale_x": 2.0 ** -k, "spatial_scale_y": 2.0 ** -k}
        result.append(Row(f"RoiAlign1 FPN P{k}, {len(chosen)} ROIs, X [1,256,{height},{width}]",
                          "RoiAlign1", (feature, chosen, np.zeros(len(chosen), np.int64)),
                          {"output_size": [7, 7], **attributes}, 0.7,
                          onnxruntime=agreement))
    return result


def rows(rng: np.random.Generator) -> list[Row]:
    """The rows of the issue's target table, then the tiny cases, then float16 ones."""
    feature = rng.standard_normal((8, 64, 56, 56)).astype(np.float32)
    volume = rng.standard_normal((2, 16, 16, 32, 32)).astype(np.float32)
    columns = rng.standard_normal((8, 576, 3136)).astype(np.float32)
    image = rng.standard_normal((2, 256, 64, 64)).astype(np.float32)
    boxes = _rois(rng, 512, 1024)
    batch = rng.integers(0, 2, 512)
    pool_rois = np.concatenate([batch[:, None].astype(np.float32), boxes], axis=1)
    gradient = rng.standard_normal((512, 256, 7, 7)).astype(np.float32)
    window = {"window_sizes": [3, 3], "start_padding": [1, 1], "end_padding": [1, 1]}
    pad = {"start_padding": [1, 1], "end_padding": [1, 1]}
    align = {"spatial_scale_x": 1 / 16, "spatial_scale_y": 1 / 16,
             "minimum_samples_per_output": 2, "maximum_samples_per_output": 2}
    grad_attributes = {**align, "input_shape": list(image.shape)}

    tiny = rng.standard_normal((1, 1, 8, 8)).astype(np.float32)
    tiny_box = np.array([[1, 1, 6, 5]], np.float32)
    tiny_batch = np.zeros(1, np.int64)
    tiny_columns = rng.standard_normal((1, 9, 64)).astype(np.float32)
    tiny_gradient = rng.standard_normal((1, 1, 2, 2)).astype(np.float32)
    tiny_align = {"minimum_samples_per_output": 2, "maximum_samples_per_output": 2}

    close = Agreement(1e-5, 1e-5)
    lp_pool, col2im = ("LpPool", close), ("Col2Im", close)
    gather, max_roi_pool = ("Pad+Gather", EXACT), ("MaxRoiPool", EXACT)
    roi_align = ("RoiAlign", Agreement(1e-4, 1e-4))
    big = [
        Row("LpPooling p=2, 3x3, pad 1, X [8,64,56,56]", "LpPooling", (feature,),
            {"window_size": [3, 3], **pad}, 0.3, onnxruntime=lp_pool),
        Row("LpPooling p=3, 3x3x3, X [2,16,16,32,32]", "LpPooling", (volume,),
            {"window_size": [3, 3, 3], "p": 3}, 0.5, onnxruntime=lp_pool),
        Row("Unfold 3x3, pad 1, X [8,64,56,56]", "Unfold", (feature,), window, 0.5,
            [_torch_unfold_peer(feature, 3, 1)], onnxruntime=gather),
        Row("Fold 3x3, pad 1, [8,576,3136] -> [8,64,56,56]", "Fold", (columns,),
            {**window, "output_size": [56, 56]}, 0.5, onnxruntime=col2im),
        Row("RoiPooling 7x7, 512 ROIs, X [2,256,64,64]", "RoiPooling", (image, pool_rois),
            {"pooled_size": [7, 7], "spatial_scale": 1 / 16}, 0.7, onnxruntime=max_roi_pool),
        Row("RoiAlign1 avg, sampling 2, 7x7, 512 ROIs", "RoiAlign1", (image, boxes, batch),
            {"output_size": [7, 7], **align}, 1.0, onnxruntime=roi_align),
        Row("RoiAlignGrad dX, same", "RoiAlignGrad", (None, gradient, boxes, batch),
            grad_attributes, 0.3,
            [_torchvision_backward_peer(image, boxes, batch, gradient, 7, 1 / 16, 2)],
            outputs=(True, False)),
        *_fpn_rows(rng, align, roi_align),
    ]
    small = [
        Row("LpPooling tiny, X [1,1,8,8]", "LpPooling", (tiny,),
            {"window_size": [3, 3], **pad}, 2.0, onnxruntime=lp_pool),
        Row("Unfold tiny, X [1,1,8,8]", "Unfold", (tiny,), window, 2.0,
            [_torch_unfold_peer(tiny, 3, 1)], onnxruntime=gather),
        Row("Fold tiny, [1,9,64] -> [1,1,8,8]", "Fold", (tiny_columns,),
            {**window, "output_size": [8, 8]}, 2.0, onnxruntime=col2im),
        Row("RoiPooling tiny, 1 ROI, X [1,1,8,8]", "RoiPooling",
            (tiny, np.concatenate([tiny_batch[:, None], tiny_box], 1).astype(np.float32)),
            {"pooled_size": [2, 2]}, 2.0, onnxruntime=max_roi_pool),
        Row("RoiAlign1 tiny, 1 ROI, X [1,1,8,8]", "RoiAlign1", (tiny, tiny_box, tiny_batch),
            {"output_size": [2, 2], **tiny_align}, 2.0, onnxruntime=roi_align),
        Row("RoiAlignGrad dX tiny, 1 ROI, X [1,1,8,8]", "RoiAlignGrad",
            (None, tiny_gradient, tiny_box, tiny_batch),
            {**tiny_align, "input_shape": list(tiny.shape)}, 2.0,
            [_torchvision_backward_peer(tiny, tiny_box, tiny_batch, tiny_gradient, 2, 1.0, 2)],
            outputs=(True, False)),
    ]
    for row in small:
        row.tiny = True
    half = []
    for row in big:
        inputs = tuple(a.astype(np.float16) if a is not None and a.dtype == np.float32 else a
                       for a in row.inputs)
        if row.op == "RoiPooling":  # batch ids and corners stay exact in float16
            rois = row.inputs[1]
            assert rois is not None  # RoiPooling's second input
            inputs = (inputs[0], np.round(rois).astype(np.float16))
        half_row = Row(f"{row.name.split(',')[0]} float16", row.op, inputs, row.attributes,
                       1.5, outputs=row.outputs)
        half_row.peers = [_float32_peer(half_row)]
        half.append(half_row)
    return big + small + half
