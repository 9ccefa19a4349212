"""How `Client.train`'s ranks hand their outcome back through the log (both sides).

Rank 0 prints its function's return value as JSON (``kdist.shared.jsonvalue``;
never a pickle: loading one from log text would run whatever code the text
names, on the caller's machine) as the last thing it writes: base64 in
numbered lines of at most CHUNK characters, each framed as
``KDIST-RESULT-JSON <digest> <i>/<n> <chunk>`` (the digest, of the whole JSON
text, ties the pieces together and is checked once they are all there). The
old pickled frames' ``KDIST-RESULT`` lines (an image with an older kdist) are
only counted, so that the client can refuse them by name, never decoded. A
rank whose function raised prints one ``KDIST-ERROR <base64 JSON>`` line (its
rank, the exception's type and message, the traceback's last lines) before
the traceback itself. The client reads them from the logs it already follows,
so the pod needs no permission, volume or service to answer. Lines are short
(a log line is whole below 16 KiB on every runtime) and bounded in number.

Standard library only: the runtime prints them, the API parses them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from kdist.shared import jsonread, jsonvalue

RESULT = "KDIST-RESULT-JSON"
#: kdist < this format's frames: a pickle, refused unread.
PICKLED_RESULT = "KDIST-RESULT"
ERROR = "KDIST-ERROR"
CHUNK = 4096
#: The return value's cap, as JSON text: it travels in the log, a few hundred lines.
MAX_RESULT_BYTES = 1 << 20
MAX_CHUNKS = -(-MAX_RESULT_BYTES * 4 // 3 // CHUNK) + 1
#: What an error line carries of the remote traceback.
TRACEBACK_LINES = 12
MAX_ERROR_CHARS = 8192


def result_lines(value: Any) -> list[str]:
    """The framed lines that carry `value` as JSON; ValueError (jsonvalue.NotJson naming
    the part at fault) for a value JSON cannot carry or one over MAX_RESULT_BYTES."""
    payload = jsonvalue.dumps(value).encode("ascii")
    if len(payload) > MAX_RESULT_BYTES:
        raise ValueError(f"it is {len(payload):,} bytes as JSON, at most "
                         f"{MAX_RESULT_BYTES:,}; save it to a volume and return its path")
    text = base64.b64encode(payload).decode("ascii")
    digest = hashlib.sha256(payload).hexdigest()[:16]
    pieces = [text[i:i + CHUNK] for i in range(0, len(text), CHUNK)] or [""]
    return [f"{RESULT} {digest} {i + 1}/{len(pieces)} {p}" for i, p in enumerate(pieces)]


def error_line(rank: int, kind: str, message: str, traceback_lines: list[str],
               where: str | None = None) -> str:
    """`where`: the user's `file:line` the exception came through (`kdist.shared.tracebacks`)."""
    trace = [line[:500] for line in traceback_lines[-TRACEBACK_LINES:]]
    info: dict[str, Any] = {"rank": rank, "type": kind[:200], "message": message[:2000],
                            "traceback": trace}
    if where:
        info["where"] = where[:500]
    text = json.dumps(info)
    if len(text) > MAX_ERROR_CHARS:
        info["traceback"] = trace[-3:]
        text = json.dumps(info)
    return f"{ERROR} {base64.b64encode(text.encode()).decode('ascii')}"


class Frames:
    """Collects the framed lines of one rank's log, in any interleaving with other output.

    `result()` is the newest complete payload (an earlier attempt's pieces, cut
    by a restart, never mix with a later one's: the digest differs), `decode`
    reads it; `errors` the error lines seen, oldest first, at most a few;
    `pickled` how many old-format (pickled) result lines went by, unread.
    """

    def __init__(self) -> None:
        self._pieces: dict[str, dict[int, str]] = {}
        self._counts: dict[str, int] = {}
        self._complete: list[bytes] = []
        self.errors: list[dict[str, Any]] = []
        self.pickled = 0

    def feed(self, line: str) -> bool:
        """Take `line` if it is a frame (True), anywhere after a prefix; else False."""
        at = line.find(RESULT + " ")
        if at >= 0:
            self._result_piece(line[at + len(RESULT) + 1:].strip())
            return True
        at = line.find(ERROR + " ")
        if at >= 0:
            self._error(line[at + len(ERROR) + 1:].strip())
            return True
        if PICKLED_RESULT + " " in line:
            self.pickled += 1  # counted to name the cause, never decoded
            return True
        return False

    def _result_piece(self, text: str) -> None:
        digest, _, rest = text.partition(" ")
        where, _, chunk = rest.partition(" ")
        index, _, count = where.partition("/")
        if not (index.isdigit() and count.isdigit() and 0 < int(index) <= int(count)
                <= MAX_CHUNKS and len(chunk) <= CHUNK):
            return
        if digest not in self._pieces and len(self._pieces) >= 4:
            self._pieces.pop(next(iter(self._pieces)))  # an old attempt's leftovers
            self._counts = {d: c for d, c in self._counts.items() if d in self._pieces}
        pieces = self._pieces.setdefault(digest, {})
        self._counts[digest] = int(count)
        pieces[int(index)] = chunk
        if len(pieces) == int(count):
            data = "".join(pieces[i] for i in range(1, int(count) + 1))
            del self._pieces[digest]
            try:
                payload = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                return
            if hashlib.sha256(payload).hexdigest()[:16] == digest:
                self._complete = [payload]

    def _error(self, text: str) -> None:
        if len(self.errors) >= 8 or len(text) > MAX_ERROR_CHARS * 2:
            return
        try:
            info = jsonread.loads(base64.b64decode(text, validate=True), limit=MAX_ERROR_CHARS * 2)
        except (binascii.Error, ValueError):
            return
        if isinstance(info, dict) and isinstance(info.get("rank"), int):
            self.errors.append(info)

    def result(self) -> bytes | None:
        return self._complete[-1] if self._complete else None


def decode(payload: bytes) -> Any:
    """The value a complete result payload holds: JSON types only; ValueError if it is
    not JSON or nests deeper than kdist reads (a digest that matched makes that a forgery
    or a bug, never a cut)."""
    try:
        return jsonvalue.loads(payload, limit=MAX_RESULT_BYTES)
    except jsonread.OutOfBounds:
        raise
    except ValueError as e:
        raise ValueError(f"it is not JSON ({e})") from None
