"""Elastic jobs growing back (issue 55 slice 2): the members at the larger size, the
newcomer's ask, node 0 reading it, the rendezvous at the larger size over node 0's port,
the old pod of the slot staying fenced, and the ledger, the watch and status."""

from __future__ import annotations

import dataclasses
import time

import pytest

from kdist.cli.progress import ledger_lines
from kdist.kube.watch.tracker import Tracker
from kdist.local.ledger import LocalLedger
from kdist.runtime import elastic as X
from kdist.runtime import rendezvous as R
from kdist.runtime import spares as S
from kdist.runtime.membership import GROW, Fenced, Members, fence_line, fenced
from kdist.runtime.store import MiniStore, StoreClient
from kdist.shared.ledger import Ledger, grew, in_process_line
from kdist.shared.ledgerread import read

from .test_elastic import _free_port, _plan, _run
from .test_ledger import Clock, pod, step

SHRUNK = Members(1, (0, 1))  # 3 nodes, node 2 lost


def test_the_newcomers_take_the_next_ranks_at_the_next_generation():
    assert X.grown(SHRUNK, [2], 3) == Members(2, (0, 1, 2), (0, 0, 2))
    # renumbered survivors keep their ranks; a newcomer in a lost slot joins at the end
    assert X.grown(Members(1, (0, 2)), [1], 3) == Members(2, (0, 2, 1), (0, 0, 2))
    # no more than the full size; slots already members and no newcomer change nothing
    assert X.grown(Members(3, (0,)), [2, 1, 5], 2) == Members(4, (0, 1), (0, 4))
    assert X.grown(SHRUNK, [1], 3) is SHRUNK and X.grown(SHRUNK, [], 3) is SHRUNK
    # a second shrink keeps when each holder joined
    twice = X.shrunk(Members(2, (0, 1, 2), (0, 0, 2)), [1], [0, 2], 1)
    assert twice == Members(3, (0, 2), (0, 2))
    assert Members.decode(twice.encode(), 3) == twice
    assert Members.decode(b"3:0,2;0,9", 3) is None  # joined after the generation: not a record
    assert SHRUNK.encode() == b"1:0,1"  # as before, where every holder is from the start


def test_a_survivor_adopts_the_larger_gang_and_says_it_grew():
    plan = _plan(1, 1, members=SHRUNK, nnodes=2)
    moved, said = X.adopt(plan, X.grown(SHRUNK, [2], 3))
    assert (moved.node_rank, moved.nnodes, moved.world_size) == (1, 3, 3)
    assert said == ("the gang grew to 3 nodes: slot 2 admitted at a step boundary "
                    "(generation 2: node ranks held by slots 0, 1, 2)")
    assert grew("kdist.launch: " + said) == (3, "2")
    assert grew("[rank 0] kdist.launch: " + said) is None  # a worker's line


def test_the_old_pod_of_a_slot_the_gang_grew_back_into_stays_fenced():
    now = X.grown(SHRUNK, [2], 3)
    assert fenced(0, 2, 2, now)  # slot 2's old pod held rank 2 at generation 0
    assert "a new pod in this slot holds it since generation 2" in fence_line(2, 2, 0, now)
    assert not fenced(1, 1, 1, now) and not fenced(1, 0, 0, now)  # the survivors
    assert not fenced(2, 2, 2, now)  # the newcomer itself


def test_a_newcomer_asks_only_while_the_gang_is_smaller_and_node_0_reads_it():
    port = _free_port()
    listener = R.bind(_plan(0, port))
    server = MiniStore(listener).start()  # as rank 0's store, while the gang trains
    try:
        node0 = _plan(0, port, members=SHRUNK, nnodes=2)
        newcomer = _plan(2, port, node_rank=5)  # its slot's rank was given away: a spare
        assert newcomer.is_spare and newcomer.home_slot == 2
        client = StoreClient("127.0.0.1", port, timeout=5)
        try:
            assert S.grow_asks(client, node0) == []
            server.set("kdist/members", Members(1, (0, 1, 3)).encode())  # a spare took rank 2
            full = dataclasses.replace(newcomer, spares=1)
            assert S._vacancy(client, full) is None  # the gang at full size: no ask
            assert f"{GROW}2" not in server.data
            server.set("kdist/members", SHRUNK.encode())
            assert S._vacancy(client, newcomer) is None  # it asks, and waits
            assert server.data[f"{GROW}2"] == b"1"
            assert S.grow_asks(client, node0) == [2]
            assert S.grow_asks(client, _plan(1, port, members=SHRUNK, nnodes=2)) == []
            assert S.grow_asks(client, dataclasses.replace(
                node0, members=Members(2, (0, 1, 2)), nnodes=3)) == []  # full again
            # node 0's re-form at 3 names it: it takes rank 2
            server.set("kdist/members", X.grown(SHRUNK, [2], 3).encode())
            assert S._vacancy(client, newcomer) == (2, X.grown(SHRUNK, [2], 3))
        finally:
            client.close()
    finally:
        server.stop()
        listener.close()


