"""The docstrings of the operators' builders (``dml_onnx.lp_pooling`` ...), written from the
operator table, so that they cannot drift from the operators."""

from __future__ import annotations

import textwrap

from dml_onnx.definition import DOMAIN, DOMAIN_VERSION, OpDefinition

BUILDER_ARGUMENT_TYPES = {"ints": "Sequence[int]", "int": "int", "float": "float",
                          "string": "str"}
"""The Python type a builder takes for each attribute type (its annotation, ``| None`` where
the attribute is optional)."""


def _wrapped(text: str, first: str = "", rest: str = "") -> list[str]:
    """``text`` in lines of at most 92 characters, the first indented by ``first``, the others
    by ``rest``."""
    return textwrap.wrap(text, 92, initial_indent=first, subsequent_indent=rest,
                         break_long_words=False, break_on_hyphens=False)


def builder_doc(definition: OpDefinition) -> str:
    """The docstring of the operator's builder (``dml_onnx.lp_pooling`` ...), from its
    definition alone: the summary, every input, output and attribute with its type,
    default and meaning, so that it cannot drift from the operator. Google style (as
    ``help()`` shows it and Sphinx's napoleon reads it); a ``|`` of the table's text is
    escaped, which reStructuredText reads as a substitution."""
    types = "; ".join(f"{name}: {', '.join(t[len('tensor('):-1] for t in allowed)}"
                      for name, allowed in definition.type_constraints.items())
    paragraphs = [f"A ``{DOMAIN}::{definition.name}`` node (domain version {DOMAIN_VERSION}): "
                  f"{definition.summary}",
                  f"DirectML ``{definition.dml_name}``; specification section "
                  f"{definition.spec_section}. Element types: {types}. An attribute left "
                  "``None`` is left off the node and takes its default; an optional input "
                  "or output given as ``None`` (or ``\"\"``) is omitted."]
    arguments = []
    for kind, parameters in (("input", definition.inputs), ("output", definition.outputs)):
        for parameter in parameters:
            optional = ", optional" if parameter.optional else ""
            arguments.append(f"{parameter.name} (str{optional}): the name of the {kind} "
                             f"value, of type {parameter.type}: {parameter.doc}")
    for attribute in definition.attributes:
        default = ("required" if attribute.required
                   else f"default: {attribute.describe_default()}")
        arguments.append(f"{attribute.name} ({BUILDER_ARGUMENT_TYPES[attribute.type]}, "
                         f"{default}): {attribute.doc}")
    arguments.append("name (str, optional): the node's name, which error messages quote.")
    lines = [*_wrapped(paragraphs[0]), "", *_wrapped(paragraphs[1]), "", "Args:"]
    for argument in arguments:
        lines += _wrapped(argument, "    ", "        ")
    lines += ["", "Returns:", "    onnx.NodeProto: the node, its attributes checked.", "",
              "Raises:", "    TypeError: an unknown attribute, or a value of the wrong type.",
              *_wrapped("dml_onnx.KernelError: (a ValueError) a value or combination the "
                        "operator refuses, naming the operator, node, field and value.",
                        "    ", "        ")]
    return "\n".join(lines).replace("|", "\\|") + "\n"
