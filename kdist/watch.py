"""Following a training job to its end.

Two layers:

* `Tracker`, a pure state machine: fed job events, pod events and log lines
  (plain dicts, as the API sends them), it keeps a `JobState` (per rank: pod,
  phase, restarts, last step and loss) and returns each warning the user must
  see exactly once. No I/O, no clock of its own beyond what it is given.
* `Reflector` and `follow`, the I/O loop: one watch on the job and one on its
  pods, each resumed from the last resourceVersion on disconnect (BOOKMARKs
  included), relisted on 410 Gone, reconnected with bounded exponential
  backoff; and one log follower per pod container. Everything lands on one
  queue that the caller's thread consumes, so nothing here sleep-polls.

The Python client's own `Watch` is not used: it retries a 410 only once and
can block forever on a dead connection (DESIGN.md, "Facts that bite").
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from kdist import exitcodes
from kdist import labels as L
from kdist.cluster import Gone, Transient, pod_rank
from kdist.errors import ClusterError

SUCCEEDED, FAILED, DELETED = "Succeeded", "Failed", "Deleted"

# Terminal conditions (status "True") per kind. FailureTarget/SuccessCriteriaMet come
# first on recent Kubernetes (1.31+); Failed/Complete only once every pod has stopped.
_TERMINAL = {
    "Job": {"Complete": SUCCEEDED, "SuccessCriteriaMet": SUCCEEDED,
            "Failed": FAILED, "FailureTarget": FAILED},
    "PyTorchJob": {"Succeeded": SUCCEEDED, "Failed": FAILED},
}
_IMAGE_PULL = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
_CONFIG_ERRORS = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
MAX_HISTORY = 500
# A watch or log stream that ends this fast with nothing in it counts as a failure
# (backoff), so a server or proxy that keeps closing at once is not hammered.
QUICK_END = 1.0


# ---- state ------------------------------------------------------------------------------


@dataclass
class RankState:
    """What is known about one node rank (one pod at a time; replacements counted)."""

    rank: int
    pod: str = ""
    phase: str = "Pending"
    reason: str = ""
    restarts: int = 0
    node: str = ""
    step: int | None = None
    loss: float | None = None
    losses: list[float] = field(default_factory=list)
    world_size: int | None = None
    done: bool = False
    exit_code: int | None = None
    finished_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class Failure:
    """A pod of the job that exited non-zero (kept after the pod is replaced or deleted)."""

    rank: int
    pod: str
    exit_code: int
    reason: str
    finished_at: str
    said: str = ""  # the last line the pod's main container wrote (its termination message)


@dataclass
class JobState:
    """One job as far as the events seen so far tell."""

    name: str
    namespace: str = ""
    kind: str = ""
    backend: str = ""
    nodes: int | None = None
    max_steps: int | None = None
    created: str | None = None
    finished: str | None = None
    outcome: str | None = None  # Succeeded | Failed | Deleted once terminal
    reason: str = ""
    message: str = ""
    ranks: dict[int, RankState] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)

    @property
    def phase(self) -> str:
        if self.outcome:
            return self.outcome
        if any(r.phase not in ("Pending", "Deleted") for r in self.ranks.values()):
            return "Running"
        return "Pending"

    def rank(self, r: int) -> RankState:
        if r not in self.ranks:
            self.ranks[r] = RankState(r)
        return self.ranks[r]

    def rank_phase(self, r: RankState) -> str:
        """A rank's phase for display: "Gone" once the job is over and its pod deleted."""
        return "Gone" if self.outcome and not r.pod else r.phase

    def first_failure(self) -> Failure | None:
        """The pod whose failure explains the job's: the most telling, then the earliest.

        A code error before a kill before a lost peer (``exitcodes.severity``).
        """
        return min(self.failures, default=None,
                   key=lambda f: (exitcodes.severity(f.exit_code), f.finished_at, f.rank))

    def failure_line(self) -> str:
        """One line naming why the job failed: the rank and its exit code when known."""
        bad = self.first_failure()
        what = f"job {self.name} failed"
        if self.outcome == DELETED:
            return f"job {self.name} was deleted before it finished"
        if bad is not None:
            why = f" ({bad.reason})" if bad.reason and bad.reason != "Error" else ""
            what += f": rank {bad.rank} (pod {bad.pod}) exited with code {bad.exit_code}{why}"
            if bad.said:
                what += f": {bad.said}"
        if self.reason:
            what += f" [{self.reason}: {self.message}]" if self.message else f" [{self.reason}]"
        return what

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "namespace": self.namespace, "kind": self.kind,
            "backend": self.backend, "nodes": self.nodes, "maxSteps": self.max_steps,
            "phase": self.phase, "created": self.created, "finished": self.finished,
            "reason": self.reason, "message": self.message,
            "ranks": [dict(self.ranks[r].to_dict(), phase=self.rank_phase(self.ranks[r]))
                      for r in sorted(self.ranks)],
            "failures": [f.__dict__ for f in sorted(self.failures, key=lambda f: f.finished_at)],
        }


