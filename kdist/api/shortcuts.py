"""The module-level verbs (`kdist.submit`, `kdist.status`, ...): shortcuts over a Client.

Each takes the Client method's own parameters, spelled out (so `help(kdist.submit)`
and a notebook show them), plus the cluster target as keywords (`kubeconfig=`,
`context=`, `namespace=`, `request_timeout=`), and calls that client's method of
the same name. Each docstring is the method's, so the two cannot tell different
stories; a test holds the parameters equal. Without a target they share one
default client (one connection), made again when $KUBECONFIG or
$KDIST_REQUEST_TIMEOUT changes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from kdist.api import files
from kdist.api.clients import Client, PathLike, never
from kdist.api.types import (
    BACKEND_DEFAULT,
    Deleted,
    JobSummary,
    Observer,
    RankLog,
    Submission,
)

if TYPE_CHECKING:
    from kdist.api.steps import Step
    from kdist.kube.probe.verdict import Verdict
    from kdist.kube.watch.tracker import JobState
    from kdist.rendering.workdir import Packed
    from kdist.spec.model import TrainingJob

__all__ = ["check", "client", "delete", "list_jobs", "load", "logs", "metrics", "namespace",
           "plot", "rank_logs", "status", "submit", "train", "validate", "wait", "wait_many",
           "watch_jobs"]

_default: tuple[tuple[str | None, ...], Client] | None = None
_lock = threading.Lock()
F = TypeVar("F", bound=Callable[..., Any])
TARGET = ("kubeconfig", "context", "namespace", "request_timeout")
_TARGET_DOC = """
The cluster target, as `kdist.Client` takes it: `kubeconfig=`, `context=`,
`namespace=`, `request_timeout=` (none given: one shared default client)."""


def client(kubeconfig: PathLike | None = None, context: str | None = None,
           namespace: str | None = None, request_timeout: float | None = None) -> Client:
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


def _like(method: Callable[..., Any]) -> Callable[[F], F]:
    """The shortcut's docstring: the Client method's, then the target keywords."""

    def mark(fn: F) -> F:
        fn.__doc__ = (method.__doc__ or "").rstrip() + "\n" + _TARGET_DOC
        return fn

    return mark


@_like(Client.submit)
def submit(job: TrainingJob | PathLike, *, wait: bool = True, replace: bool = False,
           dry_run: str | None = None, timeout: float | None = None, logs: bool = False,
           observer: Observer | None = None,
           on_submitted: Callable[[Submission], None] | None = None,
           code: Packed | None = None, backend: str | None = None,
           workdir: PathLike | None = None, all_nodes: bool = False,
           kubeconfig: PathLike | None = None,
           context: str | None = None, namespace: str | None = None,
           request_timeout: float | None = None) -> Submission:
    return client(kubeconfig, context, namespace, request_timeout).submit(
        job, wait=wait, replace=replace, dry_run=dry_run, timeout=timeout, logs=logs,
        observer=observer, on_submitted=on_submitted, code=code, backend=backend,
        workdir=workdir, all_nodes=all_nodes)


@_like(Client.wait)
def wait(name: str, *, timeout: float | None = None, logs: bool = False,
         tail: int | None = None, rank: int | None = None, check: bool = True,
         observer: Observer | None = None, all_nodes: bool = False,
         kubeconfig: PathLike | None = None,
         context: str | None = None, namespace: str | None = None,
         request_timeout: float | None = None) -> JobState:
    return client(kubeconfig, context, namespace, request_timeout).wait(
        name, timeout=timeout, logs=logs, tail=tail, rank=rank, check=check,
        observer=observer, all_nodes=all_nodes)


@_like(Client.status)
def status(name: str, *, tail: int = 2000, kubeconfig: PathLike | None = None,
           context: str | None = None, namespace: str | None = None,
           request_timeout: float | None = None) -> JobState:
    return client(kubeconfig, context, namespace, request_timeout).status(name, tail=tail)


@_like(Client.logs)
def logs(name: str, *, follow: bool = False, tail: int | None = None,
         ranks: int | Sequence[int] | None = None,
         on_note: Callable[[int, str], None] | None = None,
         kubeconfig: PathLike | None = None, context: str | None = None,
         namespace: str | None = None,
         request_timeout: float | None = None) -> Iterator[tuple[int, str]]:
    return client(kubeconfig, context, namespace, request_timeout).logs(
        name, follow=follow, tail=tail, ranks=ranks, on_note=on_note)


@_like(Client.rank_logs)
def rank_logs(name: str, *, rank: int | None = None, tail: int | None = None,
              kubeconfig: PathLike | None = None, context: str | None = None,
              namespace: str | None = None,
              request_timeout: float | None = None) -> list[RankLog]:
    return client(kubeconfig, context, namespace, request_timeout).rank_logs(
        name, rank=rank, tail=tail)


@_like(Client.metrics)
def metrics(name: str, *, kubeconfig: PathLike | None = None, context: str | None = None,
            namespace: str | None = None,
            request_timeout: float | None = None) -> dict[int, list[Step]]:
    return client(kubeconfig, context, namespace, request_timeout).metrics(name)


@_like(Client.list_jobs)
def list_jobs(*, all_namespaces: bool = False, selector: str = "",
              kubeconfig: PathLike | None = None, context: str | None = None,
              namespace: str | None = None,
              request_timeout: float | None = None) -> list[JobSummary]:
    return client(kubeconfig, context, namespace, request_timeout).list_jobs(
        all_namespaces=all_namespaces, selector=selector)


@_like(Client.delete)
def delete(name: str, *, wait: bool = True, timeout: float = 300,
           kubeconfig: PathLike | None = None, context: str | None = None,
           namespace: str | None = None, request_timeout: float | None = None) -> Deleted:
    return client(kubeconfig, context, namespace, request_timeout).delete(
        name, wait=wait, timeout=timeout)


@_like(Client.wait_many)
def wait_many(names: Sequence[str] = (), *, all_jobs: bool = False, selector: str = "",
              timeout: float | None = None, check: bool = True,
              on_update: Callable[[list[JobState]], None] | None = None,
              on_end: Callable[[JobState], None] | None = None,
              kubeconfig: PathLike | None = None, context: str | None = None,
              namespace: str | None = None,
              request_timeout: float | None = None) -> list[JobState]:
    return client(kubeconfig, context, namespace, request_timeout).wait_many(
        names, all_jobs=all_jobs, selector=selector, timeout=timeout, check=check,
        on_update=on_update, on_end=on_end)


@_like(Client.watch_jobs)
def watch_jobs(*, on_update: Callable[[list[JobState]], None],
               all_namespaces: bool = False, selector: str = "",
               progress_every: float = 10.0,
               stop: Callable[[], bool] = never,
               kubeconfig: PathLike | None = None, context: str | None = None,
               namespace: str | None = None, request_timeout: float | None = None) -> None:
    client(kubeconfig, context, namespace, request_timeout).watch_jobs(
        on_update=on_update, all_namespaces=all_namespaces, selector=selector,
        progress_every=progress_every, stop=stop)


@_like(Client.train)
def train(fn: Callable[..., Any] | PathLike, *, nodes: int = 1,
          procs_per_node: int = 1, args: Sequence[Any] | Mapping[str, Any] | None = None,
          image: str | None = None, backend: str = BACKEND_DEFAULT,
          workdir: PathLike | None = None, local: bool = False, name: str | None = None,
          timeout: float | None = None, logs: bool = True,
          env: Mapping[str, str] | None = None, resources: Mapping[str, Any] | None = None,
          spec: Mapping[str, Any] | None = None, kubeconfig: PathLike | None = None,
          context: str | None = None, namespace: str | None = None,
          request_timeout: float | None = None) -> Any:
    return client(kubeconfig, context, namespace, request_timeout).train(
        fn, nodes=nodes, procs_per_node=procs_per_node, args=args, image=image,
        backend=backend, workdir=workdir, local=local, name=name, timeout=timeout,
        logs=logs, env=env, resources=resources, spec=spec)


@_like(Client.load)
def load(file: PathLike, *, backend: str | None = None, kubeconfig: PathLike | None = None,
         context: str | None = None, namespace: str | None = None,
         request_timeout: float | None = None) -> TrainingJob:
    return client(kubeconfig, context, namespace, request_timeout).load(file, backend=backend)


@_like(Client.validate)
def validate(file: PathLike, *, kubeconfig: PathLike | None = None,
             context: str | None = None, namespace: str | None = None,
             request_timeout: float | None = None) -> files.Validated:
    return client(kubeconfig, context, namespace, request_timeout).validate(file)


@_like(Client.plot)
def plot(name: str, file: PathLike, *, kubeconfig: PathLike | None = None,
         context: str | None = None, namespace: str | None = None,
         request_timeout: float | None = None) -> int:
    return client(kubeconfig, context, namespace, request_timeout).plot(name, file)


@_like(Client.check)
def check(*, kubeconfig: PathLike | None = None, context: str | None = None,
          namespace: str | None = None, request_timeout: float | None = None) -> list[Verdict]:
    return client(kubeconfig, context, namespace, request_timeout).check()


def namespace(*, kubeconfig: PathLike | None = None, context: str | None = None,
              namespace: str | None = None, request_timeout: float | None = None) -> str:
    """The namespace the other functions use for these options."""
    return client(kubeconfig, context, namespace, request_timeout).namespace
