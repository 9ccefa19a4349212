"""Warm spares and fencing (issue 54): the membership logic (generations, which slot holds
which rank, fencing), and the store protocol between node 0, the survivors, a spare and a
node that comes back; the ledger's record of a spare."""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time

import pytest

from kdist.runtime import rendezvous as R
from kdist.runtime import spares as S
from kdist.runtime.membership import (
    MEMBERS,
    Fenced,
    Members,
    fenced,
    start_role,
    took_line,
)
from kdist.runtime.plan import resolve_env
from kdist.runtime.store import MiniStore, StoreClient
from kdist.shared import exitcodes
from kdist.shared.ledger import Ledger, spare_took
from kdist.shared.ledgerread import read

# --- the membership logic -------------------------------------------------------------------


def test_members_round_trip_and_bad_records_read_as_none():
    m = Members(3, (0, 4, 2))
    assert Members.decode(m.encode(), 3) == m
    for raw in (b"", b"x:0,1", b"1:0,1,2", b"1:0,a", b"-1:0,1", "1:0,\u00e9".encode()):
        assert Members.decode(raw, 2) is None


def test_a_new_generation_only_where_a_rank_changed_hands():
    first = Members.first(3)
    assert first.after({1: 1, 2: 2}) is first
    moved = first.after({1: 3, 2: 2})
    assert moved == Members(1, (0, 3, 2))
    assert moved.rank_of(3) == 1 and moved.rank_of(1) is None


def test_fencing_needs_a_newer_generation_that_gave_the_rank_away():
    now = Members(1, (0, 2))
    assert fenced(0, 1, 1, now)  # held rank 1 at 0; slot 2 holds it at 1
    assert not fenced(1, 1, 1, Members(1, (0, 1)))  # same generation
    assert not fenced(0, 1, 1, Members(1, (2, 1)))  # another rank changed hands
    assert not fenced(None, 1, 1, now)  # a fresh start held nothing: it becomes a spare
    assert not fenced(0, 1, 1, None)


def test_where_a_launcher_starting_anew_stands():
    taken = Members(1, (0, 2))
    assert start_role(1, 2, None) == 1 and start_role(2, 2, None) is None
    assert start_role(1, 2, taken) is None  # its rank was taken: its pod is a spare now
    assert start_role(2, 2, taken) == 1  # a spare that took rank 1, restarted in place
    assert start_role(3, 2, taken) is None


# --- the store protocol ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _plan(node: int, port: int, **changes):
    plan = resolve_env({"KDIST_JOB_NAME": "j", "KDIST_NNODES": "2", "KDIST_SPARES": "1",
                        "KDIST_NPROC_PER_NODE": "1", "KDIST_NODE_RANK": str(node),
                        "KDIST_MASTER_ADDR": "127.0.0.1", "KDIST_MASTER_PORT": str(port),
                        "KDIST_DIST_BACKEND": "gloo", "KDIST_RDZV_TIMEOUT": "20"})
    return dataclasses.replace(plan, **changes)


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


def test_a_spare_takes_a_lost_rank_and_the_node_coming_back_is_fenced():
    port = _free_port()
    node0, node1, spare = _plan(0, port), _plan(1, port), _plan(2, port)
    assert spare.is_spare and spare.home_slot == 2 and not node1.is_spare
    listener = R.bind(node0)
    try:
        # generation 0: slots 0 and 1 hold the ranks
        t1, joined = _run(R.meet, node1, None, time.monotonic())
        lead = R.meet(node0, listener, time.monotonic())
        t1.join(timeout=20)
        assert lead.members == joined["value"].members == Members.first(2)
        node0 = dataclasses.replace(node0, members=lead.members)
        node1 = dataclasses.replace(node1, members=lead.members)

        # node 1 lost: node 0 leads the next rendezvous saying so; the spare takes rank 1
        said: list[str] = []
        t0, led = _run(R.meet, node0, listener, time.monotonic(), 1, [1])
        rank, seen = S.wait_for_rank(spare, said.append)
        assert rank == 1 and said == [f"spare in slot 2: waiting at 127.0.0.1:{port}, "
                                      "holding no rank"]
        took = dataclasses.replace(spare, node_rank=rank, members=seen)
        met = R.meet(took, None, time.monotonic(), 0)
        t0.join(timeout=20)
        assert met.members == led["value"].members == Members(1, (0, 2))
        assert met.restart == led["value"].restart == 1

        # node 1 comes back while node 0 serves its next store: fenced before any write
        server = MiniStore(listener).start()
        try:
            S.publish(server, dataclasses.replace(node0, members=met.members))
            before = dict(server.data)
            with pytest.raises(Fenced) as e:
                R.meet(node1, None, time.monotonic(), 1)
            assert e.value.exit_code == exitcodes.FENCED
            assert "slot 2 holds it" in str(e.value)
            assert server.data == before
            # a pod of slot 1 starting anew (replaced) is told to wait as a spare
            with pytest.raises(S.Taken):
                R.meet(_plan(1, port), None, time.monotonic(), 0)
        finally:
            server.stop()
    finally:
        listener.close()


