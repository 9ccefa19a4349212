"""A warm spare takes a frozen node's rank in seconds, and the node, back, is fenced (issue 54).

Needs what ``test_node_loss.py`` needs (two schedulable nodes, a kind worker node this
machine can pause with docker, ``KDIST_E2E_SHARED_DIR``): `make e2e-kind`. A job of 2
ranks + 1 spare (slot 2) runs with rank 0 and the spare on the surviving node and rank 1
on the victim. After a checkpoint the victim is paused (``docker pause``: its kubelet,
containers and network frozen at once); the survivors find node 1 lost within
``nodeLossSeconds``, the spare takes rank 1 and training resumes; then the victim is
unpaused, and rank 1's old pod must be fenced (exit 206) while the job finishes.

The same with node 0 lost (the store's host, issue 54): rank 0 on the victim, rank 1 and the
spare on the survivor. Node 1 hosts the store at its own pod's address, the spare takes
rank 0 there and the gang resumes from node 1's memory (no step lost); node 0's old pod,
back, finds the store moved and is fenced. The paused node is always the kind worker (the
`victim` fixture): pausing the control plane would stop the API server.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kdist.rendering import render
from kdist.shared import exitcodes
from kdist.shared import labels as L
from kdist.spec import validate_job

from .conftest import REQUEST_TIMEOUT, Kube
from .conftest_cli import job_spec, kdist_popen_fixture  # noqa: F401
from .test_node_loss import (
    KindNode,
    Placer,
    node_ready,
    node_shared_volume,  # noqa: F401 (a fixture)
    report,
    schedulable_nodes,
    spread,
    victim,  # noqa: F401 (a fixture)
    wait_node,
)
from .test_restarts import ARGS, FAULT_AFTER, MAX_STEPS, STRIKE_AT, Stream, figures
from .test_training import create, wait_job

pytestmark = pytest.mark.exclusive  # a paused node stalls other tests' pods

LOSS_S = 10
RUN_TIMEOUT = 900


def _docker(node: KindNode, verb: str) -> None:
    out = node.docker(verb, node.name)
    assert out.returncode == 0, f"docker {verb} {node.name}: {out.stderr}"


@pytest.mark.parametrize("lost", [1, 0], ids=["node-1", "node-0"])
def test_a_spare_takes_the_rank_of_a_paused_node_which_is_fenced_when_it_returns(
        lost: int, kube: Kube, namespace: str, victim: KindNode,  # noqa: F811 (fixtures)
        node_shared_volume: dict[str, Any], kdist_popen: Any) -> None:  # noqa: F811
    name = "spares"
    job = validate_job(job_spec(
        name, args=ARGS,
        # warm workers: the survivors' new workers come from standbys, the spare's too
        distributed={"backend": "gloo", "maxRestarts": 2, "spares": 1, "warmWorkers": True,
                     "restartMode": "inPlace", "nodeLossSeconds": LOSS_S,
                     "collectiveTimeoutSeconds": 300, "rendezvousTimeoutSeconds": 600},
        checkpoint={"path": "/checkpoints", "volume": node_shared_volume},
        resources={"cpu": "500m", "memory": "2Gi"},  # a standby beside each worker
        # this tree's runtime (a ConfigMap), not the one the nodes' image was built with
        runtime="shipped"))
    survivor = next(n.metadata.name for n in schedulable_nodes(kube)
                    if n.metadata.name != victim.name)
    # the lost rank's pod on the victim, the other rank and the spare (slot 2) beside
    first = {0: survivor, 1: survivor, 2: survivor} | {lost: victim.name}
    placer = Placer(kube, namespace, name, first=first)
    paused = False
    try:
        create(kube, namespace, spread(render(job), name, required=False, gate=True))
        proc = kdist_popen("logs", name, "--follow")
        stream = Stream(proc)
        assert stream.until(lambda r: r["event"] == "checkpoint" and r["step"] >= FAULT_AFTER,
                            timeout=300), "\n".join(stream.text)
        assert stream.until(lambda r: r.get("step", 0) >= STRIKE_AT, timeout=60)
        fault_time = time.monotonic()
        _docker(victim, "pause")
        paused = True
        # the spare's workers resume (from rank 0's memory, DDP): the victim comes back
        assert stream.until(lambda r: r["event"] == "resume", timeout=RUN_TIMEOUT), \
            "\n".join(stream.text)
        resumed_s = time.monotonic() - fault_time
        _docker(victim, "unpause")
        paused = False
        stream.until(lambda r: False, timeout=RUN_TIMEOUT)  # to the end of the run
        proc.wait(30)
        log = "\n".join(stream.text)
        assert wait_job(kube, namespace, name, "indexed-job") == "succeeded", log
        done = {r["rank"]: r["step"] for _, _, r in stream.records if r["event"] == "done"}
        assert done == {0: MAX_STEPS, 1: MAX_STEPS}, log
        assert f"spare in slot 2 takes node rank {lost}" in log, log
        assert f"1 of 1 worker(s) of node {lost} started from their standbys (warm)" in log, log
        cost = figures(stream.records, fault_time)
        fenced = exit_codes(kube, namespace, name, index=lost)
        report({"drill": "spare" if lost else "spare, node 0 (the store's host) lost",
                "node_loss_s": LOSS_S, "fenced_exits": fenced,
                "seconds_paused_to_resume": round(resumed_s, 1), **cost})
        assert exitcodes.FENCED in fenced, fenced  # the lost rank's old pod, back: fenced
        if not lost:
            _the_store_moved_and_the_gang_resumed_from_memory(log, stream.records, cost)
    finally:
        if paused:
            _docker(victim, "unpause")
        placer.stop()
        wait_node(kube, victim.name, node_ready)


def _the_store_moved_and_the_gang_resumed_from_memory(
        log: str, records: list[tuple[float, int, dict[str, Any]]], cost: dict) -> None:
    """Node 1 hosted the store (kdist.runtime.hostmove) and every rank resumed from its
    memory at the last step the gang made: none lost."""
    assert "node 0 (slot 0), the store's host, is lost: this node (rank 1) hosts the " \
        "store now at" in log, log
    sources = {r.get("source", "") for _, _, r in records if r["event"] == "resume"}
    assert sources and all(s.startswith("memory of rank 1, step ") for s in sources), sources
    assert cost["steps_lost"] == 0, cost


def exit_codes(kube: Kube, namespace: str, name: str, index: int) -> list[int]:
    """The exit codes of the pytorch containers of the job's pods of `index`."""
    pods = kube.core.list_namespaced_pod(namespace, label_selector=L.selector_string(name),
                                         _request_timeout=REQUEST_TIMEOUT).items
    codes = []
    for pod in pods:
        if (pod.metadata.annotations or {}).get(L.COMPLETION_INDEX) != str(index):
            continue
        for status in pod.status.container_statuses or []:
            term = status.state.terminated or status.last_state.terminated
            if status.name == "pytorch" and term is not None:
                codes.append(term.exit_code)
    return codes