def test_the_gang_meets_at_the_larger_size_with_the_newcomer():
    """Node 0 leads at the grown members; node 1 joins with the members it had; the newcomer
    waits as a spare until the members name it, then joins as rank 2."""
    port = _free_port()
    listener = R.bind(_plan(0, port))
    try:
        node0 = _plan(0, port, members=SHRUNK, nnodes=2, restart_count=2)
        node1 = _plan(1, port, members=SHRUNK, nnodes=2)
        newcomer = _plan(2, port, node_rank=5)
        target = X.grown(SHRUNK, [2], 3)
        t1, one = _run(R.meet, node1, None, time.monotonic(), 2)

        def spare():
            rank, seen = S.wait_for_rank(newcomer, lambda _: None)
            took = dataclasses.replace(newcomer, node_rank=rank, members=seen,
                                       nnodes=len(seen.slots))
            return R.meet(took, None, time.monotonic(), 0)

        t2, new = _run(spare)
        led = R.meet(dataclasses.replace(node0, members=target, nnodes=3), listener,
                     time.monotonic(), 2)
        t1.join(timeout=20)
        t2.join(timeout=20)
        assert "error" not in one and "error" not in new, (one, new)
        assert led.members == one["value"].members == new["value"].members == target
        assert led.restart == one["value"].restart == new["value"].restart == 2
        # the fenced old pod of slot 2, back now, writes nothing and exits 206
        server = MiniStore(listener).start()
        try:
            S.publish(server, dataclasses.replace(node0, members=target, nnodes=3))
            before = dict(server.data)
            with pytest.raises(Fenced, match="since generation 2"):
                R.meet(_plan(2, port, members=Members.first(3)), None, time.monotonic(), 1)
            assert server.data == before
        finally:
            server.stop()
    finally:
        listener.close()


# --- the ledger, the watch and status --------------------------------------------------------


LINE = "kdist.launch: " + X.grow_line(SHRUNK, X.grown(SHRUNK, [2], 3))
WHY = "the gang grows to 3 nodes (a planned re-form at a step boundary)"


def test_the_ledger_records_the_grow_with_no_step_lost():
    ledger = Ledger()
    assert not ledger.grew_to(3, "2")  # no restart open
    ledger.failed("node 0", 143, None, 10.0, 21, said=WHY)
    assert ledger.grew_to(3, "2") and not ledger.grew_to(3, "2")  # each node says it
    ledger.stepped(21, 16.0, resumed=True)
    entry = ledger.summary(2, 0.0, 20.0)["restarts"][0]
    assert entry["grew"] == "grew to 3 nodes: slot 2 admitted"
    assert (entry["secondsLost"], entry["stepsLost"]) == (6.0, 0)
    kept = read('{"restarts": [' + __import__("json").dumps(entry) + "]}")
    assert kept.problems == [] and kept.ledger["restarts"][0]["grew"] == entry["grew"]


def test_the_local_ledger_and_the_watch_record_the_grow():
    now = [100.0]
    local = LocalLedger(2, clock=lambda: now[0])
    local.line(0, '{"event": "step", "step": 21, "rank": 0}')
    for node in (0, 1):
        local.line(node, "kdist.launch: " + in_process_line(2, 2, WHY, 143))
        local.line(node, LINE)
    now[0] += 7
    local.line(0, '{"event": "resume", "step": 21, "rank": 0}')
    summary = local.summary(True)
    assert summary is not None
    (r,) = summary["restarts"]
    assert r["grew"] == "grew to 3 nodes: slot 2 admitted" and r["stepsLost"] == 0

    clock = Clock()
    t = Tracker("unit-job", "d", clock=clock)
    t.state.nodes = 3
    for rank in (0, 1, 2):
        t.pod_event("ADDED", pod(rank))
    t.log_line("unit-job-0-x", step(21))
    t.log_line("unit-job-0-x", "kdist.launch: " + in_process_line(2, 2, WHY, 143))
    t.log_line("unit-job-0-x", LINE)
    assert t.state.size == 3
    clock.now += 5
    t.log_line("unit-job-0-x", step(21, "resume"))
    (r,) = t.state.ledger["restarts"]
    assert "; grew to 3 nodes: slot 2 admitted; back 5.0s later, 0 step(s) lost" in \
        ledger_lines(t.state.ledger)[0]


def test_status_says_the_gang_grew_back(capsys):
    from kdist.cli.progress import print_status
    from kdist.kube.watch.state import JobState

    state = JobState(name="j", namespace="d")
    state.nodes = 3
    state.size = 3  # it shrank, then grew back
    print_status(state)
    assert "training on all 3 nodes again (spec.minNodes: the gang grew back" in \
        capsys.readouterr().out
