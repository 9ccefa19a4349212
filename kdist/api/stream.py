"""`Client.logs`: every rank's log lines as `(rank, line)`, streamed, never held whole.

Without `follow`, each rank's current log is read in turn, line by line as
the API server sends it; one the server refuses or cuts off is told to `on_note`
and the next rank's follows. With `follow`, the job's watch session
(`kdist.kube.watch.reflector.Session`, as `kdist logs -f`) starts one follower
per container instance, so a restarted rank's new pod (or container) is
followed too, and lines come in the order they arrive; the queue between the
followers and the caller is bounded, so a slow consumer holds the readers
back rather than filling memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kdist.api.jobs import no_log_note, tracked
from kdist.api.types import Connection
from kdist.kube.errors import Gone, Transient
from kdist.shared.errors import ClusterError, UsageError
from kdist.shared.terminal import escape

if TYPE_CHECKING:
    from kdist.kube.client import Cluster

#: Lines (and events) queued between the log followers and the caller at most.
QUEUE_LIMIT = 4096
#: How long the followers get to deliver the last lines once the job has ended.
DRAIN_S = 15.0


def stream_logs(conn: Connection, name: str, *, follow: bool, tail: int | None,
                ranks: set[int] | None,
                on_note: Callable[[int, str], None] | None) -> Iterator[tuple[int, str]]:
    """The generator behind `Client.logs` (arguments already checked).

    The job is looked up at once (JobNotFound before the first `next`), so a
    wrong name fails where the call is, not where the loop is.
    """
    from kdist.kube.watch.objects import job_nodes

    cluster, ns = conn.cluster(), conn.namespace()
    job = cluster.get_job(name, ns)
    nodes = job_nodes(job)
    if ranks is not None and nodes is not None and max(ranks) >= nodes:
        raise UsageError(f"ranks: job {name} has ranks 0 to {nodes - 1}, not "
                         f"{', '.join(str(r) for r in sorted(ranks) if r >= nodes)}")
    if follow:
        return _follow(cluster, job, tail, ranks)
    return _now(cluster, job, tail, ranks, on_note)


def _now(cluster: Cluster, job: dict[str, Any], tail: int | None, ranks: set[int] | None,
         on_note: Callable[[int, str], None] | None) -> Iterator[tuple[int, str]]:
    from kdist.kube.watch.sources import PodLogs

    tracker = tracked(cluster, job)
    state = tracker.state
    reader = PodLogs(cluster, state.namespace, tracker.container)
    unread: list[str] = []
    for r in sorted(state.ranks.values(), key=lambda r: r.rank):
        if ranks is not None and r.rank not in ranks:
            continue
        if not r.pod or not tracker.pod_started(r.pod):
            if on_note is not None:
                on_note(r.rank, no_log_note(state, r))
            continue
        count = 0
        try:
            for raw in reader.stream_log(r.pod, follow=False, tail=tail, since_seconds=None):
                count += 1
                yield r.rank, raw.partition(" ")[2]  # without the timestamp asked for
        except (Transient, Gone) as e:  # this rank's alone (a 5xx, 404, 400, a cut): go on
            what = f"log cut off after {count} line{'s' * (count != 1)}" if count else \
                "log not readable"
            why = escape(f"{what}: pod {r.pod}: {e or 'the pod is gone'}")
            if on_note is not None:
                on_note(r.rank, why)
            else:
                unread.append(f"rank {r.rank} ({why})")
    if unread:  # no on_note to hear of them: not lost in silence
        raise ClusterError(f"the logs of {len(unread)} ranks could not be read whole: "
                           + "; ".join(unread[:3]) + (", ..." if len(unread) > 3 else ""))


def _follow(cluster: Cluster, job: dict[str, Any], tail: int | None,
            ranks: set[int] | None) -> Iterator[tuple[int, str]]:
    from kdist.kube.watch.reflector import Session
    from kdist.kube.watch.sources import job_sources
    from kdist.kube.watch.tracker import Tracker

    meta = job["metadata"]
    tracker = Tracker(meta["name"], meta["namespace"])
    tracker.job_event("ADDED", job)
    session = Session(tracker, job_sources(cluster, job), logs=True,
                      tail=tail, ranks=ranks, queue_limit=QUEUE_LIMIT)
    session.start()
    try:
        for kind, payload in session.events(drain=DRAIN_S):
            if kind == "log" and payload[0] is not None:
                yield payload
    finally:
        session.close()
