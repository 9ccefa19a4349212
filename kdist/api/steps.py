"""`Client.metrics`: a job's step series per rank, from the JSON step lines in its logs.

The workloads print `{"event": "step", "step": ..., "loss": ...,
"samples_per_s": ..., "world_size": ...}` (docs/DESIGN.md, "JSON log lines"); a script of your
own may print the same. Every pod of a rank is read, oldest first, and a pod
whose container restarted in place also its previous instance (the kubelet
keeps one), so the series runs across restarts: `Step.restart` says which
attempt a point belongs to, and where it changes the job restarted (a launcher
that restarts its workers in process says so in its log: the steps after that
line are the next attempt's). The
logs are streamed and each rank's series is bounded (its newest points).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from kdist.api.types import Connection

if TYPE_CHECKING:
    from kdist.kube.client import Cluster

#: Points kept per rank (the newest): a week of a step every ten seconds.
MAX_POINTS = 60_000


@dataclass(frozen=True)
class Step:
    """One step line of one rank: the optimizer step, the loss, the job's samples/s, when
    (epoch seconds, from the log's timestamp), the attempt (0 until the first restart) and
    the world size the step ran at (an elastic job's changes as it shrinks and grows; None
    where the line does not say)."""

    rank: int
    step: int
    loss: float | None
    samples_per_s: float | None
    time: float | None
    restart: int
    world_size: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def step_of(line: str, rank: int, when: float | None, restart: int) -> Step | None:
    """The Step a log line reports, or None (not a step line, or one without a step)."""
    from kdist.kube.watch.objects import parse_record

    record = parse_record(line)
    if record is None or record.get("event") != "step":
        return None
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        return None
    world = record.get("world_size")
    return Step(rank, step, _number(record.get("loss")), _number(record.get("samples_per_s")),
                when, restart,
                world if isinstance(world, int) and not isinstance(world, bool) and world > 0
                else None)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def read_metrics(conn: Connection, name: str) -> dict[int, list[Step]]:
    """Every node rank's steps, in log order (arguments already checked)."""
    from kdist import backends
    from kdist.kube.watch.objects import parse_time, pod_selector, pod_view
    from kdist.shared.ledger import in_process_restart

    cluster, ns = conn.cluster(), conn.namespace()
    job = cluster.get_job(name, ns)
    container = backends.of(job).container
    views = [v for v in (pod_view(p, container)
                         for p in cluster.list_pods(ns, pod_selector(job)))
             if v.rank is not None and v.started]
    views.sort(key=lambda v: (v.rank, v.created, v.earlier_pods, v.name))
    series: dict[int, deque[Step]] = {}
    attempt: dict[int, int] = {}
    for view in views:
        assert view.rank is not None
        rank = view.rank
        points = series.setdefault(rank, deque(maxlen=MAX_POINTS))
        instances = [True, False] if view.restarts else [False]
        for offset, previous in enumerate(instances):
            restart = max(attempt.get(rank, -1) + 1,
                          view.earlier_pods + view.restarts - (len(instances) - 1 - offset))
            attempt[rank] = restart
            for raw in _log(cluster, ns, view.name, previous, container):
                stamp, _, text = raw.partition(" ")
                again = in_process_restart(text)  # the launcher's own line only
                if again is not None:  # its launcher restarted the workers in process
                    restart = attempt[rank] = max(restart + 1, again.number)
                    continue
                step = step_of(text, rank, parse_time(stamp), restart)
                if step is not None:
                    points.append(step)
    return {rank: list(points) for rank, points in sorted(series.items())}


def _log(cluster: Cluster, namespace: str, pod: str, previous: bool,
         container: str) -> Iterator[str]:
    """kdist's container's timestamped log lines, streamed; nothing for a pod that is gone
    or whose container has not run (a 404 or 400), the API's error otherwise."""
    from kdist.kube import kinds
    from kdist.kube.client import LOG_READ_TIMEOUT
    from kdist.kube.errors import Action, HttpError, Transient, api_error
    from kdist.shared.errors import ClusterError

    query = {"container": container, "timestamps": "true"}
    if previous:
        query["previous"] = "true"
    action = Action("get", "pods/log", namespace, pod)
    try:
        yield from cluster.watch_lines(kinds.POD.item(namespace, pod, "log"), query,
                                       LOG_READ_TIMEOUT, action)
    except HttpError as e:
        if e.status in (400, 404):
            return
        raise api_error(e, action, cluster.server) from None
    except Transient as e:
        raise ClusterError(f"reading the log of pod {pod} in namespace {namespace}: {e}") \
            from None
