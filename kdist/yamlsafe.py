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
# libyaml when present: the pure-Python scanner takes seconds on a 1 MiB scalar.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlProblem(ValueError):
    """The text is not one small, well-formed YAML document."""


def load_document(data: bytes) -> object:
    """Parse `data` as exactly one YAML document within the bounds above."""
    if len(data) > MAX_BYTES:
        raise YamlProblem(f"file is larger than {MAX_BYTES // 1024} KiB")
    if b"\x00" in data:
        raise YamlProblem("file is binary, not YAML text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise YamlProblem(f"file is not UTF-8 text (byte {e.start})") from None
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
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise YamlProblem(f"{where}invalid YAML: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise YamlProblem(f"invalid YAML: {e}") from None
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
