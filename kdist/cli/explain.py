"""`kdist explain FIELD`: a field's doc, type, default and subfields, as `kubectl explain`.

Read from the spec model (no cluster, no torch), so it says what `kdist validate` checks.
"""

from __future__ import annotations

import textwrap

import click

from kdist.cli.options import Command, cluster_options
from kdist.cli.say import say

# as kdist.spec.schema says it (the CLI imports no spec module: import-linter)
EACH_DEFAULT = "each field's default"

INDENT = "    "


@click.command(cls=Command, cluster=False, examples=[
    "kdist explain spec.checkpoint",
    "kdist explain spec.distributed.maxRestarts",
    "kdist explain spec --recursive"])
@click.argument("field", default="", metavar="[FIELD]")
@click.option("--recursive", is_flag=True, help="Every field below FIELD, one line each.")
@cluster_options
def explain(_opts: object, field: str, recursive: bool) -> None:
    """Describe a job.yaml field: its doc, type, default and subfields.

    FIELD is a dotted path as in job.yaml (spec.checkpoint, spec.distributed.port;
    list items need no index: spec.scheduling.tolerations.key); none: the whole job.
    An unknown field is exit 2, naming the closest one. docs/reference.md has them all.
    """
    from kdist.api import explain as api

    doc = api.explain(field)
    for line in describe(doc, api.KIND, api.API_VERSION, recursive=recursive):
        say(line)


def describe(doc, kind: str, version: str, *, recursive: bool = False) -> list[str]:
    """The lines `kdist explain` prints for one FieldDoc."""
    lines = [f"KIND:     {kind}", f"VERSION:  {version}", ""]
    lines.append(f"FIELD:    {doc.path or kind} <{doc.type}>"
                 + (" -required-" if doc.required and doc.path else ""))
    if doc.default_text():
        lines.append(f"DEFAULT:  {doc.default_text()}")
    if doc.values:
        lines.append(f"VALUES:   {doc.values}")
    lines += ["", "DESCRIPTION:"]
    for paragraph in (doc.doc or "(none)").splitlines():
        lines += textwrap.wrap(paragraph, 88, initial_indent=INDENT, subsequent_indent=INDENT)
    if doc.fields:
        lines += ["", "FIELDS:"]
        lines += _field_lines(doc.fields, "  ", recursive)
    return lines


def _field_lines(fields, indent: str, recursive: bool) -> list[str]:
    """One line per field: name, type, required or default, what it is."""
    name_w = max(len(f.name) for f in fields)
    type_w = max(len(f.type) for f in fields) + 2
    out = []
    for f in fields:
        default = f.default_text()
        words = f.description or f.type_doc
        if f.required:
            words = f"-required- {words}"
        elif default and default != EACH_DEFAULT:
            words = f"{words} (default {default})"
        out.append(f"{indent}{f.name:<{name_w}}  {'<' + f.type + '>':<{type_w}}  {words}".rstrip())
        if recursive and f.fields:
            out += _field_lines(f.fields, indent + "  ", recursive)
    return out
