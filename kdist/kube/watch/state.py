"""What kdist knows of a job while it follows it: per rank, its failures, its queue.

`kdist.kube.watch.tracker.Tracker` fills these in from API events and log lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kdist.kube.watch.objects import DELETED
from kdist.shared import exitcodes
from kdist.shared.terminal import escape


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
    samples_per_s: float | None = None  # the whole job's, as the rank's last step line said
    steps_per_s: float | None = None
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
    queue_name: str = ""  # Kueue: the LocalQueue, and its verdict and words
    queue_status: str = ""  # "" (no queue) | queued | admitted | never-fits
    queue_message: str = ""
    code: str = ""  # sha256 of the shipped workdir (spec.workdir), "" when none was
    runtime: str = ""  # sha256 of the shipped runtime (spec.runtime), "" for the image's
    max_restarts: int | None = None  # spec.distributed.maxRestarts (from the pods' env)
    # "inPlace" | "recreate": what the job's pod template says (kube.watch.objects.restart_mode_of)
    restart_mode: str = ""
    # A native gang (distributed.gang): its PodGroup (kube.watch.objects.gang_of), "" when none;
    # the scheduler's verdict on it (kube.watch.objects.gang_state) and minCount, once read.
    gang: str = ""
    # "" (not read) | waiting | unschedulable | placed | unreadable (gang_message: why)
    gang_status: str = ""
    gang_min: int | None = None
    gang_message: str = ""
    # spec.procsPerNode (from the pods' env; the spec's default until the job says);
    # None for "auto" (one process per GPU: not known here).
    procs_per_node: int | None = 1
    ranks: dict[int, RankState] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    # The goodput ledger (kdist.shared.ledger): this watch's, else the job's annotation's
    ledger: dict[str, Any] | None = None
    # What of the job object kdist did not read as its own, one line each: a shape it does
    # not write, ledger entries skipped (kdist.shared.ledgerread)
    notes: list[str] = field(default_factory=list)
    # Warm spares (spec.distributed.spares), by slot: "free", or "took rank R" (their
    # launchers' lines, kdist.runtime.membership).
    spares: dict[int, str] = field(default_factory=dict)
    # The nodes an elastic gang (spec.minNodes) trains on now, once it shrank (None: all
    # of spec.nodes; its survivors' launchers say it, kdist.runtime.elastic).
    size: int | None = None

    def gang_holds(self) -> bool:
        """Whether a native gang holds pods back now: it has not been placed, and some
        rank's pod is still pending (not yet on a node)."""
        return bool(self.gang) and self.gang_status in ("waiting", "unschedulable") and \
            not self.outcome and any(r.phase == "Pending" for r in self.ranks.values())

    def gang_words(self) -> str:
        """What holds a native gang's pods and why they wait (or that it was placed)."""
        pods = f"all {self.gang_min} pods" if self.gang_min else "all its pods"
        if self.gang_status == "unschedulable":
            return (f"waits as a gang (PodGroup {self.gang}): the scheduler cannot place {pods} "
                    f"at once, so none starts: {self.gang_message}")
        if self.gang_status == "placed":
            return f"was placed as a gang (PodGroup {self.gang}): {pods} at once"
        return (f"waits as a gang (PodGroup {self.gang}): no pod starts until {pods} fit at "
                f"once: {self.gang_message}")

    @property
    def phase(self) -> str:
        if self.outcome:
            return self.outcome
        if self.queue_status in ("queued", "never-fits") and \
                all(r.phase in ("Pending", "Deleted") for r in self.ranks.values()):
            return "Queued"
        if any(r.phase not in ("Pending", "Deleted") for r in self.ranks.values()):
            return "Running"
        return "Pending"

    def rank(self, r: int) -> RankState:
        if r not in self.ranks:
            self.ranks[r] = RankState(r)
        return self.ranks[r]

    @property
    def unit(self) -> str:
        """What one of `ranks` (a pod, by its index) is called: "rank" only when it runs one
        process, so that its index is torch's RANK; else "node" (it holds several ranks)."""
        return "rank" if self.procs_per_node == 1 else "node"

    def ranks_of(self, node: int) -> str:
        """The torch ranks pod `node` holds ("2-3"); "?" when procsPerNode is unknown."""
        ppn = self.procs_per_node
        if ppn is None:
            return "?"
        return str(node) if ppn == 1 else f"{node * ppn}-{node * ppn + ppn - 1}"

    def rank_phase(self, r: RankState) -> str:
        """A rank's phase for display: "Gone" once the job is over and its pod deleted."""
        return "Gone" if self.outcome and not r.pod else r.phase

    def first_failure(self) -> Failure | None:
        """The pod whose failure explains the job's: the most telling, then the earliest.

        A code error before a kill before a lost peer (``exitcodes.severity``).
        """
        return min(self.failures, default=None,
                   key=lambda f: (_severity(f), f.finished_at, f.rank))

    def failure_line(self) -> str:
        """One line naming why the job failed: the rank and its exit code when known.

        Escaped whole (kdist.shared.terminal): names and words from the cluster in it
        are shown, never obeyed, and cannot break it into two lines.
        """
        return escape(self._failure_words())

    def _failure_words(self) -> str:
        bad = self.first_failure()
        what = f"job {self.name} failed"
        if self.outcome == DELETED:
            return f"job {self.name} was deleted before it finished"
        if bad is not None:
            why = f" ({bad.reason})" if bad.reason and bad.reason != "Error" else ""
            what += (f": {self.unit} {bad.rank} (pod {bad.pod}) exited with code "
                     f"{bad.exit_code}{why}")
            if bad.said:
                what += f": {bad.said}"
        if self.reason:
            what += f" [{self.reason}: {self.message}]" if self.message else f" [{self.reason}]"
        return what

    def eta_s(self) -> float | None:
        """Seconds left at the current pace: (max steps - step) / steps per second (rank 0)."""
        r = self.ranks.get(0)
        if self.outcome or r is None or r.step is None or not self.max_steps or \
                not r.steps_per_s:
            return None
        return max(0.0, (self.max_steps - r.step) / r.steps_per_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "namespace": self.namespace, "kind": self.kind,
            "backend": self.backend, "nodes": self.nodes, "maxSteps": self.max_steps,
            "phase": self.phase, "created": self.created, "finished": self.finished,
            "reason": self.reason, "message": self.message, "etaSeconds": self.eta_s(),
            "queue": ({"localQueue": self.queue_name, "status": self.queue_status,
                       "message": self.queue_message} if self.queue_status else None),
            "code": self.code or None, "runtime": self.runtime or None,
            "maxRestarts": self.max_restarts,
            "restartMode": self.restart_mode or None,
            "gang": ({"podGroup": self.gang, "minCount": self.gang_min,
                      "status": self.gang_status or None, "message": self.gang_message or None}
                     if self.gang else None),
            "procsPerNode": self.procs_per_node,
            "ranks": [dict(self.ranks[r].to_dict(), phase=self.rank_phase(self.ranks[r]))
                      for r in sorted(self.ranks)],
            "failures": [f.__dict__ for f in sorted(self.failures, key=lambda f: f.finished_at)],
            # The failure failure_line() names: a code error outranks the 203 of a peer that
            # only saw it (the list above is by time, 1 s resolution, so either may come first).
            "firstFailure": (bad.__dict__ if (bad := self.first_failure()) else None),
            "ledger": self.ledger,
            # warm spares by slot ("free", "took rank R"), where the job has any
            **({"spares": {str(k): v for k, v in sorted(self.spares.items())}}
               if self.spares else {}),
            # an elastic gang's nodes now, where it shrank below spec.nodes
            **({"size": self.size} if self.size is not None and self.size != self.nodes
               else {}),
        }


def _severity(f: Failure) -> int:
    """exitcodes.severity, where a pod that ran out of restarts counts as what it stood for
    (its launcher's line says: a lost peer is still the echo of a failure elsewhere)."""
    if f.exit_code == exitcodes.RESTARTS_SPENT and f"(exit {exitcodes.PEER_LOST}:" in f.said:
        return exitcodes.severity(exitcodes.PEER_LOST)
    return exitcodes.severity(f.exit_code)
