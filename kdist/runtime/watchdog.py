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
job's store on the master port (rank 0's worker serves it; ``kdist.runtime.store``
speaks its protocol without torch) once a second; when that total
has not moved for the limit, every node stops its workers within about a
second of the others and exits ``exitcodes.HUNG``, and the gang restarts.
The clock starts at the job's first output: starting up (imports, the
rendezvous, loading a checkpoint) is not watched.

The same tick carries the launchers' heartbeat (``kdist.runtime.heartbeat``): a
node silent for ``nodeLossSeconds`` is lost, and node 0 is lost when the master port
stops answering that long (once rank 0's worker has exited, node 0's launcher answers
there itself, ``kdist.runtime.rendezvous``): its ranks are dead, so this node stops its
own workers and exits ``PEER_LOST``, even when they sit outside any
collective (a hung rank, whose peers' failures it would never notice). This
part runs on every job of several nodes, with or without a progress limit:
otherwise the node would keep its pod until the restarted master's
rendezvous gave up on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kdist.runtime import spares
from kdist.runtime.heartbeat import Heartbeat, NodeLost, StoreSilence, lost_line
from kdist.runtime.output import Output
from kdist.runtime.plan import LaunchPlan
from kdist.runtime.store import StoreClient

TICK_S = 1.0
STORE_KEY = "kdist-watchdog/progress"
HUNG_KEY = "kdist-watchdog/hung"  # "rank<TAB>node<TAB>where" of the rank a node found hung
# + a node rank: that node's ranks' counts of collectives started, "rank=count" lines
COUNTS_KEY = "kdist-watchdog/collectives/"
#: the restart count a launcher gathers the gang for, restarting in process
#: (``kdist.runtime.rendezvous``): above this attempt's, the gang is restarting
RESTART_KEY = "kdist/restart"
#: why the node that set ``RESTART_KEY`` restarts (its launcher's words): every node
#: stopped by that key names the origin (a lost node, a failed rank), not "another node"
CAUSE_KEY = "kdist/restart-cause"
CAUSE_MAX = 400
STORE_TIMEOUT_S = 5


class MasterLost(NodeLost):
    """The store stopped answering for ``nodeLossSeconds``: its host (node 0, until the
    store moves) is lost, and the gang is broken."""

    def __init__(self, why: str, host: int = 0) -> None:
        super().__init__(host, why)


class RestartAsked(MasterLost):
    """Another node's launcher is restarting the gang's workers in process (it set
    ``RESTART_KEY`` above this attempt's count in the store it reached): this node's
    workers must stop too, even when they sit outside any collective (a hung rank)."""


class Superseded(MasterLost):
    """A newer generation of the gang gave this node's rank to a warm spare while this node
    was lost (``kdist.runtime.membership``): its workers stop, and it writes nothing more
    into the store (its launcher is then fenced)."""


class JobProgress:
    """The job's total progress: this node's, plus (several nodes) everyone's via the store.

    A node whose master went away learns it here (``MasterLost``), even when its
    own workers sit outside any collective (a hung rank would otherwise wait forever).
    """

    def __init__(self, plan: LaunchPlan, output: Output, *,
                 started: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.plan, self.output, self.clock = plan, output, clock
        # Whether this node's workers run: the rendezvous is done, so node 0's store is
        # up. Not asked before (a refused connection costs seconds and log lines).
        self.started = started
        self._store: Any = None  # a StoreClient, once the master's store answers
        self._sent = self._total = 0
        self._answered = False
        # Node 0's loss: its store silent (a frozen node answers nothing, slowly: a short
        # timeout, so that a few tries fit in nodeLossSeconds).
        self._silence = StoreSilence(plan.node_loss_s)
        self._timeout = min(STORE_TIMEOUT_S, max(1.0, plan.node_loss_s / 3))
        self.heartbeat = Heartbeat(plan.node_rank, plan.nnodes, plan.node_loss_s, clock=clock,
                                   hosts=plan.hosts_store)
        self.host = 0 if plan.members is None else plan.members.host
        # Node 0 of an elastic gang running smaller: told once of the newcomers that ask to
        # be admitted (``kdist.runtime.elastic``: it stops its workers at a step boundary).
        self.on_grow: Callable[[list[int]], None] | None = None
        self.growing = False

    def _client(self) -> Any:
        if self._store is None:
            store = StoreClient(self.plan.master_addr, self.plan.master_port,
                                timeout=self._timeout)
            if self.plan.tracks_members and self._answered:  # back after a silence: still a member?
                try:
                    why = spares.superseded(store, self.plan)
                except BaseException:
                    store.close()
                    raise
                if why is not None:
                    store.close()
                    raise Superseded(why)
            self._store = store
        return self._store

    def _beat(self) -> None:
        self.heartbeat.tick(self._client())

    def end(self) -> None:
        """This node's workers are done: its beat says so (best effort), so that no
        watcher reads it as lost while it waits in the exit barrier or restarts."""
        if self.plan.nnodes > 1 and self._store is not None:
            try:
                self.heartbeat.end(self._store)
            except Exception:
                pass

    def _add(self, delta: int) -> int:
        return int(self._client().add(STORE_KEY, delta))

    def tell_hung(self, text: str) -> None:
        """Tell the other nodes which of this node's ranks hung (``kdist.runtime.stacks``)."""
        if self.plan.nnodes > 1:
            try:
                self._client().set(HUNG_KEY, text.encode())
            except Exception:  # the store is gone: each node names what it saw
                pass

    def tell_counts(self, counts: dict[int, int | None]) -> None:
        """Tell the other nodes this node's ranks' counts of collectives started
        (``kdist.runtime.stacks.collectives``)."""
        if self.plan.nnodes > 1:
            text = "\n".join(f"{r}={n}" for r, n in counts.items() if n is not None)
            try:
                self._client().set(COUNTS_KEY + str(self.plan.node_rank), text.encode())
            except Exception:  # the store is gone: each node compares its own
                pass

    def counts_everywhere(self, wait_s: float) -> dict[int, int]:
        """Every node's counts (``tell_counts``), as far as told within ``wait_s``."""
        keys = [COUNTS_KEY + str(n) for n in range(self.plan.nnodes)]
        if len(keys) == 1:
            return {}
        deadline = self.clock() + wait_s
        counts: dict[int, int] = {}
        try:
            store = self._client()
            while not store.check(keys) and self.clock() < deadline:
                time.sleep(0.1)
            for key in keys:
                if store.check([key]):
                    counts.update(_counts(bytes(store.get(key))))
        except Exception:
            pass
        return counts

    def hung_elsewhere(self, wait_s: float) -> str | None:
        """What another node said hung, if one says so within ``wait_s``."""
        if self.plan.nnodes == 1:
            return None
        deadline = self.clock() + wait_s
        try:
            while True:
                store = self._client()
                if store.check([HUNG_KEY]):
                    return str(store.get(HUNG_KEY).decode("utf-8", errors="replace"))
                if self.clock() >= deadline:
                    return None
                time.sleep(0.1)
        except Exception:
            return None

    def _publish_alone(self) -> None:
        """An elastic gang shrunk to node 0 alone: the members into rank 0's store once it
        answers, so that a lost node coming back reads that it is fenced."""
        if not self.started():
            return
        try:
            spares.publish(self._client(), self.plan)
            self._answered = True
        except Exception:  # rank 0's worker serves the store once torch is imported
            if self._store is not None:
                self._store.close()
            self._store = None

    def total(self) -> int:
        mine = self.output.progress()
        if self.plan.nnodes == 1 and self.plan.tracks_members and not self._answered:
            self._publish_alone()
        if self.plan.nnodes == 1 and self._answered:
            self._grow_asked()
        if self.plan.nnodes == 1 or not (self._answered or self.started()):
            return mine
        try:
            self._total = self._add(mine - self._sent)
            self._sent = mine
            self._silence.ok(self.clock())
            if not self._answered:  # node 0: rank 0's new store learns the members
                spares.publish(self._store, self.plan)
            self._answered = True
        except Superseded:
            raise
        except Exception as e:
            if self._store is not None:
                self._store.close()
            self._store = None  # connect anew next time
            if not self._answered:  # rank 0's worker serves the store once torch is imported
                return mine
            silent = self._silence.failed(self.clock())
            if silent is not None:
                where = f"{self.plan.master_addr}:{self.plan.master_port}"
                raise MasterLost(f"{lost_line(self.host, silent)}: the master's store at "
                                 f"{where} stopped answering ({e})", self.host) from e
            return self._total + mine - self._sent  # meanwhile, this node's own progress
        self._restart_asked()
        self._grow_asked()
        try:
            self._beat()
        except NodeLost:
            raise
        except Exception:  # the store went meanwhile: the next tick's ADD tells
            if self._store is not None:
                self._store.close()
            self._store = None
        return self._total

    def _asked(self) -> bytes:
        store = self._client()
        return bytes(store.get(RESTART_KEY)) if store.check([RESTART_KEY]) else b""

    def _cause(self) -> str:
        try:
            store = self._client()
            if store.check([CAUSE_KEY]):
                text = bytes(store.get(CAUSE_KEY))[:CAUSE_MAX].decode("utf-8", "replace")
                return text.strip() or "another node's workers failed"
        except Exception:
            pass
        return "another node's workers failed"

    def _grow_asked(self) -> None:
        if self.on_grow is None or self.growing:
            return
        try:
            slots = spares.grow_asks(self._client(), self.plan)
        except Exception:
            return  # asked again next tick
        if slots:
            self.growing = True
            self.on_grow(slots)

    def _restart_asked(self) -> None:
        if self.growing:  # its workers stop at a step anyway; the others meet it already
            return
        try:
            asked = self._asked()
        except Exception:
            return  # asked again next tick
        if asked.isdigit() and int(asked) > (self.plan.restart_count or 0):
            raise RestartAsked(f"the gang is restarting (restart {int(asked)}): "
                               f"{self._cause()}")


def _counts(text: bytes) -> dict[int, int]:
    """``rank=count`` lines (``JobProgress.tell_counts``); anything else is skipped."""
    counts = {}
    for line in text[:65536].decode("ascii", errors="replace").splitlines():
        rank, _, count = line.partition("=")
        if rank.isdecimal() and count.isdecimal() and len(rank) + len(count) < 40:
            counts[int(rank)] = int(count)
    return counts


class Watchdog:
    """Calls ``on_hang(silent_s)`` once, when ``progress()`` stopped growing for ``limit_s``,
    or ``on_lost(reason)`` once, when ``progress()`` raises ``NodeLost`` (``MasterLost``:
    node 0); then stops."""

    def __init__(self, limit_s: float, progress: Callable[[], int],
                 on_hang: Callable[[float], None], *,
                 on_lost: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, tick_s: float = TICK_S) -> None:
        self.limit_s, self.progress, self.on_hang = limit_s, progress, on_hang
        self.on_lost = on_lost
        self.clock, self.tick_s = clock, tick_s
        self.fired = False
        self.lost = False
        # The node found lost (not node 0's store gone, nor a restart asked): a vacancy
        # for a warm spare (kdist.runtime.spares).
        self.lost_node: int | None = None
        # The store's host was found lost (its store silent): with spares, the survivors
        # move the store (kdist.runtime.hostmove).
        self.host_lost = False
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
        if self.limit_s <= 0 or self._moved_at is None or now - self._moved_at < self.limit_s:
            return False  # no limit (only node 0's liveness is watched), or not yet
        self.fired = True
        self.on_hang(now - self._moved_at)
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                if self.check():
                    return
            except NodeLost as e:
                self.lost = True
                if not isinstance(e, MasterLost):
                    self.lost_node = e.node
                self.host_lost = type(e) is MasterLost
                if self.on_lost is not None:
                    self.on_lost(str(e))
                return
            except Exception:  # nothing to watch with (never expected): stop quietly
                return
