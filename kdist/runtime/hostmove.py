"""The store moves when its host is lost (issue 54): node 0 is a node like the others.

The gang meets on one store (``kdist.runtime.store``), served by the launcher holding the
members' ``host`` rank (node rank 0 at the start; ``kdist.runtime.membership``). A job
with warm spares (or elastic) and each slot's address (``KDIST_SLOT_ADDR``: an Indexed Job
or JobSet pod's stable DNS name) does not wait for a lost host's replacement. The rule, which
every launcher applies alone, from the members it last met (no store needed to agree):

1. **Who hosts next**: the candidates are the node ranks other than the host, lowest
   first (``Members.candidates``). A survivor that found the host lost walks them in
   order: reaching itself, it hosts (``_open``: a store on its own slot's address, the
   members **moved** to it at the next generation); at another candidate's address it
   waits up to twice ``nodeLossSeconds`` (``CANDIDATE_WAIT``: the candidate reads the
   silence itself and stops its workers first, seconds apart from this one) for a store
   whose generation is newer than its own and joins there, or passes over a candidate
   that never answers (lost too).
2. **What is accepted**: only a store whose members are newer than the generation this
   launcher met at (``ask``); a spare follows the newest it finds (``best``), so a store
   at the old host's address (thawed, or cut off) is never taken for the gang's.
3. **The old host is fenced**: a launcher that hosted at an older generation and finds a
   newer one hosted by another rank exits ``FENCED`` (``moved_away``, asked before it
   leads a rendezvous again and while it waits in one). A host that was frozen and
   thawed finds every beat silent: its heartbeat restarts its watch after its own stall
   (``kdist.runtime.heartbeat``), its workers fail on their dead peers, and before it
   meets again it reads the move at the successor's address: it neither declares the
   others lost nor leads them.

A survivor whose workers stopped for another reason first gives the host
``nodeLossSeconds`` to answer (``find``): a host restarting its own workers is silent for
a moment only. What it does not settle: a partition that leaves the old host and some
spares on one side and the successor on the other can re-form two gangs (no quorum is
taken); the gang with a spare goes on, the other waits out its rendezvous.
Standard library only.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Callable, Iterable

from kdist.runtime.membership import MEMBERS, Fenced, Members, fence_line, fenced
from kdist.runtime.plan import LaunchPlan
from kdist.runtime.store import StoreClient, listen
from kdist.shared.errors import LaunchError

ASK_TIMEOUT_S = 1.0  # one address: a frozen pod accepts (its kernel does) and never answers
#: How long (in ``nodeLossSeconds``) a survivor waits for an earlier candidate to host
CANDIDATE_WAIT = 2
POLL_S = 0.25
#: How many candidates a launcher that hosted asks whether the store moved away from it:
#: the successor, and the next in case the successor was lost too.
ASKED = 2


def ask(addr: tuple[str, int], nnodes: int, timeout: float = ASK_TIMEOUT_S) -> Members | None:
    """The members the store at ``addr`` holds; None where nothing answers, no TCPStore
    does, or it holds none."""
    try:
        client = StoreClient(addr[0], addr[1], timeout=timeout)
    except OSError:
        return None
    try:
        raw = bytes(client.get(MEMBERS)) if client.check([MEMBERS]) else None
        return None if raw is None else Members.decode(raw, nnodes)
    except OSError:
        return None
    finally:
        client.close()


def newer(plan: LaunchPlan, members: Members | None) -> bool:
    held = -1 if plan.members is None else plan.members.generation
    return members is not None and members.generation > held


def moved_away(plan: LaunchPlan) -> None:
    """``Fenced`` when this launcher hosted the store and a candidate's address serves
    newer members that fence it (rule 3); nothing where none answers."""
    if not plan.store_moves or not plan.hosts_store or plan.members is None:
        return
    held = plan.members
    for rank in held.candidates()[:ASKED]:
        found = ask(plan.address_of(held.slots[rank]), plan.full_nodes)
        if newer(plan, found) and found is not None and fenced(
                held.generation, plan.node_rank, plan.home_slot, found, hosted=True):
            raise Fenced(fence_line(plan.home_slot, plan.node_rank, held.generation, found))


def _open(plan: LaunchPlan, wait_s: float,
          clock: Callable[[], float]) -> socket.socket:
    """This launcher's store socket on its own slot's address (the port may still be let
    go of by this pod's last worker: tried again for ``wait_s``)."""
    port = plan.address_of(plan.home_slot)[1]
    deadline = clock() + wait_s
    while True:
        try:
            return listen(port)
        except OSError as e:
            if clock() >= deadline:
                raise LaunchError(f"cannot host the store on port {port}: "
                                  f"{e.strerror or e}") from None
            time.sleep(POLL_S)


def find(plan: LaunchPlan, host_lost: bool, say: Callable[[str], None],
         clock: Callable[[], float] = time.monotonic,
         sleep: Callable[[float], None] = time.sleep
         ) -> tuple[LaunchPlan, socket.socket | None, list[int]]:
    """A launcher that does not host, meeting the gang again: (its plan at the store's
    address, the socket it hosts the store on when it is the successor, the node ranks
    now vacant). ``host_lost``: its watchdog found the store silent for
    ``nodeLossSeconds`` already; else the host gets that long to answer first."""
    members = plan.members
    if not plan.store_moves or plan.hosts_store or members is None:
        return plan, None, []
    here = (plan.master_addr, plan.master_port)
    if not host_lost:
        deadline = clock() + plan.node_loss_s
        while clock() < deadline:
            if ask(here, plan.full_nodes) is not None:
                return plan, None, []
            sleep(POLL_S)
    old = members.host
    for rank in members.candidates():
        if rank == plan.node_rank:
            moved = members.moved(rank)
            listener = _open(plan, plan.node_loss_s, clock)
            hosted = plan.at_host(moved)
            say(f"node {old} (slot {members.host_slot}), the store's host, is lost: this "
                f"node (rank {rank}) hosts the store now at {hosted.master_addr}:"
                f"{hosted.master_port} (generation "
                f"{moved.generation}); node rank {old} is vacant")
            return hosted, listener, [old]
        addr = plan.address_of(members.slots[rank])
        deadline = clock() + CANDIDATE_WAIT * plan.node_loss_s
        while clock() < deadline:
            found = ask(addr, plan.full_nodes)
            if newer(plan, found):
                say(f"node {old}, the store's host, is lost: the store moved to node rank "
                    f"{rank} at {addr[0]}:{addr[1]}")
                return dataclasses.replace(plan, master_addr=addr[0], master_port=addr[1],
                                           job_port=plan.job_port or plan.master_port), \
                    None, [old]
            sleep(POLL_S)
    raise LaunchError(f"node {old}, the store's host, is lost and no other node hosts it")


def ask_order(members: Members, slots: Iterable[int]) -> list[int]:
    """The order a spare asks ``slots`` in where the store moved: the candidates' slots
    first, in their order, then the free ones, the host last (silent, it costs a timeout)."""
    place = {slot: i for i, slot in enumerate(members.slots[r] for r in members.candidates())}
    last = len(members.slots)
    return sorted(slots, key=lambda s: place.get(s, last + (s == members.host_slot)))


def best(plan: LaunchPlan, slots: Iterable[int], known: int) -> tuple[Members, str, int] | None:
    """A spare, its store silent: the newest members any of ``slots``' addresses serves,
    with generation at least ``known`` (rule 2); with that address."""
    found = None
    for slot in slots:
        addr = plan.address_of(slot)
        members = ask(addr, plan.full_nodes)
        if members is not None and members.generation >= known and \
                (found is None or members.generation > found[0].generation):
            found = (members, *addr)
    return found
