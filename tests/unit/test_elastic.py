"""Elastic jobs (issue 55 slice 1, ``spec.minNodes``): the spec, the Indexed Job it renders,
the shrink logic (renumbering, generation, refusal below minNodes), the rendezvous of the
survivors over node 0's port, fencing of the node that comes back, and the ledger."""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time

import pytest

from kdist.cli.progress import ledger_lines
from kdist.kube.watch.tracker import Tracker
from kdist.local.ledger import LocalLedger
from kdist.rendering import render
from kdist.runtime import elastic as X
from kdist.runtime import rendezvous as R
from kdist.runtime import spares as S
from kdist.runtime.membership import Fenced, Members, fenced
from kdist.runtime.plan import resolve_env
from kdist.runtime.store import MiniStore
from kdist.shared import exitcodes
from kdist.shared.errors import LaunchError, SpecError
from kdist.shared.ledger import Ledger, in_process_line, shrank
from kdist.shared.ledgerread import read
from kdist.spec import validate_job

from .helpers import spec_with
from .test_ledger import Clock, pod, step

ELASTIC = {"spec.nodes": 3, "spec.minNodes": 2, "spec.distributed": {"maxRestarts": 2}}


def _job(**changes):
    return validate_job(spec_with(**changes))


# --- the spec ------------------------------------------------------------------------------


@pytest.mark.parametrize(("changes", "words"), [
    ({"spec.backend": "pytorchjob"}, "spec.minNodes: not served on pytorchjob (the training"),
    ({"spec.minNodes": 4}, "spec.minNodes 4 exceeds spec.nodes 3"),
    ({"spec.distributed": {}}, "spec.minNodes needs distributed.maxRestarts >= 1"),
    ({"spec.distributed": {"maxRestarts": 1, "restartMode": "recreate"}},
     "restart their workers in process"),
    ({"spec.distributed": {"maxRestarts": 1, "restartWorkers": False}},
     "restart their workers in process"),
])
def test_min_nodes_is_refused_where_it_cannot_serve_in_one_line(changes, words):
    with pytest.raises(SpecError) as e:
        _job(**{**ELASTIC, **changes})
    assert words in str(e.value)
    assert "\n" not in str(e.value).strip()


@pytest.mark.parametrize("value", [0, -1, "2", 1.5])
def test_min_nodes_is_a_positive_integer(value):
    with pytest.raises(SpecError) as e:
        _job(**{**ELASTIC, "spec.minNodes": value})
    assert "minNodes" in str(e.value)


def test_min_nodes_equal_to_nodes_is_off_and_renders_as_before():
    plain, _ = render(_job(**{**ELASTIC, "spec.minNodes": None}))
    same, _ = render(_job(**{**ELASTIC, "spec.minNodes": 3}))
    assert plain == same  # minNodes = nodes (the default) changes nothing
    assert "successPolicy" not in same["spec"]
    # and elsewhere than indexed-job, minNodes = nodes is no error
    _job(**{**ELASTIC, "spec.minNodes": 3, "spec.backend": "jobset"})


def test_the_job_succeeds_on_min_nodes_indexes_and_ignores_a_fenced_pod():
    job, _ = render(_job(**ELASTIC))
    spec = job["spec"]
    assert (spec["completions"], spec["parallelism"]) == (3, 3)
    assert spec["successPolicy"] == {"rules": [{"succeededCount": 2}]}
    rules = spec["podFailurePolicy"]["rules"]
    ignored = [r for r in rules if r["action"] == "Ignore" and "onExitCodes" in r]
    assert [r["onExitCodes"]["values"] for r in ignored] == [[exitcodes.FENCED]]
    env = {e["name"]: e.get("value") for e in
           spec["template"]["spec"]["containers"][0]["env"]}
    assert env["KDIST_MIN_NODES"] == "2" and env["KDIST_NNODES"] == "3"


def test_the_launcher_reads_min_nodes():
    base = {"KDIST_NNODES": "3", "KDIST_NODE_RANK": "2", "KDIST_MASTER_ADDR": "m",
            "KDIST_DIST_BACKEND": "gloo"}
    plan = resolve_env({**base, "KDIST_MIN_NODES": "2"})
    assert plan.elastic and plan.tracks_members and plan.home_slot == 2
    assert (plan.min_nodes, plan.full_nodes) == (2, 3)
    off = resolve_env({**base, "KDIST_MIN_NODES": "3"})
    assert off == resolve_env(base) and not off.tracks_members
    with pytest.raises(LaunchError, match="KDIST_MIN_NODES='4' must be <= 3"):
        resolve_env({**base, "KDIST_MIN_NODES": "4"})


# --- the shrink logic -----------------------------------------------------------------------


