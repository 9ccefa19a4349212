"""Reading an answer's body in bounded pieces: decoded here, refused past kdist's caps.

kdist asks for no content encoding, but a server may send one anyway: half a
megabyte of gzip can expand to 512 MiB. So the raw body is read in pieces of
`CHUNK` bytes and decoded here (gzip and deflate; any other encoding is refused),
never more than `CHUNK` bytes of output at a time, whatever urllib3's version
would do. Whoever reads counts: a whole answer up to its cap
(`kdist.shared.limits.MAX_ANSWER_BYTES`), a line up to its own
(`MAX_EVENT_BYTES`), a log's last lines within the answer cap, so that no more
than about one cap is ever held.
"""

from __future__ import annotations

import sys
import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from kdist.shared.errors import ClusterError

CHUNK = 64 << 10
#: What a kept log line costs beyond its str object: its slot in the deque.
SLOT = 8
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n:,} bytes"


class _Inflater:
    """gzip (members one after another, as gunzip reads them) or deflate, CHUNK at a time."""

    def __init__(self, encoding: str) -> None:
        self.wbits = _WBITS[encoding]
        self.z = zlib.decompressobj(self.wbits)

    def feed(self, data: bytes) -> Iterator[bytes]:
        while data:
            out = self.z.decompress(data, CHUNK)
            if out:
                yield out
            data = self.z.unconsumed_tail
            if self.z.eof:
                data = self.z.unused_data
                if data and self.wbits != zlib.MAX_WBITS:
                    self.z = zlib.decompressobj(self.wbits)
                else:
                    return  # what follows a deflate stream is not part of it

    def flush(self) -> Iterator[bytes]:
        if not self.z.eof:
            while out := self.z.decompress(self.z.unconsumed_tail, CHUNK):
                yield out


def pieces(resp: Any, where: str) -> Iterator[bytes]:
    """The decoded body of `resp` (an unread urllib3 response), at most CHUNK bytes a
    piece, as it arrives; ClusterError for an encoding kdist does not read or a body
    that does not decode. `where` names the answer in messages."""
    encoding = (resp.headers.get("Content-Encoding") or "").strip().lower()
    if encoding in ("", "identity"):
        inflater = None
    elif encoding in _WBITS:
        inflater = _Inflater(encoding)
    else:
        raise ClusterError(f"{where} in the encoding {encoding[:40]!r}, which kdist neither "
                           "asked for nor reads")
    try:
        for raw in resp.stream(CHUNK, decode_content=False):
            if inflater is None:
                yield raw
            else:
                yield from inflater.feed(raw)
        if inflater is not None:
            yield from inflater.flush()
    except zlib.error as e:
        raise ClusterError(f"{where} in {encoding} that does not decode ({e})") from None


def whole(chunks: Iterable[bytes], cap: int, where: str, *, cut: bool = False) -> bytearray:
    """The body up to `cap` bytes: more is a ClusterError (with `cut`, the first `cap`
    bytes, the rest unread)."""
    buf = bytearray()
    for piece in chunks:
        buf += piece
        if len(buf) > cap:
            if cut:
                del buf[cap:]
                return buf
            raise ClusterError(f"{where} with more than {size(cap)}")
    return buf


def lines(chunks: Iterable[bytes], max_line: int, where: str, *,
          cut: bool = False) -> Iterator[bytes]:
    """The body's lines (split at b"\\n", which is dropped), each at most `max_line`
    bytes: a longer one is a ClusterError, or with `cut` its first `max_line` bytes
    (the rest of it skipped unheld)."""
    buf, skipping = bytearray(), False
    for piece in chunks:
        start = 0
        while start <= len(piece):
            end = piece.find(b"\n", start)
            stop = len(piece) if end < 0 else end
            if not skipping:
                buf += piece[start:min(stop, start + max_line - len(buf) + 1)]
                if len(buf) > max_line:
                    if not cut:
                        raise ClusterError(f"{where} with a line of more than {size(max_line)}")
                    del buf[max_line:]
                    skipping = True
            if end < 0:
                break
            yield bytes(buf)
            buf.clear()
            skipping, start = False, end + 1
    if buf:
        yield bytes(buf)


def text_lines(chunks: Iterable[bytes], max_line: int, what: str) -> Iterator[str]:
    """A log's lines as text, one at a time as they arrive, never more than one held:
    split at each ``\\n`` alone, as the kubelet counts them, less a ``\\r`` that ends one
    (no other character ends a line, so that nothing a worker prints mid-line starts
    one, kdist.shared.records); lines longer than `max_line` are cut."""
    for raw in lines(chunks, max_line, what, cut=True):
        yield raw.decode("utf-8", "replace").removesuffix("\r")


def last_lines(chunks: Iterable[bytes], tail: int | None, cap: int, max_line: int,
               what: str) -> list[str]:
    """A log's lines as text (`text_lines`), the last `tail` of them when given,
    holding at most about `cap` bytes while reading: with `tail`, older lines go to
    stay within `cap`; without, a log past `cap` is a ClusterError naming `what`."""
    kept: deque[str] = deque()
    held = 0
    for text in text_lines(chunks, max_line, what):
        kept.append(text)
        held += sys.getsizeof(text) + SLOT
        while kept and ((tail is not None and len(kept) > tail) or held > cap):
            if tail is None:  # only a list is refused: `kdist logs` streams (text_lines)
                raise ClusterError(f"{what} is more than {size(cap)} to hold as a list: "
                                   "read its end with tail=N, or stream it (Client.logs)")
            held -= sys.getsizeof(kept.popleft()) + SLOT
    return list(kept)
