"""The conformance suite: every operator example as an ONNX backend-style test case.

Layout (what onnxruntime's ``onnx_test_runner`` and ``onnx.backend.test`` read)::

    models/test_<op>_<example>/model.onnx                 the dml_onnx node, with its
                                                          standard form as a local function
    models/test_<op>_<example>/test_data_set_0/input_<i>.pb, output_<k>.pb
    models/test_<op>_<example>/config.txt                 float tolerances, where needed
    models/test_<op>_<example>_expanded/...               the same with standard ops only
    models/test_<op>_<example>_decomposed/...             primitive standard ops only, where
                                                          the expanded twin has a native op

Expected outputs are the example's independently known values where it has them (the seed
examples), otherwise what the plain reference implementations (:mod:`dml_onnx.reference_ops`,
through :class:`dml_onnx.ReferenceEvaluator`) compute, never the kernels being checked. Each
case imports the default-domain opset at which the DirectML execution provider registers the
native op its standard form uses (16:
MaxRoiPool-1, RoiAlign-16, LpPool-11; 18: Col2Im-18), so ``onnx_test_runner -e dml models``
checks what DirectML computes against the kernels here. The forms of a case are
:data:`FORMS`.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from dml_onnx.builders import single_node_model, snake
from dml_onnx.conformance import directml_ep
from dml_onnx.conformance.files import check_replaceable, written_by_suite
from dml_onnx.conformance.metric import difference
from dml_onnx.conformance.probes import export_probes
from dml_onnx.definition import DOMAIN, Example, OpDefinition
from dml_onnx.form import DIRECTML_VERSIONS, NATIVE_VERSIONS, op_version
from dml_onnx.model_files import load_model, read_regular
from dml_onnx.ops import OPERATORS
from dml_onnx.reference import ReferenceEvaluator
from dml_onnx.standard import lower_model, with_functions


@dataclass(frozen=True)
class Tolerance:
    """``|got - want| <= absolute + relative * |want|`` per element, as onnx_test_runner
    reads them from ``config.txt`` (``per_sample_tolerance`` and
    ``relative_per_sample_tolerance``). Zero for exact cases."""

    absolute: float = 0.0
    relative: float = 0.0

    @classmethod
    def for_outputs(cls, outputs: list[np.ndarray]) -> Tolerance:
        """A few units in the last place of the largest float output (float16 is rounded
        once from float32, where a standard form may land on the other side of a tie). Both
        in float64: a float64 output near its type's limit has an absolute tolerance beyond
        float32's range, which as float32 would be infinite (a check that cannot fail)."""
        floats = [o for o in outputs if o.dtype.kind == "f" and o.size]
        if not floats:
            return cls()
        relative = max(2 * 2.0 ** -10 if o.dtype == np.float16 else 16 * float(np.finfo(
            o.dtype).eps) for o in floats)
        scale = max(float(np.max(np.abs(o[np.isfinite(o)]), initial=0.0)) for o in floats)
        return cls(relative * scale, relative)

    def config_text(self) -> str:
        return (f"per_sample_tolerance: {self.absolute!r}\n"
                f"relative_per_sample_tolerance: {self.relative!r}\n")

    @classmethod
    def read(cls, folder: Path) -> Tolerance:
        """The tolerance of ``folder/config.txt`` (none: exact); ``ValueError`` naming the
        file for one that is not a small regular file of the two ``name: value`` lines."""
        path = folder / "config.txt"
        if not (path.exists() or path.is_symlink()):
            return cls()
        try:
            lines = read_regular(path, CONFIG_BYTES).decode().splitlines()
            values = dict(line.split(":", 1) for line in lines if line.strip())
            return cls(float(values["per_sample_tolerance"]),
                       float(values["relative_per_sample_tolerance"]))
        except (UnicodeDecodeError, KeyError) as error:
            raise ValueError(f"{path} is not a tolerance file ({error!r})") from None
        except ValueError as error:
            raise ValueError(f"{path}: {error}" if str(path) not in str(error)
                             else str(error)) from None


FORMS = {
    "dml_onnx": "",
    "expanded": "_expanded",
    "decomposed": "_decomposed",
}
"""Each form of a case, by the suffix of its folder's name: ``dml_onnx``, the ``dml_onnx`` node
(run by :class:`dml_onnx.InferenceSession`); ``expanded``, standard ops with the native
RoiAlign, MaxRoiPool, LpPool or Col2Im where they agree (:func:`expanded`: what tests a
provider's own ops); ``decomposed``, primitive standard ops only (:func:`decomposed`: what a
provider runs as DirectML computes; written only where the expanded twin has a native op, the
expanded twin being that form elsewhere)."""


