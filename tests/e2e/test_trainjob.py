"""backend trainjob on the cluster (issue 57): Kubeflow Trainer v2.3.0 makes the JobSet of the
job's own TrainingRuntime; every verb works on the TrainJob. Needs the TrainJob kind: skipped
with the reason where the cluster lacks it (kind), a failure on tests/cluster's own cluster,
which runs Trainer (conftest.require_backend)."""

from __future__ import annotations

import json

import pytest

from .conftest import Kube, require_backend
from .conftest_cli import job_file_fixture, kdist_fixture, kubectl, leftovers  # noqa: F401

# A tiny 2-node DDP run that visibly trains (tests/e2e/test_training.py's figures).
DDP_ARGS = ["--max-steps", "20", "--batch-size", "32", "--log-every", "4",
            "--dataset-size", "4096", "--lr", "0.3", "--classes", "4", "--hidden", "128",
            "--layers", "2"]
TIMEOUT = "300"  # seconds a tiny 2-rank job may take on 2 shared cores


@pytest.fixture(autouse=True)
def _trainer(kube: Kube) -> None:
    require_backend(kube, "trainjob")


def get(namespace: str, kind: str, name: str) -> dict:
    return json.loads(kubectl("-n", namespace, "get", kind, name, "-o", "json").stdout)


def owner_uids(obj: dict) -> set[str]:
    return {r["uid"] for r in obj["metadata"].get("ownerReferences") or []
            if r["kind"] == "TrainJob"}


def test_every_verb_on_a_trainjob(namespace, kdist, job_file):
    path = job_file("tj", backend="trainjob", args=DDP_ARGS)
    sub = kdist("submit", path, "--timeout", TIMEOUT)
    assert sub.returncode == 0, sub.stdout + sub.stderr
    assert "trainjob.trainer.kubeflow.org/tj created" in sub.stdout, sub.stdout
    job = get(namespace, "trainjobs.trainer.kubeflow.org", "tj")
    uid = job["metadata"]["uid"]
    assert [c["type"] for c in job["status"]["conditions"]
            if c["status"] == "True"][-1:] == ["Complete"], job["status"]
    # The runtime kdist made, and the JobSet Trainer made from it: both the TrainJob's.
    assert owner_uids(get(namespace, "trainingruntimes.trainer.kubeflow.org", "tj")) == {uid}
    assert owner_uids(get(namespace, "jobsets.jobset.x-k8s.io", "tj")) == {uid}

    status = json.loads(kdist("status", "tj", "-o", "json").stdout)
    assert status["phase"] == "Succeeded", status
    assert status["backend"] == "trainjob" and status["kind"] == "TrainJob", status
    logs = kdist("logs", "tj")
    assert logs.returncode == 0 and "[rank 0]" in logs.stdout and "[rank 1]" in logs.stdout, \
        logs.stdout[-2000:] + logs.stderr
    listed = kdist("list")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[:2] for line in listed.stdout.splitlines()
            if line.split()[:1] == ["tj"]] == [["tj", "trainjob"]], listed.stdout

    again = kdist("submit", path, "--replace", "--no-wait")
    assert again.returncode == 0, again.stdout + again.stderr
    fresh = get(namespace, "trainjobs.trainer.kubeflow.org", "tj")
    assert fresh["metadata"]["uid"] != uid
    assert owner_uids(get(namespace, "trainingruntimes.trainer.kubeflow.org", "tj")) == {
        fresh["metadata"]["uid"]}

    deleted = kdist("delete", "tj")
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert leftovers(namespace, "tj") == []
    assert kubectl("-n", namespace, "get", "jobsets.jobset.x-k8s.io,"
                   "trainingruntimes.trainer.kubeflow.org", "-o", "name").stdout.split() == []
