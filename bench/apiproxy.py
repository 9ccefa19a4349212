"""A counting HTTP proxy in front of the API server, for the watch benchmark.

Clients get a kubeconfig that points at ``http://127.0.0.1:PORT`` with no
credentials; the proxy forwards each connection over TLS to the real API
server with the real kubeconfig's credentials (loaded by the official client's
config loader), and counts, per client connection, every request and which
ones are long-running: watches (``watch=true``) and followed logs
(``follow=true``). A long-running request is held from when it is sent until
the next request on its connection or the connection's close (HTTP/1.1 sends
one request at a time per connection), which is when a client gives it up.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import yaml


@dataclass
class Stats:
    requests: int = 0
    by_kind: Counter = field(default_factory=Counter)
    watches: int = 0  # held now
    follows: int = 0  # followed logs held now
    connections: int = 0  # open now
    peak_watches: int = 0
    peak_follows: int = 0
    peak_long: int = 0  # watches + follows at once
    peak_connections: int = 0

    def snapshot(self) -> dict:
        return {"requests": self.requests, "by_kind": dict(self.by_kind),
                "watches": self.watches, "follows": self.follows,
                "connections": self.connections, "peak_watches": self.peak_watches,
                "peak_follows": self.peak_follows, "peak_long": self.peak_long,
                "peak_connections": self.peak_connections}


def request_kind(method: str, target: str) -> str:
    """watch | follow | list-or-get | the method (POST, PATCH, ...)."""
    parts = urlsplit(target)
    query = {k: v[-1].lower() for k, v in parse_qs(parts.query).items()}
    if query.get("watch") in ("true", "1"):
        return "watch"
    if parts.path.endswith("/log") and query.get("follow") in ("true", "1"):
        return "follow"
    if parts.path.endswith("/log"):
        return "log"
    return "list-or-get" if method == "GET" else method


class ApiProxy:
    """Start with `with ApiProxy(kubeconfig) as proxy:`; `proxy.kubeconfig` is for clients."""

    def __init__(self, kubeconfig: str | Path) -> None:
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg,
                                persist_config=False)
        url = urlsplit(cfg.host)
        self.upstream = (url.hostname, url.port or 443)
        self.ssl = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        if not cfg.verify_ssl:
            self.ssl.check_hostname = False
            self.ssl.verify_mode = ssl.CERT_NONE
        if cfg.cert_file:
            self.ssl.load_cert_chain(cfg.cert_file, cfg.key_file)
        token = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
        self.auth = f"Authorization: {token}\r\n".encode() if token else b""
        self.stats = Stats()
        self._cond = threading.Condition()
        self._ids = itertools.count()
        self._dir = tempfile.TemporaryDirectory(prefix="kdist-bench-proxy-")
        self.kubeconfig = Path(self._dir.name) / "kubeconfig"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> ApiProxy:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True,
                                        name="bench-apiproxy")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the API proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)
        self._dir.cleanup()

    def _serve(self, ready: threading.Event) -> None:
        asyncio.run(self._main(ready))

    async def _main(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._client, "127.0.0.1", 0, limit=1 << 20)
        port = server.sockets[0].getsockname()[1]
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "bench",
            "clusters": [{"name": "bench", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "bench", "user": {}}],
            "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
        }))
        ready.set()
        async with server:
            await self._stop.wait()

    # -- counting ------------------------------------------------------------------------

    def reset(self) -> None:
        """Zero the counters; what is held now stays held (and counts as the new peak)."""
        with self._cond:
            s = self.stats
            self.stats = Stats(watches=s.watches, follows=s.follows, connections=s.connections,
                               peak_watches=s.watches, peak_follows=s.follows,
                               peak_long=s.watches + s.follows, peak_connections=s.connections)

    def snapshot(self) -> dict:
        with self._cond:
            return self.stats.snapshot()

    def wait_for(self, ready: Callable[[Stats], bool], timeout: float) -> bool:
        """Block until `ready(stats)` holds (checked at every change) or `timeout` passes."""
        with self._cond:
            return self._cond.wait_for(lambda: ready(self.stats), timeout)

    def _held(self, kind: str | None, delta: int) -> None:
        s = self.stats
        if kind == "watch":
            s.watches += delta
        elif kind == "follow":
            s.follows += delta
        s.peak_watches = max(s.peak_watches, s.watches)
        s.peak_follows = max(s.peak_follows, s.follows)
        s.peak_long = max(s.peak_long, s.watches + s.follows)

    def _count(self, previous: str | None, kind: str | None, connections: int = 0) -> None:
        with self._cond:
            s = self.stats
            self._held(previous, -1)
            if kind is not None:
                s.requests += 1
                s.by_kind[kind] += 1
                self._held(kind, +1)
            s.connections += connections
            s.peak_connections = max(s.peak_connections, s.connections)
            self._cond.notify_all()

    # -- forwarding ----------------------------------------------------------------------

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(
                *self.upstream, ssl=self.ssl, limit=1 << 20)
        except OSError:
            writer.close()
            return
        self._count(None, None, connections=+1)
        pump = asyncio.create_task(self._pump(up_reader, writer))
        current: str | None = None
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, _, rest = head.partition(b"\r\n")
                method, target, _ = line.decode("latin-1").split(" ", 2)
                kind = request_kind(method, target)
                self._count(current, kind)
                current = kind
                up_writer.write(line + b"\r\n" + self.auth + rest)
                await self._body(rest, reader, up_writer)
                await up_writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError,
                ValueError):
            pass
        except asyncio.CancelledError:  # the proxy is stopping: end this connection quietly
            pass
        finally:
            self._count(current, None, connections=-1)
            pump.cancel()
            for w in (writer, up_writer):
                w.close()

    @staticmethod
    async def _body(head: bytes, reader: asyncio.StreamReader,
                    up_writer: asyncio.StreamWriter) -> None:
        headers = {}
        for raw in head.split(b"\r\n"):
            name, sep, value = raw.partition(b":")
            if sep:
                headers[name.strip().lower()] = value.strip().lower()
        if headers.get(b"transfer-encoding") == b"chunked":
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                up_writer.write(size_line + await reader.readexactly(size + 2))
                if size == 0:
                    return
        length = int(headers.get(b"content-length", b"0") or 0)
        if length:
            up_writer.write(await reader.readexactly(length))

    @staticmethod
    async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(1 << 16):
                dst.write(data)
                await dst.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            dst.close()
