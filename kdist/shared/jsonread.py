"""The one reader of JSON that kdist did not write itself: cluster answers, watch events,
annotations, and the lines workers print.

Python's json recurses once per level of nesting, so a text of 100,000 `[` (a
few hundred KiB, well inside every size cap) raised RecursionError, which no
caller expected, wherever such text was read. Here that error, text longer
than the caller's `limit`, and a value nested deeper than MAX_DEPTH (measured
level by level, not recursively) are refused like any other text that is not
JSON: `NotRead`, a ValueError, whose message says why in a few words. What
comes back is plain JSON types (no hook builds anything else), never deeper
than MAX_DEPTH, so code that walks it recursively later (json.dumps for
`-o json`) is safe too.

Standard library only.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: Deeper than this is refused. A Kubernetes object kdist reads (a list of pods, a JobSet
#: and its pod template) is under 20 deep; `Client.train`'s value is at most this deep
#: (``kdist.shared.jsonvalue`` refuses a deeper one on the pod).
MAX_DEPTH = 100
#: A text this long or longer is read with the garbage collector paused (`_no_collection`).
BIG = 64 * 1024


class NotRead(ValueError):
    """The text is not JSON kdist reads: malformed, too long, or nested too deeply."""


class OutOfBounds(NotRead):
    """The text is longer or nests deeper than kdist reads (JSON or not): not a cut or a
    page that is not JSON, but an answer no Kubernetes object or kdist line makes."""


def loads(text: str | bytes | bytearray, *, limit: int) -> Any:
    """The value `text` holds; NotRead when it is longer than `limit` (characters or
    bytes), nested deeper than MAX_DEPTH, or not JSON at all."""
    if len(text) > limit:
        raise OutOfBounds(f"it is more than {limit:,} bytes long")
    with _no_collection(len(text) >= BIG):
        try:
            value = json.loads(text)
        except RecursionError:  # json's C scanner counts its levels, and stops here
            raise OutOfBounds(f"it is nested more than {MAX_DEPTH} deep") from None
        except ValueError as e:  # UnicodeDecodeError included
            raise NotRead(str(e)) from None
        if _opened(text) > MAX_DEPTH and depth(value) > MAX_DEPTH:
            raise OutOfBounds(f"it is nested more than {MAX_DEPTH} deep")
    return value


@contextmanager
def _no_collection(big: bool) -> Iterator[None]:
    """The cyclic garbage collector paused while a big text is read: json.loads and `depth`
    build trees, which hold no cycle to find, yet every 700 containers made start a
    collection that walks them (a 1.4 MB page of 250 pods: ~25% more time). Resumed only
    if it ran before, so a `gc.disable()` made before stands; another thread's overlapping
    pause can only turn it on early, which costs time, never memory."""
    if not big or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def depth(value: Any) -> int:
    """How many lists and dicts deep `value` nests (0 for a scalar), or MAX_DEPTH + 1 once
    it is known to be deeper. Level by level, not recursive."""
    level, levels = [value], 0
    while levels <= MAX_DEPTH:
        # json.loads makes no subclasses, so the exact types are enough.
        containers = [item for item in level if type(item) is dict or type(item) is list]
        if not containers:
            return levels
        level, levels = [], levels + 1
        for c in containers:
            level.extend(c.values() if type(c) is dict else c)
    return levels


def _opened(text: str | bytes | bytearray) -> int:
    """An upper bound of the depth, counted fast: fewer brackets than MAX_DEPTH cannot nest
    deeper (brackets in strings included)."""
    if isinstance(text, str):
        return text.count("[") + text.count("{")
    return text.count(b"[") + text.count(b"{")
