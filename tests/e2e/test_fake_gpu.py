"""GPU-shaped jobs on a CPU cluster: scheduled by nvidia.com/gpu count, trained with gloo.

The test cluster's node advertises fake nvidia.com/gpu capacity (tests/cluster/fakegpu.sh:
an extended resource, no device behind it), so a job with `resources.gpus` is placed by
GPU count and runs the CPU image end to end; a job asking for more GPUs than any node has
stays Pending, and `kdist submit` says why within seconds and fails clearly at its timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from .conftest import REQUEST_TIMEOUT, Kube
from .conftest_cli import REPO, job_file_fixture, kdist_fixture  # noqa: F401 - fixtures

GPU = "nvidia.com/gpu"
HARNESS_NODE = "kdist-node"  # tests/cluster/lib.sh NODE_NAME
pytestmark = pytest.mark.timeout(420)


def node_gpus(kube: Kube) -> list[int]:
    """Allocatable nvidia.com/gpu of each node."""
    nodes = kube.core.list_node(_request_timeout=REQUEST_TIMEOUT).items
    return [int(n.status.allocatable.get(GPU, "0")) for n in nodes]


def on_test_harness(kube: Kube) -> bool:
    """The cluster is tests/cluster's (its one node's name): what it provides must be there."""
    nodes = kube.core.list_node(_request_timeout=REQUEST_TIMEOUT).items
    return [n.metadata.name for n in nodes] == [HARNESS_NODE]


def test_gpu_job_is_scheduled_by_count_and_trains_on_cpu(kube: Kube, namespace, kdist, job_file):
    gpus = node_gpus(kube)
    if len(gpus) != 1 or gpus[0] < 2:
        missing = (f"needs one node with >= 2 {GPU} (fake ones: tests/cluster/fakegpu.sh); "
                   f"nodes have {gpus}")
        if on_test_harness(kube):
            pytest.fail(missing)  # the test harness's own cluster must advertise them
        pytest.skip(missing)
    per_pod = gpus[0] // 2  # two pods that take every GPU of the node between them
    path = job_file("gpu", procsPerNode="auto", paced={}, args=["--max-steps", "3"],
                    resources={"gpus": per_pod, "cpu": "500m", "memory": "1Gi"},
                    distributed={"backend": "gloo"})
    sub = kdist("submit", path, "--timeout", "240")
    assert sub.returncode == 0, sub.stdout + sub.stderr
    assert "job gpu succeeded in" in sub.stdout

    pods = kube.core.list_namespaced_pod(
        namespace, label_selector="kdist.dev/job-name=gpu", _request_timeout=REQUEST_TIMEOUT
    ).items
    assert len(pods) == 2
    for pod in pods:
        (c,) = pod.spec.containers
        assert c.resources.limits[GPU] == str(per_pod)
        assert c.resources.requests[GPU] == str(per_pod)  # the API server defaults it
        assert pod.spec.node_name
    # procsPerNode: auto is resolved in the pod as one worker per GPU the pod requested
    # (KDIST_GPUS), never from what the node's runtime exposes: per_pod workers per pod.
    logs = kdist("logs", "gpu")
    assert logs.returncode == 0
    worlds = {json.loads(line[line.index("{"):])["world_size"]
              for line in logs.stdout.splitlines() if '"event": "done"' in line}
    assert worlds == {2 * per_pod}, logs.stdout


def test_more_gpus_than_exist_fails_scheduling_clearly(kube: Kube, namespace, job_file):
    if max(node_gpus(kube), default=0) >= 8:
        pytest.skip(f"a node has >= 8 {GPU}: a gpus: 8 job could be scheduled")
    path = job_file("toomany", paced={}, args=["--max-steps", "1"],
                    resources={"gpus": 8, "cpu": "100m", "memory": "256Mi"})
    cmd = [sys.executable, "-m", "kdist", "-n", namespace, "submit", str(path), "--timeout", "30"]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1, cwd=REPO, env=os.environ.copy())
    lines: list[tuple[float, str]] = []
    try:
        for line in proc.stdout:
            lines.append((time.monotonic() - started, line.rstrip("\n")))
        rc = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    out = "\n".join(f"{t:5.1f}s {line}" for t, line in lines)
    print(out)
    assert rc == 1, out
    warned = [(t, line) for t, line in lines if "FailedScheduling" in line]
    assert warned, out
    assert f"Insufficient {GPU}" in warned[0][1], out
    assert warned[0][0] < 20, f"FailedScheduling shown only after {warned[0][0]:.0f}s\n{out}"
    assert "timed out after 30s" in out and "Unschedulable" in out, out
    assert lines[-1][0] < 60, out
