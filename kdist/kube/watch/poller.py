"""Reading an object that only explains a job, by polling instead of watching.

A job's PodGroup (a native gang) and its Kueue Workload say why its pods wait; the job
and its pods say everything else. Watching all four holds four connections per job
(issue 53: a watch is at most two); reading the explaining ones every few seconds while
something waits, and seldom after, costs a GET each time and no connection held.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from kdist.kube.errors import Transient
from kdist.kube.watch.backoff import Backoff
from kdist.shared.errors import ClusterError

#: How often an explaining object is read while the job's pods wait to be placed or
#: admitted (a verdict shown within ~2 s), and once they all are (a gang restart's wait
#: is still caught, at the pace of the job's own events).
WAITING_EVERY, SETTLED_EVERY = 2.0, 30.0


class Listed(Protocol):
    """What a poller reads: a `reflector.Source`'s list, without its watch."""

    what: str

    def list(self) -> tuple[list[dict[str, Any]], str]: ...


class Poller:
    """List `source` again and again; emit ("relist", items) when what it lists changed.

    `every()` says how long to pause before the next read (asked after each). Transient
    failures pause by `backoff` and give up after `backoff.attempts` in a row, as a
    Reflector does; any other error (a Forbidden) ends it, for the caller to decide.
    """

    def __init__(self, source: Listed, emit: Callable[[str, Any], None],
                 stop: threading.Event, every: Callable[[], float], backoff: Backoff) -> None:
        self.source, self.emit, self.stop, self.every = source, emit, stop, every
        self.backoff = backoff

    def run(self) -> None:
        seen: tuple[tuple[str, str], ...] | None = None
        failures = 0
        while not self.stop.is_set():
            try:
                items, _ = self.source.list()
            except Transient as e:
                failures += 1
                if failures >= self.backoff.attempts:
                    raise ClusterError(f"lost the reads of {self.source.what} after {failures} "
                                       f"attempts in a row: {e}") from None
                self.stop.wait(self.backoff.delay(failures))
                continue
            failures = 0
            now = _versions(items)
            if now != seen:  # the list's own resourceVersion moves with every write anywhere
                seen = now
                self.emit("relist", items)
            self.stop.wait(self.every())


def _versions(items: list[dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    def key(obj: dict[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))
    return tuple(sorted(key(o) for o in items))
