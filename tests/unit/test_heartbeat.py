"""kdist.runtime.heartbeat (issue 54): a lost node noticed by the gang itself, no processes.

The launchers' ticks are driven by hand on one store (a dict with the store client's
calls, or the real ``MiniStore`` for the wire protocol) and one fake clock.
"""

from __future__ import annotations

import pytest

from kdist.runtime import heartbeat as H
from kdist.runtime.store import MiniStore, StoreClient, listen
from kdist.shared import exitcodes
from kdist.shared.ledger import Ledger, in_process_line, in_process_restart
from tests.unit.test_runtime_light import free_port, plan


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class DictStore:
    """What a launcher's ``StoreClient`` does, on a dict; ``multi_get`` of a missing key
    fails, as torch's store would not answer it."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.requests = 0

    def add(self, key: str, delta: int) -> int:
        self.requests += 1
        value = int(self.data.get(key, b"0")) + delta
        self.data[key] = str(value).encode()
        return value

    def set(self, key: str, value: bytes) -> None:
        self.requests += 1
        self.data[key] = value

    def check(self, keys: list[str]) -> bool:
        self.requests += 1
        return all(k in self.data for k in keys)

    def get(self, key: str) -> bytes:
        self.requests += 1
        return self.data[key]

    def multi_get(self, keys: list[str]) -> list[bytes]:
        self.requests += 1
        return [self.data[k] for k in keys]


def gang(nnodes: int, loss_s: float = 10.0) -> tuple[Clock, list[H.Heartbeat], list[float]]:
    clock, slept = Clock(), []
    beats = [H.Heartbeat(n, nnodes, loss_s, clock=clock, sleep=slept.append)
             for n in range(nnodes)]
    return clock, beats, slept


def tick(beats: list[H.Heartbeat], store: DictStore, nodes: list[int]) -> dict[int, str]:
    """One tick of each node in `nodes`; {node: the words of the NodeLost it raised}."""
    lost = {}
    for n in nodes:
        try:
            beats[n].tick(store)
        except H.NodeLost as e:
            lost[n] = str(e)
    return lost


def test_every_node_is_watched_by_two_others_in_a_ring():
    assert H.watched(0, 2) == [1] and H.watched(1, 2) == [0]
    for nnodes in (3, 4, 17):
        watchers = [H.watched(n, nnodes) for n in range(nnodes)]
        for node in range(nnodes):
            assert sum(node in w for w in watchers) == 2
            assert node not in watchers[node]


def test_a_silent_node_is_lost_after_node_loss_seconds_and_every_survivor_hears():
    clock, beats, _ = gang(3)
    store = DictStore()
    for _ in range(5):
        assert tick(beats, store, [0, 1, 2]) == {}
        clock.now += 1
    frozen = clock.now  # node 2 freezes: its beat stops
    lost = tick(beats, store, [0, 1])
    while not lost:
        clock.now += 1
        lost = tick(beats, store, [0, 1])
    assert 10 <= clock.now - frozen <= 11  # its watchers saw its last beat a tick later
    assert set(lost) == {0, 1}, lost  # its watcher found it; the other read LOST
    for words in lost.values():
        assert words.startswith("node 2 lost (silent for 10 s)"), words
    assert store.data[H.LOST] == b"3"


def test_the_watcher_on_node_0_tells_the_others_before_its_workers_take_the_store():
    clock, beats, slept = gang(2)
    store = DictStore()
    tick(beats, store, [1, 0])
    lost: dict[int, str] = {}
    for _ in range(10):
        clock.now += 1
        lost = tick(beats, store, [0])
    assert lost[0].startswith("node 1 lost (silent for 10 s)") and slept == [H.TELL_S]


def test_a_slow_but_alive_node_is_not_lost():
    clock, beats, _ = gang(2, loss_s=10)
    store = DictStore()
    for second in range(60):
        nodes = [0, 1] if second % 4 == 0 else [0]  # node 1 beats every 4 s only
        assert tick(beats, store, nodes) == {}, second
        clock.now += 1


def test_a_node_whose_workers_ended_is_not_lost_while_it_waits():
    clock, beats, _ = gang(2)
    store = DictStore()
    tick(beats, store, [0, 1])
    beats[1].end(store)  # in the exit barrier
    for _ in range(30):
        assert tick(beats, store, [0]) == {}
        clock.now += 1


def test_a_watcher_that_was_stalled_itself_does_not_blame_the_others():
    clock, beats, _ = gang(2)
    store = DictStore()
    tick(beats, store, [0, 1])
    clock.now += 30  # node 0's launcher was stopped (SIGSTOP) for 30 s, node 1 too
    assert tick(beats, store, [0]) == {}  # its view is stale: the watch starts anew
    for _ in range(9):
        clock.now += 1
        assert tick(beats, store, [0]) == {}
    clock.now += 1
    assert tick(beats, store, [0])[0].startswith("node 1 lost (silent for 10 s)")


def test_each_node_writes_one_beat_and_reads_once_a_tick():
    clock, beats, _ = gang(1000)
    store = DictStore()
    tick(beats, store, list(range(1000)))  # the first tick creates the watched keys
    store.requests = 0
    clock.now += 1
    tick(beats, store, list(range(1000)))
    assert store.requests == 2 * 1000  # a SET and a MULTI_GET per node: O(nodes)


def test_node_0_is_lost_when_its_store_is_silent_for_node_loss_seconds():
    silence = H.StoreSilence(10.0)
    assert silence.failed(5.0) is None  # never answered yet: node 0 may still start
    silence.ok(100.0)
    assert silence.failed(101.0) is None
    assert silence.failed(109.0) is None
    assert silence.failed(110.0) == pytest.approx(10.0)


def test_one_failure_after_this_node_was_stalled_is_not_node_0s_loss():
    silence = H.StoreSilence(10.0)
    silence.ok(100.0)
    assert silence.failed(140.0) is None  # the first failure, 40 s on: confirm first
    silence.ok(140.5)  # it answered: node 0 was fine
    assert silence.failed(141.0) is None


def test_the_mini_store_answers_a_multi_get():
    sock = listen(free_port())
    server = MiniStore(sock).start()
    try:
        client = StoreClient("127.0.0.1", sock.getsockname()[1], timeout=5)
        clock, beats, _ = gang(2)
        beats[1].tick(client)
        beats[0].tick(client)
        assert client.multi_get([f"{H.BEAT}0", f"{H.BEAT}1", H.LOST]) == [b"1", b"1", b"0"]
        for _ in range(9):
            clock.now += 1
            beats[0].tick(client)
        clock.now += 1
        with pytest.raises(H.NodeLost, match=r"^node 1 lost \(silent for 10 s\)"):
            beats[0].tick(client)
        client.close()
    finally:
        server.stop()
        sock.close()


def test_node_loss_seconds_reaches_the_launcher():
    assert plan().node_loss_s == 10
    assert plan(KDIST_NODE_LOSS_SECONDS="4").node_loss_s == 4
    from kdist.shared.errors import LaunchError
    with pytest.raises(LaunchError, match="KDIST_NODE_LOSS_SECONDS='1' must be >= 2"):
        plan(KDIST_NODE_LOSS_SECONDS="1")


def lost_line(node: int, code: int = exitcodes.PEER_LOST) -> str:
    return "kdist.launch: " + in_process_line(
        1, 3, f"node {node} lost (silent for 10 s): its launcher's heartbeat stopped", code)


def peer_line(node: int, code: int = exitcodes.PEER_LOST) -> str:
    return "kdist.launch: " + in_process_line(
        1, 3, f"worker rank {node} (node {node}, local rank 0, pid 9) exited with code 1: "
              "RuntimeError: Connection closed by peer", code)


@pytest.mark.parametrize("order", ["lost first", "peer first"])
def test_the_ledger_blames_the_lost_node_over_its_survivors_lost_peers(order):
    led = Ledger()
    lines = [lost_line(2), peer_line(1)]
    for line in lines if order == "lost first" else lines[::-1]:
        restart = in_process_restart(line)
        assert restart is not None
        led.restarted_in_process(restart, now=100.0, last_step=5)
    (entry,) = led.summary(3, started=0.0, now=200.0)["restarts"]
    assert entry["cause"].startswith("node 2 lost (silent for 10 s)"), entry


def test_a_pods_exit_that_names_a_lost_node_is_the_cause_at_the_same_severity():
    led = Ledger()
    led.failed("rank 0 (pod p0)", exitcodes.PEER_LOST, "2026-12-05T03:05:00Z", 0.0, 9,
               said="worker rank 0 exited with code 1: Connection closed by peer")
    led.failed("rank 1 (pod p1)", exitcodes.PEER_LOST, "2026-12-05T03:05:00Z", 0.0, 9,
               said="node 2 lost (silent for 10 s): its launcher's heartbeat stopped")
    assert "node 2 lost (silent for 10 s)" in led.restarts[0].cause
    led.failed("rank 2 (pod p2)", 1, "2026-12-05T03:05:00Z", 0.0, 9, said="a code error")
    assert "a code error" in led.restarts[0].cause  # a more telling failure still wins


# --- spec.distributed.nodeLossSeconds ------------------------------------------------------


def test_node_loss_seconds_defaults_to_10_and_is_rendered_only_when_set():
    from kdist.spec import validate_job
    from tests.unit.helpers import spec_with
    from tests.unit.test_spec_progress import pod_env

    job = validate_job(spec_with())
    assert job.spec.distributed.node_loss_seconds == 10
    assert "KDIST_NODE_LOSS_SECONDS" not in pod_env(job)


@pytest.mark.parametrize("backend", ["indexed-job", "jobset", "pytorchjob"])
def test_node_loss_seconds_reaches_the_launcher_through_the_rendered_pod(backend):
    from kdist.runtime.plan import resolve_env
    from kdist.spec import validate_job
    from tests.unit.helpers import spec_with
    from tests.unit.test_spec_progress import pod_env

    job = validate_job(spec_with(**{"spec.backend": backend,
                                    "spec.distributed": {"nodeLossSeconds": 4}}))
    env = pod_env(job)
    assert env["KDIST_NODE_LOSS_SECONDS"] == "4"
    plan = resolve_env({**env, "KDIST_NODE_RANK": "1", "KDIST_MASTER_ADDR": "m"},
                       gpu_count=lambda: 0)
    assert plan.node_loss_s == 4


@pytest.mark.parametrize(("value", "fragment"), [
    (1, ">= 2"), ("10s", "integer"), (2.5, "integer"), (3601, "<= 3600")])
def test_bad_node_loss_seconds_are_named(value, fragment):
    from tests.unit.helpers import spec_with
    from tests.unit.test_spec import problems

    found = problems(spec_with(**{"spec.distributed": {"nodeLossSeconds": value}}))
    assert any(p.startswith("job.yaml: spec.distributed.nodeLossSeconds") and
               fragment in p for p in found), found


def test_nodes_in_the_exit_barrier_are_ended_not_lost_to_a_node_still_at_work():
    """Node 0's workers (and rank 0's store) are done: its barrier store says node 0 ended,
    and a node reporting to the barrier says it too, so that node 2, still at work, reads
    neither as lost while it finishes."""
    from kdist.runtime.rendezvous import ExitBarrier

    port = free_port()
    sock = listen(port)
    node0 = ExitBarrier(plan(nodes=3, node=0, port=port), sock)
    try:
        node0.serve(finished=True)
        assert ExitBarrier(plan(nodes=3, node=1, port=port), None).wait(limit_s=10) == ""
        assert node0.server is not None
        clock, beats, _ = gang(3)
        client = StoreClient("127.0.0.1", port, timeout=5)
        for _ in range(30):  # node 2 watches nodes 0 and 1
            beats[2].tick(client)
            clock.now += 1
        client.close()
    finally:
        node0.stop()
        sock.close()


def test_gloos_pair_closed_at_the_timeout_is_a_lost_peer_not_a_code_error():
    from kdist.runtime.failures import output_says_peer_lost

    tail = ("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
            "RuntimeError: Application timeout caused pair closure\n")
    assert output_says_peer_lost(tail)
