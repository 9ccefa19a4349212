"""A warm spare takes the rank of a frozen pod of a JobSet, which is fenced when it thaws
(issue 54, spares on backend jobset).

The single-node harness cluster (``make e2e``: its kubelet runs on this machine, and the
JobSet controller with it): a JobSet of 2 ranks + 1 spare (slot 2), DDP on gloo. After a
checkpoint, rank 1's pod is frozen through its freezer cgroup, as ``docker pause`` freezes a
kind node: every process of the pod stops at once, its sockets stay open and say nothing,
and its kubelet still reports it Running (the node is fine; only the gang can tell). The
survivors find node 1 lost within ``nodeLossSeconds``, the spare takes rank 1 (its worker
started from the standby that imported torch while it waited) and the gang resumes from
rank 0's memory; then the pod thaws, finds its rank held at a newer generation and exits 206
(fenced), which the JobSet's one Job ignores; the job succeeds once the two ranks have.
The node-loss drills proper (a kind node paused) are ``test_spares.py``'s.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kdist.rendering import render
from kdist.shared import exitcodes
from kdist.spec import validate_job

from .conftest import HARNESS_NODE, REQUEST_TIMEOUT, Kube
from .conftest_cli import job_spec, kdist_popen_fixture  # noqa: F401
from .test_restarts import (
    ARGS,
    FAULT_AFTER,
    MAX_STEPS,
    MOUNT,
    STRIKE_AT,
    Stream,
    figures,
    pods_by_rank,
    report,
    shared_volume,  # noqa: F401 (a fixture)
)
from .test_spares import exit_codes
from .test_training import create, wait_job

LOSS_S = 10
RUN_TIMEOUT = 600
FREEZER = Path("/sys/fs/cgroup/freezer")


def pod_freezer(uid: str) -> Path:
    """The freezer cgroup of the pod `uid` on this machine (cgroupfs or systemd driver)."""
    names = {f"pod{uid}", f"pod{uid.replace('-', '_')}"}
    for path in FREEZER.glob("kubepods*/**/"):
        if path.name in names or path.name.removesuffix(".slice").rpartition("-")[2] in names:
            return path
    raise AssertionError(f"no freezer cgroup of pod {uid} under {FREEZER}")


def freeze(cgroup: Path, state: str) -> None:
    (cgroup / "freezer.state").write_text(state)
    deadline = time.monotonic() + 30
    while (cgroup / "freezer.state").read_text().strip() != state:
        assert time.monotonic() < deadline, f"{cgroup} not {state}"
        time.sleep(0.1)


@pytest.fixture
def harness(kube: Kube) -> None:
    """The harness cluster, whose pods' cgroups are this machine's."""
    nodes = [n.metadata.name for n in kube.core.list_node(_request_timeout=REQUEST_TIMEOUT).items]
    if nodes != [HARNESS_NODE] or not FREEZER.is_dir():
        pytest.skip("needs the single-node harness cluster (its pods' freezer cgroups here)")


def test_a_spare_takes_the_rank_of_a_frozen_jobset_pod_which_is_fenced_when_it_thaws(
        harness: None, kube: Kube, namespace: str, shared_volume: dict[str, Any],  # noqa: F811
        kdist_popen: Any) -> None:  # noqa: F811
    name = "spares-js"
    job = validate_job(job_spec(
        name, backend="jobset", args=ARGS,
        distributed={"backend": "gloo", "maxRestarts": 2, "spares": 1,
                     "nodeLossSeconds": LOSS_S, "collectiveTimeoutSeconds": 300,
                     "rendezvousTimeoutSeconds": 600},
        checkpoint={"path": MOUNT, "volume": shared_volume},
        resources={"cpu": "500m", "memory": "1Gi"}))
    frozen: Path | None = None
    try:
        create(kube, namespace, render(job))
        stream = Stream(kdist_popen("logs", name, "--follow"))
        assert stream.until(lambda r: r["event"] == "checkpoint" and r["step"] >= FAULT_AFTER,
                            timeout=RUN_TIMEOUT), "\n".join(stream.text)
        assert stream.until(lambda r: r.get("step", 0) >= STRIKE_AT, timeout=60)
        victim = pods_by_rank(kube, namespace, name)[1]
        frozen = pod_freezer(victim.metadata.uid)
        fault_time = time.monotonic()
        freeze(frozen, "FROZEN")
        assert stream.until(lambda r: r["event"] == "resume", timeout=RUN_TIMEOUT), \
            "\n".join(stream.text)
        resumed_s = time.monotonic() - fault_time
        freeze(frozen, "THAWED")
        frozen = None
        stream.until(lambda r: False, timeout=RUN_TIMEOUT)  # to the end of the run
        log = "\n".join(stream.text)
        assert wait_job(kube, namespace, name, "jobset") == "succeeded", log
        done = {r["rank"]: r["step"] for _, _, r in stream.records if r["event"] == "done"}
        assert done == {0: MAX_STEPS, 1: MAX_STEPS}, log
        assert "spare in slot 2 takes node rank 1" in log, log
        assert "1 of 1 worker(s) of node 1 started from their standbys (warm)" in log, log
        cost = figures(stream.records, fault_time)
        fenced = exit_codes(kube, namespace, name, index=1)
        report({"drill": "spare, jobset, a pod frozen", "node_loss_s": LOSS_S,
                "fenced_exits": fenced, "seconds_frozen_to_resume": round(resumed_s, 1),
                **cost})
        assert exitcodes.FENCED in fenced, fenced  # rank 1's old pod, thawed: fenced
        assert cost["steps_lost"] == 0, cost  # from rank 0's memory
    finally:
        if frozen is not None:
            freeze(frozen, "THAWED")
