"""The fake API server, misbehaving on the wire: slow, compressed, throttling, warning.

`WireApi` is a `FakeApi` whose handler knows a few more misbehaviours (rules, as
`FakeApi.misbehave` adds them):

- "dribble": the answer one byte every `every` seconds, its status line and
  headers too (or, with `head`, those at once and only the body slowly);
- "throttle": a 429 (or `code`) with `Retry-After: <after>`;
- `bombs[plural]`: the next watch on `plural` sends one event line that gzip
  makes small on the wire and huge decoded (`bomb`);
- `floods[(namespace, pod)]`: that pod's log is `lines` lines of `width` bytes,
  made as they are sent, whatever `tailLines` asks (a server that ignores it);
- `cuts[(namespace, pod)]`: that pod's log breaks off after that many lines (the
  connection dropped, no last chunk: a kubelet or node gone mid-answer);
- `headers`: sent with every answer (a `Warning:`).

A test module uses it with `FAKEAPI_CLASS = WireApi` (tests/api/conftest.py).
"""

from __future__ import annotations

import functools
import gzip
import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.api import fakeapi
from tests.api.fakeapi import FakeApi

BOMB_BYTES = 512 << 20  # what the bomb's line decodes to


@functools.cache
def bomb(name: str = "demo") -> bytes:
    """gzip (about 0.5 MB: members one after another, as gzip allows) of one MODIFIED
    event of Job `name` whose annotation is BOMB_BYTES long: the line a watch sends."""
    head = json.dumps({"type": "MODIFIED", "object": {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "default", "annotations": {"x": "@"}}}})
    before, _, after = head.partition("@")
    block = gzip.compress(b"a" * (1 << 20), 9)
    return (gzip.compress(before.encode()) + block * (BOMB_BYTES >> 20)
            + gzip.compress(after.encode() + b"\n"))


@dataclass
class Flood:
    lines: int
    width: int

    def chunks(self) -> Iterator[bytes]:
        line = b"x" * (self.width - 1) + b"\n"
        per = max(1, (1 << 20) // self.width)
        for start in range(0, self.lines, per):
            yield line * min(per, self.lines - start)


@dataclass
class WireApi(FakeApi):
    headers: list[tuple[str, str]] = field(default_factory=list)
    bombs: dict[str, bytes] = field(default_factory=dict)
    floods: dict[tuple[str, str], Flood] = field(default_factory=dict)
    cuts: dict[tuple[str, str], int] = field(default_factory=dict)

    def start(self) -> WireApi:
        super().start()
        assert self._httpd is not None
        self._httpd.RequestHandlerClass = _Handler  # read for each new connection
        return self

    def dribble(self, every: float = 1.0, *, head: bool = False, **match: Any) -> None:
        self.misbehave("dribble", body={"every": every, "head": head}, **match)

    def throttle(self, after: str, code: int = 429, **match: Any) -> None:
        self.misbehave("throttle", body={"after": after, "code": code}, **match)


class _Handler(fakeapi._Handler):
    server: Any

    def end_headers(self) -> None:
        for name, value in self.server.api.headers:
            self.send_header(name, value)
        super().end_headers()

    def _misbehave(self, rule: fakeapi.Rule) -> None:
        params = rule.body or {}
        if rule.action == "throttle":
            code = params["code"]
            body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "reason": fakeapi._REASONS.get(code, "Unknown"), "code": code,
                               "message": "too many requests, please try again later"})
            self.send_response(code)
            self.send_header("Retry-After", params["after"])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())
        elif rule.action == "dribble":
            self._dribble(params["every"], params["head"])
        else:
            super()._misbehave(rule)

    def _dribble(self, every: float, head: bool) -> None:
        body = b'{"kind": "List", "apiVersion": "v1", "metadata": {}, "items": []}'
        status = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))
        if head:
            self.wfile.write(status)
            self.wfile.flush()
        try:
            for byte in (b"" if head else status) + body:
                if self.server.api.closing.wait(every):
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
        except OSError:
            pass  # the client hung up: what a deadline does
        self.close_connection = True

    def _watch(self, api: Any, query: Any, req: Any) -> None:
        data = api.bombs.pop(query.plural, None)
        if data is None:
            return super()._watch(api, query, req)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._chunks([data])  # one chunk, as one event line is

    def _log(self, api: Any, ns: str, pod: str, query: dict[str, str]) -> None:
        if (ns, pod) in api.cuts:
            return self._cut(api.store.logs.get((ns, pod), "").splitlines()[:api.cuts[ns, pod]])
        flood = api.floods.get((ns, pod))
        if flood is None:
            return super()._log(api, ns, pod, query)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._chunks(flood.chunks())

    def _cut(self, lines: list[str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for line in lines:
            data = (line + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)  # no last chunk: the answer breaks off

    def _chunks(self, chunks: Any) -> None:
        try:
            for data in chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True  # the client stopped reading: what a cap does
