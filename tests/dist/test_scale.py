"""The launchers' protocols at 64 nodes, by simulation (``bench/scale.py``, issue 53).

Node 0's real launcher code in one process, 63 launchers' real client code as threads
in four more. What is asserted does not depend on the machine's speed: every node
finishes every protocol, all agree on the restart, and each node's queries and
connections stay what the protocols need, whatever N (a poll would add queries per
node as the wait grows).
"""

from __future__ import annotations

import resource

import pytest

from bench.scale import one_round

NODES = 64
# Per node: the rendezvous (connect, PING, CHECK, 2 SETs, ADD, WAIT, GET, ADD) and the
# restart (the same); one watchdog tick (connect, PING, ADD, CHECK, and the heartbeat's
# first: 3 ADDs creating the keys it reads, its beat's SET, one MULTI_GET) and the exit
# barrier (connect, PING, then ADD and CHECK, or WAIT, the ended beat's SET and ADD).
# VALIDATE counts as a query.
QUERIES = {"rendezvous": 9, "progress": 9, "restart": 9, "barrier": 4}


@pytest.mark.timeout(300)
def test_every_protocol_completes_at_64_nodes_with_queries_flat_per_node():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 2 * NODES + 100:
        pytest.skip(f"the hard limit on open files is {hard}")
    figures = one_round(NODES)  # raises BenchError naming a node that failed
    assert set(figures) == set(QUERIES)
    for phase, want in QUERIES.items():
        f = figures[phase]
        assert f["failed"] == 0, phase
        # A node that reached the barrier's store as node 0 closed it (the restart) joins
        # again: a few more queries and connections, never a poll.
        assert want <= f["queries"] <= want * 2, (phase, f)
        assert 1 <= f["connections"] <= 2, (phase, f)
