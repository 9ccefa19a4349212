"""The module-level verbs (`kdist.submit`, `kdist.status`, ...): shortcuts over a Client.

Each takes the cluster target as keywords (`kubeconfig=`, `context=`,
`namespace=`, `request_timeout=`) and calls that client's method of the same
name with the rest. Without a target they share one default client (one
connection), made again when $KUBECONFIG or $KDIST_REQUEST_TIMEOUT changes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kdist.api.client import Client
from kdist.api.types import Deleted, JobSummary, Submission

if TYPE_CHECKING:
    from kdist.api.steps import Step
    from kdist.kube.tracker import JobState

_default: tuple[tuple[str | None, ...], Client] | None = None
_lock = threading.Lock()


def client(kubeconfig: Any = None, context: Any = None, namespace: Any = None,
           request_timeout: Any = None) -> Client:
    """A client for this target; the shared default one when no keyword is given."""
    global _default
    if (kubeconfig, context, namespace, request_timeout) != (None, None, None, None):
        return Client(kubeconfig=kubeconfig, context=context, namespace=namespace,
                      request_timeout=request_timeout)
    env = (os.environ.get("KUBECONFIG"), os.environ.get("KDIST_REQUEST_TIMEOUT"))
    with _lock:
        if _default is None or _default[0] != env:
            _default = (env, Client())
        return _default[1]


def submit(job: Any, *, kubeconfig: Any = None, context: Any = None, namespace: Any = None,
           request_timeout: Any = None, **kwargs: Any) -> Submission:
    return client(kubeconfig, context, namespace, request_timeout).submit(job, **kwargs)


def wait(name: str, *, kubeconfig: Any = None, context: Any = None, namespace: Any = None,
         request_timeout: Any = None, **kwargs: Any) -> JobState:
    return client(kubeconfig, context, namespace, request_timeout).wait(name, **kwargs)


def status(name: str, *, kubeconfig: Any = None, context: Any = None, namespace: Any = None,
           request_timeout: Any = None, **kwargs: Any) -> JobState:
    return client(kubeconfig, context, namespace, request_timeout).status(name, **kwargs)


def logs(name: str, *, kubeconfig: Any = None, context: Any = None, namespace: Any = None,
         request_timeout: Any = None, **kwargs: Any) -> Iterator[tuple[int, str]]:
    return client(kubeconfig, context, namespace, request_timeout).logs(name, **kwargs)


def rank_logs(name: str, *, kubeconfig: Any = None, context: Any = None,
              namespace: Any = None, request_timeout: Any = None, **kwargs: Any) -> list[Any]:
    return client(kubeconfig, context, namespace, request_timeout).rank_logs(name, **kwargs)


def metrics(name: str, *, kubeconfig: Any = None, context: Any = None, namespace: Any = None,
            request_timeout: Any = None) -> dict[int, list[Step]]:
    return client(kubeconfig, context, namespace, request_timeout).metrics(name)


def list_jobs(*, kubeconfig: Any = None, context: Any = None, namespace: Any = None,
              request_timeout: Any = None, **kwargs: Any) -> list[JobSummary]:
    return client(kubeconfig, context, namespace, request_timeout).list_jobs(**kwargs)


def delete(name: str, *, kubeconfig: Any = None, context: Any = None, namespace: Any = None,
           request_timeout: Any = None, **kwargs: Any) -> Deleted:
    return client(kubeconfig, context, namespace, request_timeout).delete(name, **kwargs)


def wait_many(names: Any = (), *, kubeconfig: Any = None, context: Any = None,
              namespace: Any = None, request_timeout: Any = None,
              **kwargs: Any) -> list[JobState]:
    return client(kubeconfig, context, namespace, request_timeout).wait_many(names, **kwargs)


def watch_jobs(*, kubeconfig: Any = None, context: Any = None, namespace: Any = None,
               request_timeout: Any = None, **kwargs: Any) -> None:
    client(kubeconfig, context, namespace, request_timeout).watch_jobs(**kwargs)


def train(fn: Any, *, kubeconfig: Any = None, context: Any = None, namespace: Any = None,
          request_timeout: Any = None, **kwargs: Any) -> Any:
    return client(kubeconfig, context, namespace, request_timeout).train(fn, **kwargs)


def namespace(*, kubeconfig: Any = None, context: Any = None, namespace: Any = None,
              request_timeout: Any = None) -> str:
    """The namespace the other functions use for these options."""
    return client(kubeconfig, context, namespace, request_timeout).namespace