@dataclass(frozen=True)
class Case:
    """One runnable case: a single-node model, its feeds, expected outputs and tolerance."""

    name: str
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    tolerance: Tolerance = Tolerance()

    @property
    def operator(self) -> str:
        """The operator the case tests (``RoiAlign1`` ...), from the model's node."""
        return next((n.op_type for n in self.model.graph.node if n.domain == DOMAIN),
                    self.model.graph.name.removesuffix("_model"))

    @property
    def form(self) -> str:
        """Which of :data:`FORMS` the case is: ``dml_onnx`` by its nodes, a standard one by
        its name (``expanded`` unless it ends in ``_decomposed``)."""
        if any(n.domain == DOMAIN for n in self.model.graph.node):
            return "dml_onnx"
        return "decomposed" if self.name.endswith(FORMS["decomposed"]) else "expanded"


CONFORMANCE_OPSETS = (16, 18)
"""The default-domain opsets a case may import; see :func:`case_opset`."""


def case_opset(model_at: Callable[[int], onnx.ModelProto]) -> int:
    """The first of :data:`CONFORMANCE_OPSETS` at which the lowered model uses a native op in
    the version the DirectML execution provider registers; else the first."""
    for opset in CONFORMANCE_OPSETS:
        lowered = lower_model(model_at(opset))
        natives = {n.op_type for n in lowered.graph.node if n.op_type in DIRECTML_VERSIONS}
        if natives and all(op_version(op, opset) == DIRECTML_VERSIONS[op] for op in natives):
            return opset
    return CONFORMANCE_OPSETS[0]


def example_case(definition: OpDefinition, example: Example) -> Case:
    """The example as a case; expected outputs from the example or from the reference."""
    def model_at(opset: int) -> onnx.ModelProto:
        return single_node_model(definition, example.inputs, example.attributes,
                                 example.outputs, opset=opset,
                                 node_name=f"{snake(definition.name)}_{example.name}")

    model = with_functions(model_at(case_opset(model_at)))
    feeds = {p.name: a for p, a in zip(definition.inputs, example.inputs) if a is not None}
    names = [o.name for o in model.graph.output]
    expected: list[np.ndarray] = list(example.expected)
    if not expected:
        outputs = ReferenceEvaluator(model).run(None, feeds)
        assert isinstance(outputs, list)  # a dict only for intermediate=True
        expected = outputs
    return Case(f"test_{snake(definition.name)}_{example.name}", model, feeds,
                dict(zip(names, expected)), Tolerance.for_outputs(expected))


def expanded(case: Case) -> Case:
    """The case's twin with every ``dml_onnx`` node lowered to standard ops."""
    return replace(case, name=f"{case.name}{FORMS['expanded']}", model=lower_model(case.model))


def decomposed(case: Case) -> Case | None:
    """The case's twin of primitive standard ops only (``lower_model(..., native=False)``),
    or ``None`` where its expanded twin uses no native op (and so is that form already).

    It imports the first of :data:`CONFORMANCE_OPSETS` at which the DirectML execution
    provider registers every op it uses (:func:`~dml_onnx.conformance.directml_ep.unregistered`;
    it needs no native op's opset), else the case's own opset."""
    if not {n.op_type for n in lower_model(case.model).graph.node} & set(NATIVE_VERSIONS):
        return None
    forms = [lower_model(_at_opset(case.model, opset), native=False)
             for opset in CONFORMANCE_OPSETS]
    model = next((f for f in forms if not directml_ep.unregistered(f)),
                 lower_model(case.model, native=False))
    return replace(case, name=f"{case.name}{FORMS['decomposed']}", model=model)


