"""The launchers' static rendezvous and exit barrier, on the master's one port, without torch.

Node 0's launcher binds the master port first thing (``store.listen``) and serves
a ``MiniStore`` on it until every node's launcher has joined (``KDIST_RDZV_TIMEOUT``
bounds the wait on every node, as torch's static rendezvous did); then it hands the
listening socket to rank 0's worker, whose ``sitehook`` serves torch's TCPStore on
it (the store torchrun's agent would host: ``TORCHELASTIC_USE_AGENT_STORE=True``).
Workers start on every node at about the same moment, each importing torch once.

The exit barrier (torch's agent keeps its store up until every agent is done): once
rank 0's worker has exited, node 0's launcher serves the ``MiniStore`` again on the
same socket, and a launcher whose workers all succeeded waits, up to
``EXIT_BARRIER_S``, until every node's workers are done (node 0 counts the others'
reports; the others report to node 0's barrier, or stop waiting when node 0 is
gone). A node whose workers failed exits at once, as under torch (telling node 0's
barrier, if it already waits, not to wait for it; node 0 then exits PEER_LOST, not 0,
so that no controller counts its pod as done while the job failed: under torch's
agent it sat in the barrier until the controller ended it). The store itself
lives in rank 0's worker, so a script whose other ranks still use it after rank 0
exited loses it (as with ``torch.multiprocessing`` or an ``env://`` launch without
an agent); collectives and ``destroy_process_group`` do not need it.
"""

from __future__ import annotations

import errno
import socket
import sys
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

from kdist.runtime import elastic, hostmove, spares
from kdist.runtime.heartbeat import BEAT, ENDED
from kdist.runtime.membership import MEMBERS, Members
from kdist.runtime.plan import LaunchPlan
from kdist.runtime.store import MiniStore, StoreClient, allow_many_connections, listen
from kdist.runtime.watchdog import CAUSE_KEY, CAUSE_MAX, RESTART_KEY
from kdist.shared.errors import LaunchError

JOINED, GO, RELEASED = "kdist/rdzv/joined", "kdist/rdzv/go", "kdist/rdzv/released"
#: each node's restart count, set before it joins; node 0 answers GO with the highest
COUNT = "kdist/rdzv/count/"
BARRIER, DONE, FAILED = "kdist/exit/open", "kdist/exit/done", "kdist/exit/failed"
EXIT_BARRIER_S = 300.0  # torch's exit_barrier_timeout
_POLL_S = 0.02
#: how long node 0 waits for every node to have its GO before the port goes to rank 0
RELEASE_S = 10.0
#: how often a host waiting in its rendezvous asks whether the store moved away from it
#: (``kdist.runtime.hostmove``: it was lost, and came back)
MOVED_ASK_S = 2.0
#: how long node 0 tries a master port in use again (``bind``)
BIND_WAIT_S = 20.0
_BIND_RETRY_S = 0.25


class RendezvousError(LaunchError):
    """Not every node joined within ``KDIST_RDZV_TIMEOUT``: the node exits 1, as before."""

    exit_code = 1


def _failed(plan: LaunchPlan, why: str) -> RendezvousError:
    return RendezvousError(
        f"rendezvous of {plan.nnodes} node(s) at {plan.master_addr}:{plan.master_port} failed "
        f"(KDIST_RDZV_TIMEOUT={plan.rdzv_timeout_s}s): {why}")


def bind(plan: LaunchPlan, wait_s: float = BIND_WAIT_S,
         clock: Callable[[], float] = time.monotonic) -> socket.socket | None:
    """Node 0: the master port, bound and listening (None on the other nodes).

    A port in use is tried again for up to ``wait_s``: on a restart in place (a
    local run, a pod whose container restarts) the last attempt's processes may
    still be letting go of it.
    """
    if not plan.hosts_store:
        return None
    allow_many_connections()  # a connection per node here, one per rank in rank 0's worker
    deadline = clock() + wait_s
    told = False
    while True:
        try:
            return listen(plan.master_port)
        except OSError as e:
            if e.errno != errno.EADDRINUSE or clock() >= deadline:
                waited = f" (waited {wait_s:.0f}s for it)" if told else ""
                raise LaunchError(f"cannot listen on the master port {plan.master_port}: "
                                  f"{e.strerror or e}{waited}") from None
            if not told:
                print(f"kdist.launch: the master port {plan.master_port} is in use; trying "
                      f"again for up to {wait_s:.0f}s", file=sys.stderr, flush=True)
                told = True
            time.sleep(_BIND_RETRY_S)


def rendezvous(plan: LaunchPlan, listener: socket.socket | None, started: float,
               clock: Callable[[], float] = time.monotonic) -> float:
    """Block until every node's launcher has joined; the seconds it took.

    ``started``: when this launcher started (the deadline counts from it, the wait for
    the master included). Raises ``RendezvousError`` at the deadline.
    """
    return gather(plan, listener, started, clock=clock)[0]


