"""The goodput ledger: what each gang restart of a job cost, as its watch saw it.

Per restart: its cause (the most telling failure), when it struck (the failed
container's finishedAt), when the gang was back (the first step or resume line
after it), the steps done twice (the highest step logged before the fault minus
the step the gang resumed from). Totals: restarts used of those allowed, seconds
and steps lost, and goodput (the share of the job's time not lost to restarts).

`kdist submit`'s watch keeps it on the training object as the annotation
``kdist.dev/ledger`` (JSON), so any client (`kdist status`, `Client.status`,
kubectl) reads it; a job nobody watched through a restart has none. `kdist run
--local` keeps one too (``kdist.local.ledger``) and prints it at its end.

A launcher that restarts its own workers without exiting (in process) says so in
one line, `IN_PROCESS` (`in_process_line` writes it, `in_process_restart` reads it):
every node says it once per restart, and the ledger counts each restart once. A warm
spare that takes a lost node's rank says so (`SPARE_TOOK`, ``kdist.runtime.membership``):
the open restart records it (``spare``: "slot S took rank R"); so does an elastic gang that
goes on smaller (`SHRANK`, ``kdist.runtime.elastic``: ``shrank``, "shrank to N nodes: node K
lost"), and one that grows back, admitting a newcomer at a step boundary (`GREW`: ``grew``,
"grew to N nodes: slot S admitted"; a planned re-form, counted as a restart).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, NamedTuple

from kdist.shared import exitcodes
from kdist.shared.records import launcher_said
from kdist.shared.records import parse_time as epoch

#: The annotation the ledger is kept in (JSON, bounded by MAX_ENTRIES); read back by
#: ``kdist.shared.ledgerread``, which checks it.
ANNOTATION = "kdist.dev/ledger"
MAX_ENTRIES = 100
#: Two exits this close in time (their containers' finishedAt) are one restart's.
SAME_S = 1.0
#: A launcher's words on a node it found lost (``kdist.runtime.heartbeat.lost_line``): at
#: the same severity, that cause names the origin, its survivors' lost peers do not.
LOST_NODE = re.compile(r"\bnode \d+ lost \(silent for ")


def _names_no_lost_node(cause: str) -> bool:
    return LOST_NODE.search(cause) is None


# The launcher's line (after its "kdist.launch: ") when it restarts its workers in process.
IN_PROCESS = re.compile(r"restarting this node's workers \(restart (\d+) of (\d+), in process\): "
                        r"(.*); exit (\d+)\s*$")


# The launcher's line (after its "kdist.launch: ") when a warm spare takes a node rank.
SPARE_TOOK = re.compile(r"spare in slot (\d+) takes node rank (\d+)\s*$")


# The launcher's line (after its "kdist.launch: ") when an elastic gang re-forms smaller
# (``kdist.runtime.elastic.shrink_line``).
SHRANK = re.compile(r"the gang shrank to (\d+) nodes: node ([\d, ]+) lost\b")


# The launcher's line (after its "kdist.launch: ") when an elastic gang re-forms larger
# (``kdist.runtime.elastic.grow_line``).
GREW = re.compile(r"the gang grew to (\d+) nodes: slot ([\d, ]+) admitted\b")


def grew(line: str) -> tuple[int, str] | None:
    """(the nodes the gang has now, the newcomers' slots as said) of a launcher's own line
    saying an elastic gang grew, else None."""
    said = launcher_said(line)
    m = GREW.match(said) if said is not None else None
    return None if m is None else (int(m.group(1)), m.group(2).strip())


def shrank(line: str) -> tuple[int, str] | None:
    """(the nodes the gang has now, the lost node ranks as said) of a launcher's own line
    saying an elastic gang shrank, else None."""
    said = launcher_said(line)
    m = SHRANK.match(said) if said is not None else None
    return None if m is None else (int(m.group(1)), m.group(2).strip())


def spare_took(line: str) -> tuple[int, int] | None:
    """(slot, rank) of a launcher's own line saying a spare took that rank, else None."""
    said = launcher_said(line)
    m = SPARE_TOOK.match(said) if said is not None else None
    return None if m is None else (int(m.group(1)), int(m.group(2)))


class InProcess(NamedTuple):
    """A launcher's restart of its own workers: which restart, of how many, why."""

    number: int
    of: int
    cause: str
    exit_code: int


def in_process_line(number: int, of: int, cause: str, exit_code: int) -> str:
    """The launcher's words (it prefixes "kdist.launch: ") for restart `number` in process."""
    return (f"restarting this node's workers (restart {number} of {of}, in process): "
            f"{cause}; exit {exit_code}")


def in_process_restart(line: str) -> InProcess | None:
    """The restart a launcher's own line (`kdist.launch: restarting ...` at the line's
    start, ``records.launcher_said``) says; a line with anything before it is a worker's."""
    said = launcher_said(line)
    m = IN_PROCESS.match(said) if said is not None else None
    if m is None:
        return None
    number, of, cause, code = m.groups()
    return InProcess(int(number), int(of), cause, int(code))


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


@dataclass
class Restart:
    """One gang restart."""

    cause: str
    exit_code: int
    fault_at: float
    last_step: int | None = None  # the highest step logged before the gang was back
    resumed_at: float | None = None
    resumed_step: int | None = None  # the step it went on from (a checkpoint's, or 0)
    gone: bool = False  # its cause is a pod that went away (deleted, evicted): the origin
    spare: str = ""  # a warm spare that took the lost node's rank: "slot S took rank R"
    shrank: str = ""  # an elastic gang went on smaller: "shrank to N nodes: node K lost"
    resumed_from: str = ""  # what the resume line said: "memory of rank 0, step 53" (DDP)
    grew: str = ""  # an elastic gang grew back: "grew to N nodes: slot S admitted"

    @property
    def seconds_lost(self) -> float | None:
        return None if self.resumed_at is None else max(0.0, self.resumed_at - self.fault_at)

    @property
    def steps_lost(self) -> int | None:
        if self.resumed_step is None or self.last_step is None:
            return None
        return max(0, self.last_step - self.resumed_step)

    def to_dict(self) -> dict[str, Any]:
        return {"cause": self.cause, "exitCode": self.exit_code, "faultAt": iso(self.fault_at),
                "resumedAt": iso(self.resumed_at), "lastStep": self.last_step,
                "resumedStep": self.resumed_step,
                "secondsLost": None if self.seconds_lost is None else round(self.seconds_lost, 1),
                "stepsLost": self.steps_lost, **({"spare": self.spare} if self.spare else {}),
                **({"shrank": self.shrank} if self.shrank else {}),
                **({"resumedFrom": self.resumed_from} if self.resumed_from else {}),
                **({"grew": self.grew} if self.grew else {})}


@dataclass
class Ledger:
    """The restarts of one job, in order; the last may still be open (not resumed)."""

    restarts: list[Restart] = field(default_factory=list)
    version: int = 0  # bumped on every change worth writing down
    in_process: set[int] = field(default_factory=set)  # the numbers of those counted

    @property
    def open(self) -> Restart | None:
        last = self.restarts[-1] if self.restarts else None
        return last if last is not None and last.resumed_at is None else None

    def failed(self, who: str, code: int, finished_at: str | None, now: float,
               last_step: int | None, said: str = "", apart: bool = False,
               gone: bool = False) -> None:
        """A pod's container exited `code`: a new restart, or a more telling cause of the
        one under way (a kill before the lost peers it caused). `said`: what its
        launcher said of it, added to the cause. `apart`: a restart of its own even while
        one is open (no step line said when that one was back; the local runner knows
        each restart it makes). `gone`: the pod went away (deleted, evicted, disrupted):
        of exits alike (143 from its SIGTERM, 143 from its peers' preemption vote) its
        is the cause."""
        cause = f"{who} exited with code {code}: {exitcodes.describe(code)}"
        cause += f"; {said}" if said else ""
        current = None if apart else self.open
        ended = epoch(finished_at)
        if current is None and ended is not None:  # an exit a ledger kept before already?
            current = next((r for r in self.restarts if abs(r.fault_at - ended) < SAME_S), None)
        if current is None:
            if len(self.restarts) >= MAX_ENTRIES:
                return
            self.restarts.append(Restart(cause, code, epoch(finished_at) or now, last_step,
                                         gone=gone))
            self.version += 1
        elif (exitcodes.severity(code), not gone, _names_no_lost_node(cause)) < \
                (exitcodes.severity(current.exit_code), not current.gone,
                 _names_no_lost_node(current.cause)):
            current.cause, current.exit_code, current.gone = cause, code, gone
            current.fault_at = min(current.fault_at, epoch(finished_at) or now)
            self.version += 1

    def unseen(self, who: str, restarts: int, code: int, now: float,
               last_step: int | None) -> None:
        """`restarts` restarts in place of `who` whose exit no watch saw (the kubelet
        restarted its containers between two updates read): each was retryable (its restart
        rule fires on nothing else), counted by the kubelet's record of the exit (`code`).

        However many they are, they are one restart here: no step line came between them,
        so each after the first is the same restart, still open. Said once, so a count of
        2147483647 (a pod's word, believed up to 18 digits) costs what a count of 1 does."""
        if restarts > 0:
            self.failed(who, code, None, now, last_step,
                        said="restarted in place before its exit was seen")

    def adopt(self, kept: dict[str, Any]) -> bool:
        """Go on from the ledger a watch kept on the job (``ledgerread.read``), when it knows
        more restarts than this one: a later reader (`kdist status`, a watch attached again)
        adds to the history, never writes a shorter one over it. Whether it did."""
        entries = [e for e in kept.get("restarts", []) if isinstance(e, dict)]
        if len(entries) <= len(self.restarts):
            return False

        def num(value: Any) -> int | None:
            return value if isinstance(value, int) else None

        def when(value: Any) -> float | None:
            return epoch(value) if isinstance(value, str) else None

        self.restarts = [Restart(
            str(e.get("cause", "")), num(e.get("exitCode")) or 0,
            when(e.get("faultAt")) or 0.0, num(e.get("lastStep")),
            when(e.get("resumedAt")), num(e.get("resumedStep")),
            spare=e["spare"] if isinstance(e.get("spare"), str) else "",
            shrank=e["shrank"] if isinstance(e.get("shrank"), str) else "",
            resumed_from=e["resumedFrom"] if isinstance(e.get("resumedFrom"), str) else "",
            grew=e["grew"] if isinstance(e.get("grew"), str) else "") for e in entries]
        self.in_process |= set(range(1, len(self.restarts) + 1))
        self.version += 1
        return True

    def restarted_in_process(self, restart: InProcess, now: float, last_step: int | None,
                             who: str = "") -> bool:
        """A launcher (of `who`) said it restarts its workers in process: restart
        `restart.number`, counted once however many nodes say it, its cause the most
        telling one they said (a kill before the lost peers it caused; a node found lost
        before its survivors' lost peers); a pod's failure
        the watch saw first (a deleted pod, whose survivors restart in process) is the
        same restart. Whether the ledger changed."""
        cause = (f"{who}: " if who else "") + \
            f"{restart.cause} (exit {restart.exit_code}: {exitcodes.describe(restart.exit_code)})"
        current = self.open
        new = restart.number not in self.in_process
        self.in_process.add(restart.number)
        if current is None:
            if not new or len(self.restarts) >= MAX_ENTRIES:
                return False  # another node's word on a restart the gang is back from
            self.restarts.append(Restart(cause, restart.exit_code, now, last_step))
            self.version += 1
            return True
        if (exitcodes.severity(restart.exit_code), _names_no_lost_node(cause)) < \
                (exitcodes.severity(current.exit_code), _names_no_lost_node(current.cause)):
            current.cause, current.exit_code, current.gone = cause, restart.exit_code, False
            self.version += 1
            return True
        return False

    def spare_took(self, slot: int, rank: int) -> bool:
        """A warm spare in ``slot`` took node rank ``rank``: the open restart's (the one its
        rank's loss made). Whether the ledger changed."""
        current = self.open
        if current is None:
            return False
        current.spare = f"slot {slot} took rank {rank}"
        self.version += 1
        return True

    def shrank_to(self, nodes: int, lost: str) -> bool:
        """An elastic gang re-formed at ``nodes`` nodes without node(s) ``lost``: the open
        restart's (the one the loss made), said once however many survivors say it.
        Whether the ledger changed."""
        return self._resized("shrank", f"shrank to {nodes} nodes: node {lost} lost")

    def grew_to(self, nodes: int, slots: str) -> bool:
        """An elastic gang re-formed at ``nodes`` nodes, admitting the newcomers in ``slots``:
        the open restart's (the planned re-form), said once. Whether the ledger changed."""
        return self._resized("grew", f"grew to {nodes} nodes: slot {slots} admitted")

    def _resized(self, field: str, words: str) -> bool:
        """The open restart's ``field`` (shrank, grew) set to ``words`` once."""
        current = self.open
        if current is None or getattr(current, field) == words:
            return False
        setattr(current, field, words)
        self.version += 1
        return True

    def stepped(self, step: int, now: float, resumed: bool, source: object = None) -> None:
        """A rank logged `step` (`resumed`: it said it resumed from that step, `source` what
        from, as its line said): the gang is back when it resumed, or went back to a step
        at or before the last one seen."""
        current = self.open
        if current is None:
            return
        if not resumed and (current.last_step is None or step > current.last_step):
            current.last_step = step  # the old attempt's last lines, still arriving
            return
        current.resumed_at = max(now, current.fault_at)
        current.resumed_step = step if resumed else step - 1
        if resumed and isinstance(source, str) and source.isprintable() and len(source) <= 64:
            current.resumed_from = source  # a worker's words: kept only when short and plain
        self.version += 1

    def summary(self, max_restarts: int | None, started: float | None,
                now: float, succeeded: bool = False) -> dict[str, Any]:
        """The ledger with its totals, as kept in the annotation and shown by status.

        A restart still open counts as lost until `now`, unless the job `succeeded`: then
        it did come back, and no step line said when (a script that prints none)."""
        lost = [r.seconds_lost for r in self.restarts if r.seconds_lost is not None]
        steps = [r.steps_lost for r in self.restarts if r.steps_lost is not None]
        open_ = None if succeeded else self.open
        lost_s = sum(lost) + (max(0.0, now - open_.fault_at) if open_ is not None else 0.0)
        elapsed = None if started is None else max(0.0, now - started)
        goodput = None if not elapsed else round(max(0.0, 1 - lost_s / elapsed), 3)
        return {"restarts": [r.to_dict() for r in self.restarts],
                "restartsUsed": len(self.restarts), "restartsAllowed": max_restarts,
                "secondsLost": round(lost_s, 1), "stepsLost": sum(steps),
                "succeeded": succeeded,
                "goodput": goodput, "asOf": iso(now)}