def _at_opset(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """``model`` (of ``dml_onnx`` nodes only) importing default-domain ``opset``."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    for entry in result.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = opset
    return result


def all_cases() -> list[Case]:
    """Every case of the suite, each followed by its expanded twin and, where it has one,
    its decomposed twin."""
    cases = [example_case(d, e) for d in OPERATORS for e in d.examples() if not e.error]
    return [c for case in cases for c in (case, expanded(case), decomposed(case))
            if c is not None]


PROBES = "probes"
"""The folder of the suite that holds the probes (:mod:`dml_onnx.conformance.probes`):
measured, not counted as cases."""


def export_suite(directory: str | Path) -> list[Path]:
    """Write every case under ``directory``, replacing earlier ``test_*`` folders, and the
    probes under ``directory/probes``.

    The files depend only on the cases: writing twice gives identical bytes.
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    cases = all_cases()
    names = {case.name for case in cases}
    ours = []
    for old in sorted(root.glob("test_*")):
        if written_by_suite(old):
            ours.append(old)
        elif old.name in names:  # checked before anything is removed
            raise ValueError(f"{old} was not written by dml-onnx conformance export: not "
                             "replaced (move it away, or export to another folder)")
    check_replaceable(root / PROBES)
    for old in ours:
        shutil.rmtree(old)
    export_probes(root / PROBES)
    return [write_case(case, root / case.name) for case in cases]


def write_case(case: Case, folder: Path) -> Path:
    """Write ``case`` into the new ``folder`` in the backend layout; returns ``folder``."""
    data = folder / "test_data_set_0"
    data.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(case.model.SerializeToString(deterministic=True))
    for prefix, arrays in (("input", case.feeds), ("output", case.expected)):
        for i, (name, array) in enumerate(arrays.items()):
            tensor = numpy_helper.from_array(array, name)
            (data / f"{prefix}_{i}.pb").write_bytes(tensor.SerializeToString(deterministic=True))
    if case.tolerance != Tolerance():
        (folder / "config.txt").write_text(case.tolerance.config_text())
    return folder


TENSOR_BYTES = 1 << 31
"""The largest ``.pb`` a case may hold (protobuf's own limit)."""
CONFIG_BYTES = 1 << 16
"""The largest ``config.txt`` (or ``probe.json``) read."""


def load_case(folder: str | Path) -> Case:
    """A case folder of the backend layout. Raises ``ValueError`` (``OSError``) for one that
    cannot be read, or that holds no expected output."""
    folder = Path(folder)
    model = load_model(folder / "model.onnx")
    data = folder / "test_data_set_0"

    def read(prefix: str) -> dict[str, np.ndarray]:
        tensors = []
        for path in sorted(data.glob(f"{prefix}_*.pb"), key=lambda p: p.stem.split("_")[1]):
            try:
                tensors.append(onnx.load_tensor_from_string(read_regular(path, TENSOR_BYTES)))
            except DecodeError as error:
                raise ValueError(f"{path} is not an ONNX tensor ({error})") from None
        return {t.name: numpy_helper.to_array(t) for t in tensors}

    expected = read("output")
    if not expected:
        raise ValueError(f"{data} holds no expected output (output_*.pb)")
    return Case(folder.name, model, read("input"), expected, Tolerance.read(folder))


@dataclass(frozen=True)
class Outcome:
    """How one case went: its problems (none when it passed) and its worst error, the
    largest :func:`~dml_onnx.conformance.metric.difference` of a float output from its
    expected value (``|got - want|`` relative to ``max(1, max |want|)``); which of
    :data:`FORMS` it is and what ran it (an onnxruntime provider, or :data:`RUNNERS`)."""

    case: str
    operator: str
    problems: tuple[str, ...]
    worst: float
    form: str = ""
    provider: str = ""

    @property
    def passed(self) -> bool:
        return not self.problems


def compare(case: Case, outputs: dict[str, np.ndarray]) -> Outcome:
    """The outputs against the case's expected values and tolerance."""
    problems, worst = [], 0.0
    for name, want in case.expected.items():
        got = outputs[name]
        if got.dtype != want.dtype or got.shape != want.shape:
            problems.append(f"{name} is {got.dtype}{list(got.shape)}, expected "
                            f"{want.dtype}{list(want.shape)}")
            continue
        if want.dtype.kind != "f":
            close = got == want
        else:
            wide, got64 = want.astype(np.float64), got.astype(np.float64)
            with np.errstate(invalid="ignore"):
                same = (got64 == wide) | (np.isnan(got64) & np.isnan(wide))
                close = same | (np.abs(got64 - wide) <= case.tolerance.absolute
                                + case.tolerance.relative * np.abs(wide))
            worst = max(worst, difference(got, want))
        if not np.all(close):
            bad = int(np.size(close) - np.count_nonzero(close))
            problems.append(f"{name} differs in {bad} of {close.size} values")
    return Outcome(case.name, case.operator, tuple(problems), worst, case.form)


RUNNERS = {"onnxruntime": "dml_onnx.InferenceSession", "reference": "dml_onnx.ReferenceEvaluator"}
"""What runs the ``dml_onnx`` models, by ``runtime`` (on the CPU, whatever the providers)."""


def check_providers(providers: Sequence[str]) -> None:
    """Raise ``ValueError`` naming every one of ``providers`` that the installed onnxruntime
    does not offer (``onnxruntime.get_available_providers()``)."""
    available = ort.get_available_providers()
    missing = [p for p in providers if p not in available]
    if missing or not providers:
        raise ValueError(
            f"execution provider {', '.join(missing) or '(none given)'} is not available in "
            f"the installed onnxruntime {ort.__version__} (it offers {', '.join(available)}; "
            "DmlExecutionProvider comes with the onnxruntime-directml package)")


def run_case(case: Case, *, provider: str = "CPUExecutionProvider",
             runtime: str = "onnxruntime") -> Outcome:
    """Run one case: a ``dml_onnx`` model through :class:`dml_onnx.InferenceSession` (or
    :class:`dml_onnx.ReferenceEvaluator` with ``runtime="reference"``), a standard one through
    a plain onnxruntime session on ``provider`` (onnxruntime gives what that provider does not
    take to its CPU provider). Errors count as failures."""
    names = list(case.expected)
    ran_by = RUNNERS[runtime] if case.form == "dml_onnx" else provider
    try:
        if case.form == "dml_onnx":
            from dml_onnx.runtime import InferenceSession  # imports onnxruntime-extensions

            runner: Any = (InferenceSession(case.model) if runtime == "onnxruntime"
                           else ReferenceEvaluator(case.model))
        else:
            runner = ort.InferenceSession(case.model.SerializeToString(), providers=[provider])
        outputs = dict(zip(names, runner.run(names, case.feeds)))
    except Exception as error:  # noqa: BLE001 - a failing case is reported, not raised
        return Outcome(case.name, case.operator, (f"{type(error).__name__}: {error}",), 0.0,
                       case.form, ran_by)
    return replace(compare(case, outputs), provider=ran_by)


def run_suite(directory: str | Path, *, providers: Sequence[str] = ("CPUExecutionProvider",),
              runtime: str = "onnxruntime",
              progress: Callable[[int, int, Outcome], None] | None = None) -> list[Outcome]:
    """Run every case under ``directory``: each ``dml_onnx`` model once, each standard one on
    each of ``providers`` in turn; ``progress(done, total, outcome)`` after each run. Raises
    ``ValueError`` (:func:`check_providers`) before running anything if a provider is not
    available."""
    check_providers(providers)
    runs: list[tuple[Case | Outcome, str]] = []
    for folder in sorted(Path(directory).glob("test_*")):
        try:
            case = load_case(folder)
        except (OSError, ValueError) as error:
            runs.append((Outcome(folder.name, "unreadable", (f"{error}",), 0.0), ""))
        else:
            runs += [(case, p) for p in ([""] if case.form == "dml_onnx" else providers)]
    outcomes = []
    for done, (run, provider) in enumerate(runs, 1):
        outcomes.append(run if isinstance(run, Outcome)
                        else run_case(run, provider=provider, runtime=runtime))
        if progress is not None:
            progress(done, len(runs), outcomes[-1])
    return outcomes


def summary_table(outcomes: list[Outcome]) -> str:
    """A Markdown table per operator, then one per form and what ran it: cases, passed,
    worst error."""
    tables = []
    for heading, key in (("operator", lambda o: o.operator),
                         ("form | ran on", lambda o: f"{o.form} | {o.provider}")):
        rows = [f"| {heading} | cases | passed | worst error |",
                f"|{'---|' * (heading.count('|') + 1)}---:|---:|---:|"]
        for value in dict.fromkeys(map(key, outcomes)):
            mine = [o for o in outcomes if key(o) == value]
            rows.append(f"| {value} | {len(mine)} | {sum(o.passed for o in mine)} | "
                        f"{max(o.worst for o in mine):.3g} |")
        tables.append("\n".join(rows))
    return "\n\n".join(tables)
