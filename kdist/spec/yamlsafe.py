"""Reading untrusted YAML: bounded in size, depth and alias expansion.

PyYAML's safe loader happily builds a billion-laughs document (aliases share
objects, so building is cheap) which then costs exponential time in whatever
walks it next. We compose the node graph first, measure its expanded size,
refuse duplicate keys, and only then construct Python objects.
"""

from __future__ import annotations

import yaml

MAX_BYTES = 1 << 20
MAX_NODES = 20_000
MAX_DEPTH = 64
MAX_NUMBER_CHARS = 64  # past this a YAML number is a mistake (and int() of 4,300 digits raises)
# libyaml when present: the pure-Python scanner takes seconds on a 1 MiB scalar.
_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# YAML 1.1 line breaks that editors show inside one line: a reviewer would not
# see the extra key or item PyYAML reads after one.
_HIDDEN_BREAKS = {"\x85": "U+0085", "\u2028": "U+2028", "\u2029": "U+2029"}
# Tags whose values would silently become something else than what is written.
_REFUSED_TAGS = {"tag:yaml.org,2002:binary", "tag:yaml.org,2002:timestamp",
                 "tag:yaml.org,2002:set", "tag:yaml.org,2002:omap", "tag:yaml.org,2002:pairs",
                 "tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"}


class YamlInt(int):
    """An int read from YAML, with the text it was written as (to tell `010` from `8`)."""

    yaml_text: str


class YamlFloat(float):
    """A float read from YAML, with the text it was written as (to tell `1.10` from `1.1`)."""

    yaml_text: str


class _Loader(_Base):  # type: ignore[misc,valid-type]
    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        _check_number(node)
        value = YamlInt(super().construct_yaml_int(node))
        value.yaml_text = node.value
        return value

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        _check_number(node)
        value = YamlFloat(super().construct_yaml_float(node))
        value.yaml_text = node.value
        return value

    def construct_undefined(self, node: yaml.Node) -> object:
        raise _problem(node, f"the tag {node.tag} is not allowed here")


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)
for _tag in _REFUSED_TAGS:
    _Loader.add_constructor(_tag, _Loader.construct_undefined)
_Loader.add_constructor(None, _Loader.construct_undefined)


def _problem(node: yaml.Node, message: str) -> YamlProblem:
    return YamlProblem(f"line {node.start_mark.line + 1}: {message}")


def _check_number(node: yaml.ScalarNode) -> None:
    if len(node.value) > MAX_NUMBER_CHARS:
        raise _problem(node, f"a number of {len(node.value)} characters is too large; "
                             "quote it if it is text")


def _documents(text: str) -> str:
    """How many YAML documents `text` holds, by its events (aliases are not expanded);
    "2 or more" when a later one is malformed."""
    count = 0
    try:
        for event in yaml.parse(text, Loader=_Base):
            count += isinstance(event, yaml.DocumentStartEvent)
    except yaml.YAMLError:
        return f"{max(count, 2)} or more"
    return str(count)


class YamlProblem(ValueError):
    """The text is not one small, well-formed YAML document."""


def load_document(data: bytes, *, max_bytes: int = MAX_BYTES) -> object:
    """Parse `data` as exactly one YAML document within the bounds above."""
    if len(data) > max_bytes:
        raise YamlProblem(f"file is larger than {max_bytes // 1024} KiB")
    if b"\x00" in data:
        raise YamlProblem("file is binary, not YAML text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise YamlProblem(f"file is not UTF-8 text (byte {e.start})") from None
    for char, name in _HIDDEN_BREAKS.items():
        if char in text:
            line = text.count("\n", 0, text.index(char)) + 1
            raise YamlProblem(
                f"line {line}: a raw {name} character, which YAML reads as a line break but "
                f"editors show as none; write it escaped (\\u{name[2:].lower()}) in a "
                "double-quoted string, or remove it")
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as e:  # refused up front: unprintable characters
        raise YamlProblem(
            f"invalid YAML: unprintable character {e.character!r} at character {e.position}"
        ) from None
    try:
        _check_depth(text)
        node = loader.get_single_node()
        if node is None:
            raise YamlProblem("file is empty")
        _check_graph(node)
        doc = loader.construct_document(node)
        _check_strings(doc, "")
        return doc
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = e.problem or e.context or ""
        if "another document" in problem:  # `---` between two jobs: say so, not "invalid YAML"
            raise YamlProblem(f"one TrainingJob per file (found {_documents(text)} "
                              "documents); split them into one file each") from None
        if "nesting depth" in problem:  # PyYAML >= 6.0.4's own limit, met while scanning ahead
            raise YamlProblem(f"{where}document is nested deeper than {MAX_DEPTH} levels") from None
        raise YamlProblem(f"{where}invalid YAML: {problem}") from None
    except yaml.YAMLError as e:
        raise YamlProblem(f"invalid YAML: {' '.join(str(e).split())}") from None
    except RecursionError:
        raise YamlProblem(f"document is nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


_OPEN = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken,
         yaml.FlowMappingStartToken, yaml.FlowSequenceStartToken)
_CLOSE = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


def _check_depth(text: str) -> None:
    """Refuse deep nesting and huge documents while scanning, before any node is
    built: PyYAML's scanner slows down quadratically with flow depth."""
    depth = 0
    for count, token in enumerate(yaml.scan(text, Loader=_Loader)):
        if count > 3 * MAX_NODES:  # every node is at least one token; most are two or three
            raise YamlProblem(f"document has more than {MAX_NODES} nodes")
        if isinstance(token, _OPEN):
            depth += 1
            if depth > MAX_DEPTH:
                line = token.start_mark.line + 1
                raise YamlProblem(f"line {line}: document is nested deeper than {MAX_DEPTH} levels")
        elif isinstance(token, _CLOSE):
            depth -= 1


def _check_graph(root: yaml.Node) -> None:
    sizes: dict[int, int] = {}
    on_path: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in on_path:
            raise YamlProblem("recursive YAML alias")
        if depth > MAX_DEPTH:
            raise YamlProblem(f"document is nested deeper than {MAX_DEPTH} levels")
        on_path.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode):
                    if k.value in seen:
                        line = k.start_mark.line + 1
                        raise YamlProblem(f"line {line}: duplicate key {k.value!r}")
                    seen.add(k.value)
                total += size(k, depth + 1) + size(v, depth + 1)
                if total > MAX_NODES:
                    break
        elif isinstance(node, yaml.SequenceNode):
            for v in node.value:
                total += size(v, depth + 1)
                if total > MAX_NODES:
                    break
        on_path.discard(key)
        if total > MAX_NODES:
            raise YamlProblem(f"document expands to more than {MAX_NODES} nodes (alias bomb?)")
        sizes[key] = total
        return total

    size(root, 0)


def _check_strings(value: object, path: str) -> None:
    """Refuse NUL characters (from YAML escapes) anywhere: no process can receive one."""
    if isinstance(value, str):
        if "\x00" in value:
            raise YamlProblem(f"{path or 'a value'}: contains a NUL character (\\0)")
    elif isinstance(value, dict):
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            _check_strings(k, sub)
            _check_strings(v, sub)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_strings(v, f"{path}[{i}]")