def test_the_survivors_are_renumbered_in_order_at_the_next_generation():
    before = Members(4, (0, 1, 2, 3))
    after = X.shrunk(before, [1], [0, 2, 3], 2)
    assert after == Members(5, (0, 2, 3))  # slot 2 holds node rank 1 now, slot 3 rank 2
    assert after.rank_of(0) == 0 and after.rank_of(2) == 1 and after.rank_of(1) is None
    assert X.gone_ranks(before, after) == [1]
    assert X.shrink_line(before, after) == ("the gang shrank to 3 nodes: node 1 lost "
                                            "(generation 5: node ranks held by slots 0, 2, 3)")
    # two lost at once
    assert X.shrunk(before, [3, 1], [0, 2], 2) == Members(5, (0, 2))
    # down to node 0 alone, where minNodes allows it
    assert X.shrunk(before, [1, 2, 3], [0], 1) == Members(5, (0,))
    # the store's record of a smaller gang reads back; of more ranks than nodes, not
    assert Members.decode(after.encode(), 4) == after
    assert Members.decode(b"5:0", 4) == Members(5, (0,))
    assert Members.decode(after.encode(), 2) is None


@pytest.mark.parametrize(("lost", "joined", "least", "free", "why"), [
    ([], [0, 1, 2], 2, 0, "none lost"),
    ([0], [1, 2], 2, 0, "node 0 (the store) lost: out of scope"),
    ([2], [0, 1], 3, 0, "fewer survivors than minNodes"),
    ([2], [0], 2, 0, "a survivor has not joined yet"),
    ([2], [0, 1], 2, 1, "a free spare takes the rank"),
    ([2], [0, 1, 2], 2, 0, "the lost node joined after all"),
])
def test_no_shrink_where_the_gang_waits_as_today(lost, joined, least, free, why):
    assert X.shrunk(Members.first(3), lost, joined, least, free) is None, why


def test_free_spares_are_the_spare_slots_holding_no_rank():
    assert X.free_spares(Members.first(3), 3, 1) == 1
    assert X.free_spares(Members(1, (0, 3, 2)), 3, 1) == 0  # the spare took rank 1
    assert X.free_spares(Members.first(3), 3, 0) == 0


def test_the_node_left_out_is_fenced_and_a_renumbered_survivor_is_not():
    now = Members(1, (0, 2))  # slot 1 lost: slot 2 holds rank 1
    assert fenced(0, 1, 1, now)  # slot 1, back, held rank 1 at generation 0
    assert fenced(0, 2, 2, Members(1, (0, 1)))  # slot 2 lost: rank 2 is no more
    assert not fenced(1, 1, 2, now)  # slot 2, renumbered, holds generation 1
    # and its launcher adopts its new rank and the node count
    plan = resolve_env({"KDIST_NNODES": "3", "KDIST_NODE_RANK": "2", "KDIST_MIN_NODES": "2",
                        "KDIST_MASTER_ADDR": "m", "KDIST_DIST_BACKEND": "gloo"})
    moved, said = X.adopt(dataclasses.replace(plan, members=Members.first(3)), now)
    assert (moved.node_rank, moved.nnodes, moved.world_size, moved.full_nodes) == (1, 2, 2, 3)
    assert said is not None and said.startswith("the gang shrank to 2 nodes: node 1 lost")
    with pytest.raises(Fenced) as e:  # slot 1 joined too late: the gang went on without it
        X.adopt(dataclasses.replace(plan, node_rank=1, slot=1), now)
    assert e.value.exit_code == exitcodes.FENCED


