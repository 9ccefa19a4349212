"""An elastic job (``spec.minNodes``) goes on alone when its other node stops, and grows
back when a pod returns (issue 55, the kind drill).

Needs what ``test_node_loss.py`` needs (two schedulable nodes, a kind worker node this
machine can pause with docker, ``KDIST_E2E_SHARED_DIR``): `make e2e-kind`. A 2-node DDP
job with ``minNodes: 1`` (the memory copy on, as by default) runs rank 0 on the node that
survives and rank 1 on the victim. After a checkpoint the victim is paused (``docker
pause``: its kubelet, containers and network frozen at once): node 0 finds node 1 lost
within ``nodeLossSeconds`` and, no spare being there, the gang re-forms at 1 node and
resumes. Then the victim is unpaused: rank 1's old pod finds the gang went on without it
and is fenced (exit 206), the pod made in its place asks to join, and node 0 admits it at
a step boundary: the gang trains at 2 nodes again, no step lost, to the end. Its final
loss is compared with an uninterrupted run of the same seed (``LOSS_TOLERANCE``).

Both backends that serve ``minNodes``: the jobset case skips where the cluster has no
JobSet controller (the kind cluster installs none: conftest's ``require_backend``; it
passed with JobSet v0.12 run on the host against the kind cluster).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import pytest

from kdist.rendering import render
from kdist.shared import exitcodes
from kdist.spec import validate_job
from kdist.spec.model import TrainingJob

from .conftest import Kube
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
from .test_restarts import Stream, figures
from .test_spares import exit_codes
from .test_training import create, rank_records, wait_job

pytestmark = pytest.mark.exclusive  # a paused node stalls other tests' pods

LOSS_S = 10
MAX_STEPS, CKPT_EVERY, LOG_EVERY = 600, 20, 5
# The pause strikes mid-interval: after the checkpoint of step 40, once step 50 is logged.
FAULT_AFTER, STRIKE_AT = 40, 50
# --step-delay paces the drill (it changes no number the model computes): the gang must
# still be training alone when the returning pod asks to join (30-60 s under load).
BASE_ARGS = ["--max-steps", str(MAX_STEPS), "--checkpoint-every", str(CKPT_EVERY),
             "--log-every", str(LOG_EVERY), "--keep-checkpoints", "0", "--batch-size", "16",
             "--dataset-size", "2048"]
ARGS = [*BASE_ARGS, "--step-delay", "0.25"]
#: The elastic run's final loss (the mean loss of the last FINAL_STEPS steps, every rank)
#: against the uninterrupted run's: within this fraction of it. Never equal: another world
#: size sums in another order and the trajectories part. Where the per-rank batch is kept
#: (before issue 55 slice 3) the steps at 1 node take half the global batch: locally (2 ->
#: 1 node at step 40, back at step 250) 0.84 against 0.62 uninterrupted, +35%. On kind with
#: the global batch kept (the pods' runtime of 2026-12-07): 0.619 against 0.519, +19%.
LOSS_TOLERANCE, FINAL_STEPS = 0.6, 50
RESUME_GOAL_S = 20  # issue 55's goal, reported; the assertion's bound is generous
RUN_TIMEOUT = 900


def elastic_job(name: str, backend: str, volume: dict[str, Any] | None,
                args: list[str]) -> TrainingJob:
    """2 nodes, minNodes 1, DDP on gloo; indexed-job restarts in place (the kind cluster
    serves it), a JobSet recreates (its launchers restart their workers in process)."""
    distributed: dict[str, Any] = {
        "backend": "gloo", "maxRestarts": 4, "nodeLossSeconds": LOSS_S,
        "collectiveTimeoutSeconds": 300, "rendezvousTimeoutSeconds": 600}
    if backend == "indexed-job":
        distributed["restartMode"] = "inPlace"
    return validate_job(job_spec(
        name, backend=backend, args=args, minNodes=1, distributed=distributed,
        **({"checkpoint": {"path": "/checkpoints", "volume": volume}} if volume else {}),
        resources={"cpu": "500m", "memory": "1Gi"}))


def _docker(node: KindNode, verb: str) -> None:
    out = node.docker(verb, node.name)
    assert out.returncode == 0, f"docker {verb} {node.name}: {out.stderr}"


def _final_loss(records: list[dict[str, Any]]) -> float:
    return statistics.mean(r["loss"] for r in records if r["event"] == "step"
                           and r["step"] > MAX_STEPS - FINAL_STEPS)


@pytest.mark.parametrize("backend", ["indexed-job", "jobset"])
def test_an_elastic_job_goes_on_alone_when_a_node_stops_and_grows_back_when_it_returns(
        backend: str, kube: Kube, namespace: str, victim: KindNode,  # noqa: F811
        node_shared_volume: dict[str, Any], kdist_popen: Any) -> None:  # noqa: F811
    name = f"elastic-{backend.split('-')[0]}"
    job = elastic_job(name, backend, node_shared_volume, ARGS)
    survivor = next(n.metadata.name for n in schedulable_nodes(kube)
                    if n.metadata.name != victim.name)
    placer = Placer(kube, namespace, name, first={0: survivor, 1: victim.name})
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
        # node 0 alone: the gang shrank, and its workers resume at world size 1
        assert stream.until(lambda r: r["event"] == "resume" and r.get("world_size") == 1,
                            timeout=RUN_TIMEOUT), "\n".join(stream.text)
        assert stream.until(lambda r: r["event"] == "step", timeout=120)
        shrink = figures(stream.records, fault_time)
        back_time = time.monotonic()
        _docker(victim, "unpause")
        paused = False
        # the returning pod fenced, its replacement admitted: the gang at 2 nodes again
        assert stream.until(lambda r: r["event"] == "resume" and r.get("world_size") == 2,
                            timeout=RUN_TIMEOUT), "\n".join(stream.text)
        grown = [t for t, _, r in stream.records if r["event"] == "resume"][-1]
        stream.until(lambda r: False, timeout=RUN_TIMEOUT)  # to the end of the run
        proc.wait(30)
        log = "\n".join(stream.text)
        assert wait_job(kube, namespace, name, backend) == "succeeded", log
        records = [r for _, _, r in stream.records]
        done = {r["rank"]: (r["step"], r["world_size"]) for r in records
                if r["event"] == "done"}
        assert done == {0: (MAX_STEPS, 2), 1: (MAX_STEPS, 2)}, log
        assert "the gang shrank to 1 nodes: node 1 lost" in log, log
        assert "the gang grew to 2 nodes: slot 1 admitted at a step boundary" in log, log
        alone = [r["step"] for r in records if r["event"] == "step" and r.get("world_size") == 1]
        assert alone, log  # it trained alone in between
        grow_lost = _grow_steps_lost(stream.records, grown)
        fenced = exit_codes(kube, namespace, name, index=1)
        base = _uninterrupted_loss(kube, namespace, f"{name}-base", backend)
        final = _final_loss(records)
        figures_ = {
            "drill": "elastic", "backend": backend, "node_loss_s": LOSS_S,
            "checkpoint_every": CKPT_EVERY, "fenced_exits": fenced,
            "seconds_paused_to_resumed_step_1_node": shrink["seconds_fault_to_resumed_step"],
            "shrink_steps_lost": shrink["steps_lost"], "shrink_resumed_at": shrink["resumed_at"],
            "seconds_unpaused_to_resumed_at_2_nodes": round(grown - back_time, 1),
            "grow_steps_lost": grow_lost, "steps_alone": len(alone) * LOG_EVERY,
            "final_loss": round(final, 4), "uninterrupted_final_loss": round(base, 4),
            "resume_goal_s": RESUME_GOAL_S}
        report(figures_)
        assert exitcodes.FENCED in fenced, fenced  # rank 1's old pod, back: fenced
        assert grow_lost == 0, figures_  # admitted at a step boundary, every rank saving it
        # 0 from rank 0's memory (measured, with a runtime that resumes from memory after
        # a shrink); at most one interval from the newest checkpoint (one that does not).
        assert 0 <= shrink["steps_lost"] <= CKPT_EVERY, figures_
        # issue 55's goal is 20 s; asserted with a margin for a loaded 2-core machine
        assert shrink["seconds_fault_to_resumed_step"] <= 3 * RESUME_GOAL_S, figures_
        assert abs(final - base) <= LOSS_TOLERANCE * base, figures_
    finally:
        if paused:
            _docker(victim, "unpause")
        placer.stop()
        wait_node(kube, victim.name, node_ready)


def _grow_steps_lost(records: list[tuple[float, int, dict[str, Any]]], grown: float) -> int:
    """Steps done twice at the grow: the step rank 0 stopped (and saved) at before it,
    less the step the 2-node gang resumed from."""
    stopped = [r["step"] for t, _, r in records if r["event"] == "preempted" and t < grown]
    resumed = [r["step"] for t, _, r in records if r["event"] == "resume" and t >= grown]
    assert stopped and resumed, (stopped, resumed)
    return max(stopped) - min(resumed)


def _uninterrupted_loss(kube: Kube, namespace: str, name: str, backend: str) -> float:
    """The same job's final loss, run without a fault or a pace (--step-delay only
    sleeps), each pod where the scheduler puts it."""
    job = elastic_job(name, backend, None, BASE_ARGS)
    create(kube, namespace, render(job))
    assert wait_job(kube, namespace, name, backend) == "succeeded"
    records = [r for recs in rank_records(kube, namespace, name).values() for r in recs]
    return _final_loss(records)
