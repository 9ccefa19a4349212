"""Where API failures become messages (and exit codes) for the user: one place.

`Gone` and `Transient` are the watch loop's own control flow (relist,
reconnect), never shown to a user; everything else is a ``KdistError``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from kdist.shared.errors import ClusterError, JobNotFound, KdistError, OperatorMissing

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


class PartlyUndone(ClusterError):
    """A submission failed and deleting what it had created failed too: `left` names what
    is still there (each with why)."""

    def __init__(self, message: str, left: list[str]) -> None:
        super().__init__(message)
        self.left = left


@dataclass(frozen=True)
class Action:
    """What was being done when the API answered: it names the error for the user."""

    verb: str
    resource: str  # plural, as RBAC spells it: jobs, services, pytorchjobs, pods, pods/log
    namespace: str | None = None
    name: str = ""


@dataclass(frozen=True)
class HttpError(Exception):
    """A non-2xx answer: its status, reason and body (a Kubernetes Status, or not)."""

    status: int
    reason: str
    body: bytes = b""

    def status_object(self) -> dict[str, Any]:
        try:
            body = json.loads(self.body or b"")
        except ValueError:
            return {}
        return body if isinstance(body, dict) and body.get("kind") == "Status" else {}


def unreachable(e: BaseException, server: str, request_timeout: float) -> ClusterError:
    """A transport failure (urllib3's or the OS's) as the message the user sees."""
    import urllib3

    exc = urllib3.exceptions
    # NewConnectionError (refused, no such host) is a TimeoutError subclass in urllib3 2.
    timeout = isinstance(e, (exc.TimeoutError, TimeoutError)) and not isinstance(
        e, exc.NewConnectionError)
    if timeout or "timed out" in str(e).lower():
        return ClusterError(
            f"the API server at {server} did not answer within {request_timeout:g}s (set "
            "--request-timeout or $KDIST_REQUEST_TIMEOUT for a slow server)")
    if isinstance(e, exc.ProxyError):
        reason: object = f"the proxy: {e.original_error}"
    else:
        reason = getattr(e, "reason", None) or e
    return ClusterError(f"cluster unreachable at {server}: {' '.join(str(reason).split())}")


def not_the_api(server: str, what: str, content_type: str, body: bytes) -> ClusterError:
    """The server answered, but not as a Kubernetes API server does (HTML, a proxy page)."""
    sample = " ".join(body[:80].decode("utf-8", "replace").split())
    return ClusterError(f"{server} did not answer as a Kubernetes API server ({what}: "
                        f"{content_type or 'no content type'}, {sample!r}); check the "
                        "kubeconfig's server address")


def api_error(e: HttpError, action: Action, server: str) -> KdistError:
    """An HTTP error answer as the KdistError the user sees."""
    from kdist.kube.kinds import KF_GROUP, KF_PLURAL, KF_VERSION

    where = f"in namespace {action.namespace}" if action.namespace else "cluster-wide"
    status = e.status_object()
    body_text = " ".join(e.body[:200].decode("utf-8", "replace").split())
    message = status.get("message") or body_text or e.reason
    if not status:  # not the API server's words, maybe a proxy's: say where they came from
        message = f"{message[:150]} (from {server})"
    details = status.get("details") or {}
    if e.status == 409 and action.verb == "create":
        other = "" if action.resource in ("jobs", KF_PLURAL) else \
            f" ({action.resource} {action.name} is there)"
        return ClusterError(
            f"job {action.name} already exists {where}{other}: use --replace or "
            f"`kdist delete {action.name}`")
    if e.status == 409 and action.verb == "delete":  # a uid precondition failed
        return ClusterError(
            f"{action.resource} {action.name} {where} is no longer the object kdist checked "
            "or created (another of that name took its place): not deleted")
    if e.status == 403:
        return ClusterError(f"forbidden: {action.verb} {action.resource} {where}: {message}")
    if e.status == 401:
        return ClusterError(f"unauthorized: {server} refused the kubeconfig's credentials")
    if e.status == 404 and action.resource == KF_PLURAL and not details.get("name"):
        return OperatorMissing("the Kubeflow training operator is not installed (no "
                               f"{KF_GROUP}/{KF_VERSION} PyTorchJob resource)")
    if e.status == 404 and details.get("kind") == "namespaces":
        return ClusterError(f"namespace {action.namespace} not found")
    if e.status == 404:
        return JobNotFound(f"no {action.resource} {action.name} {where}")
    if e.status == 422:
        causes = [f"{c.get('field', '?')}: {c.get('message', '')}"
                  for c in details.get("causes") or []]
        return ClusterError(f"the API server refused {action.resource} {action.name}: "
                            + ("; ".join(causes) or message))
    return ClusterError(
        f"{action.verb} {action.resource} {action.name} {where}: {e.status} "
        f"{status.get('reason') or e.reason}: {message}".replace("  ", " "))
