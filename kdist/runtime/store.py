"""torch's TCPStore wire protocol, the few queries kdist's launchers need, without torch.

The launcher does not import torch (a CUDA build takes seconds of CPU to import, and
the workers import it anyway), yet the launchers of one job talk to each other
through the store on the master's port:

- before the workers start, node 0's launcher serves a ``MiniStore`` on the port it
  has bound (``listen``): the launchers' rendezvous (``kdist.runtime.rendezvous``);
- while they run, rank 0's worker serves torch's own TCPStore on the same socket
  (``sitehook``: the listening socket is handed down), and every launcher's
  ``StoreClient`` adds its progress to one counter there (``kdist.runtime.watchdog``);
- after node 0's workers succeeded, its launcher serves the ``MiniStore`` again for
  the exit barrier.

The format is torch's (``torch/csrc/distributed/c10d/TCPStoreBackend.hpp``, stable
since torch 2.0): a one-byte query type, strings as a u64 length and bytes, integers
in the machine's byte order; a client first sends VALIDATE with a magic number.
Standard library only.
"""

from __future__ import annotations

import errno
import resource
import selectors
import socket
import struct
import threading
import time
from collections.abc import Iterable

MAGIC = 0x3C85F7CE
VALIDATE, SET, GET, ADD, CHECK, WAIT, MULTI_GET, PING = 0, 1, 3, 4, 5, 6, 10, 13
READY, NOT_READY = 0, 1  # CHECK's answer
STOP_WAITING = 0  # WAIT's answer
_U8, _U32, _U64, _I64 = (struct.Struct(f"={c}") for c in "BIQq")


class StoreError(OSError):
    """The store did not answer as a TCPStore does."""


def listen(port: int, backlog: int = socket.SOMAXCONN) -> socket.socket:
    """A socket listening on ``port`` of every address (as TCPStore's server binds):
    IPv6 and IPv4 where the pod has IPv6, else IPv4.

    Inheritable, so that rank 0's worker can take it over (``sitehook``).
    """
    problem: OSError | None = None
    for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as e:  # no IPv6 in this pod
            problem = e
            continue
        try:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(backlog)
        except OSError as e:
            sock.close()
            if e.errno == errno.EADDRINUSE:
                raise
            problem = e  # IPv6 switched off: bind fails, try IPv4
            continue
        sock.set_inheritable(True)
        return sock
    assert problem is not None
    raise problem


def _string(data: bytes) -> bytes:
    return _U64.pack(len(data)) + data


class StoreClient:
    """A TCPStore client speaking VALIDATE, PING, SET, GET, MULTI_GET, ADD, CHECK and WAIT."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock.sendall(_U8.pack(VALIDATE) + _U32.pack(MAGIC))
            nonce = threading.get_native_id() & 0xFFFFFFFF
            self.sock.sendall(_U8.pack(PING) + _U32.pack(nonce))
            if _U32.unpack(self._read(4))[0] != nonce:
                raise StoreError(f"{host}:{port} is not a TCPStore (ping)")
        except OSError:
            self.sock.close()
            raise

    def close(self) -> None:
        self.sock.close()

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise StoreError("the store closed the connection")
            data += chunk
        return data

    def add(self, key: str, delta: int) -> int:
        self.sock.sendall(_U8.pack(ADD) + _string(key.encode()) + _I64.pack(delta))
        return int(_I64.unpack(self._read(8))[0])

    def set(self, key: str, value: bytes) -> None:
        self.sock.sendall(_U8.pack(SET) + _string(key.encode()) + _string(value))

    def get(self, key: str) -> bytes:
        """A key's value; only once ``check`` said it is set (a missing key ends the
        connection on torch's store)."""
        self.sock.sendall(_U8.pack(GET) + _string(key.encode()))
        return self._read(_U64.unpack(self._read(8))[0])

    def multi_get(self, keys: Iterable[str]) -> list[bytes]:
        """Several keys' values in one request (``kdist.runtime.heartbeat``); every key
        must be set (torch's store waits for a missing one)."""
        keys = list(keys)
        self.sock.sendall(_U8.pack(MULTI_GET) + _U64.pack(len(keys))
                          + b"".join(_string(k.encode()) for k in keys))
        return [self._read(_U64.unpack(self._read(8))[0]) for _ in keys]

    def check(self, keys: Iterable[str]) -> bool:
        keys = list(keys)
        self.sock.sendall(_U8.pack(CHECK) + _U64.pack(len(keys))
                          + b"".join(_string(k.encode()) for k in keys))
        return _U8.unpack(self._read(1))[0] == READY

    def wait(self, keys: Iterable[str], timeout: float) -> None:
        """Block until every key is set (``socket.timeout`` after ``timeout`` seconds)."""
        keys = list(keys)
        self.sock.sendall(_U8.pack(WAIT) + _U64.pack(len(keys))
                          + b"".join(_string(k.encode()) for k in keys))
        self.sock.settimeout(timeout)
        if _U8.unpack(self._read(1))[0] != STOP_WAITING:
            raise StoreError("the store cancelled the wait")


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf, self.validated = sock, bytearray(), False
        self.waits: list[str] | None = None  # the keys of its WAIT, while it waits


