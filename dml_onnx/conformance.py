"""The conformance suite: every operator example as an ONNX backend-style test case.

Layout (what ``onnx_test_runner`` and ``onnx.backend.test`` read)::

    models/test_<op>_<example>/model.onnx
    models/test_<op>_<example>/test_data_set_0/input_<i>.pb, output_<k>.pb

Expected outputs are the example's independently known values where it has them (the seed
examples), otherwise what this package computes; the suite pins them so that another runtime
(the DirectML execution provider, say) or a later version can be compared against them.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from dml_onnx.builders import make_model
from dml_onnx.definition import Example, OpDefinition
from dml_onnx.ops import OPERATORS
from dml_onnx.reference import ReferenceEvaluator
from dml_onnx.runtime import InferenceSession


@dataclass(frozen=True)
class Case:
    """One runnable case: a single-node model, its feeds and its expected outputs."""

    name: str
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def single_node_model(definition: OpDefinition, inputs: tuple[np.ndarray | None, ...],
                      attributes: dict, outputs: tuple[bool, ...] = (True,), *,
                      node_name: str = "node", symbolic: bool = False) -> onnx.ModelProto:
    """A model of one ``definition`` node over ``inputs`` (``None``: omitted), output types
    from the element types of the inputs, output shapes from the shape function.

    ``symbolic`` declares every input dim as a symbol (``X_0``, ``X_1``, ...), so that sizes
    are only known when the model runs.
    """
    input_names = [p.name if a is not None else "" for p, a in zip(definition.inputs, inputs)]
    output_names = [p.name if (k < len(outputs) and outputs[k]) else ""
                    for k, p in enumerate(definition.outputs)]
    while output_names and not output_names[-1]:
        output_names.pop()
    node = definition.make_node(input_names, output_names, name=node_name, **attributes)
    elem_types, graph_inputs, input_shapes = {}, [], []
    for parameter, array in zip(definition.inputs, inputs):
        if array is None:
            input_shapes.append(None)
            continue
        elem = helper.np_dtype_to_tensor_dtype(array.dtype)
        elem_types.setdefault(parameter.type, elem)
        shape = ([f"{parameter.name}_{axis}" for axis in range(array.ndim)] if symbolic
                 else list(array.shape))
        input_shapes.append(shape)
        graph_inputs.append(helper.make_tensor_value_info(parameter.name, elem, shape))
    shapes = definition.infer_shapes(input_shapes, definition.node_attributes(node), node.name)
    graph_outputs = [helper.make_tensor_value_info(name, elem_types[parameter.type], shape)
                     for name, parameter, shape in zip(output_names, definition.outputs, shapes)
                     if name]
    return make_model([node], graph_inputs, graph_outputs, name=f"{definition.name}_model")


def example_case(definition: OpDefinition, example: Example) -> Case:
    """The example as a case; expected outputs from the example or from the kernel."""
    model = single_node_model(definition, example.inputs, example.attributes, example.outputs,
                              node_name=f"{snake(definition.name)}_{example.name}")
    feeds = {p.name: a for p, a in zip(definition.inputs, example.inputs) if a is not None}
    names = [o.name for o in model.graph.output]
    computed = ReferenceEvaluator(model).run(None, feeds)
    expected = list(example.expected) or computed
    return Case(f"test_{snake(definition.name)}_{example.name}", model, feeds,
                dict(zip(names, expected)))


def all_cases() -> list[Case]:
    return [example_case(d, e) for d in OPERATORS for e in d.examples() if not e.error]


def write_suite(directory: str | Path) -> list[Path]:
    """Write every case under ``directory`` (replacing earlier ``test_*`` folders)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    for old in root.glob("test_*"):
        shutil.rmtree(old)
    written = []
    for case in all_cases():
        folder = root / case.name
        data = folder / "test_data_set_0"
        data.mkdir(parents=True)
        onnx.save(case.model, folder / "model.onnx")
        for i, (name, array) in enumerate(case.feeds.items()):
            onnx.save_tensor(numpy_helper.from_array(array, name), data / f"input_{i}.pb")
        for k, (name, array) in enumerate(case.expected.items()):
            onnx.save_tensor(numpy_helper.from_array(array, name), data / f"output_{k}.pb")
        written.append(folder)
    return written


def load_case(folder: str | Path) -> Case:
    folder = Path(folder)
    model = onnx.load(folder / "model.onnx")
    data = folder / "test_data_set_0"

    def read(prefix: str) -> dict[str, np.ndarray]:
        tensors = [onnx.load_tensor(p) for p in sorted(data.glob(f"{prefix}_*.pb"),
                                                        key=lambda p: int(p.stem.split("_")[1]))]
        return {t.name: numpy_helper.to_array(t) for t in tensors}

    return Case(folder.name, model, read("input"), read("output"))


def tolerance(dtype: np.dtype) -> float:
    """Relative tolerance of a stored float output: a few units in the last place."""
    dtype = np.dtype(dtype)
    return float(8 * np.finfo(dtype).eps) if dtype.kind == "f" else 0.0


def compare(case: Case, outputs: dict[str, np.ndarray]) -> list[str]:
    """Mismatch descriptions (empty when every output agrees)."""
    problems = []
    for name, want in case.expected.items():
        got = outputs[name]
        if got.dtype != want.dtype or got.shape != want.shape:
            problems.append(f"{case.name}: {name} is {got.dtype}{list(got.shape)}, expected "
                            f"{want.dtype}{list(want.shape)}")
            continue
        rtol = tolerance(want.dtype)
        wide = want.astype(np.float64) if want.dtype.kind == "f" else want
        scale = float(np.max(np.abs(wide), initial=0.0)) if want.dtype.kind == "f" else 0.0
        close = np.isclose(got.astype(wide.dtype), wide, rtol=rtol, atol=rtol * scale,
                           equal_nan=True) if want.dtype.kind == "f" else got == want
        if not np.all(close):
            bad = int(np.size(close) - np.count_nonzero(close))
            problems.append(f"{case.name}: {name} differs in {bad} of {close.size} values")
    return problems


def check_suite(directory: str | Path, *, runtime: str = "onnxruntime") -> tuple[int, list[str]]:
    """Run every case under ``directory``; returns (cases run, problems).

    ``runtime`` is ``onnxruntime`` (:class:`dml_onnx.InferenceSession`) or ``reference``
    (:class:`dml_onnx.ReferenceEvaluator`).
    """
    problems, count = [], 0
    for folder in sorted(Path(directory).glob("test_*")):
        case = load_case(folder)
        runner = (InferenceSession(case.model) if runtime == "onnxruntime"
                  else ReferenceEvaluator(case.model))
        names = list(case.expected)
        outputs = dict(zip(names, runner.run(names, case.feeds)))
        problems += compare(case, outputs)
        count += 1
    return count, problems