def gather(plan: LaunchPlan, listener: socket.socket | None, started: float,
           count: int = 0, clock: Callable[[], float] = time.monotonic) -> tuple[float, int]:
    """``rendezvous``, agreeing on the restart count: (the seconds it took, the highest
    count any node brought). Every node of a gang restart counts it, but a node made
    anew (a replaced pod) may know fewer than its survivors: the gang goes on from the
    highest, so every worker is told the same restart and the bound holds for all."""
    met = meet(plan, listener, started, count, clock=clock)
    return met.waited, met.restart


class Met(NamedTuple):
    """A rendezvous done: the seconds it took, the restart count agreed, and (a job with
    spares) the gang's members as it met (``kdist.runtime.membership``)."""

    waited: float
    restart: int
    members: Members | None


def meet(plan: LaunchPlan, listener: socket.socket | None, started: float, count: int = 0,
         lost: Iterable[int] = (), clock: Callable[[], float] = time.monotonic,
         cause: str = "") -> Met:
    """``gather``, and where the job has spares the members: ``lost``, the node ranks this
    launcher found lost, are vacant for a spare to take (``kdist.runtime.spares``);
    ``cause``: why this launcher restarts, told to the nodes still running."""
    begun = clock()
    deadline = started + plan.rdzv_timeout_s
    if plan.nnodes == 1:
        return Met(0.0, count, plan.members)
    lost = list(lost)
    if listener is not None:
        agreed, members = _lead(plan, listener, deadline, clock, count, lost, cause)
    else:
        agreed, members = _join(plan, deadline, clock, count, lost, cause)
    return Met(clock() - begun, agreed, members)


def _origin(cause: str) -> bytes | None:
    """The cause to tell the running nodes: the origin's own words only (a node stopped
    by another's restart passes on nothing, the origin's words are already there)."""
    if not cause or "the gang is restarting" in cause:
        return None
    return cause.encode("utf-8", "replace")[:CAUSE_MAX]


def _lead(plan: LaunchPlan, listener: socket.socket, deadline: float,
          clock: Callable[[], float], count: int = 0,
          lost: Iterable[int] = (), cause: str = "") -> tuple[int, Members | None]:
    begun = clock()
    server = MiniStore(listener).start()
    members = plan.members
    lost = list(lost)
    smaller = None  # an elastic gang's members without its lost nodes (kdist.runtime.elastic)
    try:
        if plan.tracks_members:
            spares.lead_open(server, plan, lost)
        told = _origin(cause)
        if told is not None:  # first: a node reading the restart finds why
            server.set(CAUSE_KEY, told)
        server.set(RESTART_KEY, str(count).encode())  # a node still running stops its workers
        server.add(JOINED, 1)
        # A host back from a silence waits here for nodes that moved the store away: once
        # this wait is longer than a re-form takes, it asks (each ask may wait a second)
        asked = begun + plan.node_loss_s - MOVED_ASK_S
        while int(server.data.get(JOINED, b"0")) < plan.nnodes:
            if plan.store_moves and clock() - asked >= MOVED_ASK_S:
                asked = clock()
                hostmove.moved_away(plan)
            if plan.elastic:
                with server.lock:
                    smaller = elastic.lead_decides(dict(server.data), plan, lost, COUNT)
                if smaller is not None:  # every survivor joined: the lost node is not waited
                    break
            if clock() >= deadline:
                joined = int(server.data.get(JOINED, b"0"))
                raise _failed(plan, f"{joined} of {plan.nnodes} node(s) joined")
            time.sleep(_POLL_S)
        with server.lock:
            brought = [v for k, v in server.data.items() if k.startswith(COUNT)]
        agreed = max([count, *(int(v) for v in brought if v.isdigit())])
        if smaller is not None:
            members = smaller
            server.set(MEMBERS, members.encode())  # before GO: a late joiner reads it, fenced
        elif plan.tracks_members:
            members = spares.lead_close(server, plan)
        server.set(GO, str(agreed).encode())
        # Every other node has its answer before the socket goes to rank 0's worker
        # (a few seconds at most: they are connected and waiting).
        others = (plan.nnodes if members is None else len(members.slots)) - 1
        release_by = min(deadline, clock() + RELEASE_S)
        while int(server.data.get(RELEASED, b"0")) < others and clock() < release_by:
            time.sleep(_POLL_S)
        return agreed, members
    finally:
        server.stop()


