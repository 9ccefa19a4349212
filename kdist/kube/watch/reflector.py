"""The watch I/O: list-then-watch loops, log followers, and a session that joins them.

One watch on the job and one on its pods, each resumed from the last
resourceVersion on disconnect (BOOKMARKs included), relisted on 410 Gone,
reconnected with bounded exponential backoff; and one log follower per pod
container. Everything lands on one queue that the caller's thread consumes.
A job's Kueue Workload and PodGroup are read by polling (`kdist.kube.watch.poller`):
two watches per job, not four.

The Python client's own `Watch` is not used: it retries a 410 only once and
can block forever on a dead connection (docs/DESIGN.md, "Facts that bite").
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from kdist.kube.errors import Forbidden, Gone, Transient
from kdist.kube.watch.backoff import QUICK_END, WATCH_BACKOFF, Backoff
from kdist.kube.watch.logfollow import LogCursor, LogSource, follow_log, read_rest
from kdist.kube.watch.poller import SETTLED_EVERY, WAITING_EVERY, Poller
from kdist.kube.watch.tracker import Tracker
from kdist.shared.errors import ClusterError
from kdist.shared.terminal import escape

#: How long after the job's end a finished pod's log follower may take to end by itself
#: before its log is read to the end by a plain read (`logfollow.read_rest`).
LOG_GRACE = 1.0


class Source(Protocol):
    """One kind of object under one selector: list it, watch it from a resourceVersion."""

    what: str

    def list(self) -> tuple[list[dict[str, Any]], str]: ...

    def watch(self, resource_version: str) -> Iterator[dict[str, Any]]: ...


class Reflector:
    """List, then watch from the list's resourceVersion, forever, robustly.

    Emits ("relist", items) after every list and (type, object) for each
    ADDED/MODIFIED/DELETED event; BOOKMARKs only advance the resourceVersion.
    A 410 relists; a transient failure reconnects from the last
    resourceVersion. Each failure waits the backoff's pause first, and
    `backoff.attempts` failures in a row end it with a ClusterError.

    A failure is anything that is not news: a 410 (answer or ERROR event),
    a transient error (answer, ERROR event, cut), and a watch that ends at
    once with nothing but BOOKMARKs. Only a real event, or a watch that stayed
    open a while, resets the count. A successful list does not: a server
    that answers every watch with 410 lists fine every time.
    """

    def __init__(self, source: Source, emit: Callable[[str, Any], None],
                 stop: threading.Event, backoff: Backoff | None = None) -> None:
        self.source, self.emit, self.stop = source, emit, stop
        self.backoff = backoff or WATCH_BACKOFF
        self.resource_version: str | None = None
        self.relists = 0
        self._failures, self._failing_since = 0, 0.0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                    if self.stop.is_set():
                        return
                self._watch()
            except Gone:
                self.resource_version = None
                self._failed("410 Gone: the resourceVersion to watch from had expired")
            except Transient as e:
                self._failed(str(e))

    def _list(self) -> None:
        items, self.resource_version = self.source.list()
        self.relists += 1
        self.emit("relist", items)

    def _watch(self) -> None:
        """One watch request, to its end; Transient when it ended at once with no news."""
        started, news = time.monotonic(), 0
        for event in self.source.watch(self.resource_version or ""):
            if self._event(event):
                news += 1
                self._failures = 0
            if self.stop.is_set():
                return
        if time.monotonic() - started >= QUICK_END:
            self._failures = 0  # a watch that stayed open is a working one, news or not
        elif not news:
            raise Transient("the watch ended at once, without an event")

    def _failed(self, why: str) -> None:
        """Count one failure; pause before the next try, or give up once too many."""
        if self.stop.is_set():
            return  # stopped meanwhile: whatever failed no longer matters
        self._failures += 1
        now = time.monotonic()
        if self._failures == 1:
            self._failing_since = now
        failures, limit = self._failures, self.backoff.give_up_after
        if failures >= self.backoff.attempts or (
                limit is not None and failures >= 2 and now - self._failing_since > limit):
            raise ClusterError(f"lost the watch on {self.source.what} after {failures} "
                               f"attempts in a row: {why}")
        self.stop.wait(self.backoff.delay(failures))

    def _event(self, event: dict[str, Any]) -> bool:
        """Apply one event; whether it was news (ADDED, MODIFIED, DELETED)."""
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise Gone()
            if code in (429, 500, 503, 504):
                raise Transient(f"the API server sent ERROR {code}: {obj.get('message', '')}")
            raise ClusterError(f"watch on {self.source.what}: {obj.get('message', obj)}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self.resource_version = rv
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return False
        self.emit(kind, obj)
        return True


def wait_empty(source: Source, timeout: float, give_up_after: float | None = None) -> None:
    """Block until `source` lists nothing (watching deletions); ClusterError after `timeout`,
    or once the server has failed for `give_up_after` seconds."""
    left: dict[str, str] = {}
    stop = threading.Event()

    def emit(kind: str, obj: Any) -> None:
        if kind == "relist":
            left.clear()
            left.update({_uid(o): _ref(o) for o in obj})
        elif kind == "DELETED":
            left.pop(_uid(obj), None)
        else:
            left[_uid(obj)] = _ref(obj)
        if not left:
            stop.set()

    errors: list[BaseException] = []

    def run() -> None:
        try:
            backoff = dataclasses.replace(WATCH_BACKOFF, give_up_after=give_up_after)
            Reflector(source, emit, stop, backoff).run()
        except BaseException as e:  # handed to the waiting thread
            errors.append(e)
            stop.set()

    threading.Thread(target=run, name="kdist-wait-gone", daemon=True).start()
    finished = stop.wait(timeout)
    stop.set()
    if errors:
        raise errors[0]
    if not finished:
        raise ClusterError(f"timed out after {timeout:.0f}s waiting for {source.what} to be "
                           f"deleted; still there: {', '.join(sorted(left.values()))}")


def _uid(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return meta.get("uid") or meta.get("name", "")


def _ref(obj: dict[str, Any]) -> str:
    return f"{obj.get('kind') or 'object'}/{(obj.get('metadata') or {}).get('name', '?')}"


@dataclass
class Sources:
    """What `follow` needs from the cluster: the two watched sources and the logs."""

    job: Source
    pods: Source
    logs: LogSource | None
    queue: Source | None = None  # Kueue's Workload of a queued job
    gang: Source | None = None  # the PodGroup of a native gang (distributed.gang)


class Session:
    """Runs the watches and log followers in threads; the caller consumes `events()`.

    Each item is (kind, payload): ("warning", text), ("log", (rank, line)),
    ("update", None), ("terminal", None), ("error", exception). The tracker is
    only touched from the consuming thread.
    """

    def __init__(self, tracker: Tracker, sources: Sources, *, logs: bool = True,
                 tail: int | None = None, ranks: set[int] | None = None,
                 queue_limit: int = 0) -> None:
        self.tracker, self.sources = tracker, sources
        self.follow_logs, self.tail, self.ranks = logs and sources.logs is not None, tail, ranks
        self.stop = threading.Event()
        # queue_limit > 0: a consumer slower than the logs holds the readers back (a
        # generator in a notebook), instead of letting the queue grow without bound.
        self._q: queue.Queue[tuple[str, str, Any]] = queue.Queue(maxsize=queue_limit)
        self._followed: set[tuple[str, int]] = set()
        self._log_threads: dict[tuple[str, int], threading.Thread] = {}
        # (pod uid, container instance) -> (pod name, tail, how far its log was read)
        self._cursors: dict[tuple[str, int], tuple[str, int | None, LogCursor]] = {}
        self._finishing: set[tuple[str, int]] = set()  # their last reads, under way

    def _thread(self, name: str, target: Callable[[], None]) -> threading.Thread:
        def run() -> None:
            try:
                target()
            except Exception as e:  # handed to the consuming thread, raised there
                self._q.put((name, "error", e))
        t = threading.Thread(target=run, name=f"kdist-{name}", daemon=True)
        t.start()
        return t

    def start(self) -> None:
        # Two watches: the job and its pods. Its Workload and PodGroup only explain why
        # the pods wait: read every few seconds (kdist.kube.watch.poller), no connection held.
        for name, source in [("job", self.sources.job), ("pods", self.sources.pods),
                             ("queue", self.sources.queue), ("gang", self.sources.gang)]:
            if source is None:
                continue

            def emit(kind: str, obj: Any, name: str = name) -> None:
                self._q.put((name, kind, obj))
            if name in ("job", "pods"):
                self._thread(name, Reflector(source, emit, self.stop).run)
            else:
                self._thread(name, Poller(source, emit, self.stop, self._poll_every,
                                          WATCH_BACKOFF).run)

    def _poll_every(self) -> float:
        """The pause between two reads of the Workload or PodGroup: short while the job
        waits to be admitted or placed, long once every pod is (asked from their thread:
        list() of a dict's values is one step under the GIL)."""
        s = self.tracker.state
        ranks = list(s.ranks.values())
        waiting = not s.outcome and (not ranks or any(r.phase == "Pending" for r in ranks))
        return WAITING_EVERY if waiting else SETTLED_EVERY

    def close(self) -> None:
        self.stop.set()
        # A thread blocked on a full queue must get to see the stop.
        while True:
            try:
                self._q.get_nowait()
            except queue.Empty:
                break

    def events(self, tick: float = 1.0, drain: float = 10.0) -> Iterator[tuple[str, Any]]:
        """Everything that happens, until the job is over and its logs are drained.

        Yields ("tick", None) every `tick` seconds without events (for the clock).
        """
        drain_until: float | None = None
        rest_at: float | None = None  # then a finished pod's follower is not waited for
        while True:
            now = time.monotonic()
            if drain_until is not None and ((
                    not self._log_threads and not self._finishing) or now >= drain_until):
                return
            if rest_at is not None and now >= rest_at:
                self._read_rest_of_finished()
            try:
                wait = tick if rest_at is None or now >= rest_at else min(tick, rest_at - now)
                source, kind, payload = self._q.get(timeout=wait)
            except queue.Empty:
                yield "tick", None
                continue
            yield from self._apply(source, kind, payload)
            if self.tracker.state.outcome and drain_until is None:
                # The job watch can beat the pod watch: take the pods' final word now.
                try:
                    items, _ = self.sources.pods.list()
                    yield from self._apply("pods", "relist", items)
                except Transient:
                    pass
                drain_until = time.monotonic() + drain
                # A kubelet ends a finished container's followed log by itself, at once;
                # one still open after LOG_GRACE is read to its end another way.
                rest_at = min(drain_until, time.monotonic() + LOG_GRACE)
                yield "terminal", None

    def _apply(self, source: str, kind: str, payload: Any) -> Iterator[tuple[str, Any]]:
        t = self.tracker
        if kind == "error" and source == "gang" and isinstance(payload, Forbidden):
            s = t.state  # not this user's to read: the job is followed without it
            s.gang_status, s.gang_message = "unreadable", str(payload)
            yield "warning", f"PodGroup {s.gang} could not be read: {payload}"
            return
        if kind == "error":
            raise payload
        if kind == "log-end":
            self._log_threads.pop(payload, None)
            return
        if kind == "log-read":
            self._finishing.discard(payload)
            return
        warnings = [payload] if kind == "warning" else t.feed(source, kind, payload)
        if source == "pods":
            self._start_log_followers()
        if kind == "log":
            rank = t.rank_of_pod(payload[0])
            if self.ranks is None or rank in self.ranks:
                yield "log", (rank, payload[1])
        for w in warnings:
            # Made of the cluster's words (messages, reasons, names): shown, never obeyed,
            # one line each (kdist.shared.terminal), whoever the observer is.
            yield "warning", escape(w)
        yield "update", None

    def _start_log_followers(self) -> None:
        if not self.follow_logs:
            return
        for view in self.tracker.pods_to_follow():
            key = (view.uid, view.restarts)
            if key in self._followed or (self.ranks is not None and view.rank not in self.ranks):
                continue
            self._followed.add(key)
            first = all(k[0] != view.uid for k in self._followed - {key})
            tail = self.tail if first else None
            cursor = LogCursor()
            self._cursors[key] = (view.name, tail, cursor)

            def run(pod: str = view.name, key: tuple[str, int] = key,
                    tail: int | None = tail, cursor: LogCursor = cursor) -> None:
                assert self.sources.logs is not None  # follow_logs is False without one
                try:
                    follow_log(self.sources.logs, pod, self._emit_log, self.stop,
                               instance=key[1], tail=tail, cursor=cursor)
                finally:
                    self._q.put(("logs", "log-end", key))
            self._log_threads[key] = self._thread(f"log-{view.name}", run)

    def _emit_log(self, kind: str, payload: Any) -> None:
        self._q.put(("logs", kind, payload))

    def _read_rest_of_finished(self) -> None:
        """The job is over: a follower of a container that has exited is not waited for;
        one plain read from its cursor gives the rest (kdist.kube.watch.logfollow)."""
        logs = self.sources.logs
        for key in list(self._log_threads):
            if logs is None or not self.tracker.container_finished(*key):
                continue
            pod, tail, cursor = self._cursors[key]
            self._log_threads.pop(key)
            self._finishing.add(key)

            def run(pod: str = pod, key: tuple[str, int] = key, tail: int | None = tail,
                    cursor: LogCursor = cursor, logs: LogSource = logs) -> None:
                try:
                    read_rest(logs, pod, self._emit_log, cursor, tail=tail)
                finally:
                    self._q.put(("logs", "log-read", key))
            self._thread(f"log-rest-{pod}", run)