class _Incomplete(Exception):
    pass


def allow_many_connections() -> int:
    """Raise this process's soft limit on open files to its hard limit (what a pod's
    runtime allows); the soft limit it now has.

    Node 0's launcher serves a connection per node, and rank 0's worker (which inherits
    the limit) one per rank: a runtime that leaves the soft limit at 1,024 (containerd
    2.0, Docker 25) would refuse the 1,021st node."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError):  # an infinite hard limit some kernels refuse
            pass
    return soft


class MiniStore:
    """A TCPStore server for kdist's launchers, in a thread, on a socket already listening.

    It answers the queries ``StoreClient`` sends (and GET); anything else closes that
    connection, as a lost store would. ``stop`` ends the thread and closes every
    connection it accepted; the listening socket stays open (the caller's).

    Event-driven, so that it scales with the nodes: every connection is registered once
    with the system's selector (epoll: no limit at 1,024 descriptors, as ``select`` has),
    each wake-up costs only the sockets that are ready, and a WAIT is kept under the
    one key it still needs, answered when that key is set (never rescanned).
    """

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.data: dict[str, bytes] = {}
        self.lock = threading.Lock()
        # key -> the connections whose WAIT needs it next (a dict: dropped in O(1))
        self._waiting: dict[str, dict[_Conn, None]] = {}
        self._changed: list[str] = []  # keys set since the serving thread last looked
        self._conns: dict[int, _Conn] = {}
        self._stop = threading.Event()
        self._selector = selectors.DefaultSelector()
        # set() and add() from another thread (node 0's launcher) wake the serving thread
        self._poke_r, self._poke_w = socket.socketpair()
        self._poke_w.setblocking(False)
        self._thread = threading.Thread(target=self._serve, name="kdist-store", daemon=True)

    def start(self) -> MiniStore:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._poke()
        self._thread.join(timeout=5)
        for conn in list(self._conns.values()):
            conn.sock.close()
        self._conns.clear()
        self._poke_r.close()
        self._poke_w.close()

    def _poke(self) -> None:
        if threading.current_thread() is not self._thread:
            try:
                self._poke_w.send(b"!")
            except OSError:  # its buffer is full: it is woken already
                pass

    def add(self, key: str, delta: int) -> int:
        """ADD from this process (node 0's own launcher)."""
        with self.lock:
            value = int(self.data.get(key, b"0")) + delta
            self.data[key] = str(value).encode()
            self._changed.append(key)
        self._poke()
        return value

    def set(self, key: str, value: bytes) -> None:
        with self.lock:
            self.data[key] = value
            self._changed.append(key)
        self._poke()

    def _serve(self) -> None:
        sel = self._selector
        self.listener.setblocking(False)
        sel.register(self.listener, selectors.EVENT_READ)
        sel.register(self._poke_r, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=1.0):
                    if key.fileobj is self.listener:
                        self._accept()
                    elif key.fileobj is self._poke_r:
                        self._poke_r.recv(4096)
                    else:
                        self._receive(key.data)
                self._wake()
        finally:
            sel.close()
            self.listener.setblocking(True)

    def _accept(self) -> None:
        """Every connection waiting in the backlog (a rendezvous brings them all at once)."""
        while True:
            try:
                sock, _ = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE):  # no descriptor left: let the
                    time.sleep(0.05)  # others finish (the backlog keeps the rest)
                return
            sock.setblocking(True)
            sock.settimeout(5)
            conn = _Conn(sock)
            self._conns[sock.fileno()] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _drop(self, conn: _Conn) -> None:
        if self._conns.pop(conn.sock.fileno(), None) is None:
            return
        if conn.waits:
            self._waiting.get(conn.waits[0], {}).pop(conn, None)
        conn.waits = None
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def _receive(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        conn.buf += data
        try:
            while conn.buf:
                used = self._query(conn, bytes(conn.buf))
                del conn.buf[:used]
        except _Incomplete:
            return
        except (OSError, ValueError, struct.error):
            self._drop(conn)

    def _query(self, conn: _Conn, buf: bytes) -> int:
        """Answer the first query in ``buf``; the bytes it took (``_Incomplete``: not all here)."""
        pos = 1

        def take(n: int) -> bytes:
            nonlocal pos
            if len(buf) < pos + n:
                raise _Incomplete
            pos += n
            return buf[pos - n:pos]

        def string() -> bytes:
            return take(_U64.unpack(take(8))[0])

        kind = buf[0]
        if not conn.validated:
            if kind != VALIDATE or _U32.unpack(take(4))[0] != MAGIC:
                raise ValueError("not a TCPStore client")
            conn.validated = True
        elif kind == PING:
            conn.sock.sendall(take(4))
        elif kind == SET:
            key, value = string().decode(), string()
            self.set(key, value)
        elif kind == GET:
            key = string().decode()
            with self.lock:
                found = self.data.get(key)
            if found is None:
                raise ValueError(f"GET of a missing key {key!r}")
            conn.sock.sendall(_string(found))
        elif kind == MULTI_GET:
            keys = [string().decode() for _ in range(_U64.unpack(take(8))[0])]
            with self.lock:
                values = [self.data.get(k) for k in keys]
            if any(v is None for v in values):
                raise ValueError("MULTI_GET of a missing key")
            conn.sock.sendall(b"".join(_string(v) for v in values if v is not None))
        elif kind == ADD:
            key = string().decode()
            conn.sock.sendall(_I64.pack(self.add(key, _I64.unpack(take(8))[0])))
        elif kind in (CHECK, WAIT):
            keys = [string().decode() for _ in range(_U64.unpack(take(8))[0])]
            if kind == CHECK:
                with self.lock:
                    ready = all(k in self.data for k in keys)
                conn.sock.sendall(_U8.pack(READY if ready else NOT_READY))
            else:
                self._park(conn, keys)
        else:
            raise ValueError(f"query {kind} is not served here")
        return pos

    def _park(self, conn: _Conn, keys: list[str]) -> None:
        """Keep ``conn``'s WAIT under the first of ``keys`` not set yet; answer it if none."""
        with self.lock:
            missing = [k for k in keys if k not in self.data]
        if not missing:
            conn.waits = None
            conn.sock.sendall(_U8.pack(STOP_WAITING))
            return
        conn.waits = missing
        self._waiting.setdefault(missing[0], {})[conn] = None

    def _wake(self) -> None:
        """Answer (or park anew) the WAITs under the keys set since the last look."""
        with self.lock:
            changed, self._changed = self._changed, []
        for key in dict.fromkeys(changed):
            for conn in list(self._waiting.pop(key, {})):
                try:
                    self._park(conn, conn.waits or [])
                except OSError:
                    self._drop(conn)
