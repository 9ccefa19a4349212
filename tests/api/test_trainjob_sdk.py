"""The Kubeflow SDK (kubeflow 0.5) reads a kdist TrainJob against the fake API (issue 57):
the runtime kdist renders is one its `get_job` accepts (framework label, mlPolicy, the
trainer step's label, a container `node`), and it sees what `kdist status -o json` sees.
Needs the SDK's venv (KDIST_SDK_VENV, as `make e2e` makes it): skipped without it; the
cluster's own test is tests/e2e/test_trainjob_sdk.py."""

from __future__ import annotations

import json

import pytest

from tests.api import objects
from tests.api.test_trainjob import submitted, trainer_pod
from tests.e2e import kubeflow_sdk as sdk

pytestmark = pytest.mark.timeout(120)
FAKEAPI_OPTIONS = {"jobset": True, "trainer": True}


def test_the_sdk_reads_what_kdist_status_reads(api, kdist, tmp_path, kubeconfig, monkeypatch):
    sdk.python()
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    job, _ = submitted(api, kdist, objects.job_yaml(tmp_path / "job.yaml", backend="trainjob"))
    for rank in (0, 1):
        pod = trainer_pod(job, rank, exit_code=0)
        pod["metadata"]["creationTimestamp"] = f"2025-01-02T03:04:0{rank}Z"
        for cs in pod["status"]["containerStatuses"]:  # what the SDK's client requires
            cs.update(image="kdist-train:dev-cpu", imageID="sha256:0", ready=False)
        (stored,) = api.add(pod)
        api.set_log(stored["metadata"]["name"], objects.step_log(rank))
    api.store.update(dict(api.store.get_stored("trainjobs", "demo"), status={"conditions": [
        {"type": "Complete", "status": "True", "reason": "JobSetCompleted", "message": "done",
         "lastTransitionTime": "2025-01-02T03:05:00Z"}]}))

    ours = json.loads(kdist("status", "demo", "-o", "json").stdout)
    got = sdk.ask("get_job", "default", name="demo")
    assert (got["name"], got["status"], got["num_nodes"], got["runtime"]) == (
        "demo", "Complete", ours["nodes"], "demo"), got
    assert {s["name"]: s["pod"] for s in got["steps"]} == {
        f"node-{r['rank']}": r["pod"] for r in ours["ranks"]}, (got, ours)
    assert sdk.ask("list_jobs", "default") == [got]
    assert sdk.ask("get_job_logs", "default", name="demo") == \
        objects.step_log(0).strip().splitlines()
