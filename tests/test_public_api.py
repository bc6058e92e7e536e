"""The package's public face: ``__all__`` is the user API (the internals load but stay out of
it), every builder's docstring is written from its operator's definition, the earlier names
still work and warn with ``DeprecationWarning`` naming the new one, ``__version__`` is the
installed distribution's, and a model without the domain's opset import is told how to add
it."""

from __future__ import annotations

import inspect
import re
import warnings
from importlib import metadata

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import dml_onnx
from dml_onnx import check, definition
from dml_onnx.builder_docs import BUILDER_ARGUMENT_TYPES, builder_doc
from dml_onnx.builders import snake
from dml_onnx.cli import main

USER_API = {
    # building models
    "make_model", "IR_VERSION", "STANDARD_OPSET", "DOMAIN", "DOMAIN_VERSION", "OP_TYPES",
    "register_schemas",
    # running them
    "InferenceSession", "ReferenceEvaluator", "quiet_session_options", "memory_limit",
    "set_memory_limit", "work_limit", "set_work_limit",
    # checking and converting them
    "model_problems", "raise_model", "Raised", "lower_model", "with_functions",
    "to_runtime_model",
    # errors and warnings
    "KernelError", "NotRaisable", "NotEquivalent", "CompilingWarning",
}
"""The user API besides the builders: a name added to or taken from ``__all__`` is a decision,
made here too."""
INTERNALS = ("Example", "OpDefinition", "BUILDERS", "OPERATORS", "OPERATORS_BY_NAME",
             "register_runtime_ops", "deregister_schemas")


def test_all_is_the_user_api_and_the_builders():
    builders = {snake(d.name) for d in dml_onnx.OPERATORS}
    assert set(dml_onnx.__all__) == USER_API | builders
    assert len(dml_onnx.__all__) == len(set(dml_onnx.__all__))
    assert tuple(d.name for d in dml_onnx.OPERATORS) == dml_onnx.OP_TYPES


@pytest.mark.parametrize("name", INTERNALS)
def test_internals_still_load_outside_all(name):
    assert name not in dml_onnx.__all__
    assert getattr(dml_onnx, name) is not None


def test_listing_the_package_neither_warns_nor_lists_earlier_names():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        names = dir(dml_onnx)
        for name in names:
            getattr(dml_onnx, name)
    assert {"check_model", "OPSET_VERSION"}.isdisjoint(names)
    assert set(dml_onnx.__all__) <= set(names)


@pytest.mark.parametrize(("module", "old", "new"), [
    (dml_onnx, "check_model", "model_problems"),
    (check, "check_model", "model_problems"),
    (dml_onnx, "OPSET_VERSION", "DOMAIN_VERSION"),
    (definition, "OPSET_VERSION", "DOMAIN_VERSION"),
], ids=lambda value: getattr(value, "__name__", value))
def test_an_earlier_name_works_and_warns_naming_the_new_one(module, old, new):
    where = module.__name__
    with pytest.warns(DeprecationWarning, match=rf"{where}\.{old} is deprecated.*use "
                                                rf"{where}\.{new}") as caught:
        value = getattr(module, old)
    assert value is getattr(module, new)
    assert caught[0].filename == __file__  # it points at the code that reads the name
    with pytest.warns(DeprecationWarning):  # every use warns, not only the first
        getattr(module, old)


def test_an_earlier_name_warns_through_from_import():
    with pytest.warns(DeprecationWarning, match="use dml_onnx.model_problems"):
        from dml_onnx import check_model
    with pytest.warns(DeprecationWarning, match="use dml_onnx.check.model_problems"):
        from dml_onnx.check import check_model as from_module
    assert check_model is from_module is dml_onnx.model_problems


def test_version_is_the_installed_distributions():
    assert dml_onnx.__version__ == metadata.version("dml-onnx")


@pytest.mark.parametrize("definition", dml_onnx.OPERATORS, ids=lambda d: d.name)
def test_builder_docstring_is_written_from_the_definition(definition):
    """Every input, output and attribute with its type, default and meaning, as the operator
    table has them; the builder's annotations are the types the docstring gives."""
    builder = getattr(dml_onnx, snake(definition.name))
    doc = builder.__doc__
    assert doc == builder_doc(definition)
    assert definition.summary.replace("|", r"\|")[:40] in " ".join(doc.split())
    arguments = doc[doc.index("\nArgs:\n"):doc.index("\nReturns:\n")]
    entries = {m[1]: " ".join(m[2].split())
               for m in re.finditer(r"^    (\w+) \((.*?)\n(?=    \w|\Z)", arguments + "\n    x",
                                    re.S | re.M)}
    signature = inspect.signature(builder).parameters
    assert set(entries) == set(signature)  # one entry per argument, in the table's order
    assert list(entries) == [*(p.name for p in (*definition.inputs, *definition.outputs)),
                             *definition.attribute_names, "name"]
    for parameter in (*definition.inputs, *definition.outputs):
        assert entries[parameter.name].startswith(
            "str, optional)" if parameter.optional else "str)")
        assert " ".join(parameter.doc.split()) in entries[parameter.name]
    for attribute in definition.attributes:
        entry, python_type = entries[attribute.name], BUILDER_ARGUMENT_TYPES[attribute.type]
        default = ("required" if attribute.required
                   else f"default: {attribute.describe_default()}")
        assert entry.startswith(f"{python_type}, {default}): "), entry
        assert " ".join(attribute.doc.split()) in entry
        annotation = signature[attribute.name].annotation
        assert annotation == (python_type if attribute.required else f"{python_type} | None")


def _without_domain_import() -> onnx.ModelProto:
    """A model as ``onnx.helper.make_model`` makes it without the domain's import: the default
    domain's alone (at the project's standard opset: onnx's newest, which ``make_model`` takes
    by default, is beyond what the oldest supported onnxruntime loads)."""
    graph = helper.make_graph([dml_onnx.unfold("X", "Y", window_sizes=[1, 1], name="u")], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1, 2, 2])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, ir_version=dml_onnx.IR_VERSION,
                              opset_imports=[helper.make_opsetid("", dml_onnx.STANDARD_OPSET)])
    assert [o.domain for o in model.opset_import] == [""]
    return model


FIX = ("no opset import of the dml_onnx domain, which its nodes use: add "
       "onnx.helper.make_opsetid('dml_onnx', 1) to the model's opset imports")


def test_a_model_without_the_domain_import_is_told_how_to_fix_it(tmp_path, capsys):
    model = _without_domain_import()
    for make in (dml_onnx.InferenceSession, dml_onnx.to_runtime_model, dml_onnx.lower_model,
                 dml_onnx.with_functions, dml_onnx.raise_model):
        with pytest.raises(ValueError, match=re.escape(f"model: {FIX}")):
            make(model)
    with pytest.raises(RuntimeError, match=re.escape(FIX)):  # as onnx's own evaluator raises
        dml_onnx.ReferenceEvaluator(model)
    (problem,) = dml_onnx.model_problems(model)
    assert problem.startswith(f"model: {FIX}") and "dml_onnx.make_model" in problem
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    assert main(["check", str(path)]) == 1
    assert FIX in capsys.readouterr().out
    # the fix it names works
    model.opset_import.append(helper.make_opsetid(dml_onnx.DOMAIN, dml_onnx.DOMAIN_VERSION))
    X = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    (Y,) = dml_onnx.InferenceSession(model).run(None, {"X": X})
    assert np.array_equal(Y, X.reshape(1, 1, 4))
    assert dml_onnx.model_problems(model) == []

