"""Kubernetes objects -> YAML text that every reader reads back as the same strings.

kdist's YAML is read by PyYAML (YAML 1.1) in kdist itself and by kubectl, which
uses sigs.k8s.io/yaml on go-yaml v2. The two resolve plain scalars differently:
go-yaml v2 reads `y`, `n`, `0o17`, `1_000`, `1e3`, `+.5` as booleans and numbers,
where PyYAML sees strings and so prints them unquoted. A job named `n` then fails
`kubectl apply`, and a label key `y` becomes `true`. Here a string is written
plain only when no reader of either family could take it for anything else;
PyYAML's own resolver already covers YAML 1.1, this module adds go-yaml v2's
rules (which include YAML 1.2's core schema). Strings with control characters
or line breaks are double-quoted, and no scalar is ever folded: every value sits
on one line, as escapes that all readers decode alike, instead of relying on
every reader folding multi-line scalars the same way (and line-based tools such
as kubectl's `---` document splitter or grep see one value per line).

Strings that need no quoting come out byte-identical to plain PyYAML output.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = ["dump_objects"]

_STR_TAG = "tag:yaml.org,2002:str"

# go-yaml v2 resolve.go: scalars looked up verbatim (bool, null, inf/nan), plus
# the merge key `<<` (a plain `<<` key merges a mapping) and PyYAML's value key `=`.
_GO_YAML_WORDS = frozenset(
    """y Y yes Yes YES n N no No NO true True TRUE false False FALSE
    on On ON off Off OFF ~ null Null NULL
    .nan .NaN .NAN .inf .Inf .INF +.inf +.Inf +.INF -.inf -.Inf -.INF << =""".split()
) | {""}
# go-yaml v2 strips every `_` from a scalar starting with a sign or digit, then
# tries strconv.ParseInt/ParseUint with base 0 (0b, 0o, 0x, leading-0 octal) and
# its YAML float pattern. Out-of-range numbers are matched too: a superset is safe.
_GO_INT = re.compile(r"[-+]?(?:0[bB][01]+|0[oO][0-7]+|0[xX][0-9a-fA-F]+|[0-9]+)")
_GO_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
# A scalar starting with `.` goes to strconv.ParseFloat as is.
_GO_DOT_FLOAT = re.compile(r"\.[0-9_]+(?:[eE][-+]?[0-9_]+)?")
# go-yaml v2 parseTimestamp's layouts (2006-1-2, then a T/t/space and a time).
# v2 hands them back as the original string, v3 as a time: quote them anyway.
_GO_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt ].*)?", re.DOTALL)
# Characters written as escapes in a one-line double-quoted scalar: C0/C1
# controls (tab and the line breaks included), DEL, YAML 1.1's U+0085/2028/2029
# line breaks, the BOM and the non-characters readers refuse.
_NEEDS_ESCAPE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")

# libyaml's emitter when present (byte-identical to what kdist printed before);
# wide enough that no scalar is ever folded onto a second line.
_Base: type = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_WIDTH = (1 << 31) - 1


def go_yaml_resolves(text: str) -> bool:
    """Whether go-yaml v2 (kubectl's reader) would read plain `text` as a non-string."""
    if text in _GO_YAML_WORDS:
        return True
    first = text[0]
    if first == ".":
        return _GO_DOT_FLOAT.fullmatch(text) is not None
    if first not in "+-0123456789":
        return False
    if _GO_TIMESTAMP.fullmatch(text):
        return True
    digits = text.replace("_", "")
    return bool(_GO_INT.fullmatch(digits) or _GO_FLOAT.fullmatch(digits))


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = None  # PyYAML's choice: plain unless its YAML 1.1 resolver objects
    if _NEEDS_ESCAPE.search(data):
        style = '"'
    elif go_yaml_resolves(data):
        style = "'"  # the style PyYAML itself picks for `yes`, `1.0`, `~`
    return dumper.represent_scalar(_STR_TAG, data, style=style)


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.SequenceNode:
    # Block style, except lists of numbers (exit codes) on one line.
    flow = bool(data) and all(type(x) is int for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


class _Dumper(_Base):
    """Safe dumper whose strings read back as strings under YAML 1.1, 1.2 and go-yaml v2."""


_Dumper.add_representer(str, _represent_str)
_Dumper.add_representer(list, _represent_list)


def dump_objects(objects: list[dict[str, Any]]) -> str:
    """Multi-document YAML (each document after `---`), keys in insertion order.

    Byte-identical for identical input; every string reads back as that string
    with PyYAML's safe loader and with kubectl's reader (sigs.k8s.io/yaml).
    """
    return yaml.dump_all(
        objects,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=_WIDTH,
        explicit_start=True,
    )
