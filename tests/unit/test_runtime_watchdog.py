"""kdist.runtime.watchdog (progressTimeoutSeconds) and kdist.runtime.restarts, without processes."""

from __future__ import annotations

import dataclasses

import pytest

from kdist.runtime import restarts
from kdist.runtime.plan import resolve_env
from kdist.runtime.watchdog import Watchdog


class Fake:
    def __init__(self) -> None:
        self.now = 0.0
        self.progress = 0
        self.hangs: list[float] = []


def watchdog(fake: Fake, limit: float = 10.0) -> Watchdog:
    return Watchdog(limit, lambda: fake.progress, fake.hangs.append, clock=lambda: fake.now)


def test_silence_before_the_first_output_is_not_a_hang():
    fake = Fake()
    w = watchdog(fake)
    for fake.now in (0.0, 30.0, 300.0):  # imports, rendezvous, loading a checkpoint
        assert not w.check()
    assert fake.hangs == [] and not w.fired


def test_no_progress_for_the_limit_is_a_hang():
    fake = Fake()
    w = watchdog(fake)
    fake.progress = 1
    assert not w.check()  # the clock starts at the first output (t=0)
    for fake.now in (5.0, 9.9):
        assert not w.check()
    fake.now = 10.0
    assert w.check() and w.fired
    assert fake.hangs == [10.0]


def test_progress_restarts_the_clock():
    fake = Fake()
    w = watchdog(fake)
    fake.progress = 1
    w.check()
    fake.now, fake.progress = 9.0, 2
    assert not w.check()
    fake.now = 18.0
    assert not w.check()
    fake.now = 19.0
    assert w.check()


def test_the_thread_stops_watching_when_the_progress_cannot_be_read():
    def gone() -> int:
        raise ConnectionError("the store went away with node 0")

    w = Watchdog(1.0, gone, lambda s: None, tick_s=0.01).start()
    w._thread.join(timeout=10)
    assert not w._thread.is_alive() and not w.fired


def plan(**env: str):
    base = {"KDIST_NNODES": "2", "KDIST_NODE_RANK": "1", "KDIST_MASTER_ADDR": "m",
            "KDIST_MAX_RESTARTS": "3"}
    return resolve_env({**base, **env}, gpu_count=lambda: 0)


@pytest.mark.parametrize(("env", "count"), [
    ({"KDIST_RESTART_COUNT": "2"}, 2),  # kdist run --local says it
    ({"KDIST_INDEX_FAILURES": "1"}, 1),  # an Indexed Job's replacement pod
    ({"KDIST_INDEX_FAILURES": "1", "KDIST_INDEX_IGNORED_FAILURES": "1"}, 2),  # + an eviction
    ({"KDIST_INDEX_FAILURES": "0", "KDIST_INDEX_IGNORED_FAILURES": ""}, 0),  # first pods
    ({}, None),  # a PyTorchJob pod: the launcher asks kdist.runtime.restarts
])
def test_the_restart_count_the_environment_states(env, count):
    assert plan(**env).restart_count == count


def test_worker_env_carries_the_restart_count():
    env = plan(KDIST_INDEX_FAILURES="2").worker_env({}, 4)
    assert env["KDIST_RESTART_COUNT"] == "2"


def test_a_pytorchjob_node_keeps_its_count_in_the_checkpoint_directory(tmp_path):
    p = dataclasses.replace(plan(), checkpoint_dir=str(tmp_path))
    path = restarts.counter_path(p)
    assert path == tmp_path / ".kdist-restart-count-node-1"
    assert restarts.take(path) == 0  # the first run
    restarts.leave(path, 1)  # it exited retryably
    assert restarts.take(path) == 1  # the next gang's launcher of node 1
    assert restarts.take(path) == 0  # taken: a job resubmitted later starts at 0
    assert not path.exists()


def test_no_counter_where_the_count_is_known_or_cannot_be_kept(tmp_path):
    assert restarts.counter_path(plan()) is None  # no checkpoint directory
    known = dataclasses.replace(plan(KDIST_INDEX_FAILURES="1"), checkpoint_dir=str(tmp_path))
    assert restarts.counter_path(known) is None
    restarts.leave(tmp_path / "missing" / "c", 1)  # never raises
    assert restarts.take(tmp_path / "missing" / "c") == 0


class FakeStore:
    """JobProgress's store: a shared counter that can go away."""

    def __init__(self) -> None:
        self.total, self.up = 0, True

    def add(self, delta: int) -> int:
        if not self.up:
            raise ConnectionError("Failed to recv, got 0 bytes")
        self.total += delta
        return self.total


def test_the_job_progress_is_every_nodes_and_a_dead_master_is_noticed(monkeypatch):
    from kdist.runtime.watchdog import JobProgress, MasterLost

    class Out:
        count = 0

        def progress(self) -> int:
            return self.count

    fake, out, store = Fake(), Out(), FakeStore()
    progress = JobProgress(plan(KDIST_NODE_LOSS_SECONDS="12"), out,  # type: ignore[arg-type]
                           clock=lambda: fake.now)
    monkeypatch.setattr(progress, "_add", store.add)
    monkeypatch.setattr(progress, "_beat", lambda: None)
    store.up = False
    fake.now = 100.0
    assert progress.total() == 0  # the store is not up yet at start: no loss, just wait
    store.up, store.total = True, 5  # node 0's ranks printed 5 times
    out.count = 2
    assert progress.total() == 7
    assert progress.total() == 7  # only what is new is added
    store.up = False
    out.count = 3
    assert progress.total() == 8  # meanwhile this node's own progress still counts
    fake.now += 11  # nodeLossSeconds=12 since it last answered: not yet
    assert progress.total() == 8
    fake.now += 1
    with pytest.raises(MasterLost, match=r"^node 0 lost \(silent for 12 s\): .*stopped answering"):
        progress.total()


