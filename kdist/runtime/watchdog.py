"""``progressTimeoutSeconds``: a job whose ranks all stop making progress ends as a hang.

A rank that hangs (a deadlock, a stuck data loader, a peer that is alive but
never joins the next collective) fails nothing: every other rank just waits
in its next collective, up to ``collectiveTimeoutSeconds``, or forever in
code that is not a collective. The watchdog sees the silence instead.

Progress is the workers' output (``kdist.runtime.output``): any output of a
user's script (a log line, a progress bar's redraw), or a JSON log line of
kdist's own workloads. It is judged for the **whole job**: a rank that prints
only at start (many scripts print only on rank 0) is not a hang while
another rank still prints. Every node adds its progress to one counter in the
rendezvous store (the agent's, on the master) once a second; when that total
has not moved for the limit, every node stops its workers within about a
second of the others and exits ``exitcodes.HUNG``, and the gang restarts.
The clock starts at the job's first output: starting up (imports, the
rendezvous, loading a checkpoint) is not watched.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kdist.runtime.output import Output
from kdist.runtime.plan import LaunchPlan

TICK_S = 1.0
STORE_KEY = "kdist-watchdog/progress"
STORE_TIMEOUT_S = 5


class JobProgress:
    """The job's total progress: this node's, plus (several nodes) everyone's via the store."""

    def __init__(self, plan: LaunchPlan, output: Output) -> None:
        self.plan, self.output = plan, output
        self._store: Any = None  # a TCPStore client, once the master's store answers
        self._sent = 0

    def total(self) -> int:
        mine = self.output.progress()
        if self.plan.nnodes == 1:
            return mine
        if self._store is None:
            import torch.distributed as dist

            try:  # node 0's agent opens the store at the rendezvous: maybe not yet
                self._store = dist.TCPStore(
                    self.plan.master_addr, self.plan.master_port, is_master=False,
                    timeout=timedelta(seconds=STORE_TIMEOUT_S))
            except Exception:
                return mine
        total = self._store.add(STORE_KEY, mine - self._sent)
        self._sent = mine
        return int(total)


class Watchdog:
    """Calls ``on_hang(silent_s)`` once, when ``progress()`` stopped growing for ``limit_s``.

    ``progress`` may raise (the store went away with node 0): the watchdog then
    stops watching, since the gang is failing anyway.
    """

    def __init__(self, limit_s: float, progress: Callable[[], int],
                 on_hang: Callable[[float], None], *,
                 clock: Callable[[], float] = time.monotonic, tick_s: float = TICK_S) -> None:
        self.limit_s, self.progress, self.on_hang = limit_s, progress, on_hang
        self.clock, self.tick_s = clock, tick_s
        self.fired = False
        self._last = 0
        self._moved_at: float | None = None  # None until the first progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kdist-watchdog", daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def check(self) -> bool:
        """One look at the progress; True when the limit is reached (and on_hang was called)."""
        now = self.clock()
        seen = self.progress()
        if seen != self._last:
            self._last, self._moved_at = seen, now
            return False
        if self._moved_at is None or now - self._moved_at < self.limit_s:
            return False
        self.fired = True
        self.on_hang(now - self._moved_at)
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                if self.check():
                    return
            except Exception:  # the store is gone: so is the master, the gang is ending
                return
