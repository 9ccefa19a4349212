"""Warm spares and fencing (``spec.distributed.spares``): which pod holds which node rank.

A job of N node ranks and K spares has N + K pods (local node groups), each with a
**slot**: its completion index. At the start slot R holds node rank R, and slots N..N+K-1
are spares: their launchers start, wait at node 0's port holding no rank (no worker
started), and poll it. The gang's **members** are one record, kept in node 0's store
(``MEMBERS``): a **generation**, bumped each time the gang re-forms with another slot
holding a rank, and the slot that holds each rank.

When the gang finds node R lost (``kdist.runtime.heartbeat``), its survivors stop
their workers and meet again in process (``kdist.runtime.launch``); each says in that
rendezvous that rank R is vacant (``VACANT``). A free spare sees it, claims rank R
(``CLAIM``: an ``ADD`` in the host's store, so one claimant wins, whether a spare or node
R itself come back in time), joins as node R, and the host writes the new members, at
the next generation, before it lets the gang go. The survivors resume from the newest
checkpoint (kdist's DDP: from a survivor's memory), as after any restart.

**The store's host** is one more field of the members (``host``: a node rank, 0 at the
start): the launcher holding that rank serves the store on its own pod's address
(``LaunchPlan.address_of``: the slot's stable DNS name; a port per slot in a local run).
When the host itself is lost, the rule is (``kdist.runtime.hostmove``):

- the **successor** is the lowest node rank other than the host (``candidates``, in that
  order): a survivor that is the first candidate opens a store at its own address with
  the members **moved** (the next generation, the same slots, ``host`` = its rank) and
  leads the rendezvous there; a survivor further down the list looks for it, candidate by
  candidate (each given twice ``nodeLossSeconds`` to answer; one that never does is passed
  over, and the first candidate left hosts);
- a store is accepted only with a generation newer than the one the launcher met at;
  a spare, its store silent, asks every slot's address (the successors first) and follows
  the newest generation it finds, so a store that answers at the old address (the old
  host thawed) is ignored;
- the lost host's rank is vacant, taken by a spare as any other rank.

**Fencing**: a launcher that held a rank at an older generation and finds that rank held
by another slot now (a frozen node thawed, a partition healed) exits ``FENCED`` (206) at
once, touching neither the store's keys nor the checkpoints. A launcher that hosted the
store at an older generation is fenced by any newer one hosted elsewhere: before it leads
a rendezvous again it asks the candidates' addresses, so a thawed host that sees everyone
silent neither leads nor declares them lost (``kdist.runtime.hostmove.moved_away``).

A launcher that starts anew
in a slot whose rank a spare took (its pod replaced) becomes a spare itself. Pure logic
here; the store protocol is in ``kdist.runtime.spares`` and ``kdist.runtime.rendezvous``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kdist.shared import exitcodes
from kdist.shared.errors import LaunchError

#: "generation:slot,slot,...[;since,...][@host]" (the slot holding each node rank)
MEMBERS = "kdist/members"
VACANT = "kdist/rdzv/vacant/"  # + rank: a survivor says that rank's node is lost
ANY_VACANT = "kdist/rdzv/vacant"  # set with any of them: one key for the spares to poll
CLAIM = "kdist/rdzv/claim/"  # + rank: ADD 1 by each claimant; the first (1) holds it
SLOT = "kdist/rdzv/slot/"  # + rank: the slot that joined this rendezvous as that rank
#: + slot: a newcomer holding no rank asks an elastic gang running smaller to admit it
#: (``kdist.runtime.elastic``); set in rank 0's store, which node 0's watchdog reads
GROW = "kdist/grow/"


class Fenced(LaunchError):
    """A newer generation gave this launcher's rank to another slot: exit at once."""

    exit_code = exitcodes.FENCED


