"""Every request ends by its deadline: connecting, sending, the answer's headers and body.

A socket timeout bounds each read, not the request: a server that sends one byte a
second never trips it, in the headers or in the body. So each request arms a
`Watchdog`: a timer that, when the deadline passes, shuts the request's socket down
(a blocked read or write then returns at once, with an error or a cut answer) and
remembers that it did, so the caller reports a timeout whatever the read made of it.

The watchdog learns which connection a request uses from the connection itself: the
pool's connections (`install`) name themselves to the watchdog their thread is
`noting` for while they connect and send. Connecting is bounded by its own timeout
as well (no socket to shut exists before it).
"""

from __future__ import annotations

import functools
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_noting = threading.local()


class Watchdog:
    """A deadline for one request; `fired` once it passed (the request's socket is shut)."""

    def __init__(self, seconds: float | None) -> None:
        self.fired = False
        self._conn: Any = None
        self._done = False
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self.arm(seconds)

    def arm(self, seconds: float | None) -> None:
        """Count `seconds` from now instead (None: no deadline from now on)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if seconds is not None and not self._done and not self.fired:
                self._timer = threading.Timer(max(0.0, seconds), self._fire)
                self._timer.daemon = True  # a forgotten one never holds up the exit
                self._timer.start()

    def cancel(self) -> None:
        """The request is over: never shut its connection (the pool may lend it again)."""
        with self._lock:
            self._done = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    @contextmanager
    def noting(self) -> Iterator[Watchdog]:
        """Within the block, the connection this thread's request uses is this one's."""
        previous = getattr(_noting, "dog", None)
        _noting.dog = self
        try:
            yield self
        finally:
            _noting.dog = previous

    def note(self, conn: Any) -> None:
        with self._lock:
            self._conn = conn
            if self.fired and not self._done:
                _shut(conn)

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            if self._conn is not None:
                _shut(self._conn)


def each_within(pieces: Iterator[bytes], dog: Watchdog, seconds: float) -> Iterator[bytes]:
    """`pieces` of an answer of any length, each to come within `seconds` of being
    asked for (a server that stalls is cut); the time the caller takes between pieces is
    its own (a pager the user has paused is no dead server)."""
    while True:
        dog.arm(seconds)
        try:
            piece = next(pieces, None)
        finally:
            dog.arm(None)
        if piece is None:
            return
        yield piece


def _shut(conn: Any) -> None:
    """Shut the socket of `conn` (a urllib3 connection) down, both ways. The plain
    socket's shutdown, also under TLS: an SSLSocket's own would unwrap it under the
    reading thread's feet."""
    sock = getattr(conn, "sock", None)
    while sock is not None and not isinstance(sock, socket.socket):
        sock = getattr(sock, "socket", None)  # urllib3's SSLTransport (TLS in TLS)
    if sock is not None:
        try:
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            pass  # closed already, or not connected yet


def _note_current(conn: Any) -> None:
    dog = getattr(_noting, "dog", None)
    if dog is not None:
        dog.note(conn)


def install(manager: Any) -> None:
    """Let the watchdogs find the connections of `manager` (a urllib3 PoolManager or
    ProxyManager, before its first request)."""
    manager.pool_classes_by_scheme = _pool_classes()


@functools.cache
def _pool_classes() -> dict[str, type]:
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    def noted(base: type) -> type:
        class Noted(base):
            def connect(self) -> None:
                _note_current(self)
                super().connect()
                _note_current(self)  # now with its socket

            def request(self, *args: Any, **kwargs: Any) -> Any:
                _note_current(self)  # a kept-alive connection, lent again
                return super().request(*args, **kwargs)

        Noted.__name__ = Noted.__qualname__ = f"Noted{base.__name__}"
        return Noted

    http = type("NotedHTTPConnectionPool", (HTTPConnectionPool,),
                {"ConnectionCls": noted(HTTPConnection)})
    https = type("NotedHTTPSConnectionPool", (HTTPSConnectionPool,),
                 {"ConnectionCls": noted(HTTPSConnection)})
    return {"http": http, "https": https}