def test_one_claim_wins_a_vacant_rank_whoever_makes_it():
    port = _free_port()
    node1 = _plan(1, port, members=Members.first(2))
    listener = R.bind(_plan(0, port))
    server = MiniStore(listener).start()
    try:
        S.lead_open(server, _plan(0, port), [1])
        S.join_check(StoreClient("127.0.0.1", port, 5.0), node1, [])  # node 1 came back first
        client = StoreClient("127.0.0.1", port, 5.0)
        try:
            assert S._vacancy(client, _plan(2, port)) is None  # the spare stays free
        finally:
            client.close()
        assert S.lead_close(server, _plan(0, port)) == Members.first(2)
        assert server.data[MEMBERS] == b"0:0,1"
    finally:
        server.stop()
        listener.close()


def test_without_spares_the_rendezvous_writes_no_membership_key():
    port = _free_port()
    plans = [dataclasses.replace(_plan(i, port), spares=0, slot=None) for i in range(2)]
    listener = R.bind(plans[0])
    try:
        t1, joined = _run(R.meet, plans[1], None, time.monotonic())
        lead = R.meet(plans[0], listener, time.monotonic())
        t1.join(timeout=20)
        assert lead.members is None and joined["value"].members is None
    finally:
        listener.close()


# --- the ledger and status -----------------------------------------------------------------


def test_the_ledger_records_the_spare_that_took_the_lost_rank():
    line = "kdist.launch: " + took_line(2, 1)
    assert spare_took(line) == (2, 1)
    assert spare_took("[rank 0] " + line) is None  # a worker's line, not the launcher's
    ledger = Ledger()
    assert not ledger.spare_took(2, 1)  # no restart open
    ledger.failed("node 1", exitcodes.PEER_LOST, None, 10.0, 8,
                  said="node 1 lost (silent for 5 s)")
    assert ledger.spare_took(2, 1)
    entry = ledger.summary(2, 0.0, 20.0)["restarts"][0]
    assert entry["spare"] == "slot 2 took rank 1"
    kept = read('{"restarts": [' + json.dumps(entry) + "]}")
    assert kept.problems == [] and kept.ledger["restarts"][0]["spare"] == "slot 2 took rank 1"
    plain = read('{"restarts": [{"cause": "x", "exitCode": 137}]}')
    assert "spare" not in plain.ledger["restarts"][0]


def test_a_node_back_from_a_silence_that_cost_its_rank_stops_before_it_writes():
    """Its watchdog's new connection reads the members first (Superseded: its workers stop),
    and its launcher is fenced before it says a restart (``spares.probe``)."""
    from kdist.runtime.watchdog import JobProgress, Superseded

    class Out:
        def progress(self) -> int:
            return 7

    port = _free_port()
    listener = R.bind(_plan(0, port))
    server = MiniStore(listener).start()
    try:
        S.publish(server, _plan(0, port, members=Members(1, (0, 2))))
        node1 = _plan(1, port, members=Members.first(2))
        progress = JobProgress(node1, Out())  # type: ignore[arg-type]
        progress._answered = True  # it had reached the store before its silence
        before = dict(server.data)
        with pytest.raises(Superseded, match="slot 2 holds it"):
            progress.total()
        assert server.data == before  # no progress added, no beat set
        with pytest.raises(Fenced):
            S.probe(node1)
        S.probe(_plan(1, port, members=Members(1, (0, 1))))  # a member: nothing said
        progress = JobProgress(_plan(1, port, members=Members(1, (0, 1))), Out())  # type: ignore[arg-type]
        progress._answered = True
        progress.total()
        assert server.data != before  # a member goes on writing
    finally:
        server.stop()
        listener.close()


def test_a_node_back_early_waits_for_the_members_before_it_claims_its_rank():
    """A running gang's store gets the members at node 0's first watchdog tick: a launcher
    that held a rank and joins before then waits for them, and is fenced, not let in."""
    port = _free_port()
    listener = R.bind(_plan(0, port))
    server = MiniStore(listener).start()
    try:
        node0 = _plan(0, port, members=Members(1, (0, 2)))
        timer = threading.Timer(0.5, S.publish, (server, node0))
        timer.start()
        with pytest.raises(Fenced):
            S.join_check(StoreClient("127.0.0.1", port, 5.0), _plan(1, port,
                                                                   members=Members.first(2)), [])
        timer.join()
        assert not any(k.startswith("kdist/rdzv/") for k in server.data), server.data
    finally:
        server.stop()
        listener.close()
