"""The gang notices a lost node itself: every launcher heartbeats through node 0's store.

A node that is frozen, powered off or cut off by the network fails nothing on the
others: their ranks wait in their next collective until ``collectiveTimeoutSeconds``
(minutes), and Kubernetes marks the node NotReady only after 40 s or more. The
launchers notice it in ``nodeLossSeconds`` instead (``KDIST_NODE_LOSS_SECONDS``):

- every launcher's watchdog tick (``kdist.runtime.watchdog``, once a second, on the
  store connection it already holds) sets its own beat, ``BEAT`` + its node rank,
  to a counter: one small write per node per second;
- in the same tick it reads, in one ``MULTI_GET``, the ``LOST`` key and the beats of
  the ``WATCHERS`` nodes after it in a ring (node i watches i+1 and i+2): every node
  is watched twice, and the store serves O(nodes) reads a second, never O(nodes^2);
- a watched beat that has not changed for ``nodeLossSeconds`` (by the watcher's own
  clock: the nodes' clocks need not agree) is a lost node: its watcher sets ``LOST``,
  which every node reads within a tick, and every survivor SIGKILLs its workers
  (``kdist.runtime.agent``) and exits ``PEER_LOST`` (or meets the others again, in
  process), naming the node: ``node N lost (silent for X s)``;
- the host's loss (node 0's, until the store moves) takes the store with it: a launcher
  whose store has not answered for ``nodeLossSeconds`` reads the host as lost
  (``StoreSilence``), and with spares the survivors move the store
  (``kdist.runtime.hostmove``).

A launcher whose workers ended sets its beat to ``ENDED`` (it waits in the exit
barrier, or restarts: not lost), and node 0's exit barrier says so for node 0. A
launcher that was itself stalled (its own ticks far apart) starts its watch anew
rather than blame the others for its own silence. Every value is an integer, so that
``ADD(key, 0)`` can create a key before the first ``MULTI_GET`` (torch's store does
not answer a ``MULTI_GET`` of a missing key). Standard library only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

BEAT = "kdist/heartbeat/"  # + node rank: that launcher's beat counter, or ENDED
LOST = "kdist/heartbeat/lost"  # the lost node's rank + 1 (0: none)
LOST_WHY = "kdist/heartbeat/lost-why"  # the words of its watcher, set before LOST
ENDED = -1
WATCHERS = 2
# The store's host (node 0 until it moves; the store lives in its first worker): when it
# finds a node lost, it waits this long before killing its workers (and the store), so
# that the others read LOST first.
TELL_S = 1.5


class NodeLost(Exception):
    """A node of the gang is lost: this node's workers must stop."""

    def __init__(self, node: int, why: str) -> None:
        super().__init__(why)
        self.node = node


def lost_line(node: int, silent_s: float) -> str:
    """How a launcher names a lost node (the ledger's cause starts with it)."""
    return f"node {node} lost (silent for {silent_s:.0f} s)"


def watched(node: int, nnodes: int, watchers: int = WATCHERS) -> list[int]:
    """The nodes whose beats ``node`` watches: the next ones in a ring."""
    return [(node + j) % nnodes for j in range(1, min(watchers, nnodes - 1) + 1)]


class Silence:
    """Which watched node has been silent for ``loss_s``, from the beats read each tick."""

    def __init__(self, nodes: list[int], loss_s: float) -> None:
        self.loss_s = loss_s
        self.value: dict[int, int | None] = dict.fromkeys(nodes)
        self.changed: dict[int, float] = {}
        self.ended: set[int] = set()
        self._looked: float | None = None

    def saw(self, values: dict[int, int], now: float) -> None:
        """The beats read at ``now``."""
        if self._looked is not None and now - self._looked > self.loss_s / 2:
            self.changed.clear()  # this node was stalled itself: its view is stale
        self._looked = now
        for node, value in values.items():
            if value == ENDED:
                self.ended.add(node)
            elif value != self.value.get(node) or node not in self.changed:
                self.ended.discard(node)
                self.value[node], self.changed[node] = value, now

    def lost(self, now: float) -> tuple[int, float] | None:
        """(node, seconds silent) of the longest silent watched node past ``loss_s``."""
        silent = [(now - at, node) for node, at in self.changed.items()
                  if node not in self.ended and now - at >= self.loss_s]
        if not silent:
            return None
        seconds, node = max(silent)
        return node, seconds


class StoreSilence:
    """Node 0's loss, read from its store: unanswered for ``loss_s`` since it last
    answered, and failing for at least ``confirm_s`` (one failure after this node was
    stalled itself is not enough)."""

    def __init__(self, loss_s: float, confirm_s: float = 1.0) -> None:
        self.loss_s, self.confirm_s = loss_s, confirm_s
        self.answered: float | None = None
        self.failing_since: float | None = None

    def ok(self, now: float) -> None:
        self.answered, self.failing_since = now, None

    def failed(self, now: float) -> float | None:
        """The store failed at ``now``: the seconds it has been silent once that is a
        loss, else None (never before it first answered: node 0 may still start)."""
        if self.answered is None:
            return None
        if self.failing_since is None:
            self.failing_since = now
        if now - self.answered >= self.loss_s and now - self.failing_since >= self.confirm_s:
            return now - self.answered
        return None


class Heartbeat:
    """One launcher's beat and watch, a tick at a time, on a store client (``StoreClient``:
    ``add``, ``set``, ``check``, ``get``, ``multi_get``)."""

    def __init__(self, node: int, nnodes: int, loss_s: float,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, hosts: bool | None = None) -> None:
        self.node, self.clock, self.sleep = node, clock, sleep
        self.hosts = node == 0 if hosts is None else hosts  # it serves the store
        self.nodes = watched(node, nnodes)
        self.silence = Silence(self.nodes, loss_s)
        self.count = 0
        self._primed: Any = None  # the store client the keys were created on

    def tick(self, store: Any) -> None:
        """Beat, then read the watched beats and ``LOST``. Raises ``NodeLost``."""
        keys = [LOST, *(f"{BEAT}{n}" for n in self.nodes)]
        if store is not self._primed:  # a new connection, maybe a new store: create them
            for key in keys:
                store.add(key, 0)
            self._primed = store
        self.count += 1
        store.set(f"{BEAT}{self.node}", str(self.count).encode())
        values = [_int(v) for v in store.multi_get(keys)]
        if values[0] > 0:
            node = values[0] - 1
            told = bytes(store.get(LOST_WHY)) if store.check([LOST_WHY]) else b""
            raise NodeLost(node, told.decode("utf-8", "replace") or f"node {node} lost")
        now = self.clock()
        self.silence.saw(dict(zip(self.nodes, values[1:], strict=True)), now)
        found = self.silence.lost(now)
        if found is None:
            return
        node, seconds = found
        why = f"{lost_line(node, seconds)}: its launcher's heartbeat stopped (seen by " \
              f"node {self.node})"
        store.set(LOST_WHY, why.encode())
        store.set(LOST, str(node + 1).encode())
        if self.hosts:
            store.check([LOST])  # answered: the store has both keys
            self.sleep(TELL_S)
        raise NodeLost(node, why)

    def end(self, store: Any) -> None:
        """This node's workers are done (or stopped): not lost while it waits."""
        store.set(f"{BEAT}{self.node}", str(ENDED).encode())


def _int(value: bytes) -> int:
    try:
        return int(value)
    except ValueError:
        return 0
