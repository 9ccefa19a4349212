"""`Tracker`: a pure state machine that follows one training job.

Fed job events, pod events and log lines (plain dicts, as the API sends
them), it keeps a `JobState` (per rank: pod, phase, restarts, last step and
loss; the goodput ledger of its restarts) and returns each warning the user must
see exactly once. No I/O; its one clock (for the ledger) is given.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from kdist import backends
from kdist.kube.watch.objects import (
    DELETED,
    FAILED,
    SUCCEEDED,
    PodView,
    checked_job_nodes,
    gang_of,
    gang_state,
    job_kind_backend,
    parse_record,
    parse_time,
    pod_view,
    restart_mode_of,
    shape_notes,
    terminal_condition,
    workload_state,
)
from kdist.kube.watch.podwarnings import Warned, once, pod_warnings
from kdist.kube.watch.state import Failure, JobState, RankState
from kdist.shared import exitcodes, facts
from kdist.shared.ledger import ANNOTATION as LEDGER
from kdist.shared.ledger import Ledger, grew, in_process_restart, shrank, spare_took
from kdist.shared.ledgerread import read as read_ledger
from kdist.shared.terminal import escape

__all__ = ["Failure", "JobState", "RankState", "Tracker"]
# An elastic gang's launcher lines on its size (kdist.runtime.elastic): shrank, grew back.
RESIZED = ("kdist.launch: the gang shrank to ", "kdist.launch: the gang grew to ")
MAX_HISTORY = 500


class Tracker:
    """Feeds on job/pod events and log lines; keeps a JobState; yields warnings once each."""

    def __init__(self, name: str, namespace: str = "",
                 clock: Callable[[], float] = time.time) -> None:
        self.clock = clock  # wall-clock seconds: when the ledger saw a line or a failure
        self.state = JobState(name=name, namespace=namespace)
        self.seen_job = False
        self._pods: dict[str, PodView] = {}  # uid -> latest view
        self._by_name: dict[str, str] = {}  # pod name -> uid
        self._rank_pods: dict[int, set[str]] = {}  # rank -> every pod uid seen for it
        self._warned = Warned()
        # (pod uid, when its container ended) of the exits already in state.failures
        self._failed: set[tuple[str, str]] = set()
        self._retried: dict[str, int] = {}  # per pod: the retryable exits the ledger counted
        self.ledger = Ledger()  # what this watch sees of restarts (kdist.shared.ledger)
        self._saved_ledger: dict[str, Any] | None = None  # the job's, as last read
        self._gang_restarts = 0  # in process (no pod shows it): a launcher's, or the ledger's
        self._adopted = -1  # the ledger's version when it took up the job's kept one

    @property
    def container(self) -> str:
        """kdist's container in the job's pods, as its backend names it (the default's
        until the job is seen)."""
        return backends.container(self.state.backend)

    def feed(self, source: str, kind: str, payload: Any) -> list[str]:
        """One item as the I/O loop queues it; returns the new warnings.

        ("job"|"pods", "relist", [objects]), ("job"|"pods", ADDED|MODIFIED|DELETED,
        object), ("logs", "log", (pod name, line)).
        """
        if source == "job":
            return self.job_relist(payload) if kind == "relist" else self.job_event(kind, payload)
        if source == "pods":
            return self.pod_relist(payload) if kind == "relist" else self.pod_event(kind, payload)
        if source in ("queue", "gang"):
            items = payload if kind == "relist" else ([] if kind == "DELETED" else [payload])
            event = self.queue_event if source == "queue" else self.gang_event
            return event(items[-1]) if items else []
        if source == "logs" and kind == "log":
            self.log_line(*payload)
        return []

    def queue_event(self, workload: dict[str, Any]) -> list[str]:
        """Kueue's Workload of this job: queued (and why), admitted, or never fitting."""
        s = self.state
        verdict, message = workload_state(workload)
        queue = escape((workload.get("spec") or {}).get("queueName") or s.queue_name or "?")
        s.queue_name, s.queue_status, s.queue_message = queue, verdict, message
        if verdict == "admitted":
            return self._warn(("queue", verdict), f"job {s.name} {message}")
        if verdict == "never-fits":
            return self._warn(("queue", verdict), f"job {s.name} can never be admitted in "
                                                  f"LocalQueue {queue}: {message}")
        return self._warn(("queue", message), f"job {s.name} queued in LocalQueue {queue}: "
                                              f"{message}")

    def gang_event(self, podgroup: dict[str, Any]) -> list[str]:
        """The job's PodGroup (a native gang): placed, or what holds its pods back."""
        s = self.state
        s.gang = escape((podgroup.get("metadata") or {}).get("name") or s.gang)
        s.gang_status, s.gang_min, s.gang_message = gang_state(podgroup)
        if s.gang_status != "unschedulable" or s.outcome:
            return []
        return self._warn(("gang", s.gang_message), f"job {s.name} {s.gang_words()}")

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
        # Bounded by kdist's own limits: ranks are made for every node up front.
        s.nodes = checked_job_nodes(obj) or s.nodes
        said = facts.read(meta.get("annotations"))  # what the spec said, as rendered
        s.max_steps, s.max_restarts, s.code = said.max_steps, said.max_restarts, said.code
        s.runtime, s.procs_per_node = said.runtime, said.procs_per_node  # None: "auto"
        s.restart_mode = restart_mode_of(obj)
        s.gang = escape(gang_of(obj)) or s.gang
        kept = read_ledger((meta.get("annotations") or {}).get(LEDGER))
        self._saved_ledger, s.notes = kept.ledger, [*shape_notes(obj), *map(escape, kept.problems)]
        if self._saved_ledger is not None and self.ledger.adopt(self._saved_ledger):
            self._adopted = self.ledger.version
        used = (self._saved_ledger or {}).get("restartsUsed")
        if isinstance(used, int) and used > self._gang_restarts:  # what a watch saw
            self._gang_restarts = used
            for r in list(self.state.ranks):
                self._refresh_rank(r)
        s.created = meta.get("creationTimestamp") or s.created
        for r in range(s.nodes or 0):
            s.rank(r)
        done = terminal_condition(obj)
        if done is not None and s.outcome is None:
            s.outcome, cond = done
            # The condition's words, escaped as read (kdist.shared.terminal): they reach
            # the user's terminal in tables, failure lines and exceptions.
            s.reason = escape(cond.get("reason") or cond.get("type", ""))
            s.message = escape(cond.get("message", ""))
            s.finished = cond.get("lastTransitionTime") or (obj.get("status") or {}).get(
                "completionTime")
        self.ledger_changed()
        return [w for note in s.notes for w in self._warn(("note", note), note)]

    def job_relist(self, items: list[dict[str, Any]]) -> list[str]:
        """The job as a fresh list shows it (empty: it is gone)."""
        if not items:
            return self.job_event("DELETED", {}) if self.seen_job else []
        return self.job_event("MODIFIED", items[0])

    # -- pods -----------------------------------------------------------------------------

    def pod_event(self, kind: str, pod: dict[str, Any]) -> list[str]:
        """A watch event on one of the job's pods."""
        view = pod_view(pod, self.container)
        if view.rank is None:
            return []
        if kind == "DELETED":
            self._forget(view)
            return []
        self._pods[view.uid] = view
        self._by_name[view.name] = view.uid
        self._rank_pods.setdefault(view.rank, set()).add(view.uid)
        # A pod restarted in place failed once per restart: its last exit is one more, kept
        # (by when it ended) whether or not its terminated state was seen before.
        ended = [(view.exit_code, view.finished_at or "", view.said, view.reason)]
        if view.last_exit is not None:
            ended.append((*view.last_exit, "Error"))
        for code, when, said, reason in ended:
            if code in (None, 0) or (view.uid, when) in self._failed:
                continue
            self._failed.add((view.uid, when))
            self.state.failures.append(Failure(view.rank, view.name, code, reason, when, said))
            if exitcodes.is_retryable(code) and self.state.outcome is None:
                self.ledger.failed(f"{self.state.unit} {view.rank} (pod {view.name})", code,
                                   when, self.clock(), self._last_step(), gone=view.gone)
                self._retried[view.uid] = self._retried.get(view.uid, 0) + 1
                self.ledger_changed()
        missed = view.restarts - self._retried.get(view.uid, 0) if view.in_place_exit else 0
        if missed > 0 and self.state.outcome is None:  # restarted in place, exit unseen
            self._retried[view.uid] = view.restarts
            self.ledger.unseen(f"{self.state.unit} {view.rank} (pod {view.name})", missed,
                               view.in_place_exit or 137, self.clock(), self._last_step())
            self.ledger_changed()
        self._refresh_rank(view.rank)
        return pod_warnings(self._warned, self.state.unit, pod, view)

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

    def _forget(self, view: PodView) -> None:
        self._pods.pop(view.uid, None)
        self._by_name.pop(view.name, None)
        if view.rank is not None:
            self._refresh_rank(view.rank, gone=view)

    def pod_started(self, pod_name: str) -> bool:
        """Whether the pod's main container has run (so it has a log)."""
        uid = self._by_name.get(pod_name)
        return uid in self._pods and self._pods[uid].started

    def pods_to_follow(self) -> list[PodView]:
        """Pods whose main container has run, so their logs can be read."""
        return [v for v in self._pods.values() if v.started]

    def container_finished(self, uid: str, instance: int) -> bool:
        """Whether that run (restartCount `instance`) of pod `uid`'s main container has
        exited for good, so its log is whole: the pod has ended, restarted it, or is gone."""
        v = self._pods.get(uid)
        return v is None or v.phase in (SUCCEEDED, FAILED) or v.restarts > instance

    def _refresh_rank(self, rank: int, gone: PodView | None = None) -> None:
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
        # A gang restart in process restarts every rank, and shows on no pod.
        r.restarts = max(r.restarts, self._gang_restarts)

    def _warn(self, key: tuple[Any, ...], text: str) -> list[str]:
        return once(self._warned, key, text)

    # -- the goodput ledger ---------------------------------------------------------------

    def _last_step(self) -> int | None:
        return max((r.step for r in self.state.ranks.values() if r.step is not None),
                   default=None)

    def ledger_changed(self) -> None:
        s = self.state
        # What this watch saw, once it saw more than the job's kept ledger (adopted, not
        # changed since: shown as its watch wrote it, totals included).
        if self.ledger.restarts and self.ledger.version != self._adopted:
            s.ledger = self.ledger.summary(s.max_restarts, parse_time(s.created), self.clock(),
                                           succeeded=s.outcome == SUCCEEDED)
        else:
            s.ledger = self._saved_ledger

    def _in_process(self, rank: int, pod_name: str, line: str, live: bool) -> None:
        """``kdist.launch: restarting this node's workers (restart N of M, in process):
        <why>; exit C`` (``kdist.runtime.launch._again``): no pod or container shows it."""
        said = in_process_restart(line)
        if said is None or self.state.outcome is not None:
            return
        if said.number > self._gang_restarts:
            self._gang_restarts = said.number
            for r in list(self.state.ranks):
                self._refresh_rank(r)
        who = f"{self.state.unit} {rank} (pod {pod_name})"
        if live and self.ledger.restarted_in_process(said, self.clock(), self._last_step(),
                                                     who=who):
            self.ledger_changed()

    def _spare(self, slot: int, line: str, live: bool) -> None:
        """A warm spare's launcher: waiting (free), or taking a lost node's rank."""
        took = spare_took(line)
        if took is None:
            self.state.spares.setdefault(slot, "free")
            return
        self.state.spares[took[0]] = f"took rank {took[1]}"
        if live and self.ledger.spare_took(*took):
            self.ledger_changed()

    def _shrank(self, line: str, live: bool) -> None:
        """An elastic gang's survivor: the gang went on at fewer nodes (``spec.minNodes``), or
        grew back."""
        smaller, larger = shrank(line), grew(line)
        if smaller is not None:
            self.state.size = smaller[0]
            if live and self.ledger.shrank_to(*smaller):
                self.ledger_changed()
        elif larger is not None:  # grew back at a step boundary
            self.state.size = larger[0]
            if live and self.ledger.grew_to(*larger):
                self.ledger_changed()

    # -- logs -----------------------------------------------------------------------------

    def rank_of_pod(self, pod_name: str) -> int | None:
        uid = self._by_name.get(pod_name)
        return self._pods[uid].rank if uid in self._pods else None

    def log_line(self, pod_name: str, line: str, live: bool = True) -> None:
        """One line of a pod's log: JSON step/done records update that rank; the launcher's
        own line (``records.launcher_said``) of a restart in process is a gang restart (in
        the ledger when `live`, seen as written: a log read back says nothing of when)."""
        rank = self.rank_of_pod(pod_name)
        if rank is None:
            return
        if line.startswith("kdist.launch: restarting "):
            self._in_process(rank, pod_name, line, live)
            return
        if line.startswith("kdist.launch: spare in slot "):
            self._spare(rank, line, live)
            return
        if line.startswith(RESIZED):
            self._shrank(line, live)
            return
        record = parse_record(line)
        if record is None:
            return
        r = self.state.rank(rank)
        if record["event"] in ("step", "resume") and isinstance(record.get("step"), int):
            before = self.ledger.version
            self.ledger.stepped(record["step"], self.clock(), record["event"] == "resume",
                                record.get("source"))
            if self.ledger.version != before:
                self.ledger_changed()
        if record["event"] == "step":
            step, loss = record.get("step"), record.get("loss")
            if isinstance(step, int):
                r.step = step if r.step is None else max(r.step, step)
            if isinstance(loss, (int, float)) and math.isfinite(loss):
                r.loss = float(loss)
                r.losses = (r.losses + [float(loss)])[-MAX_HISTORY:]
            for name in ("samples_per_s", "steps_per_s"):
                value = record.get(name)
                if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
                    setattr(r, name, float(value))
        elif record["event"] == "resume" and isinstance(record.get("step"), int):
            r.step = record["step"]  # a restarted rank goes on from its checkpoint
        elif record["event"] == "done":
            r.done = True
            if isinstance(record.get("step"), int):
                r.step = record["step"]
        if isinstance(record.get("world_size"), int):
            r.world_size = record["world_size"]

