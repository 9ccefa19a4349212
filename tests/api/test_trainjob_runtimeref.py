"""spec.trainjob.runtimeRef against the fake API (issue 57): submit reads the named
ClusterTrainingRuntime first and creates the TrainJob alone; a runtime missing or of a
shape kdist's TrainJob cannot run on is one line, with nothing created; delete leaves the
runtime (an admin's) alone."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kdist.backends import trainjob
from tests.api import objects
from tests.api.checks import error_line
from tests.api.fakeapi import FakeApi

pytestmark = pytest.mark.timeout(60)
FAKEAPI_OPTIONS = {"jobset": True, "trainer": True}

TRAINJOBS = trainjob.TRAINJOB.collection("default")
RUNTIME = trainjob.CLUSTER_TRAINING_RUNTIME.cluster_item("torch-distributed")

#: Kubeflow Trainer v2.3.0's stock torch-distributed (manifests/base/runtimes).
STOCK: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed",
                 "labels": {"trainer.kubeflow.org/framework": "torch"}},
    "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {
            "metadata": {"labels": {trainjob.ANCESTOR: "trainer"}},
            "spec": {"template": {"spec": {"containers": [
                {"name": "node",
                 "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"}]}}}}}]}}}}


@pytest.fixture
def spec(tmp_path):
    path = objects.job_yaml(tmp_path / "job.yaml", backend="trainjob")
    path.write_text(path.read_text() + "  trainjob: {runtimeRef: torch-distributed}\n")
    return path


def writes(out: Any) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in out.requests if r.method in ("POST", "PATCH", "DELETE")
            and r.query.get("dryRun") != "All"]


def test_submit_reads_the_runtime_then_creates_the_trainjob_alone(api: FakeApi, kdist, spec):
    api.add(STOCK)
    out = kdist("submit", "--no-wait", str(spec))
    assert out.code == 0, out.describe()
    read = next(i for i, r in enumerate(out.requests) if r.path == RUNTIME)
    made = next(i for i, r in enumerate(out.requests) if r.method == "POST")
    assert read < made, out.describe()
    assert writes(out) == [("POST", TRAINJOBS)], out.describe()
    job = api.store.get_stored("trainjobs", "demo")
    assert job["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org",
                                         "kind": "ClusterTrainingRuntime",
                                         "name": "torch-distributed"}
    assert job["spec"]["trainer"]["image"] == "kdist-train:dev-cpu"
    (patch,) = job["spec"]["runtimePatches"]
    assert patch["manager"] == trainjob.PATCH_MANAGER
    assert api.store.names("trainingruntimes") == []


@pytest.mark.parametrize(("runtime", "said"), [
    (None, "ClusterTrainingRuntime torch-distributed is not in the cluster"),
    ({"replicatedJobs": [{"name": "trainer", "template": {
        "metadata": {"labels": {trainjob.ANCESTOR: "trainer"}}}}]},
     "names its trainer's replicated Job 'trainer', not 'node'"),
    ({"replicatedJobs": [{"name": "node", "template": {"spec": {}}}]},
     "has 0 replicated Jobs labelled trainer.kubeflow.org/trainjob-ancestor-step: trainer"),
    ({"replicatedJobs": [{"name": "node", "template": {
        "metadata": {"labels": {trainjob.ANCESTOR: "trainer"}},
        "spec": {"template": {"spec": {"containers": [{"name": "pytorch"}]}}}}}]},
     "has no container 'node' in its replicated Job 'node'"),
    ({}, "has no spec.template.spec.replicatedJobs"),
])
def test_a_missing_or_misshapen_runtime_is_one_line_and_nothing_is_made(
        api, kdist, spec, runtime, said):
    if runtime is not None:
        odd = copy.deepcopy(STOCK)
        odd["spec"]["template"]["spec"] = runtime
        api.add(odd)
    out = kdist("submit", "--no-wait", str(spec))
    error_line(out, 3, "spec.trainjob.runtimeRef", said)
    assert writes(out) == [], out.describe()
    assert api.store.names("trainjobs") == []


def test_delete_leaves_the_runtime(api, kdist, spec):
    api.add(STOCK)
    assert kdist("submit", "--no-wait", str(spec)).code == 0
    out = kdist("delete", "demo")
    assert out.code == 0, out.describe()
    assert [p for m, p in writes(out) if m == "DELETE"] == [f"{TRAINJOBS}/demo"], out.describe()
    assert api.store.get_stored("clustertrainingruntimes", "torch-distributed", "") is not None
