"""Where API failures become messages (and exit codes) for the user: one place.

`Gone` and `Transient` are the watch loop's own control flow (relist,
reconnect), never shown to a user; everything else is a ``KdistError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kdist.shared import jsonread
from kdist.shared.errors import ClusterError, JobNotFound, KdistError, OperatorMissing
from kdist.shared.limits import MAX_ANSWER_BYTES
from kdist.shared.spelling import option

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
# scheme://user:password@ (or a bare user:password@ before a host): the part never printed.
_USERINFO = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.-]*:)?//)?[^/?#]*@")


def redacted(url: str) -> str:
    """`url` as kdist prints it: a server's or proxy's user:password replaced by ***."""
    return _USERINFO.sub(lambda m: f"{m.group(1) or ''}***@", url, count=1)


class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410), or the object is gone: relist."""


class Transient(Exception):
    """A dropped connection, a timeout, a 5xx/429: reconnect after a backoff."""


class Unanswered(Exception):
    """A request without a whole answer: refused, reset, or cut at its deadline. `error`
    is what the user is told; `sent`, whether the request may have reached the server."""

    def __init__(self, error: ClusterError, sent: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.sent = sent


class MaybeDone(ClusterError):
    """A create whose outcome is unknown: answered 5xx, or unanswered once sent. The
    server may have stored it. `found` is what a look afterwards found that this
    submission made (an `owned.Made`), `unknown` why no look could tell."""

    def __init__(self, message: str, found: Any = None, unknown: str | None = None) -> None:
        super().__init__(message)
        self.found = found
        self.unknown = unknown


class PartlyUndone(ClusterError):
    """A submission failed and deleting what it had created failed too: `left` names what
    is still there (each with why)."""

    def __init__(self, message: str, left: list[str]) -> None:
        super().__init__(message)
        self.left = left


class Forbidden(ClusterError):
    """A 403: the API server (RBAC, or an admission webhook) refused the request."""


class ErrorStatus(ClusterError):
    """An error status no class here names (a 5xx after its retries, a 400, a 502 from a
    proxy): the server answered, for this request only. `status`: the HTTP code."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class AlreadyExists(ClusterError):
    """A create answered 409: an object of that name is there already."""


@dataclass(frozen=True)
class Action:
    """What was being done when the API answered: it names the error for the user."""

    verb: str
    resource: str  # plural, as RBAC spells it: jobs, services, pytorchjobs, pods, pods/log
    namespace: str | None = None
    name: str = ""

    def __str__(self) -> str:
        where = f" in namespace {self.namespace}" if self.namespace else ""
        return f"{self.verb} {self.resource}{f' {self.name}' if self.name else ''}{where}"


@dataclass(frozen=True)
class HttpError(Exception):
    """A non-2xx answer: its status, reason and body (a Kubernetes Status, or not), its
    Retry-After header, and how many times it was retried (`kdist.kube.connect.throttle`)."""

    status: int
    reason: str
    body: bytes = b""
    retry_after: str | None = None
    tries: int = 0

    def status_object(self) -> dict[str, Any]:
        try:
            body = jsonread.loads(self.body or b"", limit=MAX_ANSWER_BYTES)
        except ValueError:
            return {}
        return body if isinstance(body, dict) and body.get("kind") == "Status" else {}


class Unreachable(ClusterError):
    """No whole answer came: `why` says what happened, for a caller that suggests a fix
    (`kdist check`): "refused", "no such host", "tls", "proxy", "timeout" or "other"."""

    def __init__(self, message: str, why: str) -> None:
        super().__init__(message)
        self.why = why


def timed_out(server: str, what: object, request_timeout: float) -> ClusterError:
    """A request that outlived its deadline (`kdist.kube.connect.deadline`), `what` it was."""
    return Unreachable(
        f"the API server at {server} did not answer {f'{what} ' if what else ''}within "
        f"{request_timeout:g}s (set {option('request_timeout')} or $KDIST_REQUEST_TIMEOUT "
        "for a slow server)", "timeout")


def unreachable(e: BaseException, server: str, request_timeout: float,
                what: object = "") -> ClusterError:
    """A transport failure (urllib3's or the OS's) as the message the user sees."""
    import urllib3

    exc = urllib3.exceptions
    # NewConnectionError (refused, no such host) is a TimeoutError subclass in urllib3 2.
    timeout = isinstance(e, (exc.TimeoutError, TimeoutError)) and not isinstance(
        e, exc.NewConnectionError)
    if timeout or "timed out" in str(e).lower():
        return timed_out(server, what, request_timeout)
    why = _why(e)
    if isinstance(e, exc.ProxyError):
        reason: object = f"the proxy: {e.original_error}"
    else:
        reason = getattr(e, "reason", None) or e
        # It reached the server and the answer broke off (a failed TLS handshake is no
        # answer: the request was never sent).
        if what and not unsent(e) and why != "tls":
            return Unreachable(f"the API server at {server} did not answer {what}: "
                               f"{_plain(reason)}", why)
    return Unreachable(f"cluster unreachable at {server}: {_plain(reason)}", why)


#: urllib3 starts some messages with the connection (or pool) it used, by an internal
#: class name (`NotedHTTPSConnection(host='h', port=1): `, `<...NotedHTTPSConnection
#: object at 0x7f...>: `): not for the user; the message names the server already.
_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>:?\s*"
                          r"|\b[\w.]*Connection(?:Pool)?\(host=[^)]*\):?\s*")


def _plain(reason: object) -> str:
    """A transport failure's words on one line, without any Python object's repr."""
    return " ".join(_OBJECT_REPR.sub("", str(reason)).split())


def _why(e: BaseException) -> str:
    """What kind of transport failure `e` is, from its chain of causes (urllib3 wraps the
    OS's error in its own, and its messages differ between versions)."""
    import socket
    import ssl

    import urllib3

    chain: list[BaseException] = []
    todo: list[object] = [e]  # urllib3's `reason` may be a string
    while todo and len(chain) < 16:
        x = todo.pop()
        if not isinstance(x, BaseException) or any(x is c for c in chain):
            continue
        chain.append(x)
        todo += [getattr(x, "reason", None), getattr(x, "original_error", None),
                 x.__cause__, x.__context__]
    for x in chain:
        if isinstance(x, urllib3.exceptions.ProxyError):
            return "proxy"
        if isinstance(x, (ssl.SSLError, urllib3.exceptions.SSLError)):
            return "tls"
        if isinstance(x, (socket.gaierror, getattr(urllib3.exceptions, "NameResolutionError",
                                                   socket.gaierror))):
            return "no such host"
        if isinstance(x, ConnectionRefusedError):
            return "refused"
    text = " ".join(str(x) for x in chain).lower()
    for words, why in ((("connection refused",), "refused"),
                       (("name or service not known", "nodename nor servname",
                         "name resolution", "getaddrinfo"), "no such host"),
                       (("certificate", "ssl", "tls"), "tls")):
        if any(w in text for w in words):
            return why
    return "other"


def unsent(e: BaseException) -> bool:
    """Whether a transport failure happened before the request left (no connection was
    made): anything else may have reached the server."""
    import urllib3

    exc = urllib3.exceptions
    cause = getattr(e, "original_error", None) or getattr(e, "reason", None)
    return any(isinstance(x, (exc.NewConnectionError, exc.ConnectTimeoutError))
               for x in (e, cause))


def not_the_api(server: str, what: str, content_type: str,
                body: bytes | bytearray) -> ClusterError:
    """The server answered, but not as a Kubernetes API server does (HTML, a proxy page)."""
    sample = " ".join(body[:80].decode("utf-8", "replace").split())
    return ClusterError(f"{server} did not answer as a Kubernetes API server ({what}: "
                        f"{content_type or 'no content type'}, {sample!r}); check the "
                        "kubeconfig's server address")


def not_kubernetes(server: str, code: int) -> ClusterError:
    """/version answered `code`: the server is no Kubernetes API server (a wrong URL or
    path, a proxy that answers 404 to everything)."""
    return ClusterError(f"{server} did not answer as a Kubernetes API server ({code} on "
                        "/version); check the kubeconfig's server address (a wrong URL or "
                        "path, or a proxy in between)")


def api_error(e: HttpError, action: Action, server: str) -> KdistError:
    """An HTTP error answer as the KdistError the user sees."""
    from kdist import backends

    training = {b.kind.plural: b for b in backends.BACKENDS}
    where = f"in namespace {action.namespace}" if action.namespace else "cluster-wide"
    status = e.status_object()
    body_text = " ".join(e.body[:200].decode("utf-8", "replace").split())
    message = status.get("message") or body_text or e.reason
    if not status:  # not the API server's words, maybe a proxy's: say where they came from
        message = f"{message[:150]} (from {server})"
    details = status.get("details") or {}
    if e.status == 409 and action.verb == "create":
        other = "" if action.resource in training else \
            f" ({action.resource} {action.name} is there)"
        return AlreadyExists(
            f"job {action.name} already exists {where}{other}: use --replace or "
            f"`kdist delete {action.name}`")
    if e.status == 409 and action.verb == "delete":  # a uid precondition failed
        return ClusterError(
            f"{action.resource} {action.name} {where} is no longer the object kdist checked "
            "or created (another of that name took its place): not deleted")
    if e.status == 403:
        return Forbidden(f"forbidden: {action.verb} {action.resource} {where}: {message}")
    if e.status == 401:
        return ClusterError(f"unauthorized: {server} refused the kubeconfig's credentials")
    backend = training.get(action.resource)
    if e.status == 404 and backend is not None and backend.installs and \
            not details.get("name"):
        return OperatorMissing(f"{backend.installs} is not installed (no "
                               f"{backend.kind.api_version} {backend.kind.kind} resource)")
    if e.status == 404 and details.get("kind") == "namespaces":
        return ClusterError(f"namespace {action.namespace} not found")
    if e.status == 404:  # a list has no name: "no jobs in namespace x", one space
        return JobNotFound(" ".join(filter(None, ["no", action.resource, action.name, where])))
    if e.status == 422:
        causes = [f"{c.get('field', '?')}: {c.get('message', '')}"
                  for c in details.get("causes") or []]
        return ClusterError(f"the API server refused {action.resource} {action.name}: "
                            + ("; ".join(causes) or message))
    return ErrorStatus(
        f"{action.verb} {action.resource} {action.name} {where}: {e.status} "
        f"{status.get('reason') or e.reason}: {message}".replace("  ", " ") + _asked(e),
        e.status)


def _asked(e: HttpError) -> str:
    """What a 429 or 5xx said about trying again, and what kdist did about it."""
    if e.tries:
        return f" (still, after {e.tries} retries as the server asked)"
    if e.retry_after and e.status == 429:
        return (f" (the server asks to retry after {' '.join(e.retry_after.split())[:40]}s: "
                "longer than kdist waits, or not a count of seconds; try again later)")
    return ""