def _join(plan: LaunchPlan, deadline: float, clock: Callable[[], float],
          count: int = 0, lost: Iterable[int] = (),
          cause: str = "") -> tuple[int, Members | None]:
    problem = "node 0's launcher did not answer"
    while clock() < deadline:
        try:
            client = StoreClient(plan.master_addr, plan.master_port,
                                 timeout=max(0.1, min(5.0, deadline - clock())))
        except OSError as e:
            problem = f"node 0's launcher did not answer ({e})"
            time.sleep(min(0.2, max(0.0, deadline - clock())))
            continue
        try:
            if plan.tracks_members:  # first: a fenced launcher writes no key (spares)
                spares.join_check(client, plan, lost)
            if client.check([BARRIER]):  # node 0's workers are done: no gang to join
                client.add(FAILED, 1)
                client.add(DONE, 1)  # node 0 exits PEER_LOST, not 0: the gang restarts
                raise _failed(plan, "node 0's workers already finished (its exit barrier "
                                    "answered); told it this node's failed")
            client.set(f"{COUNT}{plan.node_rank}", str(count).encode())
            # Node 0's workers may still run (another node's failed): its watchdog, which
            # reads rank 0's store, stops them; node 0 then leads this rendezvous.
            told = _origin(cause)
            if told is not None:
                client.set(CAUSE_KEY, told)
            client.set(RESTART_KEY, str(count).encode())
            client.add(JOINED, 1)
            client.wait([GO], timeout=max(0.1, deadline - clock()))
            answer = client.get(GO)
            members = spares.current(client, plan.full_nodes) if plan.tracks_members \
                else None
            client.add(RELEASED, 1)
            _until_closed(client, min(deadline, clock() + RELEASE_S + 5.0), clock)
            return (int(answer) if answer.isdigit() else count), members
        except TimeoutError:
            problem = "not every node joined"
        except OSError as e:
            problem = f"the rendezvous was cut off ({e})"
            time.sleep(0.2)
        finally:
            client.close()
    raise _failed(plan, problem)


def _until_closed(client: StoreClient, deadline: float, clock: Callable[[], float]) -> None:
    """Wait until node 0's launcher closes this connection: its rendezvous server has
    stopped accepting, so that no worker of this node (a warm one starts within
    milliseconds) connects to the master port while that server still answers (it
    would take the worker's store connection, then close it under it: "broken pipe").
    Rank 0's worker is the next to accept there."""
    try:
        client.sock.settimeout(max(0.1, deadline - clock()))
        while client.sock.recv(64):
            pass
    except OSError:  # reset (closed), or node 0 never closed it: go on as before
        pass


class ExitBarrier:
    """Node 0 serves the barrier once rank 0's worker is gone; every node waits in it."""

    def __init__(self, plan: LaunchPlan, listener: socket.socket | None) -> None:
        self.plan, self.listener = plan, listener
        self.server: MiniStore | None = None
        self.peer_failed = False  # node 0: another node reported failed workers

    def serve(self, finished: bool = True) -> None:
        """Node 0, once rank 0's worker exited: answer the others on the master port (their
        watchdogs must not read node 0 as lost). ``finished``: it succeeded, so the
        barrier is open; a failed one's node is about to fail or restart, not wait."""
        if self.listener is not None and self.server is None and self.plan.nnodes > 1:
            self.server = MiniStore(self.listener).start()
            # node 0's launcher is alive and answering: not lost to the others' heartbeats
            self.server.set(f"{BEAT}0", str(ENDED).encode())
            spares.publish(self.server, self.plan)  # a node coming back reads it: fenced?
            if finished:
                self.server.set(BARRIER, b"1")

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def report_failure(self) -> None:
        """This node's workers failed: tell node 0's barrier, if it is already waiting,
        not to wait for this node (one try; no waiting here)."""
        if self.plan.nnodes == 1 or self.listener is not None:
            return
        try:
            client = StoreClient(self.plan.master_addr, self.plan.master_port, timeout=2.0)
        except OSError:
            return
        try:
            if client.check([BARRIER]):
                client.add(FAILED, 1)
                client.add(DONE, 1)
        except OSError:
            pass
        finally:
            client.close()

    def wait(self, limit_s: float = EXIT_BARRIER_S,
             clock: Callable[[], float] = time.monotonic) -> str:
        """This node's workers succeeded: wait for the others; what happened, for the log."""
        if self.plan.nnodes == 1:
            return ""
        deadline = clock() + limit_s
        if self.server is not None:
            while int(self.server.data.get(DONE, b"0")) < self.plan.nnodes - 1:
                if clock() >= deadline:
                    return f"not every node finished within {limit_s:.0f}s"
                time.sleep(0.1)
            failed = int(self.server.data.get(FAILED, b"0"))
            if failed:
                self.peer_failed = True
                return f"{failed} other node(s) reported failed workers"
            return ""
        while clock() < deadline:  # another node: report to node 0's barrier
            try:
                client = StoreClient(self.plan.master_addr, self.plan.master_port, timeout=5.0)
            except ConnectionRefusedError:
                return "node 0 is gone"
            except OSError:
                time.sleep(0.5)
                continue
            try:
                # One connection, waiting in the store: rank 0's store never has the key,
                # and its worker's exit ends the wait (the connection closes); node 0's
                # launcher then answers with it set. A poll would open a connection per
                # node twice a second into rank 0's store (torch's server resolves each
                # new client's name).
                client.wait([BARRIER], timeout=max(0.1, deadline - clock()))
                # its beat, ended, in node 0's barrier store too: a node still at work
                # must not read this one as lost (kdist.runtime.heartbeat)
                client.set(f"{BEAT}{self.plan.node_rank}", str(ENDED).encode())
                client.add(DONE, 1)
                return ""
            except TimeoutError:
                break
            except OSError:
                time.sleep(_POLL_S)  # the store went: node 0's launcher answers next
            finally:
                client.close()
        return f"node 0 did not finish within {limit_s:.0f}s"