def test_the_watchdog_reports_a_lost_master_once_and_stops():
    from kdist.runtime.watchdog import MasterLost

    lost: list[str] = []

    def gone() -> int:
        raise MasterLost("the master's store at m:29500 stopped answering")

    w = Watchdog(10.0, gone, lambda s: None, on_lost=lost.append, tick_s=0.01).start()
    w._thread.join(timeout=10)
    assert lost == ["the master's store at m:29500 stopped answering"] and w.lost
    assert not w.fired


def test_without_a_limit_only_the_master_is_watched():
    fake = Fake()
    w = watchdog(fake, limit=0)
    fake.progress = 1
    w.check()
    fake.now = 10_000.0
    assert not w.check() and not w.fired


def test_the_store_is_not_asked_before_this_nodes_workers_run(monkeypatch):
    from kdist.runtime.watchdog import JobProgress

    class Out:
        def progress(self) -> int:
            return 0

    asked: list[int] = []
    running = False
    progress = JobProgress(plan(), Out(), started=lambda: running)  # type: ignore[arg-type]
    monkeypatch.setattr(progress, "_add", lambda delta: asked.append(delta) or 4)
    assert progress.total() == 0 and asked == []  # node 0's store may not be up yet
    running = True
    assert progress.total() == 4 and asked == [0]


def test_a_gang_restarting_in_process_stops_this_nodes_workers(monkeypatch):
    """Another node's launcher gathers the gang for restart 1 (it set the store's restart
    key): this node, on restart 0, is told to stop its workers; on restart 1 it is not."""
    from kdist.runtime.watchdog import JobProgress, RestartAsked

    class Out:
        def progress(self) -> int:
            return 1

    store = FakeStore()
    store.up, store.total = True, 0
    asked = [b""]
    for count in (0, 1):
        progress = JobProgress(plan(KDIST_RESTART_COUNT=str(count)), Out())  # type: ignore[arg-type]
        monkeypatch.setattr(progress, "_add", store.add)
        monkeypatch.setattr(progress, "_asked", lambda: asked[0])
        asked[0] = b""
        progress.total()  # no key: training goes on
        asked[0] = b"1"
        if count == 0:
            with pytest.raises(RestartAsked, match=r"the gang is restarting \(restart 1\)"):
                progress.total()
        else:
            progress.total()  # its own restart's gathering: nothing to stop


class KeyStore:
    """A store of keys, as JobProgress's client speaks to it."""

    def __init__(self) -> None:
        self.keys: dict[str, bytes] = {}

    def set(self, key: str, value: bytes) -> None:
        self.keys[key] = value

    def get(self, key: str) -> bytes:
        return self.keys[key]

    def check(self, keys) -> bool:
        return all(k in self.keys for k in keys)


def test_the_nodes_tell_each_other_their_ranks_counts_of_collectives(monkeypatch):
    """At a hang every node tells its ranks' counts of collectives started, and reads the
    others' (a rank behind on one node is the hung one for all: kdist.runtime.stacks)."""
    from kdist.runtime.watchdog import COUNTS_KEY, JobProgress

    store = KeyStore()
    nodes = []
    for node in (0, 1):
        p = JobProgress(dataclasses.replace(plan(), nnodes=2, node_rank=node),
                        None, clock=lambda: 0.0)  # type: ignore[arg-type]
        monkeypatch.setattr(p, "_client", lambda: store)
        nodes.append(p)
    nodes[0].tell_counts({0: 12, 1: None})
    assert nodes[1].counts_everywhere(0.0) == {0: 12}  # node 1 told nothing (yet)
    nodes[1].tell_counts({2: 11, 3: 12})
    assert nodes[0].counts_everywhere(0.0) == {0: 12, 2: 11, 3: 12}
    store.set(COUNTS_KEY + "1", b"2=x\n=4\n3=12\n" + b"9" * 50 + b"=1")  # not a count: skipped
    assert nodes[0].counts_everywhere(0.0) == {0: 12, 3: 12}


def test_a_node_stopped_by_the_gangs_restart_names_its_origin(monkeypatch):
    """The node that restarts the gang leaves its words beside the restart key: a node it
    stops says why (the lost node, the killed rank), not "another node's workers failed";
    a node that was itself stopped that way passes nothing on (the origin's words stay)."""
    from kdist.runtime import rendezvous
    from kdist.runtime.watchdog import CAUSE_KEY, RESTART_KEY, JobProgress, RestartAsked

    class Out:
        def progress(self) -> int:
            return 1

    store = KeyStore()
    progress = JobProgress(plan(KDIST_RESTART_COUNT="0"), Out())  # type: ignore[arg-type]
    monkeypatch.setattr(progress, "_add", lambda delta: 1)
    monkeypatch.setattr(progress, "_client", lambda: store)
    store.set(RESTART_KEY, b"1")
    with pytest.raises(RestartAsked, match=r"\(restart 1\): another node's workers failed$"):
        progress.total()  # an older launcher told no cause
    origin = "node 2 lost (silent for 10 s): its launcher's heartbeat stopped (seen by node 1)"
    store.set(CAUSE_KEY, rendezvous._origin(origin) or b"")
    with pytest.raises(RestartAsked, match=r"\(restart 1\): node 2 lost \(silent for 10 s\)"):
        progress.total()
    assert rendezvous._origin("node 0: the gang is restarting (restart 1): " + origin) is None
    assert rendezvous._origin("") is None
    assert len(rendezvous._origin("x" * 5000) or b"") == 400  # bounded
