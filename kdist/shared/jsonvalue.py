"""What `Client.train`'s return value may be: a JSON value, checked with a path to the culprit.

The value travels from rank 0 to the caller as JSON text in the pod's log
(``kdist.shared.frames``), never as a pickle: the log is text that anything on
the cluster side can write (the training script, a dependency, the API
server), and loading a pickle from it would run their code on the caller's
machine. JSON carries None, bool, int, float (NaN and the infinities too, as
Python's json writes them), str, lists and tuples (tuples come back as lists)
and dicts with str keys; subclasses of those come back as the plain type.
Anything else is refused on the pod, naming where it sits and what to send.

Standard library only.
"""

from __future__ import annotations

import json
from typing import Any

from kdist.shared import jsonread

#: Deeper than this is refused: json's encoder and decoder recurse, and a value this
#: deep is a mistake, not a result. The reader's bound, so what one side sends the other reads.
MAX_DEPTH = jsonread.MAX_DEPTH
ALLOWED = "None, bool, int, float, str, lists, tuples and dicts with str keys"


class NotJson(ValueError):
    """The value holds something JSON cannot carry; the message says where and what."""


def dumps(value: Any, root: str = "result") -> str:
    """`value` as compact ASCII JSON; NotJson naming the part (as `root[...]`) at fault."""
    _check(value, root, 0, set())
    try:
        return json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    except ValueError as e:  # an int past Python's str-conversion digit limit (the reader's too)
        raise NotJson(f"{root}: {str(e).split(';')[0]}; return such an int as str") from None


def loads(text: str | bytes, limit: int) -> Any:
    """The value `text` holds; plain JSON types only (no hook builds anything else);
    ValueError (`jsonread.NotRead`) for text that is not, is longer than `limit` or nests
    deeper than MAX_DEPTH."""
    return jsonread.loads(text, limit=limit)


def _check(value: Any, path: str, depth: int, seen: set[int]) -> None:
    if value is None or isinstance(value, (bool, int, float, str)):
        return
    if not isinstance(value, (list, tuple, dict)):
        raise NotJson(f"{path}: {_a(_type(value))} cannot travel as JSON; {_hint(value)}")
    if depth >= MAX_DEPTH:
        raise NotJson(f"{path}: nested more than {MAX_DEPTH} deep; return a flatter value")
    if id(value) in seen:
        raise NotJson(f"{path}: the value contains itself; JSON cannot carry a cycle")
    seen.add(id(value))
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotJson(f"{path}: the key {key!r} is {_a(_type(key))}, and JSON's keys "
                              "are strings; use str keys")
            _check(item, f"{path}[{key!r}]", depth + 1, seen)
    else:
        for i, item in enumerate(value):
            _check(item, f"{path}[{i}]", depth + 1, seen)
    seen.discard(id(value))


def _type(value: Any) -> str:
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def _a(name: str) -> str:
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _hint(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "return str (decode it, or base64 it)"
    if isinstance(value, (set, frozenset)):
        return "return a list (sorted(...))"
    if callable(getattr(value, "tolist", None)) and callable(getattr(value, "item", None)):
        return "return .tolist() or .item()"  # tensors, arrays, numpy scalars
    return f"return JSON values: {ALLOWED}"
