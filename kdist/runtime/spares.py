"""The store side of warm spares and fencing (``kdist.runtime.membership``), on the host's port.

Every call here runs only for a job that keeps its members (``plan.tracks_members``: warm
spares, or an elastic job, ``kdist.runtime.elastic``): any other job speaks the rendezvous
as before, key for key. Standard library only.

- The store's host (node 0 until it moves, ``kdist.runtime.hostmove``), leading a
  rendezvous (``lead_open``, ``lead_close``): writes the members it
  knows and the ranks its own launcher found lost, then, once every rank joined, the
  members as they met (the next generation where a spare took a rank), before ``GO``.
- Every other launcher, joining (``join_check``): reads the members first (a newer
  generation that gave its rank away fences it: ``Fenced``, before it writes a key), says
  which ranks it found lost, and claims its rank (``CLAIM``: one claimant wins).
- A spare (``wait_for_rank``): polls the port, holding no rank, until a rendezvous says a
  rank is vacant and its claim wins; or the members say its slot holds a rank already (its
  container restarted in place). Its store silent, it follows the store where it moved
  (the newest generation any slot's address serves).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from kdist.runtime import hostmove
from kdist.runtime.membership import (
    ANY_VACANT,
    CLAIM,
    GROW,
    MEMBERS,
    SLOT,
    VACANT,
    Fenced,
    Members,
    fence_line,
    fenced,
)
from kdist.runtime.plan import LaunchPlan
from kdist.runtime.store import StoreClient
from kdist.shared.errors import LaunchError

POLL_S = 0.25
#: How long a spare waits for an answer before it looks for the store elsewhere (where it
#: may move, ``kdist.runtime.hostmove``)
SILENT_S = 1.5
# How long a launcher that held a rank waits for the members in the store it reaches: a
# running gang's store (rank 0's) has them from node 0's first watchdog tick, seconds
# after it is up; every store node 0's launcher serves has them from the start.
MEMBERS_WAIT_S = 5.0


class Taken(LaunchError):
    """A launcher starting anew found its slot's rank held by a spare: it becomes one."""

    exit_code = 1


def current(store: Any, nnodes: int) -> Members | None:
    """The members a store holds (a ``MiniStore``'s ``data`` or a client), or None."""
    if isinstance(getattr(store, "data", None), dict):
        raw = store.data.get(MEMBERS)
    else:
        raw = bytes(store.get(MEMBERS)) if store.check([MEMBERS]) else None
    return None if raw is None else Members.decode(raw, nnodes)


def superseded(client: Any, plan: LaunchPlan) -> str | None:
    """Why this launcher is fenced, read from the store ``client`` reaches (None: it is
    not, or the store does not say)."""
    return _fence_why(current(client, plan.full_nodes), plan)


def _fence_why(now: Members | None, plan: LaunchPlan) -> str | None:
    held = None if plan.members is None else plan.members.generation
    if now is None or held is None or not fenced(held, plan.node_rank, plan.home_slot, now,
                                                 hosted=plan.hosts_store):
        return None
    return fence_line(plan.home_slot, plan.node_rank, held, now)


def _wait_members(client: Any, plan: LaunchPlan) -> None:
    """A launcher that held a rank: wait (``MEMBERS_WAIT_S``; TimeoutError) until the store
    has the members, so that it is not told too early that it is not fenced."""
    if plan.members is not None and not client.check([MEMBERS]):
        client.wait([MEMBERS], timeout=MEMBERS_WAIT_S)


def probe(plan: LaunchPlan) -> None:
    """``Fenced`` when the store on the host's port says this launcher is (one short try; a
    store that does not answer says nothing: the rendezvous asks again). The host itself
    asks where the store would have moved to (``hostmove.moved_away``)."""
    if plan.hosts_store:
        hostmove.moved_away(plan)
        return
    try:
        client = StoreClient(plan.master_addr, plan.master_port, timeout=2.0)
    except OSError:
        return
    try:
        _wait_members(client, plan)
        why = superseded(client, plan)
    except OSError:  # TimeoutError included
        return
    finally:
        client.close()
    if why is not None:
        raise Fenced(why)


def lead_open(server: Any, plan: LaunchPlan, lost: Iterable[int]) -> None:
    """Node 0, a rendezvous begun: the members it knows, and the ranks it found lost."""
    server.set(MEMBERS, (plan.members or Members.first(plan.nnodes)).encode())
    say_vacant(server, lost)


def lead_close(server: Any, plan: LaunchPlan) -> Members:
    """Node 0, every rank joined: the members as they met, written before ``GO``."""
    before = plan.members or Members.first(plan.nnodes)
    joined = {}
    for rank in range(plan.nnodes):
        if rank == before.host:
            continue
        raw = server.data.get(f"{SLOT}{rank}")
        if raw is not None and raw.isdigit():
            joined[rank] = int(raw)
    members = before.after(joined)
    server.set(MEMBERS, members.encode())
    return members


def say_vacant(store: Any, lost: Iterable[int]) -> None:
    # the host's rank too: said only at the store's new host (kdist.runtime.hostmove)
    ranks = list(lost)
    for rank in ranks:
        store.set(f"{VACANT}{rank}", b"1")
    if ranks:
        store.set(ANY_VACANT, b"1")