# ---- reading API objects ------------------------------------------------------------------


def job_kind_backend(obj: dict[str, Any]) -> tuple[str, str]:
    kind = obj.get("kind", "")
    return kind, "pytorchjob" if kind == "PyTorchJob" else "indexed-job"


def job_pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "PyTorchJob":
        return [r.get("template") or {} for r in (spec.get("pytorchReplicaSpecs") or {}).values()]
    return [spec.get("template") or {}]


def job_nodes(obj: dict[str, Any]) -> int | None:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "PyTorchJob":
        reps = (spec.get("pytorchReplicaSpecs") or {}).values()
        return sum(int(r.get("replicas") or 1) for r in reps) or None
    return spec.get("completions")


def max_steps_from_args(args: Iterable[str]) -> int | None:
    """`--max-steps N` / `--max-steps=N` in a workload's arguments, if present."""
    args = list(args)
    for i, a in enumerate(args):
        value = None
        if a == "--max-steps" and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith("--max-steps="):
            value = a.split("=", 1)[1]
        if value is not None:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def job_max_steps(obj: dict[str, Any]) -> int | None:
    for template in job_pod_templates(obj):
        for c in (template.get("spec") or {}).get("containers") or []:
            steps = max_steps_from_args([*(c.get("command") or []), *(c.get("args") or [])])
            if steps is not None:
                return steps
    return None


def job_phase(obj: dict[str, Any]) -> str:
    """A job's phase from its object alone (for `kdist list`)."""
    done = terminal_condition(obj)
    if done is not None:
        return done[0]
    status = obj.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conditions.get("Suspended") == "True":
        return "Suspended"
    if obj.get("kind") == "PyTorchJob":
        return "Running" if conditions.get("Running") == "True" else "Pending"
    return "Running" if (status.get("ready") or 0) > 0 else "Pending"


