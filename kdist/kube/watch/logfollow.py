"""Following one pod's log, and reading what is left of it once the pod has finished.

A follower reads `follow=true` with timestamps, so that a reconnect (a cut stream while
the same container still runs) resumes after the last line seen, not from the start.
Its `LogCursor` is where it has read to. When the job is over, a finished pod's follower
is not waited for: one plain read from the cursor gives what the stream had not sent yet
(`read_rest`), complete since the container has exited, and the follower's own lines
after that are the same lines, dropped by the cursor. A kubelet ends a followed log when
its container exits; a stream that does not end (kwok, a proxy holding it) no longer
holds the watch's end for its whole drain.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from kdist.kube.errors import Gone, Transient
from kdist.kube.watch.backoff import QUICK_END, Backoff
from kdist.kube.watch.objects import parse_time


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


class LogCursor:
    """How far one container's log has been read: the newest timestamp taken and the
    lines taken with it. Shared by the follower and the last read of a finished pod, so
    that a line either reads is sent on once."""

    def __init__(self) -> None:
        self.last: tuple[str, str] | None = None
        self._at_last: set[str] = set()
        self._lock = threading.Lock()

    def take(self, raw: str, send: Callable[[str], None]) -> bool:
        """Send the text of a timestamped line on when it is new (False: a line re-sent).
        Sent under the lock, so that two readers of one log keep its lines' order."""
        stamp, _, text = raw.partition(" ")
        key = _stamp_key(stamp)
        with self._lock:
            if self.last is not None and (key < self.last or
                                          (key == self.last and text in self._at_last)):
                return False
            if key != self.last:
                self.last, self._at_last = key, set()
            self._at_last.add(text)
            send(text)
            return True

    def since_seconds(self) -> int | None:
        """How far back a read must start to include the last line taken (with a margin
        for the clocks of this machine and the node), or None: from the start."""
        if self.last is None:
            return None
        last_s = parse_time(f"{self.last[0]}Z") or time.time()
        return max(1, math.ceil(time.time() - last_s) + 5)


def follow_log(logs: LogSource, pod: str, emit: Callable[[str, Any], None],
               stop: threading.Event, *, instance: int = 0, tail: int | None = None,
               backoff: Backoff | None = None, cursor: LogCursor | None = None) -> None:
    """Emit ("log", (pod, line)) for each line of `pod`'s container until it stops.

    `instance` is the container's restartCount when following began; once it
    stops (or restarts: a new follower takes the new instance) this returns.
    """
    backoff = backoff or Backoff(attempts=5)
    cursor = cursor or LogCursor()
    failures = 0
    while not stop.is_set():
        started, lines = time.monotonic(), 0
        try:
            for raw in logs.stream_log(pod, follow=True,
                                       tail=tail if cursor.last is None else None,
                                       since_seconds=cursor.since_seconds()):
                if not cursor.take(raw, lambda text: emit("log", (pod, text))):
                    continue  # the overlap a reconnect re-sends
                failures, lines = 0, lines + 1
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


def read_rest(logs: LogSource, pod: str, emit: Callable[[str, Any], None],
              cursor: LogCursor, *, tail: int | None = None) -> None:
    """One plain read of a finished container's log from `cursor` on: emit what its
    follower has not. A refused read is said as a warning: the lines taken stay."""
    try:
        for raw in logs.stream_log(pod, follow=False,
                                   tail=tail if cursor.last is None else None,
                                   since_seconds=cursor.since_seconds()):
            cursor.take(raw, lambda text: emit("log", (pod, text)))
    except Gone:  # deleted meanwhile: nothing more can be read
        return
    except Transient as e:
        emit("warning", f"the last lines of pod {pod}'s log could not be read: {e}")