# --- the rendezvous over node 0's port ------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _plan(node: int, port: int, least: int = 2, **changes):
    plan = resolve_env({"KDIST_JOB_NAME": "j", "KDIST_NNODES": "3", "KDIST_MIN_NODES": str(least),
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


def _first_gang(port: int, listener: socket.socket):
    plans = [_plan(i, port) for i in range(3)]
    threads = [_run(R.meet, p, None, time.monotonic()) for p in plans[1:]]
    lead = R.meet(plans[0], listener, time.monotonic())
    for t, _ in threads:
        t.join(timeout=20)
    assert lead.members == Members.first(3)
    return [dataclasses.replace(p, members=lead.members) for p in plans]


def test_the_survivors_meet_without_the_lost_node_and_it_is_fenced_coming_back():
    port = _free_port()
    listener = R.bind(_plan(0, port))
    try:
        node0, node1, node2 = _first_gang(port, listener)
        # node 1 lost, found by node 2: node 0 does not wait for it once node 2 joined
        t2, joined = _run(R.meet, node2, None, time.monotonic(), 1, [1])
        started = time.monotonic()
        led = R.meet(node0, listener, time.monotonic(), 1)
        t2.join(timeout=20)
        assert time.monotonic() - started < 15  # not the rendezvous timeout (20 s)
        assert led.members == joined["value"].members == Members(1, (0, 2))
        moved, said = X.adopt(node2, joined["value"].members)
        assert (moved.node_rank, moved.nnodes) == (1, 2) and said is not None

        # node 1 comes back while node 0 serves its next store: fenced before any write
        server = MiniStore(listener).start()
        try:
            S.publish(server, dataclasses.replace(node0, members=led.members))
            before = dict(server.data)
            with pytest.raises(Fenced) as e:
                R.meet(node1, None, time.monotonic(), 1)
            assert "slot 2 holds it" in str(e.value)
            assert server.data == before
        finally:
            server.stop()
    finally:
        listener.close()


def test_below_min_nodes_node_0_waits_for_the_lost_node_as_today():
    port = _free_port()
    listener = R.bind(_plan(0, port, least=3))
    try:
        plans = [_plan(i, port, least=3, members=Members.first(3)) for i in range(3)]
        assert not plans[0].elastic  # minNodes = nodes: off
        plans = [_plan(i, port, members=Members.first(3)) for i in range(3)]
        # two lost out of three: one survivor is below minNodes 2
        lead = dataclasses.replace(plans[0], rdzv_timeout_s=2)
        with pytest.raises(R.RendezvousError, match="1 of 3 node"):
            R.meet(lead, listener, time.monotonic(), 1, [1, 2])
    finally:
        listener.close()


# --- the ledger and status -----------------------------------------------------------------


def test_the_ledger_records_the_shrink_once():
    line = "kdist.launch: " + X.shrink_line(Members.first(3), Members(1, (0, 1)))
    assert shrank(line) == (2, "2")
    assert shrank("[rank 0] " + line) is None  # a worker's line, not the launcher's
    ledger = Ledger()
    assert not ledger.shrank_to(2, "2")  # no restart open
    ledger.failed("node 2", exitcodes.PEER_LOST, None, 10.0, 8,
                  said="node 2 lost (silent for 5 s)")
    assert ledger.shrank_to(2, "2") and not ledger.shrank_to(2, "2")  # each survivor says it
    ledger.stepped(5, 14.0, resumed=True)
    entry = ledger.summary(2, 0.0, 20.0)["restarts"][0]
    assert entry["shrank"] == "shrank to 2 nodes: node 2 lost"
    assert (entry["secondsLost"], entry["stepsLost"]) == (4.0, 3)
    kept = read('{"restarts": [' + json.dumps(entry) + "]}")
    assert kept.problems == [] and kept.ledger["restarts"][0]["shrank"] == entry["shrank"]


def test_the_watch_shows_the_size_and_the_restart_that_shrank_the_gang():
    """Node 2 of a 3-node job with minNodes 2 is lost; both survivors say the gang shrank:
    `status` says the size, and the open restart records the shrink once."""
    clock = Clock()
    t = Tracker("unit-job", "d", clock=clock)
    t.state.nodes = 3
    for rank in (0, 1, 2):
        t.pod_event("ADDED", pod(rank))
    t.log_line("unit-job-0-x", step(10))
    cause = "node 2 lost (silent for 10 s): its launcher's heartbeat stopped (seen by node 0)"
    t.log_line("unit-job-0-x", "kdist.launch: " + in_process_line(1, 2, cause, 203))
    assert "size" not in t.state.to_dict()
    line = "kdist.launch: " + X.shrink_line(Members.first(3), Members(1, (0, 1)))
    t.log_line("unit-job-0-x", line)
    t.log_line("unit-job-1-x", line)
    assert t.state.size == 2 and t.state.to_dict()["size"] == 2
    clock.now += 9
    t.log_line("unit-job-0-x", step(5, "resume"))
    (r,) = t.state.ledger["restarts"]
    assert r["shrank"] == "shrank to 2 nodes: node 2 lost" and "node 2 lost" in r["cause"]
    assert (r["secondsLost"], r["stepsLost"]) == (9.0, 5)
    assert "; shrank to 2 nodes: node 2 lost; back 9.0s later, 5 step(s) lost" in \
        ledger_lines(t.state.ledger)[0]


def test_status_says_the_size_only_while_the_gang_is_smaller(capsys):
    from kdist.cli.progress import print_status
    from kdist.kube.watch.state import JobState

    state = JobState(name="j", namespace="d")
    state.nodes = 3
    print_status(state)
    assert "training on" not in capsys.readouterr().out
    state.size = 2
    print_status(state)
    assert "training on 2 of 3 nodes (spec.minNodes" in capsys.readouterr().out


def test_the_local_ledger_records_the_shrink():
    now = [100.0]
    ledger = LocalLedger(2, clock=lambda: now[0])
    ledger.line(1, '{"event": "step", "step": 8, "rank": 1}')
    cause = "node 2 lost (silent for 5 s): its launcher's heartbeat stopped (seen by node 1)"
    for node in (0, 1):
        ledger.line(node, "kdist.launch: " + in_process_line(1, 2, cause, 203))
        ledger.line(node, "kdist.launch: " + X.shrink_line(Members.first(3),
                                                            Members(1, (0, 1))))
    now[0] += 12
    ledger.line(0, '{"event": "resume", "step": 5, "rank": 0}')
    summary = ledger.summary(True)
    assert summary is not None
    (r,) = summary["restarts"]
    assert r["shrank"] == "shrank to 2 nodes: node 2 lost"
    assert (r["secondsLost"], r["stepsLost"]) == (12.0, 3)
