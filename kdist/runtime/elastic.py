"""Elastic jobs (``spec.minNodes``): a gang that lost a node goes on with its survivors.

A job of N node ranks with ``minNodes`` M < N keeps its members (``kdist.runtime.membership``)
as a job with warm spares does. When a node is lost (``kdist.runtime.heartbeat``) and no
free spare is there to take its rank, the survivors stop their workers and meet again in
process (``kdist.runtime.launch``), each saying which rank is vacant; node 0, leading that
rendezvous, does not wait for the lost node once every other survivor joined and they are
at least M (``shrunk``): it writes the members at the next generation with the lost ranks
left out and the rest **renumbered contiguously** in their order (slot 0 keeps node rank 0
and the store), and lets the gang go. Every survivor takes its new node rank and the new
node count from those members (``adopt``); its workers restart in process with the new
``WORLD_SIZE``/``RANK``/``GROUP_RANK`` and resume from the newest checkpoint (kdist's
checkpoints reshard for FSDP; DDP loads the whole state).

Below M survivors the gang waits for the lost node (its pod replaced), as without
``minNodes``, up to the rendezvous timeout. A gang shrunk to node 0 alone still publishes
its members into rank 0's store (``kdist.runtime.watchdog``), for a lost node coming back
to read that it is fenced. The lost node, if it comes back, finds a newer
generation without its slot and is fenced (exit 206, ``membership.fenced``), touching
nothing. Node 0's loss (the store's host): where each pod's address is known
(``KDIST_SLOT_ADDR``) the store moves to node 1 first (``kdist.runtime.hostmove``), and the
gang shrinks there as for any node (node 1 renumbered to rank 0, the host); else its
survivors wait for its replacement.

**Growing back**: while the gang runs below N, a newcomer (the lost slot's replacement pod,
or a spare slot back) waits holding no rank, as a spare does, and asks to be admitted
(``GROW`` + its slot, in rank 0's store). Node 0's watchdog reads the ask and stops its
own workers at a step boundary (SIGTERM, as a preemption: every rank agrees on the step,
``kdist.runtime.preemption.StopVote``, saves it and exits 143); every launcher meets again
in process, node 0 leading at the larger size (``grown``: the survivors keep their node
ranks, the newcomers take the next ones, at the next generation), and the workers resume
from the checkpoint of the step they stopped at: no step is lost. A launcher that held a
rank and lost it stays fenced: only a newcomer holding none grows the gang. Pure logic,
standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from kdist.runtime.membership import VACANT, Fenced, Members
from kdist.runtime.plan import LaunchPlan


def free_spares(members: Members, full_nodes: int, spares: int) -> int:
    """How many spare slots (``full_nodes`` .. ``full_nodes + spares - 1``) hold no rank:
    while one is free, a lost rank is left to it (the gang keeps its size)."""
    return sum(1 for slot in range(full_nodes, full_nodes + spares) if slot not in members.slots)


def shrunk(members: Members, lost: Iterable[int], joined: Iterable[int], min_nodes: int,
           free: int = 0) -> Members | None:
    """The members the gang re-forms at without its ``lost`` node ranks, or None: it waits
    for them, as without ``minNodes`` (none lost, the store's host lost, a free spare to take the
    rank, not every survivor joined yet, or fewer survivors than ``min_nodes``).
    ``joined``: the node ranks in the rendezvous, node 0 included."""
    size = len(members.slots)
    gone = {r for r in lost if 0 <= r < size}
    if not gone or members.host in gone or free > 0:
        return None
    rest = [r for r in range(size) if r not in gone]
    if len(rest) < max(1, min_nodes) or sorted(set(joined)) != rest:
        return None
    return Members(members.generation + 1, tuple(members.slots[r] for r in rest),
                   tuple(members.joined_at(r) for r in rest) if members.since else (),
                   rest.index(members.host))


def lead_decides(data: Mapping[str, bytes], plan: LaunchPlan, lost: Iterable[int],
                 count_prefix: str) -> Members | None:
    """Node 0, leading a rendezvous (its ``MiniStore``'s ``data``): the smaller members to
    re-form at now, or None. The ranks lost are its own finding and every ``VACANT`` key a
    survivor set; the ranks joined, those that set their count (``count_prefix`` + rank)."""
    if not plan.elastic:
        return None
    members = plan.members or Members.first(plan.nnodes)
    keys = list(data)
    said = [int(k[len(VACANT):]) for k in keys if k.startswith(VACANT)
            and k[len(VACANT):].isdigit()]
    # the leader (the store's host: node 0 until the store moved) sets no count of its own
    joined = [plan.node_rank, *(int(k[len(count_prefix):]) for k in keys
                                if k.startswith(count_prefix) and k[len(count_prefix):].isdigit())]
    free = free_spares(members, plan.full_nodes, plan.spares)
    return shrunk(members, [*lost, *said], joined, plan.min_nodes, free)


def gone_ranks(before: Members, after: Members) -> list[int]:
    """The node ranks of ``before`` whose slots hold none in ``after``."""
    return [r for r, slot in enumerate(before.slots) if slot not in after.slots]


def shrink_line(before: Members, after: Members) -> str:
    """The launcher's words (after "kdist.launch: ") when the gang re-formed smaller: the
    ledger and `kdist status` read them (``kdist.shared.ledger.SHRANK``)."""
    gone = ", ".join(map(str, gone_ranks(before, after)))
    return (f"the gang shrank to {len(after.slots)} nodes: node {gone} lost (generation "
            f"{after.generation}: node ranks held by slots {', '.join(map(str, after.slots))})")


def grown(members: Members, newcomers: Iterable[int], full_nodes: int) -> Members:
    """The members the gang re-forms at when it admits the ``newcomers`` (slots, holding
    no rank): the same node ranks for its members, the next ones for the newcomers (in
    slot order, as many as there is room for below ``full_nodes``), the next generation."""
    room = max(0, full_nodes - len(members.slots))
    new = [s for s in sorted(set(newcomers)) if s not in members.slots][:room]
    if not new:
        return members
    after = members.generation + 1
    kept = tuple(members.joined_at(r) for r in range(len(members.slots)))
    return Members(after, (*members.slots, *new), (*kept, *[after] * len(new)), members.host)


def grow_line(before: Members, after: Members) -> str:
    """The launcher's words (after "kdist.launch: ") when the gang re-formed larger: the
    ledger and `kdist status` read them (``kdist.shared.ledger.GREW``)."""
    new = ", ".join(str(s) for s in after.slots if s not in before.slots)
    return (f"the gang grew to {len(after.slots)} nodes: slot {new} admitted at a step "
            f"boundary (generation {after.generation}: node ranks held by slots "
            f"{', '.join(map(str, after.slots))})")


def adopt(plan: LaunchPlan, members: Members) -> tuple[LaunchPlan, str | None]:
    """This launcher's plan once the gang met as ``members``: its node rank (its slot's
    place in them) and the node count, and what to say of it (None: nothing new). Raises
    ``Fenced`` when the gang went on without this slot (it joined too late)."""
    before = plan.members or Members.first(plan.full_nodes)
    rank = members.rank_of(plan.home_slot)
    if rank is None:
        raise Fenced(f"fenced: this pod (slot {plan.home_slot}) joined as node rank "
                     f"{plan.node_rank}, but the gang went on without it at generation "
                     f"{members.generation}: exiting without touching the job's state or "
                     "checkpoints")
    moved = dataclasses.replace(plan, members=members, node_rank=rank,
                                nnodes=len(members.slots))
    if len(members.slots) < len(before.slots):
        return moved, shrink_line(before, members)
    if len(members.slots) > len(before.slots):
        return moved, grow_line(before, members)
    if members.generation and members != before:
        return moved, (f"the gang is on generation {members.generation}: node ranks held by "
                       f"slots {', '.join(map(str, members.slots))}")
    return moved, None