def terminal_condition(obj: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(Succeeded|Failed, the condition) when the job object says it is over."""
    table = _TERMINAL.get(obj.get("kind", ""), {})
    conditions = (obj.get("status") or {}).get("conditions") or []
    # Failure wins if both appear (a Job can carry FailureTarget then Failed).
    for want in (FAILED, SUCCEEDED):
        for c in conditions:
            if c.get("status") == "True" and table.get(c.get("type")) == want:
                return want, c
    return None


def parse_record(line: str) -> dict[str, Any] | None:
    """A workload's JSON log line (`{"event": ...}`, DESIGN.md), else None.

    A prefix before the JSON object (a launcher's `[default0]:`) is tolerated.
    """
    text = line.strip()
    start = text.find('{"event"')
    if start < 0:
        return None
    try:
        record = json.loads(text[start:])
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("event"), str) else None


def parse_time(stamp: str | None) -> float | None:
    """An RFC 3339 API timestamp as epoch seconds."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass
class _PodView:
    uid: str
    name: str
    rank: int | None
    created: str
    phase: str
    reason: str
    node: str
    restarts: int
    earlier_pods: int  # the rank's pods before this one, as the Job controller counts them
    exit_code: int | None
    finished_at: str | None
    said: str
    running: bool
    started: bool  # the main container has run (logs can be read)


def _int(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def last_words(message: str, limit: int = 300) -> str:
    """The line of a termination message that says why: kdist's own, else the last one.

    With ``FallbackToLogsOnError`` the message is the log's tail; the launcher
    ends it with one ``kdist.launch: ...`` line naming the failed worker.
    """
    lines = [" ".join(line.split()) for line in message.splitlines() if line.strip()]
    ours = [line for line in lines if line.startswith(("kdist.launch:", "kdist:"))]
    pick = (ours or lines or [""])[-1]
    return pick if len(pick) <= limit else pick[: limit - 3] + "..."


def _main_container(statuses: list[dict[str, Any]]) -> dict[str, Any] | None:
    for cs in statuses:
        if cs.get("name") == "pytorch":
            return cs
    return statuses[0] if statuses else None


def _pod_view(pod: dict[str, Any]) -> _PodView:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    phase = status.get("phase") or "Pending"
    reason = status.get("reason") or ""
    cs = _main_container(status.get("containerStatuses") or [])
    state = (cs or {}).get("state") or {}
    exit_code = finished = None
    said = ""
    if "waiting" in state:
        reason = state["waiting"].get("reason") or reason
    elif "terminated" in state:
        term = state["terminated"]
        reason = term.get("reason") or reason
        exit_code, finished = term.get("exitCode"), term.get("finishedAt")
        said = last_words(term.get("message") or "")
    if cs is None:
        for ics in status.get("initContainerStatuses") or []:
            waiting = (ics.get("state") or {}).get("waiting")
            if waiting and waiting.get("reason") != "PodInitializing":
                reason = waiting.get("reason") or reason
            elif "running" in (ics.get("state") or {}):
                reason = "Init"
        for c in status.get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False":
                reason = c.get("reason") or reason
    if meta.get("deletionTimestamp") and phase not in (SUCCEEDED, FAILED):
        phase = "Terminating"
    return _PodView(
        uid=meta.get("uid") or meta.get("name", ""), name=meta.get("name", ""),
        rank=pod_rank(pod), created=meta.get("creationTimestamp") or "", phase=phase,
        reason=reason, node=(pod.get("spec") or {}).get("nodeName") or "",
        restarts=int((cs or {}).get("restartCount") or 0),
        earlier_pods=sum(_int(annotations.get(k)) for k in L.INDEX_FAILURES), exit_code=exit_code,
        finished_at=finished, said=said, running="running" in state,
        started="running" in state or "terminated" in state,
    )


# ---- the state machine --------------------------------------------------------------------


class Tracker:
    """Feeds on job/pod events and log lines; keeps a JobState; yields warnings once each."""

    def __init__(self, name: str, namespace: str = "") -> None:
        self.state = JobState(name=name, namespace=namespace)
        self.seen_job = False
        self._pods: dict[str, _PodView] = {}  # uid -> latest view
        self._by_name: dict[str, str] = {}  # pod name -> uid
        self._rank_pods: dict[int, set[str]] = {}  # rank -> every pod uid seen for it
        self._warned: set[tuple[Any, ...]] = set()
        self._failed: set[str] = set()  # pod uids already in state.failures

    def feed(self, source: str, kind: str, payload: Any) -> list[str]:
        """One item as the I/O loop queues it; returns the new warnings.

        ("job"|"pods", "relist", [objects]), ("job"|"pods", ADDED|MODIFIED|DELETED,
        object), ("logs", "log", (pod name, line)).
        """
        if source == "job":
            return self.job_relist(payload) if kind == "relist" else self.job_event(kind, payload)
        if source == "pods":
            return self.pod_relist(payload) if kind == "relist" else self.pod_event(kind, payload)
        if source == "logs" and kind == "log":
            self.log_line(*payload)
        return []

    # -- job ------------------------------------------------------------------------------

    def job_event(self, kind: str, obj: dict[str, Any]) -> list[str]:
        """A watch event on the job object (ADDED, MODIFIED, DELETED)."""
        s = self.state
        if kind == "DELETED":
            if s.outcome is None:
                s.outcome, s.reason = DELETED, "Deleted"
            return []
        self.seen_job = True
        meta = obj.get("metadata") or {}
        s.namespace = meta.get("namespace") or s.namespace
        s.kind, s.backend = job_kind_backend(obj)
        s.nodes = job_nodes(obj) or s.nodes
        s.max_steps = job_max_steps(obj)
        s.created = meta.get("creationTimestamp") or s.created
        for r in range(s.nodes or 0):
            s.rank(r)
        done = terminal_condition(obj)
        if done is not None and s.outcome is None:
            s.outcome, cond = done
            s.reason = cond.get("reason") or cond.get("type", "")
            s.message = cond.get("message", "")
            s.finished = cond.get("lastTransitionTime") or (obj.get("status") or {}).get(
                "completionTime")
        return []

    def job_relist(self, items: list[dict[str, Any]]) -> list[str]:
        """The job as a fresh list shows it (empty: it is gone)."""
        if not items:
            return self.job_event("DELETED", {}) if self.seen_job else []
        return self.job_event("MODIFIED", items[0])

    # -- pods -----------------------------------------------------------------------------

    def pod_event(self, kind: str, pod: dict[str, Any]) -> list[str]:
        """A watch event on one of the job's pods."""
        view = _pod_view(pod)
        if view.rank is None:
            return []
        old = self._pods.get(view.uid)
        if kind == "DELETED":
            self._forget(view)
            return []
        self._pods[view.uid] = view
        self._by_name[view.name] = view.uid
        self._rank_pods.setdefault(view.rank, set()).add(view.uid)
        if view.exit_code not in (None, 0) and view.uid not in self._failed:
            self._failed.add(view.uid)
            self.state.failures.append(Failure(view.rank, view.name, view.exit_code,
                                               view.reason, view.finished_at or "", view.said))
        self._refresh_rank(view.rank)
        return self._pod_warnings(pod, view, old)

    def pod_relist(self, items: list[dict[str, Any]]) -> list[str]:
        """Every pod as a fresh list shows them: the ones missing were deleted meanwhile."""
        listed = {(p.get("metadata") or {}).get("uid") for p in items}
        warnings: list[str] = []
        for uid, view in list(self._pods.items()):
            if uid not in listed:
                self._forget(view)
        for pod in items:
            warnings += self.pod_event("MODIFIED", pod)
        return warnings

    def _forget(self, view: _PodView) -> None:
        self._pods.pop(view.uid, None)
        self._by_name.pop(view.name, None)
        self._refresh_rank(view.rank, gone=view)

    def pod_started(self, pod_name: str) -> bool:
        """Whether the pod's main container has run (so it has a log)."""
        uid = self._by_name.get(pod_name)
        return uid in self._pods and self._pods[uid].started

    def pods_to_follow(self) -> list[_PodView]:
        """Pods whose main container has run, so their logs can be read."""
        return [v for v in self._pods.values() if v.started]

    def _refresh_rank(self, rank: int, gone: _PodView | None = None) -> None:
        r = self.state.rank(rank)
        live = [self._pods[u] for u in self._rank_pods.get(rank, ()) if u in self._pods]
        if not live:
            if gone is not None and r.pod == gone.name and r.phase not in (SUCCEEDED, FAILED):
                r.phase, r.reason = "Deleted", ""
            return
        v = max(live, key=lambda p: (p.created, p.name))
        r.pod, r.phase, r.reason, r.node = v.name, v.phase, v.reason, v.node
        r.exit_code, r.finished_at = v.exit_code, v.finished_at
        # Pods seen come and go (a deleted one vanishes); the Job controller's count stays.
        r.restarts = max(len(self._rank_pods[rank]) - 1, v.earlier_pods) + v.restarts

    def _warn(self, key: tuple[Any, ...], text: str) -> list[str]:
        if key in self._warned:
            return []
        self._warned.add(key)
        return [text]

    def _pod_warnings(self, pod: dict[str, Any], v: _PodView, old: _PodView | None) -> list[str]:
        status = pod.get("status") or {}
        who = f"rank {v.rank} (pod {v.name})"
        out: list[str] = []
        conditions = {c.get("type"): c for c in status.get("conditions") or []
                      if c.get("status") in ("True", "False")}
        sched = conditions.get("PodScheduled") or {}
        if sched.get("status") == "False" and sched.get("reason") == "Unschedulable":
            msg = sched.get("message", "")
            out += self._warn(("sched", msg), f"FailedScheduling: {who}: {msg}")
        # The kubelet's eviction (status.reason) and the API's DisruptionTarget condition
        # tell the same story: one warning, the kubelet's words preferred.
        disrupted = (conditions.get("DisruptionTarget") or {}).get("status") == "True"
        evicted = status.get("reason") == "Evicted"
        if evicted:
            out += self._warn(("evicted", v.uid), f"{who} was evicted: {status.get('message', '')}")
        elif disrupted:
            c = conditions["DisruptionTarget"]
            out += self._warn(("evicted", v.uid),
                              f"{who} disrupted: {c.get('reason')}: {c.get('message', '')}")
        statuses = (status.get("initContainerStatuses") or []) + (
            status.get("containerStatuses") or [])
        for cs in statuses:
            out += self._container_warnings(cs, v, who, evicted or disrupted)
        return out

    def _container_warnings(self, cs: dict[str, Any], v: _PodView, who: str,
                            evicted: bool) -> list[str]:
        """Image pulls, config errors, CrashLoopBackOff, OOMKilled, restarts, exit codes.

        An evicted/disrupted pod's exit code is the eviction's, already reported.
        """
        name, image = cs.get("name", ""), cs.get("image", "")
        state, last = cs.get("state") or {}, cs.get("lastState") or {}
        waiting, term = state.get("waiting") or {}, state.get("terminated") or {}
        last_term = last.get("terminated") or {}
        restarts = int(cs.get("restartCount") or 0)
        out: list[str] = []
        reason = waiting.get("reason")
        if reason in _IMAGE_PULL:
            out += self._warn(("image", image), f"{who}: cannot pull image {image!r}: {reason}: "
                                                f"{waiting.get('message', '')}".rstrip(": "))
        elif reason in _CONFIG_ERRORS:
            out += self._warn(("config", v.uid, name),
                              f"{who}: {reason}: {waiting.get('message', '')}")
        elif reason == "CrashLoopBackOff":
            code = last_term.get("exitCode")
            out += self._warn(("crashloop", v.uid, name),
                              f"{who}: container {name} is in CrashLoopBackOff (last exit code "
                              f"{code})")
        for t in (term, last_term):  # once per container: later ones show as restarts
            if t.get("reason") == "OOMKilled":
                out += self._warn(("oom", v.uid, name),
                                  f"{who}: container {name} was OOMKilled (exit code "
                                  f"{t.get('exitCode')}): raise spec.resources.memory")
        if restarts and last_term:
            out += self._warn(("restart", v.uid, name, restarts),
                              f"{who}: container {name} restarted ({restarts}x), last exit code "
                              f"{last_term.get('exitCode')} ({last_term.get('reason', '')})")
        if (term and term.get("exitCode") not in (0, None) and term.get("reason") != "OOMKilled"
                and not evicted):
            code = term.get("exitCode")
            hint = f": {exitcodes.describe(code)}" if isinstance(code, int) else ""
            out += self._warn(("exit", v.uid, name, restarts),
                              f"{who}: container {name} exited with code {code} "
                              f"({term.get('reason', 'Error')}){hint}")
        return out

    # -- logs -----------------------------------------------------------------------------

    def rank_of_pod(self, pod_name: str) -> int | None:
        uid = self._by_name.get(pod_name)
        return self._pods[uid].rank if uid in self._pods else None

    def log_line(self, pod_name: str, line: str) -> None:
        """One line of a pod's log: JSON step/done records update that rank."""
        rank = self.rank_of_pod(pod_name)
        record = parse_record(line)
        if rank is None or record is None:
            return
        r = self.state.rank(rank)
        if record["event"] == "step":
            step, loss = record.get("step"), record.get("loss")
            if isinstance(step, int):
                r.step = step if r.step is None else max(r.step, step)
            if isinstance(loss, (int, float)) and math.isfinite(loss):
                r.loss = float(loss)
                r.losses = (r.losses + [float(loss)])[-MAX_HISTORY:]
        elif record["event"] == "resume" and isinstance(record.get("step"), int):
            r.step = record["step"]  # a restarted rank goes on from its checkpoint
        elif record["event"] == "done":
            r.done = True
            if isinstance(record.get("step"), int):
                r.step = record["step"]
        if isinstance(record.get("world_size"), int):
            r.world_size = record["world_size"]



# ---- the I/O loop ---------------------------------------------------------------------------


class Source(Protocol):
    """One kind of object under one selector: list it, watch it from a resourceVersion."""

    what: str

    def list(self) -> tuple[list[dict[str, Any]], str]: ...

    def watch(self, resource_version: str) -> Iterator[dict[str, Any]]: ...


@dataclass
class Backoff:
    """Bounded exponential backoff: `attempts` tries, then give up."""

    attempts: int = 8
    first: float = 0.5
    cap: float = 15.0

    def delay(self, failure: int) -> float:
        return min(self.cap, self.first * 2 ** (failure - 1))


class Reflector:
    """List, then watch from the list's resourceVersion, forever, robustly.

    Emits ("relist", items) after every list and (type, object) for each
    event; BOOKMARKs only advance the resourceVersion. A 410 relists; a
    transient failure reconnects from the last resourceVersion after a
    backoff, and `backoff.attempts` failures in a row end it with a
    ClusterError. Progress (any event) resets the failure count.
    """

    def __init__(self, source: Source, emit: Callable[[str, Any], None],
                 stop: threading.Event, backoff: Backoff | None = None) -> None:
        self.source, self.emit, self.stop = source, emit, stop
        self.backoff = backoff or Backoff()
        self.resource_version: str | None = None
        self.relists = 0

    def run(self) -> None:
        failures = 0
        while not self.stop.is_set():
            try:
                if self.resource_version is None:
                    items, self.resource_version = self.source.list()
                    self.relists += 1
                    self.emit("relist", items)
                    if self.stop.is_set():
                        return
                started, events = time.monotonic(), 0
                for event in self.source.watch(self.resource_version):
                    failures, events = 0, events + 1
                    self._event(event)
                    if self.stop.is_set():
                        return
                if not events and time.monotonic() - started < QUICK_END:
                    raise Transient("the watch ended at once, without an event")
            except Gone:
                self.resource_version = None
            except Transient as e:
                failures += 1
                if failures >= self.backoff.attempts:
                    raise ClusterError(
                        f"lost the watch on {self.source.what} after {failures} attempts: {e}"
                    ) from None
                self.stop.wait(self.backoff.delay(failures))

    def _event(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            if obj.get("code") in (429, 500, 503, 504):
                raise Transient(obj.get("message", ""))
            raise ClusterError(f"watch on {self.source.what}: {obj.get('message', obj)}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self.resource_version = rv
        if kind != "BOOKMARK":
            self.emit(kind, obj)


def wait_empty(source: Source, timeout: float) -> None:
    """Block until `source` lists nothing (watching deletions); ClusterError after `timeout`."""
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
            Reflector(source, emit, stop).run()
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
        except Transient:
            failures += 1
            if failures >= backoff.attempts:
                emit("warning", f"stopped following the log of pod {pod}: connection lost")
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


class Session:
    """Runs the watches and log followers in threads; the caller consumes `events()`.

    Each item is (kind, payload): ("warning", text), ("log", (rank, line)),
    ("update", None), ("terminal", None), ("error", exception). The tracker is
    only touched from the consuming thread.
    """

    def __init__(self, tracker: Tracker, sources: Sources, *, logs: bool = True,
                 tail: int | None = None, ranks: set[int] | None = None) -> None:
        self.tracker, self.sources = tracker, sources
        self.follow_logs, self.tail, self.ranks = logs and sources.logs is not None, tail, ranks
        self.stop = threading.Event()
        self._q: queue.Queue[tuple[str, str, Any]] = queue.Queue()
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
        for name, source in (("job", self.sources.job), ("pods", self.sources.pods)):
            def emit(kind: str, obj: Any, name: str = name) -> None:
                self._q.put((name, kind, obj))
            self._thread(name, Reflector(source, emit, self.stop).run)

    def close(self) -> None:
        self.stop.set()

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
            yield "warning", w
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
                try:
                    follow_log(self.sources.logs, pod, emit, self.stop, instance=key[1],
                               tail=tail)
                finally:
                    self._q.put(("logs", "log-end", key))
            self._log_threads[key] = self._thread(f"log-{view.name}", run)