def join_check(client: Any, plan: LaunchPlan, lost: Iterable[int]) -> None:
    """A launcher joining as ``plan.node_rank``: fenced (``Fenced``), its slot's rank held
    by a spare (``Taken``: it starts anew), or its claim on the rank made."""
    rank, slot = plan.node_rank, plan.home_slot
    held = None if plan.members is None else plan.members.generation
    _wait_members(client, plan)  # TimeoutError: the rendezvous tries again
    now = current(client, plan.full_nodes)
    why = _fence_why(now, plan)
    if why is not None:
        raise Fenced(why)
    if held is None and now is not None and now.holder(rank) != slot:
        raise Taken(f"slot {slot}'s node rank {rank} is held by slot {now.holder(rank)}"
                    if now.holder(rank) is not None else
                    f"the gang went on with {len(now.slots)} node(s) without slot {slot} "
                    "(elastic: it shrank); asking to be admitted at a step boundary")
    say_vacant(client, lost)
    if int(client.add(f"{CLAIM}{rank}", 1)) > 1:  # another claimant: unless it was this one
        holder = bytes(client.get(f"{SLOT}{rank}")) if client.check([f"{SLOT}{rank}"]) else b""
        if holder != str(slot).encode():
            why = f"slot {holder.decode('ascii', 'replace') or '?'} claimed node rank {rank}"
            if held is None:
                raise Taken(why)
            raise Fenced(f"fenced: {why} first in this rendezvous (this pod, slot {slot}, "
                         "was lost): exiting without touching the job's state or checkpoints")
    client.set(f"{SLOT}{rank}", str(slot).encode())


def wait_for_rank(plan: LaunchPlan, say: Callable[[str], None],
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> tuple[int, Members]:
    """A spare: wait, holding no rank, until it holds one; (that rank, the members it saw).
    Its claim is made in the rendezvous it then joins (``join_check`` finds it its own)."""
    where = (plan.master_addr, plan.master_port)
    say(f"spare in slot {plan.home_slot}: waiting at {where[0]}:{where[1]}, holding no rank")
    others = [s for s in range(plan.full_nodes + plan.spares) if s != plan.home_slot]
    client, known, scanned = None, -1, float("-inf")
    while True:
        try:
            if client is None:  # where the store may move: a silent one is left sooner
                client = StoreClient(*where, timeout=SILENT_S if plan.store_moves else 5.0)
            now = current(client, plan.full_nodes)
            if now is not None and now.generation > known:
                known = now.generation  # the successors' slots are asked first
                others = hostmove.ask_order(now, others)
            found = _vacancy(client, plan, now)
            if found is not None:
                client.close()
                return found
        except OSError:  # the store changed hands (a rendezvous began or ended): again
            if client is not None:
                client.close()
            client = None
            if plan.store_moves and clock() - scanned >= 1.0:  # or its host was lost
                scanned = clock()
                moved = hostmove.best(plan, others, known)
                if moved is not None and (moved[1], moved[2]) != where:
                    where, known = (moved[1], moved[2]), moved[0].generation
                    say(f"spare in slot {plan.home_slot}: the store moved to "
                        f"{where[0]}:{where[1]} (generation {known})")
        sleep(POLL_S)


def _vacancy(client: Any, plan: LaunchPlan,
             now: Members | None | bool = False) -> tuple[int, Members] | None:
    if now is False:
        now = current(client, plan.full_nodes)
    assert now is None or isinstance(now, Members)
    if now is not None and (mine := now.rank_of(plan.home_slot)) is not None:
        return mine, now  # restarted in place, or admitted by a growing gang (elastic)
    if plan.elastic and now is not None and len(now.slots) < plan.full_nodes:
        client.set(f"{GROW}{plan.home_slot}", b"1")  # node 0 admits it at a step boundary
    if not client.check([ANY_VACANT]):
        return None
    for rank in range(plan.nnodes):
        if client.check([f"{VACANT}{rank}"]) and int(client.add(f"{CLAIM}{rank}", 1)) == 1:
            client.set(f"{SLOT}{rank}", str(plan.home_slot).encode())
            return rank, now or Members.first(plan.nnodes)
    return None


def grow_asks(client: Any, plan: LaunchPlan) -> list[int]:
    """Node 0 of an elastic gang running below its full size: the slots of the newcomers
    that ask to be admitted (``GROW``), read from rank 0's store ``client``."""
    members = plan.members
    if not plan.elastic or not plan.hosts_store or members is None or \
            len(members.slots) >= plan.full_nodes:
        return []
    return [s for s in range(plan.full_nodes + plan.spares)
            if s not in members.slots and client.check([f"{GROW}{s}"])]


def publish(store: Any, plan: LaunchPlan) -> None:
    """Node 0: the members into a store it serves or reaches (rank 0's, the exit barrier's),
    so that a launcher coming back finds whether it is fenced."""
    if plan.tracks_members and plan.hosts_store:
        store.set(MEMBERS, (plan.members or Members.first(plan.nnodes)).encode())
