"""The goodput ledger of one ``kdist run --local`` (``kdist.shared.ledger``), kept from what
the local runner sees: each node's exit and the restart it makes of them all, and every
line the nodes print (steps and resumes; the launchers' own lines, a restart in process).

Per restart: the cause (the failed node, its exit code and what its launcher said of it),
when it struck (the first failing node's `exiting` line or exit, whichever came first),
when the nodes were back (the first step or resume line after it) and the steps done
twice. The CLI prints it at the run's end as `kdist status` prints a job's.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

from kdist.shared.ledger import Ledger, grew, in_process_restart, iso, shrank, spare_took
from kdist.shared.records import parse_record

# A launcher's last words on its node's failure (kdist.runtime.agent): "...; exiting N: why".
_EXITING = re.compile(r"kdist\.launch: (.*); exiting (\d+)(?:: .*)?$")


class LocalLedger:
    """Fed by the runner (`exited`, `restarting`) and by each node's lines (`line`), from
    one pump thread per node: every call holds one lock."""

    def __init__(self, max_restarts: int | None, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.ledger = Ledger()
        self.max_restarts = max_restarts
        self.started = clock()
        self._lock = threading.Lock()
        self._step: int | None = None  # the highest step logged since the nodes were last back
        self._said: dict[int, str] = {}  # node -> its launcher's words on its failure
        self._fault: float | None = None  # the first failure this attempt, as seen
        self._attempt = 0  # the ledger's restarts when this attempt began

    def line(self, node: int, text: str) -> None:
        """One line node `node` printed (a worker's, or its launcher's own)."""
        if text.startswith("kdist.launch: "):  # the launcher's own (a worker's are prefixed)
            self._launcher_line(node, text)
            return
        record = parse_record(text) if '{"event"' in text else None
        if record is None or record["event"] not in ("step", "resume"):
            return
        step = record.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            return
        with self._lock:
            resumed, open_ = record["event"] == "resume", self.ledger.open
            self.ledger.stepped(step, self.clock(), resumed, record.get("source"))
            if resumed or (open_ is not None and self.ledger.open is None):
                self._step = step  # back: the steps count from here again
            elif self._step is None or step > self._step:
                self._step = step

    def _launcher_line(self, node: int, text: str) -> None:
        now = self.clock()
        again = in_process_restart(text)
        took = spare_took(text)
        smaller = shrank(text)
        larger = grew(text)
        with self._lock:
            if again is not None:
                self.ledger.restarted_in_process(again, now, self._step)
                return
            if took is not None:
                self.ledger.spare_took(*took)
                return
            if smaller is not None:
                self.ledger.shrank_to(*smaller)
                return
            if larger is not None:
                self.ledger.grew_to(*larger)
                return
            m = _EXITING.search(text.rstrip())
            if m is not None and m.group(2) != "0":
                self._said[node] = m.group(1)
                self._fault = now if self._fault is None else min(self._fault, now)

    def exited(self, node: int, code: int) -> None:
        """Node `node`'s launcher exited with `code` (as the job would count it)."""
        if code:
            with self._lock:
                now = self.clock()
                self._fault = now if self._fault is None else min(self._fault, now)

    def restarting(self, node: int, code: int) -> None:
        """The runner restarts every node: `node`'s exit `code` told most. One fault is one
        restart: where a surviving node's launcher already restarted its workers in process
        for it this attempt (its peer's loss), that restart is this one, its cause the more
        telling of the two, struck at the earlier time."""
        with self._lock:
            now = self.clock()
            fault = self._fault if self._fault is not None else now
            current = self.ledger.open
            same = current is not None and len(self.ledger.restarts) > self._attempt
            self.ledger.failed(f"node {node}", code, iso(fault), now, self._step,
                               said=self._said.get(node, ""), apart=not same)
            if same and current is not None:
                current.fault_at = min(current.fault_at, fault)
            self._said, self._fault = {}, None
            self._attempt = len(self.ledger.restarts)

    def summary(self, succeeded: bool) -> dict[str, Any] | None:
        """The ledger with its totals (as `status -o json` has it), or None: no restart."""
        with self._lock:
            if not self.ledger.restarts:
                return None
            return self.ledger.summary(self.max_restarts, self.started, self.clock(),
                                       succeeded=succeeded)
