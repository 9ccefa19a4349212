"""Node 0, the store's host, lost with spares (issue 54): the store moves to the lowest
other node rank, a spare takes rank 0 there, the old host coming back is fenced.

The membership logic (the host in the members, the successor, fencing of a host), the
plan's addresses, and the protocol on real sockets between the old host, the successor,
another survivor and a spare (``kdist.runtime.hostmove``)."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time

import pytest

from kdist.runtime import elastic, hostmove
from kdist.runtime import rendezvous as R
from kdist.runtime import spares as S
from kdist.runtime.heartbeat import Heartbeat
from kdist.runtime.membership import Fenced, Members, fence_line, fenced
from kdist.runtime.plan import resolve_env
from kdist.runtime.store import MiniStore
from kdist.shared.errors import LaunchError

# --- the membership logic -------------------------------------------------------------------


def test_the_members_say_which_rank_hosts_the_store():
    m = Members(3, (2, 1, 4), (), host=1)
    assert m.encode() == b"3:2,1,4@1" and Members.decode(m.encode(), 3) == m
    assert m.host_slot == 1
    assert Members.first(2).encode() == b"0:0,1"  # as before: no host field at node 0
    assert Members.decode(b"1:0,1@2", 2) is None  # a host beyond the ranks
    assert Members.decode(b"1:0,1@x", 2) is None


def test_the_successor_is_the_lowest_other_rank_and_the_move_is_a_new_generation():
    first = Members.first(3)
    assert first.candidates() == [1, 2]
    moved = first.moved(1)
    assert moved == Members(1, (0, 1, 2), (), 1) and moved.candidates() == [0, 2]
    # a spare takes the old host's rank at the new host: the host stays where it moved
    assert moved.after({0: 3}) == Members(2, (3, 1, 2), (), 1)


def test_a_host_is_fenced_once_the_store_moved_even_before_its_rank_is_taken():
    moved = Members.first(2).moved(1)
    assert fenced(0, 0, 0, moved, hosted=True)  # the old host: the store moved away
    assert "the store moved to node rank 1 (slot 1)" in fence_line(0, 0, 0, moved)
    assert not fenced(0, 1, 1, moved)  # a survivor keeps its rank
    assert not fenced(1, 1, 1, moved, hosted=True)  # the new host, at its own generation
    assert fenced(0, 0, 0, Members(2, (2, 1), (), 1))  # rank 0 taken by the spare


def test_an_elastic_gang_renumbered_keeps_the_store_on_its_host():
    moved = Members.first(3).moved(1)
    shrunk = elastic.shrunk(moved, [0], [1, 2], 2)
    assert shrunk == Members(2, (1, 2), (), 0)  # slot 1 is node rank 0 now, and the host
    assert elastic.shrunk(moved, [1], [0, 2], 2) is None  # the host itself lost: waited
    assert elastic.grown(Members(1, (0, 1), (), 1), [2], 3).host == 1


def test_the_host_waits_for_the_others_to_read_lost_wherever_it_moved():
    slept: list[float] = []

    class Store:
        def __init__(self) -> None:
            self.data: dict[str, bytes] = {}

        def add(self, key: str, delta: int) -> int:
            self.data.setdefault(key, b"0")
            return 0

        def set(self, key: str, value: bytes) -> None:
            self.data[key] = value

        def check(self, keys: list[str]) -> bool:
            return all(k in self.data for k in keys)

        def multi_get(self, keys: list[str]) -> list[bytes]:
            return [self.data[k] for k in keys]

    now = [0.0]
    beat = Heartbeat(1, 2, 2, clock=lambda: now[0], sleep=slept.append, hosts=True)
    store = Store()
    for t in (0.0, 1.0, 2.0, 3.0):
        now[0] = t
        try:
            beat.tick(store)
        except Exception:
            break
    assert slept, "the host did not give the others time to read LOST"


# --- the plan's addresses -------------------------------------------------------------------


def _free_port() -> int:
    # a port with the next two free too: the local slots' stores listen there
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        try:
            for k in (1, 2, 3):
                with socket.socket() as t:
                    t.bind(("127.0.0.1", port + k))
            return port
        except OSError:
            continue
    raise AssertionError("no free ports")


def _plan(node: int, port: int, nodes: int = 2, spares: int = 1, **changes):
    plan = resolve_env({"KDIST_JOB_NAME": "j", "KDIST_NNODES": str(nodes),
                        "KDIST_SPARES": str(spares), "KDIST_NPROC_PER_NODE": "1",
                        "KDIST_NODE_RANK": str(node), "KDIST_MASTER_ADDR": "127.0.0.1",
                        "KDIST_MASTER_PORT": str(port), "KDIST_DIST_BACKEND": "gloo",
                        "KDIST_RDZV_TIMEOUT": "20", "KDIST_NODE_LOSS_SECONDS": "2",
                        "KDIST_SLOT_ADDR": "127.0.0.1", "KDIST_SLOT_PORTS": "1"})
    return dataclasses.replace(plan, **changes)


def test_each_slot_has_an_address_the_store_can_move_to():
    env = {"KDIST_NNODES": "2", "KDIST_SPARES": "1", "KDIST_NODE_RANK": "1",
           "KDIST_MASTER_ADDR": "t-0.t", "KDIST_MASTER_PORT": "29500",
           "KDIST_DIST_BACKEND": "gloo", "KDIST_SLOT_ADDR": "t-{slot}.t"}
    plan = resolve_env(env)
    assert plan.store_moves and not plan.hosts_store
    assert plan.address_of(2) == ("t-2.t", 29500)
    moved = plan.at_host(Members.first(2).moved(1))
    assert moved.hosts_store and (moved.master_addr, moved.master_port) == ("t-1.t", 29500)
    assert moved.worker_env({}, 1)["KDIST_MASTER_PORT"] == "29500"
    assert not resolve_env({**env, "KDIST_SPARES": "0"}).store_moves  # waits, as before
    assert not resolve_env({k: v for k, v in env.items() if k != "KDIST_SLOT_ADDR"}).store_moves
    with pytest.raises(LaunchError, match="KDIST_SLOT_ADDR='t-0.t' must contain"):
        resolve_env({**env, "KDIST_SLOT_ADDR": "t-0.t"})
    local = _plan(1, 4000)
    assert local.address_of(0) == ("127.0.0.1", 4000) and local.address_of(2)[1] == 4002


# --- the protocol, on real sockets ----------------------------------------------------------


def _run(target, *args) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def go() -> None:
        try:
            out["value"] = target(*args)
        except Exception as e:  # the test reads it
            out["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, out


def test_node_0_lost_the_successor_hosts_a_spare_takes_rank_0_and_node_0_is_fenced():
    port = _free_port()
    first = Members.first(2)
    node0 = _plan(0, port, members=first)
    node1 = _plan(1, port, members=first, restart_count=1)
    spare = _plan(2, port)
    old = R.bind(node0)  # node 0's port: accepts, and (frozen) never answers
    said: list[str] = []
    try:
        # node 1, its store silent: it is the successor, and hosts at its own address
        moved, listener, vacant = hostmove.find(node1, True, said.append)
        assert listener is not None and vacant == [0]
        assert moved.hosts_store and moved.members == first.moved(1)
        assert (moved.master_addr, moved.master_port) == ("127.0.0.1", port + 1)
        assert "this node (rank 1) hosts the store now at 127.0.0.1:" in said[-1]
        try:
            t1, led = _run(R.meet, moved, listener, time.monotonic(), 1, vacant)
            # the spare, its store silent, finds the newer generation and takes rank 0
            rank, seen = S.wait_for_rank(spare, said.append)
            assert rank == 0 and seen == first.moved(1)
            assert "the store moved to 127.0.0.1:" in said[-1]
            took = dataclasses.replace(spare.at_host(seen), node_rank=rank)
            met = R.meet(took, None, time.monotonic(), 0)
            t1.join(timeout=20)
            assert met.members == led["value"].members == Members(2, (2, 1), (), 1)

            # node 0 thawed: the successor's address says the store moved: fenced
            server = MiniStore(listener).start()
            try:
                S.publish(server, moved.at_host(met.members))
                with pytest.raises(Fenced, match="slot 2 holds it"):
                    S.probe(node0)
                with pytest.raises(Fenced):  # waiting in a rendezvous of its own too
                    R.meet(dataclasses.replace(node0, node_loss_s=2), old, time.monotonic(),
                           1, [1])
            finally:
                server.stop()
        finally:
            listener.close()
        # nothing answers at the successor (a partition): the old host is told nothing,
        # and fences nobody on its own
        S.probe(node0)
    finally:
        old.close()


def test_a_survivor_down_the_list_joins_the_successor_or_passes_over_a_lost_one():
    port = _free_port()
    first = Members.first(3)
    node1 = _plan(1, port, nodes=3, members=first)
    node2 = _plan(2, port, nodes=3, members=first)
    moved, listener, _ = hostmove.find(node1, True, lambda s: None)
    assert listener is not None
    server = MiniStore(listener).start()
    try:
        S.lead_open(server, moved, [0])
        there, mine, vacant = hostmove.find(node2, True, lambda s: None)
        assert mine is None and vacant == [0]
        assert (there.master_addr, there.master_port) == ("127.0.0.1", port + 1)
        assert there.members == first  # held: it is fenced by nothing at the new host
    finally:
        server.stop()
        listener.close()
    # node 1 lost too: node 2 gives it nodeLossSeconds, then hosts itself
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    there, mine, _ = hostmove.find(node2, True, lambda s: None, clock=lambda: now[0],
                                   sleep=sleep)
    try:
        assert mine is not None and there.members == first.moved(2)
        assert now[0] >= node2.node_loss_s
    finally:
        if mine is not None:
            mine.close()


def test_a_host_that_still_answers_keeps_the_store():
    port = _free_port()
    first = Members.first(2)
    listener = R.bind(_plan(0, port))
    server = MiniStore(listener).start()
    try:
        S.publish(server, _plan(0, port, members=first))
        node1 = _plan(1, port, members=first)
        assert hostmove.find(node1, False, lambda s: None) == (node1, None, [])
    finally:
        server.stop()
        listener.close()


def test_a_spare_asks_the_successors_first_and_the_silent_host_last():
    assert hostmove.ask_order(Members.first(3), [0, 1, 2, 4]) == [1, 2, 4, 0]
    assert hostmove.ask_order(Members(2, (3, 1, 2), (), 1), [0, 1, 2, 3]) == [3, 2, 0, 1]


def test_an_elastic_gang_led_at_its_new_host_shrinks_without_node_0():
    port = _free_port()
    moved = Members.first(3).moved(1)
    host = _plan(1, port, nodes=3, spares=0, min_nodes=2, max_nodes=3, members=moved,
                 slot_addr="127.0.0.1")
    assert host.elastic and host.store_moves and host.hosts_store
    data = {f"{R.COUNT}2": b"1", "kdist/rdzv/vacant/0": b"1"}
    assert elastic.lead_decides(data, host, [0], R.COUNT) == Members(2, (1, 2), (), 0)
    assert elastic.lead_decides({}, host, [0], R.COUNT) is None  # node 2 not in yet


def test_node_0_replaced_finds_the_store_moved_and_hosts_nothing():
    """A new pod in slot 0 (its restart count above 0) looks at the other slots before it
    leads: the store moved to node 1, so it closes its port and joins there as rank 0."""
    from kdist.runtime import launch

    port = _free_port()
    moved = Members.first(2).moved(1)
    host = _plan(1, port, members=moved).at_host(moved)
    listener = hostmove._open(host, 2, time.monotonic)
    fresh = _plan(0, port, restart_count=1)
    own = R.bind(fresh)
    try:
        t1, led = _run(R.meet, host, listener, time.monotonic(), 1, [0])
        # the store has moved: node 1 serves the members (its thread, under load, may not
        # have begun to; the new pod would then lead on its own, as the store never moved)
        deadline = time.monotonic() + 10
        while hostmove.ask(host.address_of(1), 2) != moved:
            assert time.monotonic() < deadline, "node 1 never served the members"
            time.sleep(0.05)
        said: list[str] = []
        real, launch._say = launch._say, said.append
        try:
            plan, hosting = launch._first_meet(fresh, own, time.monotonic())
        finally:
            launch._say = real
        t1.join(timeout=20)
        assert hosting is None and own.fileno() == -1  # closed: it hosts nothing
        assert f"the store moved to 127.0.0.1:{port + 1} (generation 1)" in said[0]
        assert (plan.node_rank, plan.master_port, plan.members) == (0, port + 1, moved)
        assert not plan.hosts_store and led["value"].members == moved
    finally:
        own.close()
        listener.close()
