"""Reading a pod's log: the last lines of it, or every line as it streams in.

Part of `kdist.kube.client.Cluster` (its base class), kept apart for the module's size.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

from kdist.kube import kinds
from kdist.kube.connect import bodies
from kdist.kube.connect.deadline import each_within
from kdist.kube.connect.transport import Transport
from kdist.kube.errors import Action, HttpError, Unanswered, api_error
from kdist.shared.limits import MAX_ANSWER_BYTES, MAX_EVENT_BYTES


class LogReads(Transport):
    """A connection's pod log reads."""

    def read_log(self, pod: str, namespace: str, tail: int | None = None) -> list[str]:
        """The main container's log lines (non-following): the last `tail` of them when
        given, kept as they stream in (a server may send the whole log regardless)."""
        query: dict[str, Any] = {"container": "pytorch"}
        if tail is not None:
            query["tailLines"] = tail
        action = Action("get", "pods/log", namespace, pod)
        path = kinds.POD.item(namespace, pod, "log")

        def once() -> list[str]:
            with self.exchange("GET", path, query, what=action) as (resp, _):
                where = f"the API server at {self.server} answered GET {path}"
                return bodies.last_lines(bodies.pieces(resp, where), tail, MAX_ANSWER_BYTES,
                                         MAX_EVENT_BYTES,
                                         f"the log of pod {pod} in namespace {namespace}")

        try:
            return self.retrying("GET", once)
        except HttpError as e:
            raise api_error(e, action, self.server) from None
        except Unanswered as u:
            raise u.error from None

    def log_lines(self, pod: str, namespace: str, tail: int | None = None) -> Iterator[str]:
        """`read_log`'s lines, yielded as they stream in and never held: a log of any
        size in bounded memory, as `kubectl logs` reads it. With `tail`, `read_log`'s
        last lines (a server may send the whole log regardless). Each piece of the log
        must come within the request timeout; the caller's time between lines is its own."""
        if tail is not None:
            yield from self.read_log(pod, namespace, tail)
            return
        action = Action("get", "pods/log", namespace, pod)
        path = kinds.POD.item(namespace, pod, "log")
        what = f"the log of pod {pod} in namespace {namespace}"
        try:
            with ExitStack() as stack:
                resp, dog = self.retrying("GET", lambda: stack.enter_context(
                    self.exchange("GET", path, {"container": "pytorch"}, what=action)))
                pieces = bodies.pieces(resp, f"the API server at {self.server} answered GET "
                                             f"{path}")
                yield from bodies.text_lines(each_within(pieces, dog, self.request_timeout),
                                             MAX_EVENT_BYTES, what)
        except HttpError as e:
            raise api_error(e, action, self.server) from None
        except Unanswered as u:
            raise u.error from None
