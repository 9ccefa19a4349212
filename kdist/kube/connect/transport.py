"""One request on the wire: sent through the official client's pool, ended by its
deadline, its answer read in bounded pieces, sent again when the server asks.

`Transport.exchange` is one request: the urllib3 pool that `kubernetes.client.rest`
builds from the kubeconfig (TLS, the proxy kdist chose in `kdist.kube.connect.proxy`), a
`Watchdog` that ends it by the request timeout whatever the server's pace
(`kdist.kube.connect.deadline`), and its failures as `HttpError` (a non-2xx answer, its
body read at most 1 MiB) or `Unanswered` (naming what was asked, and whether it may
have reached the server). `Transport.retrying` sends a request again when a 429
(or a GET's 5xx) asks for a short wait (`kdist.kube.connect.throttle`). Every answer's
`Warning:` texts are kept, each distinct one once (`take_warnings`). A server whose
certificate is not checked (``insecure-skip-tls-verify: true``) is said once per process
on stderr, in place of urllib3's warning on every request (`_say_unverified`).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, TypeVar
from urllib.parse import urlencode

from kdist.kube.connect import bodies, throttle
from kdist.kube.connect.deadline import Watchdog, install
from kdist.kube.connect.trust import check_token
from kdist.kube.errors import HttpError, Unanswered, redacted, timed_out, unreachable, unsent
from kdist.shared.errors import ClusterError

T = TypeVar("T")
CONNECT_TIMEOUT = 10.0
MAX_WARNINGS = 64  # distinct Warning: texts kept from one server
MAX_ERROR_BODY = 1 << 20


def _transport_errors() -> tuple[type[BaseException], ...]:
    import urllib3

    return (urllib3.exceptions.HTTPError, OSError)


class Transport:
    """Requests to one API server, as the kubeconfig (and --context) says."""

    def __init__(self, configuration: Any, request_timeout: float) -> None:
        from kdist.kube.connect.official import pieces

        rest = pieces()[2]
        self.configuration = configuration
        self._base = str(configuration.host).rstrip("/")  # what requests go to
        proxy = getattr(configuration, "proxy", None)
        #: The server as messages name it: no user:password, and the proxy in between.
        self.server: str = redacted(self._base) + (
            f" via the proxy {redacted(proxy)}" if proxy else "")
        self.request_timeout = request_timeout
        self._pool = rest.RESTClientObject(configuration).pool_manager
        install(self._pool)
        _say_unverified(configuration, self.server)
        self._warn_lock = threading.Lock()
        self._warned: set[str] = set()
        self._warnings: list[str] = []  # distinct, not taken yet

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "kdist"}
        if content_type:
            headers["Content-Type"] = content_type
        cfg = self.configuration
        token = cfg.get_api_key_with_prefix("authorization") or \
            cfg.get_api_key_with_prefix("BearerToken")
        if token:
            check_token(token, "the kubeconfig's credentials")  # a refreshed one too
            headers["Authorization"] = token
        return headers

    @contextmanager
    def exchange(self, method: str, path: str, query: dict[str, Any] | None = None,
                 body: Any = None, *, read_timeout: float | None = None,
                 deadline: float | None = None,
                 what: object = "") -> Iterator[tuple[Any, Watchdog]]:
        """One request, ended by its deadline (`kdist.kube.connect.deadline`; the request
        timeout unless `deadline` says other): its raw (unread) urllib3 response for the
        block to read, and the watchdog (a stream re-arms it).

        HttpError for a non-2xx answer; `Unanswered` for a transport failure (refused,
        reset, the deadline), naming `what` was asked.
        """
        limit = self.request_timeout if deadline is None else deadline
        dog, resp = Watchdog(limit), None
        try:
            resp = self._send(method, path, query, body, read_timeout, dog)
            try:
                yield resp, dog
            except BaseException:
                resp.close()  # an answer left half-read is no connection to lend again
                raise
            if dog.fired:  # what was read may look whole: the deadline cut it
                raise Unanswered(timed_out(self.server, what, limit), True)
        except _transport_errors() as e:
            line = timed_out(self.server, what, limit) if dog.fired else \
                unreachable(e, self.server, self.request_timeout, what)
            raise Unanswered(line, dog.fired or not unsent(e)) from None
        finally:
            dog.cancel()  # first: a released connection is another request's
            if resp is not None:
                resp.release_conn()

    def _send(self, method: str, path: str, query: dict[str, Any] | None, body: Any,
              read_timeout: float | None, dog: Watchdog) -> Any:
        import urllib3

        url = self._base + path + (f"?{urlencode(query)}" if query else "")
        data = None if body is None else json.dumps(body).encode()
        timeout = urllib3.Timeout(connect=min(CONNECT_TIMEOUT, self.request_timeout),
                                  read=read_timeout or self.request_timeout)
        with dog.noting():
            resp = self._pool.request(
                method, url, body=data, preload_content=False, retries=False,
                timeout=timeout,
                headers=self._headers(None if data is None else "application/merge-patch+json"
                                      if method == "PATCH" else "application/json"))
        self._note_warnings(resp.headers)
        if not 200 <= resp.status < 300:
            try:
                text = bodies.whole(bodies.pieces(resp, ""), MAX_ERROR_BODY, "", cut=True)
            except ClusterError:
                text = bytearray()  # an encoding kdist does not read: the status says enough
            finally:
                resp.release_conn()
            raise HttpError(resp.status, resp.reason or "", bytes(text),
                            resp.headers.get("Retry-After"))
        return resp

    def retrying(self, method: str, once: Callable[[], T]) -> T:
        """`once()`, sent again while the answer asks for it and `throttle` allows."""
        tries, waited = 0, 0.0
        while True:
            try:
                return once()
            except HttpError as e:
                wait = throttle.pause(e, method, tries, waited)
                if wait is None:
                    raise replace(e, tries=tries) if tries else e from None
            time.sleep(wait)
            tries, waited = tries + 1, waited + wait

    def _note_warnings(self, headers: Any) -> None:
        """Keep an answer's `Warning:` texts, each distinct one once (`take_warnings`)."""
        values = headers.getlist("Warning") if hasattr(headers, "getlist") else []
        with self._warn_lock:
            for text in map(_warning_text, values):
                if text not in self._warned and len(self._warned) < MAX_WARNINGS:
                    self._warned.add(text)
                    self._warnings.append(text)

    def take_warnings(self) -> list[str]:
        """The API server's warnings not taken yet: each distinct text once per Cluster."""
        with self._warn_lock:
            taken, self._warnings = self._warnings, []
        return taken


_unverified_lock = threading.Lock()
_unverified_said = False


def _say_unverified(configuration: Any, server: str) -> None:
    """One stderr line, once per process, when TLS to `server` is not verified.

    urllib3 warns on every such request, each warning naming its own source file
    (34 of them for one `kdist check`): that hides kdist's own lines and tells the
    user nothing more than the first did.
    """
    global _unverified_said
    if getattr(configuration, "verify_ssl", True) or not server.startswith("https:"):
        return
    import warnings

    import urllib3

    with _unverified_lock:
        warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
        if _unverified_said:
            return
        _unverified_said = True
    from kdist.shared.terminal import escape

    print(f"warning: TLS to {escape(server)} is not verified (the kubeconfig says "
          "insecure-skip-tls-verify: true): whoever is in between can pose as the server",
          file=sys.stderr, flush=True)


def _warning_text(value: str) -> str:
    """An API server `Warning:` header (`299 - "text"`) as its text."""
    code, _, rest = value.partition(" ")
    _agent, _, text = rest.partition(" ")
    return text.strip().strip('"') if code.isdigit() else value
