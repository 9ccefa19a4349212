"""spec.trainjob.runtimeRef on the cluster (issue 57): kdist's job on a stock-shaped
ClusterTrainingRuntime (Kubeflow Trainer v2.3.0's torch-distributed, restricted security
contexts added) trains to the end, its TrainJob alone made; status and logs read it; delete
leaves the runtime; a runtime kdist cannot run on is one line, nothing made."""

from __future__ import annotations

import json
import subprocess

import pytest

from . import kubeflow_sdk as sdk
from .conftest import Kube, require_backend
from .conftest_cli import IMAGE, job_file_fixture, kdist_fixture, kubectl, leftovers  # noqa: F401
from .test_trainjob import DDP_ARGS, TIMEOUT


@pytest.fixture(autouse=True)
def _trainer(kube: Kube) -> None:
    require_backend(kube, "trainjob")


@pytest.fixture
def runtime(namespace):
    """A stock-shaped ClusterTrainingRuntime (cluster-scoped: deleted after the test); its
    own command is the runtime's, replaced by kdist's launcher through spec.trainer."""
    name = f"stock-{namespace}"
    body = sdk.stock_runtime(name, "registry.invalid/never-pulled:1", ["false"])
    kubectl("apply", "-f", "-", stdin=json.dumps(body))
    yield name
    subprocess.run(["kubectl", "delete", "clustertrainingruntimes.trainer.kubeflow.org", name,
                    "--ignore-not-found", "--wait=false"], capture_output=True, timeout=60)


def test_a_job_on_a_cluster_training_runtime(namespace, kdist, job_file, runtime):
    path = job_file("ref", backend="trainjob", args=DDP_ARGS,
                    trainjob={"runtimeRef": runtime})
    sub = kdist("submit", path, "--timeout", TIMEOUT)
    assert sub.returncode == 0, sub.stdout + sub.stderr
    job = json.loads(kubectl("-n", namespace, "get", "trainjobs.trainer.kubeflow.org", "ref",
                             "-o", "json").stdout)
    assert job["spec"]["runtimeRef"]["kind"] == "ClusterTrainingRuntime"
    assert kubectl("-n", namespace, "get", "trainingruntimes.trainer.kubeflow.org",
                   "-o", "name").stdout.split() == []

    status = json.loads(kdist("status", "ref", "-o", "json").stdout)
    assert (status["phase"], status["nodes"]) == ("Succeeded", 2), status
    assert {r["step"] for r in status["ranks"]} == {20}, status
    logs = kdist("logs", "ref")
    assert logs.returncode == 0 and "[rank 0]" in logs.stdout and "[rank 1]" in logs.stdout, \
        logs.stdout[-2000:] + logs.stderr

    deleted = kdist("delete", "ref")
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert leftovers(namespace, "ref") == []
    kubectl("get", "clustertrainingruntimes.trainer.kubeflow.org", runtime)  # still there


def test_a_runtime_kdist_cannot_run_on_is_refused(namespace, kdist, job_file):
    path = job_file("ref", backend="trainjob", trainjob={"runtimeRef": "no-such-runtime"})
    sub = kdist("submit", path, "--no-wait")
    assert sub.returncode == 3, sub.stdout + sub.stderr
    assert [line for line in sub.stderr.splitlines() if line.startswith("error:")] == [
        "error: spec.trainjob.runtimeRef: ClusterTrainingRuntime no-such-runtime is not in the "
        "cluster (`kubectl get clustertrainingruntime.trainer.kubeflow.org`): nothing "
        "submitted"], sub.stderr
    assert kubectl("-n", namespace, "get", "trainjobs.trainer.kubeflow.org",
                   "-o", "name").stdout.split() == []
