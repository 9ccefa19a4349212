"""Node 0's store at scale: over 1,024 launchers at once (issue 53), as threads.

Each launcher is the real client code (``rendezvous.gather`` off node 0) on a thread of
its own; node 0 leads with the real ``MiniStore``. ``select`` cannot watch a descriptor
numbered 1,024 or more (``ValueError``), so a store built on it fails here.
"""

from __future__ import annotations

import dataclasses
import resource
import threading
import time

import pytest

from kdist.runtime import rendezvous as R
from kdist.runtime.store import MiniStore, StoreClient, allow_many_connections, listen
from tests.unit.test_runtime_light import free_port, plan

NODES = 1_101
# Each connection takes a descriptor on both ends here (client and server in one process).
NEEDED_FDS = 2 * NODES + 200


def _many_fds() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < NEEDED_FDS:
        pytest.skip(f"the hard limit on open files is {hard}; {NEEDED_FDS} are needed for "
                    f"{NODES} connections on both ends (ulimit -Hn)")
    allow_many_connections()


@pytest.fixture
def small_stacks():
    before = threading.stack_size(256 * 1024)
    yield
    threading.stack_size(before)


@pytest.mark.timeout(180)
def test_a_rendezvous_of_1101_nodes_completes(small_stacks):
    _many_fds()
    port = free_port()
    # Past kdist's own 1,000 (``limits.MAX_NODES``, which the environment is checked
    # against), as a harder case: the protocol itself has no bound.
    one = plan(nodes=2, procs=1, node=0, port=port, KDIST_RDZV_TIMEOUT="60")
    plans = [dataclasses.replace(one, nnodes=NODES, node_rank=i) for i in range(NODES)]
    listener = R.bind(plans[0])
    assert listener is not None
    agreed: dict[int, int] = {}
    errors: list[BaseException] = []

    def node(i: int) -> None:
        try:
            agreed[i] = R.gather(plans[i], listener if i == 0 else None, time.monotonic(),
                                 count=i % 3)[1]
        except BaseException as e:  # the test reports it
            errors.append(e)

    threads = [threading.Thread(target=node, args=(i,), daemon=True) for i in range(NODES)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        listener.close()
    assert not errors, f"{len(errors)} node(s) failed, the first: {errors[0]!r}"
    assert len(agreed) == NODES and set(agreed.values()) == {2}  # the highest count brought


def test_a_wait_is_answered_when_its_last_key_is_set_from_either_side():
    """A WAIT parked under one key moves to the next missing one; a set by node 0's own
    launcher (another thread) wakes it at once, with no poll."""
    listener = listen(free_port())
    store = MiniStore(listener).start()
    port = listener.getsockname()[1]
    client, other = (StoreClient("127.0.0.1", port, timeout=5) for _ in range(2))
    try:
        done = threading.Event()

        def wait() -> None:
            client.wait(["a", "b"], timeout=5)
            done.set()

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        other.set("a", b"1")
        assert other.add("n", 1) == 1  # answered after the SET: the store saw it
        assert not done.wait(0.3)  # "b" still missing
        began = time.monotonic()
        store.set("b", b"2")
        assert done.wait(5)
        assert time.monotonic() - began < 1.0
    finally:
        client.close()
        other.close()
        store.stop()
        listener.close()


class _Counting(MiniStore):
    accepted = 0

    def _accept(self) -> None:
        before = len(self._conns)
        super()._accept()
        _Counting.accepted += len(self._conns) - before


def test_a_node_in_the_exit_barrier_keeps_one_connection_while_rank_0s_store_serves():
    """While rank 0's worker still serves its store (here a store without the barrier's
    key), a node whose workers are done waits there on one connection, not a new one
    every half second (N nodes' polls, each a connection torch's server resolves the
    name of); once node 0's launcher serves the barrier, it reports at once."""
    port = free_port()
    plans = [plan(nodes=2, procs=1, node=i, port=port, KDIST_RDZV_TIMEOUT="20")
             for i in range(2)]
    listener = R.bind(plans[0])
    assert listener is not None
    rank0 = _Counting(listener).start()
    said: list[str] = []
    node1 = threading.Thread(target=lambda: said.append(R.ExitBarrier(plans[1], None).wait(20)))
    lead = R.ExitBarrier(plans[0], listener)
    try:
        node1.start()
        time.sleep(2.0)
        rank0.stop()  # rank 0's worker exited
        assert _Counting.accepted == 1
        lead.serve()
        node1.join(timeout=10)
        assert said == [""]
        assert lead.wait(5.0) == ""
    finally:
        rank0.stop()
        lead.stop()
        listener.close()
