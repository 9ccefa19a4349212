"""An in-process Kubernetes-API-like HTTP server on 127.0.0.1, for the cluster client's tests.

It records every request in order (method, raw path, query, body) and the bytes
of each answer (`answered`), answers from a `Store` of fixture objects (get, list
with label/field selectors, in pages with limit and continue, create with dryRun,
delete with propagation and a uid precondition, watch, pod logs, discovery of
kubeflow.org/v1), and can be told to misbehave: answer HTML, never answer,
answer 5xx, or send a given Status. Every write is checked by
`routes.write_problem`; what it flags lands in `violations`, which the test
fixture turns into a failure whatever the test itself asserts.

Plain http by default (the official client accepts `server: http://...`);
`FakeApi(tls=CertPair)` serves https with a self-signed certificate.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from tests.api.routes import RESOURCES, REVIEWS, Route, parse, write_problem
from tests.api.store import ApiStatus, Query, Store, status_body

# A login portal's page: many lines and a few KiB, as real ones are (a proxy's error
# page likewise), so that a client which prints the body shows it.
HTML = ("<!doctype html>\n<html>\n<head>\n<title>Sign in</title>\n<style>\n"
        + "".join(f"  .c{i} {{ color: #{i:06x}; }}\n" for i in range(120))
        + "</style>\n</head>\n<body>\n<h1>Corporate proxy</h1>\n<p>Please sign in.</p>\n"
        "</body>\n</html>\n").encode()
KUBEFLOW = "kubeflow.org/v1"
# How long a watch stays open when nothing happens. Short, so that a client's
# re-watch loop shows in the request log without slowing tests; kdist's own
# timeoutSeconds (60) is longer and only ever shortens this.
WATCH_WINDOW = 2.0
STAMP = "2025-01-02T03:04:05.{:09d}Z"  # pod log timestamps: line i gets i nanoseconds
PREVIOUS = "#previous"  # set_log(previous=True): the container's instance before a restart


@dataclass(frozen=True)
class Request:
    """One request as the server saw it."""

    method: str
    path: str  # as sent: percent-encoded, without the query
    query: dict[str, str]
    body: Any  # parsed JSON, else the text, else None
    headers: dict[str, str]
    at: float = 0.0  # time.monotonic() when it arrived

    @property
    def call(self) -> tuple[str, str]:
        return self.method, self.path

    @property
    def is_watch(self) -> bool:
        return self.query.get("watch") in ("true", "1")

    def __str__(self) -> str:
        query = "&".join(f"{k}={v}" for k, v in self.query.items())
        return f"{self.method} {self.path}" + (f"?{query}" if query else "")


class Raw(str):
    """Text sent as it is, not as JSON: an answer (`FakeApi.answer`) or a watch line
    (`script_watch`) that no JSON encoder makes, such as 100,000 `[`."""


@dataclass
class Rule:
    """A misbehaviour for matching requests: "html", "hang", "close", "status" or "answer"."""

    action: str
    method: str | None = None
    path: str | None = None  # a substring of the raw path; "...$": its end
    body: Any = None  # for "status" and "answer" (any JSON: an answer may be misshapen)
    times: int | None = None  # None: every matching request
    code: int = 200  # for "html" and "answer"
    watch: bool | None = None  # only watch requests (True), only the others (False)
    query: str | None = None  # only requests with this query parameter ("continue")

    def matches(self, method: str, path: str, watch: bool = False,
                query: dict[str, str] | None = None) -> bool:
        return ((self.method is None or self.method == method)
                and (self.query is None or self.query in (query or {}))
                and (self.path is None or (path.endswith(self.path[:-1])
                                           if self.path.endswith("$") else self.path in path))
                and (self.watch is None or self.watch == watch)
                and (self.times is None or self.times > 0))


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


@dataclass
class FakeApi:
    """The server, its store, its request log and its misbehaviour rules."""

    kubeflow: bool = True  # serve kubeflow.org/v1 (the training operator is installed)
    jobset: bool = False  # serve jobset.x-k8s.io (JobSet is installed)
    trainer: bool = False  # serve trainer.kubeflow.org (Kubeflow Trainer v2 is installed)
    kueue: bool = False  # serve kueue.x-k8s.io LocalQueues (Kueue is installed)
    podgroups: bool = False  # serve scheduling.k8s.io/v1beta1 PodGroups (GenericWorkload on)
    restart_rules: bool = True  # keep containers' restartPolicyRules (else dropped, as
    # an API server without the ContainerRestartRules feature does)
    username: str = "fake-user"  # who SelfSubjectReview says the client is
    denied: set[str] = field(default_factory=set)  # "VERB RESOURCE[/SUB]" access reviews deny
    token: str | None = "fake-token"  # the bearer token required (None: accept any)
    tls: CertPair | None = None
    store: Store = field(default_factory=Store)
    requests: list[Request] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    reported: int = 0  # how many violations a test has already failed on
    rules: list[Rule] = field(default_factory=list)
    watch_scripts: dict[str, list[list[dict[str, Any]]]] = field(default_factory=dict)
    watch_forever: dict[str, list[Any]] = field(default_factory=dict)  # once scripts run out
    # One-shot hooks, by plural: run inside the request, so their effect is ordered
    # exactly against it. after_create gets the stored object (before the answer is sent);
    # on_watch runs as a watch starts (before its first event); on_delete as a DELETE of
    # one object arrives (before it is done).
    after_create: dict[str, Callable[[dict[str, Any]], None]] = field(default_factory=dict)
    on_watch: dict[str, Callable[[], None]] = field(default_factory=dict)
    on_delete: dict[str, Callable[[], None]] = field(default_factory=dict)
    closing: threading.Event = field(default_factory=threading.Event)
    # A benchmark's server: a GET (not a watch, not a log) asked again is answered with the
    # bytes sent the first time, so that the fake's own encoding (Python's, of deep copies)
    # is not what a client's timing measures. Only where the store no longer changes.
    memo_gets: bool = False
    answer_bytes: dict[int, int] = field(default_factory=dict)  # request index -> body bytes

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self.memos: dict[str, tuple[int, bytes, str]] = {}  # memo_gets: path?query -> answer
        self._httpd: ThreadingHTTPServer | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> FakeApi:
        httpd = _Server(("127.0.0.1", 0), _Handler)
        httpd.api = self
        if self.tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.tls.cert, self.tls.key)
            # The handshake happens in the handler thread, not in the accept loop.
            httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True,
                                           do_handshake_on_connect=False)
        threading.Thread(target=httpd.serve_forever, name="fakeapi", daemon=True).start()
        self._httpd = httpd
        return self

    def stop(self) -> None:
        self.closing.set()  # releases hung handlers
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        with self.store.cond:
            self.store.cond.notify_all()  # ends open watches

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() first"
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self._httpd.server_address[1]}"

    # -- fixtures -------------------------------------------------------------------------

    def add(self, *objects: dict[str, Any]) -> list[dict[str, Any]]:
        return [self.store.add(o) for o in objects]

    def set_log(self, pod: str, text: str, namespace: str = "default",
                previous: bool = False) -> None:
        """`pod`'s log (`previous`: its container's instance before a restart in place)."""
        self.store.logs[(namespace, pod + PREVIOUS if previous else pod)] = text

    def script_watch(self, plural: str, *streams: Iterable[dict[str, Any]]) -> None:
        """The next watches on `plural` each send one of `streams` verbatim, then end."""
        self.watch_scripts.setdefault(plural, []).extend(list(s) for s in streams)

    def script_every_watch(self, plural: str, stream: Iterable[Any]) -> None:
        """Every watch on `plural` (once the scripted ones are used) sends `stream`, then
        ends: a server that misbehaves the same way on every try."""
        self.watch_forever[plural] = list(stream)

    # -- misbehaviour ---------------------------------------------------------------------

    def misbehave(self, action: str, *, method: str | None = None, path: str | None = None,
                  body: Any = None, times: int | None = None, code: int = 200,
                  watch: bool | None = None, query: str | None = None) -> None:
        self.rules.append(Rule(action, method, path, body, times, code, watch, query))

    def answer(self, body: Any, code: int = 200, **match: Any) -> None:
        """Answer `body` (any JSON, however misshapen; a `Raw` as it is) with HTTP `code`."""
        self.misbehave("answer", body=body, code=code, **match)

    def html(self, code: int = 200, **match: Any) -> None:
        """Answer an HTML page (a login portal, or a proxy's error page with code 502)."""
        self.misbehave("html", code=code, **match)

    def hang(self, **match: Any) -> None:
        """Read the request and never answer (until the server stops)."""
        self.misbehave("hang", **match)

    def fail(self, code: int, reason: str = "", message: str = "", *, details: dict | None = None,
             **match: Any) -> None:
        """Answer with a Status body of HTTP `code`."""
        body = status_body(code, reason or _REASONS.get(code, "Unknown"),
                           message or f"the fake API says {code}", **(details or {}))
        self.misbehave("status", body=body, **match)

    # -- the request log ------------------------------------------------------------------

    def mark(self) -> int:
        with self._lock:
            return len(self.requests)

    def since(self, mark: int) -> list[Request]:
        with self._lock:
            return list(self.requests[mark:])

    def _record(self, request: Request) -> int:
        """Log `request`; its index in `requests`."""
        problem = write_problem(request.method, request.path, request.body)
        with self._lock:
            self.requests.append(request)
            if problem:
                self.violations.append(f"{request}: {problem}")
            return len(self.requests) - 1

    def answered(self, requests: list[Request]) -> list[int]:
        """The bytes of each of `requests`' answer bodies (as sent: JSON text, log lines)."""
        with self._lock:
            index = {id(r): i for i, r in enumerate(self.requests)}
            return [self.answer_bytes.get(index.get(id(r), -1), 0) for r in requests]

    def _count(self, index: int, sent: int) -> None:
        with self._lock:
            self.answer_bytes[index] = self.answer_bytes.get(index, 0) + sent

    def _rule_for(self, method: str, path: str, watch: bool = False,
                  query: dict[str, str] | None = None) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.matches(method, path, watch, query):
                    if rule.times is not None:
                        rule.times -= 1
                    return rule
        return None


_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
            409: "AlreadyExists", 410: "Expired", 422: "Invalid", 429: "TooManyRequests",
            500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # hung handlers must not hold up stop()
    api: FakeApi

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up mid-answer is normal here (kdist abandons watches)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as Go's net (and so kube-apiserver) sets on every connection: with
    # Nagle on, an answer's body waited for the ACK of its headers, which the client
    # delays ~40 ms on a kept-alive connection; every request after a connection's
    # first took 44 ms here, of which the API server has none.
    disable_nagle_algorithm = True
    server: _Server
    _index = -1  # the request being answered (its index in FakeApi.requests)
    _memo: str | None = None  # its path and query, where FakeApi.memo_gets keeps its answer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(30)  # a stuck client never pins a handler thread for long

    # Every method goes through one dispatcher.
    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET

    def _dispatch(self) -> None:
        api = self.server.api
        path, _, raw_query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        request = Request(self.command, path, dict(parse_qsl(raw_query, keep_blank_values=True)),
                          _body(raw), {k.lower(): v for k, v in self.headers.items()},
                          time.monotonic())
        self._index = api._record(request)
        self._memo = self.path if api.memo_gets and self.command == "GET" and \
            not request.is_watch and not path.endswith("/log") else None
        memo = api.memos.get(self.path) if self._memo else None
        if memo is not None:
            return self._send(*memo)
        rule = api._rule_for(self.command, path, request.is_watch, request.query)
        if rule is not None:
            return self._misbehave(rule)
        auth = request.headers.get("authorization", "")
        if api.token is not None and auth != f"Bearer {api.token}":
            return self._json(401, status_body(401, "Unauthorized", "Unauthorized"))
        try:
            self._serve(api, request, parse(path))
        except ApiStatus as e:
            self._json(e.body["code"], e.body)

    def _misbehave(self, rule: Rule) -> None:
        api = self.server.api
        if rule.action == "html":
            self._send(rule.code, HTML, "text/html; charset=utf-8")
        elif rule.action == "status":
            assert rule.body is not None
            self._json(rule.body["code"], rule.body)
        elif rule.action == "answer":
            self._json(rule.code, rule.body)
        elif rule.action == "close":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        else:  # hang: keep the connection, say nothing
            api.closing.wait()
            self.close_connection = True

    # -- the API --------------------------------------------------------------------------

    def _serve(self, api: FakeApi, req: Request, route: Route) -> None:
        method = req.method
        if route.api_version == KUBEFLOW and not api.kubeflow:
            # What kube-apiserver answers for a group/version it does not serve.
            raise ApiStatus(status_body(404, "NotFound",
                                        "the server could not find the requested resource"))
        if route.api_version.split("/")[0] in self._absent(api):
            raise ApiStatus(status_body(404, "NotFound",
                                        "the server could not find the requested resource"))
        if req.path == "/version" and method == "GET":
            return self._json(200, {"major": "1", "minor": "37", "gitVersion": "v1.37.2-fake"})
        if route.shape == "namespace" and method == "GET":
            if route.name not in store_namespaces(api):
                raise ApiStatus(status_body(404, "NotFound", f'namespaces "{route.name}" not '
                                            "found", name=route.name, kind="namespaces"))
            return self._json(200, {"kind": "Namespace", "apiVersion": "v1",
                                    "metadata": {"name": route.name}})
        if route.plural in REVIEWS and method == "POST":
            return self._json(201, _reviewed(api, req.body))
        if method == "POST" and not api.restart_rules and route.plural in ("pods", "jobs"):
            req = _without_restart_rules(req)
        if route.shape == "discovery" and method == "GET":
            return self._json(200, _discovery(route.api_version))
        if route.plural not in RESOURCES or RESOURCES[route.plural][0] != route.api_version:
            raise ApiStatus(status_body(404, "NotFound",
                                        "the server could not find the requested resource"))
        store, plural, ns = api.store, route.plural, route.namespace
        if route.shape == "collection" and method == "GET":
            query = Query(plural, ns, req.query.get("labelSelector", ""),
                          req.query.get("fieldSelector", ""))
            if req.is_watch:
                return self._watch(api, query, req)
            return self._json(200, store.list(query, int(req.query.get("limit") or 0),
                                              req.query.get("continue", "")))
        if route.shape == "collection" and method == "DELETE":
            # deletecollection, as kube-apiserver does it: the reason for the write guard.
            query = Query(plural, ns, req.query.get("labelSelector", ""),
                          req.query.get("fieldSelector", ""))
            return self._json(200, store.delete_collection(query))
        if route.shape == "collection" and method == "POST" and ns is not None:
            dry = req.query.get("dryRun") == "All"
            created = store.create(plural, ns, req.body, dry)
            hook = None if dry else api.after_create.pop(plural, None)
            if hook is not None:
                hook(created)
            return self._json(201, created)
        if route.shape == "item" and ns is not None and method == "GET":
            return self._json(200, store.get(plural, ns, route.name))
        if route.shape == "item" and ns is None and method == "GET":  # cluster-scoped
            return self._json(200, store.get(plural, "", route.name))
        if route.shape == "item" and ns is not None and method == "PATCH":
            return self._json(200, store.merge_patch(plural, ns, route.name, req.body))
        if route.shape == "item" and ns is not None and method == "DELETE":
            delete_hook = api.on_delete.pop(plural, None)
            if delete_hook is not None:
                delete_hook()
            options = req.body if isinstance(req.body, dict) else {}
            propagation = req.query.get("propagationPolicy") or options.get(
                "propagationPolicy") or "Background"
            dry = req.query.get("dryRun") == "All" or options.get("dryRun") == ["All"]
            uid = (options.get("preconditions") or {}).get("uid")
            return self._json(200, store.delete(plural, ns, route.name, propagation, dry, uid))
        if route.shape == "subresource" and route.subresource == "log" and method == "GET":
            return self._log(api, ns or "", route.name, req.query)
        raise ApiStatus(status_body(405, "MethodNotAllowed",
                                    f"the fake API does not serve {method} {req.path}"))

    @staticmethod
    def _absent(api: FakeApi) -> set[str]:
        return {g for g, on in (("jobset.x-k8s.io", api.jobset), ("kueue.x-k8s.io", api.kueue),
                                ("trainer.kubeflow.org", api.trainer),
                                ("scheduling.k8s.io", api.podgroups)) if not on}

    def _watch(self, api: FakeApi, query: Query, req: Request) -> None:
        scripts = api.watch_scripts.get(query.plural)
        if scripts:
            return self._stream(_text(e) for e in scripts.pop(0))
        if query.plural in api.watch_forever:
            return self._stream(_text(e) for e in api.watch_forever[query.plural])
        hook = api.on_watch.pop(query.plural, None)
        if hook is not None:
            hook()
        seconds = min(float(req.query.get("timeoutSeconds") or WATCH_WINDOW), WATCH_WINDOW)
        events = api.store.watch(query, req.query.get("resourceVersion", ""), seconds)
        self._stream(_text(e) for e in events)

    def _log(self, api: FakeApi, ns: str, pod: str, query: dict[str, str]) -> None:
        api.store.get("pods", ns, pod)  # 404 for a missing pod, as the API does
        if query.get("previous") == "true":
            if (ns, pod + PREVIOUS) not in api.store.logs:  # the API: no earlier instance
                return self._json(400, status_body(400, "BadRequest", "previous terminated "
                                                   "container not found"))
            pod += PREVIOUS
        # Lines end at "\n" alone, as the kubelet's do (a "\r" or "\x0b" is within a line).
        lines = api.store.logs.get((ns, pod), "").split("\n")
        lines = lines[:-1] if lines[-1] == "" else lines
        if query.get("timestamps") == "true":
            lines = [f"{STAMP.format(i + 1)} {line}" for i, line in enumerate(lines)]
        if "tailLines" in query:
            tail = int(query["tailLines"])
            lines = lines[len(lines) - tail:] if tail else []
        # A follow on a pod whose container has ended ends too; the fixtures' pods have.
        self._stream(lines)

    # -- answers --------------------------------------------------------------------------

    def _json(self, code: int, body: Any) -> None:
        self._send(code, _text(body).encode(), "application/json")

    def _send(self, code: int, data: bytes, content_type: str) -> None:
        api = self.server.api
        api._count(self._index, len(data))
        if self._memo is not None:
            api.memos[self._memo] = (code, data, content_type)
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, lines: Iterator[str] | list[str],
                content_type: str = "application/json") -> None:
        """A chunked body, one line per chunk, flushed as it comes (watches, follows)."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for line in lines:
            data = (line + "\n").encode()
            self.server.api._count(self._index, len(data))
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


def _text(value: Any) -> str:
    return value if isinstance(value, Raw) else json.dumps(value)


def _body(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def store_namespaces(api: FakeApi) -> set[str]:
    with api.store.cond:
        return set(api.store.namespaces)


def _reviewed(api: FakeApi, body: Any) -> dict[str, Any]:
    """A review's answer: an access review allowed unless `api.denied` names it; a self
    review names `api.username`."""
    answer = dict(body) if isinstance(body, dict) else {}
    if answer.get("kind") == "SelfSubjectReview":
        return dict(answer, status={"userInfo": {"username": api.username}})
    attrs = (answer.get("spec") or {}).get("resourceAttributes") or {}
    sub = f"/{attrs['subresource']}" if attrs.get("subresource") else ""
    asked = f"{attrs.get('verb')} {attrs.get('resource')}{sub}"
    return dict(answer, status={"allowed": asked not in api.denied})


def _without_restart_rules(req: Request) -> Request:
    """The request as an API server without container restart rules sees it: dropped."""
    body = json.loads(json.dumps(req.body))
    spec = (body.get("spec") or {}) if isinstance(body, dict) else {}
    for pod in (spec, (spec.get("template") or {}).get("spec") or {}):
        for container in pod.get("containers") or []:
            container.pop("restartPolicyRules", None)
    return Request(req.method, req.path, req.query, body, req.headers, req.at)


def _discovery(api_version: str) -> dict[str, Any]:
    resources = [{"name": plural, "singularName": kind.lower(), "namespaced": True, "kind": kind,
                  "verbs": ["create", "delete", "get", "list", "watch"]}
                 for plural, (av, kind) in RESOURCES.items() if av == api_version]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": api_version,
            "resources": resources}


def blackhole() -> tuple[socket.socket, int]:
    """A socket that listens but never accepts: connects succeed, nothing is ever read or
    answered (a TLS handshake to it never completes). Close it when done."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock, sock.getsockname()[1]

