"""The watch I/O: list-then-watch loops, log followers, and a session that joins them.

One watch on the job and one on its pods, each resumed from the last
resourceVersion on disconnect (BOOKMARKs included), relisted on 410 Gone,
reconnected with bounded exponential backoff; and one log follower per pod
container. Everything lands on one queue that the caller's thread consumes,
so nothing here sleep-polls.

The Python client's own `Watch` is not used: it retries a 410 only once and
can block forever on a dead connection (docs/DESIGN.md, "Facts that bite").
"""

from __future__ import annotations

import dataclasses
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from kdist.kube.errors import Forbidden, Gone, Transient
from kdist.kube.watch.objects import parse_time
from kdist.kube.watch.tracker import Tracker
from kdist.shared.errors import ClusterError
from kdist.shared.terminal import escape

# A watch or log stream that ends this fast with nothing in it counts as a failure
# (backoff), so a server or proxy that keeps closing at once is not hammered.
QUICK_END = 1.0


class Source(Protocol):
    """One kind of object under one selector: list it, watch it from a resourceVersion."""

    what: str

    def list(self) -> tuple[list[dict[str, Any]], str]: ...

    def watch(self, resource_version: str) -> Iterator[dict[str, Any]]: ...


@dataclass(frozen=True)
class Backoff:
    """Bounded exponential backoff: `attempts` failures in a row, then give up.

    With `give_up_after`, also give up once failures have gone on that long
    (at least two of them): a wait that should be short fails within about
    twice the request deadline instead of riding out minutes of backoff.
    """

    attempts: int = 8
    first: float = 0.5
    cap: float = 15.0
    give_up_after: float | None = None

    def delay(self, failure: int) -> float:
        return min(self.cap, self.first * 2 ** (failure - 1))


#: The watches' backoff: pauses of 0.5, 1, 2, 4, 8, 15, 15 s, so a server that fails every
#: watch sees about ten requests in the first 10 s and an answer (give up) after about 45 s.
WATCH_BACKOFF = Backoff()


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


class LogSource(Protocol):
    """Reads one pod's log (the main container), as the cluster client does."""

    def stream_log(self, pod: str, *, follow: bool, tail: int | None,
                   since_seconds: int | None) -> Iterator[str]: ...

    def container_instance(self, pod: str) -> tuple[bool, int] | None:
        """(running, restartCount) of the main container; None when the pod is gone."""


def _stamp_key(stamp: str) -> tuple[str, str]:
    """RFC3339Nano trims trailing zeros: compare seconds, then the zero-padded fraction."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    return head, frac.ljust(9, "0")


def follow_log(logs: LogSource, pod: str, emit: Callable[[str, Any], None],
               stop: threading.Event, *, instance: int = 0, tail: int | None = None,
               backoff: Backoff | None = None) -> None:
    """Emit ("log", (pod, line)) for each line of `pod`'s container until it stops.

    `instance` is the container's restartCount when following began; once it
    stops (or restarts: a new follower takes the new instance) this returns.
    Lines arrive with timestamps so a reconnect (a cut stream while the same
    container still runs) resumes after the last line seen, not from the start.
    """
    backoff = backoff or Backoff(attempts=5)
    last: tuple[str, str] | None = None  # the newest timestamp emitted...
    at_last: set[str] = set()  # ...and the lines emitted with it
    since: int | None = None
    failures = 0
    while not stop.is_set():
        resume = (last, set(at_last)) if last is not None else None
        started, lines = time.monotonic(), 0
        try:
            for raw in logs.stream_log(pod, follow=True, tail=tail if last is None else None,
                                       since_seconds=since):
                stamp, _, text = raw.partition(" ")
                key = _stamp_key(stamp)
                if resume is not None:  # skip the overlap a reconnect re-sends
                    if key < resume[0] or (key == resume[0] and text in resume[1]):
                        continue
                    resume = None
                if key != last:
                    last, at_last = key, set()
                at_last.add(text)
                failures, lines = 0, lines + 1
                emit("log", (pod, text))
                if stop.is_set():
                    return
        except Transient as e:
            failures += 1
            if failures >= backoff.attempts:  # the other pods' logs are followed still
                emit("warning", f"stopped following the log of pod {pod} after {failures} "
                                f"tries: {e}")
                return
            stop.wait(backoff.delay(failures))
            continue
        except Gone:  # the pod was deleted
            return
        if logs.container_instance(pod) != (True, instance):
            return  # that container has stopped (or restarted): its log is complete
        if not lines and time.monotonic() - started < QUICK_END:
            failures += 1
            if failures >= backoff.attempts:
                emit("warning", f"stopped following the log of pod {pod}: the stream keeps "
                                "ending at once")
                return
            stop.wait(backoff.delay(failures))
        if last is not None:  # cut while still running: ask again from just before the cut
            last_s = parse_time(f"{last[0]}Z") or time.time()
            since = max(1, math.ceil(time.time() - last_s) + 5)


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
        watched = [("job", self.sources.job), ("pods", self.sources.pods)]
        if self.sources.queue is not None:
            watched.append(("queue", self.sources.queue))
        if self.sources.gang is not None:
            watched.append(("gang", self.sources.gang))
        for name, source in watched:
            def emit(kind: str, obj: Any, name: str = name) -> None:
                self._q.put((name, kind, obj))
            self._thread(name, Reflector(source, emit, self.stop).run)

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
        while True:
            if drain_until is not None and (
                    not self._log_threads or time.monotonic() >= drain_until):
                return
            try:
                source, kind, payload = self._q.get(timeout=tick)
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

            def run(pod: str = view.name, key: tuple[str, int] = key,
                    tail: int | None = tail) -> None:
                def emit(kind: str, payload: Any) -> None:
                    self._q.put(("logs", kind, payload))
                assert self.sources.logs is not None  # follow_logs is False without one
                try:
                    follow_log(self.sources.logs, pod, emit, self.stop, instance=key[1],
                               tail=tail)
                finally:
                    self._q.put(("logs", "log-end", key))
            self._log_threads[key] = self._thread(f"log-{view.name}", run)