@dataclass(frozen=True)
class Members:
    """Which slot holds each node rank, at a generation; ``since``: the generation each
    rank's holder joined at (empty: all at 0). An elastic gang that grew back admits a new
    pod in the slot a fenced one had (``kdist.runtime.elastic.grown``): the old one, back,
    held its rank before its slot's new holder joined, and stays fenced."""

    generation: int
    slots: tuple[int, ...]
    since: tuple[int, ...] = ()
    host: int = 0  # the node rank whose holder serves the store

    @classmethod
    def first(cls, nnodes: int) -> Members:
        return cls(0, tuple(range(nnodes)))

    def encode(self) -> bytes:
        since = f";{','.join(map(str, self.since))}" if any(self.since) else ""
        host = f"@{self.host}" if self.host else ""
        return f"{self.generation}:{','.join(map(str, self.slots))}{since}{host}".encode()

    @classmethod
    def decode(cls, raw: bytes, nnodes: int) -> Members | None:
        """The record as stored, or None when it is not one of 1 to ``nnodes`` ranks (an
        elastic gang, ``kdist.runtime.elastic``, holds fewer ranks once it shrank)."""
        try:
            gen, _, rest = raw.decode("ascii").partition(":")
            rest, at, hosted = rest.partition("@")
            slots, _, joined = rest.partition(";")
            parsed = tuple(int(s) for s in slots.split(","))
            since = tuple(int(s) for s in joined.split(",")) if joined else ()
            generation, host = int(gen), int(hosted) if at else 0
        except (UnicodeDecodeError, ValueError):
            return None
        if len(parsed) > nnodes or generation < 0 or min(parsed) < 0 or \
                not 0 <= host < len(parsed) or \
                (since and (len(since) != len(parsed) or min(since) < 0
                            or max(since) > generation)):
            return None
        return cls(generation, parsed, since, host)

    @property
    def host_slot(self) -> int:
        """The slot that serves the store."""
        return self.slots[self.host]

    def moved(self, host: int) -> Members:
        """The members once the store moved to node rank ``host`` (its host was lost): the
        next generation, every rank held as before."""
        return Members(self.generation + 1, self.slots, self.since, host)

    def candidates(self) -> list[int]:
        """The node ranks that would host the store if its host were lost, in order: the
        lowest first (``kdist.runtime.hostmove``)."""
        return [rank for rank in range(len(self.slots)) if rank != self.host]

    def holder(self, rank: int) -> int | None:
        """The slot holding ``rank``, or None (an elastic gang shrank below it)."""
        return self.slots[rank] if 0 <= rank < len(self.slots) else None

    def joined_at(self, rank: int) -> int:
        """The generation ``rank``'s holder joined at (0: from the start)."""
        return self.since[rank] if 0 <= rank < len(self.since) else 0

    def rank_of(self, slot: int) -> int | None:
        """The rank ``slot`` holds, or None (a free spare)."""
        return self.slots.index(slot) if slot in self.slots else None

    def after(self, joined: dict[int, int]) -> Members:
        """The members once the slots in ``joined`` (rank -> slot) met as those ranks: the
        next generation where any rank changed hands, else this one."""
        slots = tuple(joined.get(rank, slot) for rank, slot in enumerate(self.slots))
        # ``since`` as it was: a rank a spare took is held by another slot, which fences
        # its old holder already
        return self if slots == self.slots else \
            Members(self.generation + 1, slots, self.since, self.host)


def fenced(held: int | None, rank: int, slot: int, current: Members | None,
           hosted: bool = False) -> bool:
    """Whether a launcher in ``slot`` that held ``rank`` at generation ``held`` (None: it
    held none yet, a fresh start) must stop: a newer generation gave the rank to another
    slot, or (an elastic gang, ``kdist.runtime.elastic``) went on without this slot, or
    (``hosted``: this launcher served the store then) moved the store to another rank."""
    if held is None or current is None or current.generation <= held:
        return False
    return (current.holder(rank) != slot or current.joined_at(rank) > held
            or (hosted and current.host != rank))


def start_role(slot: int, nnodes: int, current: Members | None) -> int | None:
    """The rank a launcher starting anew in ``slot`` holds (None: it starts as a spare):
    its own slot's rank unless a spare took it (then it is a spare: its pod was replaced);
    a spare slot that took a rank holds it again (its container restarted in place)."""
    if current is not None:
        taken = current.rank_of(slot)
        if taken is not None:
            return taken
        if slot < nnodes:
            return None  # a spare holds this slot's rank now
    return slot if slot < nnodes else None


def fence_line(slot: int, rank: int, held: int, current: Members) -> str:
    holder = current.holder(rank)
    now = (f"the store moved to node rank {current.host} (slot {current.host_slot}) while "
           "this node, its host, was lost" if holder == slot and
           current.joined_at(rank) <= held else
           f"a new pod in this slot holds it since generation {current.joined_at(rank)} (the "
           "gang grew back while this one was lost)" if holder == slot else
           f"slot {holder} holds it (a spare took it, or the gang shrank and renumbered its "
           "nodes, while this node was lost)" if holder is not None else
           f"the gang went on with {len(current.slots)} node(s) without it (elastic: "
           "it shrank while this node was lost)")
    return (f"fenced: this pod (slot {slot}) held node rank {rank} at generation {held}; "
            f"at generation {current.generation} {now}: exiting without touching the job's "
            "state or checkpoints")


def took_line(slot: int, rank: int) -> str:
    """The launcher's words (after "kdist.launch: ") when a spare takes a rank: `kdist
    status` and the ledger read them (``kdist.shared.ledger.SPARE_TOOK``)."""
    return f"spare in slot {slot} takes node rank {rank}"
