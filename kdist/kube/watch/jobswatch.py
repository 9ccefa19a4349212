"""Many jobs, one watcher: one watch per kind for every kdist job, demultiplexed.

`kdist wait` and `kdist list --watch` follow any number of jobs with one watch
on Jobs, one on PyTorchJobs (where the operator is installed) and one on Pods,
all selected by kdist's labels, instead of two watches and a log stream per
job. Events are routed to one `Tracker` per job by the `kdist.dev/job-name`
label (pods) or the object's name (jobs). Logs are not streamed: a rank's
last step, loss and throughput are read once from the tail of its log when
asked (`refresh_progress`), for the live table.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kdist.kube import kinds
from kdist.kube.client import Cluster
from kdist.kube.watch.reflector import Reflector
from kdist.kube.watch.sources import ApiSource
from kdist.kube.watch.tracker import JobState, Tracker
from kdist.shared import labels as L
from kdist.shared.errors import KdistError, UsageError
from kdist.shared.selectors import SelectorProblem, check_selector

Key = tuple[str, str]  # (namespace, name)
MANAGED = f"{L.MANAGED_BY}=kdist"


def job_label_selector(selector: str = "") -> str:
    """kdist's own jobs, narrowed by a user's label selector (UsageError if it is not one)."""
    try:
        check_selector(selector)
    except SelectorProblem as e:
        raise UsageError(str(e)) from None
    return ",".join(s for s in (MANAGED, selector) if s.strip())


def _key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


def _pod_job(pod: dict[str, Any]) -> Key | None:
    meta = pod.get("metadata") or {}
    job = (meta.get("labels") or {}).get(L.JOB_NAME)
    return (meta.get("namespace", ""), job) if job else None


class JobsWatch:
    """Trackers of every kdist job in `namespace` (None: all) that `wanted` accepts."""

    def __init__(self, cluster: Cluster, namespace: str | None, *,
                 selector: str = "", wanted: Callable[[Key], bool] | None = None,
                 training_kinds: list[kinds.Kind] | None = None) -> None:
        self.cluster, self.namespace = cluster, namespace
        self.wanted = wanted or (lambda key: True)
        job_selector = job_label_selector(selector)
        if training_kinds is None:
            training_kinds = cluster.training_kinds()
        self.sources: list[tuple[str, ApiSource]] = [
            ("job", ApiSource(cluster, kind, namespace, label_selector=job_selector))
            for kind in training_kinds]
        self.sources.append(("pods", ApiSource(cluster, kinds.POD, namespace,
                                               label_selector=L.JOB_NAME)))
        self.trackers: dict[Key, Tracker] = {}
        self.listed = [False] * len(self.sources)
        self._read_at: dict[Key, float] = {}
        self._pods: dict[Key, dict[str, dict[str, Any]]] = {}  # job -> pod uid -> pod
        self.stop = threading.Event()
        self._q: queue.Queue[tuple[int, str, str, Any]] = queue.Queue()

    # -- the I/O -------------------------------------------------------------------------

    def start(self) -> None:
        for i, (name, source) in enumerate(self.sources):
            def emit(kind: str, obj: Any, i: int = i, name: str = name) -> None:
                self._q.put((i, name, kind, obj))

            def run(source: ApiSource = source, emit: Callable[[str, Any], None] = emit,
                    i: int = i, name: str = name) -> None:
                try:
                    Reflector(source, emit, self.stop).run()
                except Exception as e:  # handed to the consuming thread, raised there
                    self._q.put((i, name, "error", e))

            threading.Thread(target=run, name=f"kdist-watch-{i}", daemon=True).start()

    def close(self) -> None:
        self.stop.set()

    def events(self, tick: float = 1.0) -> Iterator[str]:
        """Yields "update" after each change and "tick" each `tick` seconds of quiet."""
        while not self.stop.is_set():
            try:
                i, name, kind, payload = self._q.get(timeout=tick)
            except queue.Empty:
                yield "tick"
                continue
            if kind == "error":
                raise payload
            self._apply(i, name, kind, payload)
            yield "update"

    @property
    def ready(self) -> bool:
        """Whether every kind has been listed once (so a missing job is really missing)."""
        return all(self.listed)

    # -- demultiplexing ------------------------------------------------------------------

    def _job_event(self, kind: str, obj: dict[str, Any]) -> None:
        key = _key(obj)
        tracker = self.trackers.get(key)
        if tracker is None:
            if kind == "DELETED" or not self.wanted(key):
                return
            tracker = self.trackers[key] = Tracker(key[1], key[0])
            tracker.job_event(kind, obj)
            # Its pods may have arrived before the job did.
            tracker.pod_relist(list(self._pods.get(key, {}).values()))
            return
        tracker.job_event(kind, obj)

    def _apply(self, i: int, name: str, kind: str, payload: Any) -> None:
        self.listed[i] = self.listed[i] or kind == "relist"
        if name == "job":
            if kind != "relist":
                self._job_event(kind, payload)
                return
            source_kind = self.sources[i][1].kind.kind
            seen = set()
            for obj in payload:
                seen.add(_key(obj))
                self._job_event("MODIFIED", dict(obj, kind=source_kind))
            for key, tracker in self.trackers.items():
                if key not in seen and tracker.state.kind == source_kind:
                    tracker.job_event("DELETED", {})
            return
        if kind == "relist":
            self._pod_relist(payload)
            return
        job = _pod_job(payload)
        if job is None:
            return
        uid = (payload.get("metadata") or {}).get("uid", "")
        pods = self._pods.setdefault(job, {})
        if kind == "DELETED":
            pods.pop(uid, None)
        else:
            pods[uid] = payload
        if job in self.trackers:
            self.trackers[job].pod_event(kind, payload)

    def _pod_relist(self, items: list[dict[str, Any]]) -> None:
        self._pods = {}
        for pod in items:
            job = _pod_job(pod)
            if job is not None:
                uid = (pod.get("metadata") or {}).get("uid", "")
                self._pods.setdefault(job, {})[uid] = pod
        for key, tracker in self.trackers.items():
            tracker.pod_relist(list(self._pods.get(key, {}).values()))

    # -- progress from logs, on demand ---------------------------------------------------

    def refresh_progress(self, tail: int = 20, min_interval: float = 10.0) -> None:
        """Read the last lines of each running job's rank-0 log (at most every `min_interval`)."""
        now = time.monotonic()
        for key, tracker in self.trackers.items():
            state = tracker.state
            if state.outcome or now - self._read_at.get(key, -min_interval) < min_interval:
                continue
            rank0 = state.ranks.get(0)
            if rank0 is None or not rank0.pod or not tracker.pod_started(rank0.pod):
                continue
            self._read_at[key] = now
            ns = key[0]
            try:
                lines = self.cluster.read_log(rank0.pod, ns, tail=tail,
                                              container=tracker.container)
            except KdistError:
                continue
            for line in lines:
                tracker.log_line(rank0.pod, line, live=False)

    def states(self) -> list[JobState]:
        return [self.trackers[k].state for k in sorted(self.trackers)]
