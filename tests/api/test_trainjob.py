"""backend trainjob against the fake API (issue 57): the runtime is created before the
TrainJob and owned by it after; delete goes in background and takes a runtime no object owns;
a JobSet Trainer made for a TrainJob (named after it, controlled by it) is never the job."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kdist.backends import jobset, trainjob
from tests.api import objects
from tests.api.fakeapi import FakeApi
from tests.api.test_check import verdicts

pytestmark = pytest.mark.timeout(60)
FAKEAPI_OPTIONS = {"jobset": True, "trainer": True}

NS = "/namespaces/default"
TRAINJOBS = trainjob.TRAINJOB.collection("default")
RUNTIMES = trainjob.TRAINING_RUNTIME.collection("default")
JOBSETS = jobset.JOBSET.collection("default")


@pytest.fixture
def spec(tmp_path):
    return objects.job_yaml(tmp_path / "job.yaml", backend="trainjob")


def writes(out: Any) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in out.requests if r.method in ("POST", "PATCH", "DELETE")
            and r.query.get("dryRun") != "All"]


def submitted(api: FakeApi, kdist: Any, spec: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    out = kdist("submit", "--no-wait", str(spec))
    assert out.code == 0, out.describe()
    assert writes(out) == [("POST", RUNTIMES), ("POST", TRAINJOBS),
                           ("PATCH", f"{RUNTIMES}/demo")], out.describe()
    job, runtime = (api.store.get_stored("trainjobs", "demo"),
                    api.store.get_stored("trainingruntimes", "demo"))
    assert job is not None and runtime is not None
    assert "trainjob.trainer.kubeflow.org/demo created in namespace default" in out.stdout
    return job, runtime


def test_submit_creates_the_runtime_first_then_owns_it_by_the_trainjob(api, kdist, spec):
    job, runtime = submitted(api, kdist, spec)
    assert job["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org",
                                         "kind": "TrainingRuntime", "name": "demo"}
    assert runtime["metadata"]["ownerReferences"] == [
        {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "demo",
         "uid": job["metadata"]["uid"], "blockOwnerDeletion": True}]


def test_a_refused_trainjob_undoes_the_runtime(api, kdist, spec):
    api.fail(422, method="POST", path="/trainjobs$")
    out = kdist("submit", "--no-wait", str(spec))
    assert out.code != 0, out.describe()
    assert ("DELETE", f"{RUNTIMES}/demo") in writes(out), out.describe()
    api.store.finish_deletions()  # the garbage collector's part
    assert api.store.names("trainingruntimes") == [] and api.store.names("trainjobs") == []


def test_delete_goes_in_background_and_skips_the_jobset_trainer_made(api, kdist, spec):
    job, _ = submitted(api, kdist, spec)
    # What Trainer makes: a JobSet named after the TrainJob, controlled by it, no kdist labels.
    api.add({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
             "metadata": {"name": "demo", "namespace": "default", "ownerReferences": [
                 {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                  "name": "demo", "uid": job["metadata"]["uid"], "controller": True}]},
             "spec": {"replicatedJobs": []}})
    status = kdist("status", "demo")
    assert status.code == 0 and "TrainJob default/demo" in status.stdout, status.describe()
    out = kdist("delete", "demo")
    assert out.code == 0, out.describe()
    deletes = [r for r in out.requests if r.method == "DELETE"]
    assert [r.path for r in deletes] == [f"{TRAINJOBS}/demo"], out.describe()
    assert deletes[0].body["propagationPolicy"] == "Background"
    assert api.store.names("trainjobs") == [] and api.store.names("trainingruntimes") == []


def test_delete_takes_a_runtime_applied_with_kubectl(api, kdist, tmp_path):
    """`kubectl apply -f` of the rendered objects: no ownerReference, found by its labels."""
    from kdist.rendering import render
    from kdist.spec import load_job

    for obj in render(load_job(objects.job_yaml(tmp_path / "j.yaml", backend="trainjob"))):
        api.add(dict(obj, metadata=dict(obj["metadata"], namespace="default")))
    out = kdist("delete", "demo")
    assert out.code == 0, out.describe()
    assert {r.path for r in out.requests if r.method == "DELETE"} == {
        f"{TRAINJOBS}/demo", f"{RUNTIMES}/demo"}, out.describe()
    api.store.finish_deletions()
    assert api.store.names("trainingruntimes") == []


def test_check_says_what_trainer_cannot_do(api, kdist):
    got = verdicts(kdist("check", "-o", "json"))
    assert got["trainjob"]["status"] == "ok", got["trainjob"]
    assert "never in place" in got["trainjob"]["detail"]


def test_check_reviews_no_trainer_access_where_trainer_is_not_served(api, kdist):
    from tests.api.test_check import serve

    serve(api, trainer=False)
    got = verdicts(kdist("check", "-o", "json"))
    assert got["trainjob"]["status"] == "not served", got["trainjob"]
    assert not [name for name in got if "trainer.kubeflow.org" in name], sorted(got)


SETTLING = ('admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: '
            'spec.runtimeRef: Invalid value: ...: trainingruntimes.trainer.kubeflow.org "demo" '
            'not found: specified trainingRuntime must be created before the TrainJob is created')


def test_a_trainjob_refused_while_trainer_has_not_seen_its_runtime_is_sent_again(
        api, kdist, spec):
    """Trainer's webhook reads the runtime from its informer's cache, a moment behind."""
    api.fail(403, message=SETTLING, method="POST", path="/trainjobs$", times=2)
    out = kdist("submit", "--no-wait", str(spec))
    assert out.code == 0, out.describe()
    posts = [r for r in out.requests if r.method == "POST" and r.path == TRAINJOBS]
    assert len(posts) == 3, out.describe()
    assert api.store.get_stored("trainjobs", "demo") is not None


def test_a_server_dry_run_says_the_trainjob_was_not_checked(api, kdist, spec):
    """A dry run stores no runtime, so Trainer's webhook cannot pass the TrainJob."""
    api.fail(403, message=SETTLING, method="POST", path="/trainjobs$")
    out = kdist("submit", "--dry-run=server", str(spec))
    assert out.code == 0, out.describe()
    assert "trainjob.trainer.kubeflow.org/demo: not checked by the server" in out.stderr, \
        out.describe()
    assert api.store.names("trainjobs") == [] and api.store.names("trainingruntimes") == []


def test_another_refusal_of_the_trainjob_is_not_retried(api, kdist, spec):
    api.fail(403, message="no trainjobs for you", method="POST", path="/trainjobs$")
    out = kdist("submit", "--no-wait", str(spec))
    assert out.code == 3, out.describe()
    assert len([r for r in out.requests if r.method == "POST" and r.path == TRAINJOBS]) == 1


def trainer_pod(job: dict[str, Any], rank: int, exit_code: int = 0) -> dict[str, Any]:
    """Rank `rank`'s pod of the JobSet Trainer made for `job` (kdist's labels on it, as the
    runtime's pod template has them), its container `node` ended with `exit_code`, a sidecar
    still running listed first (so only a lookup by name finds kdist's exit)."""
    pod = objects.pod(job, rank, exit_code=exit_code)
    name = job["metadata"]["name"]
    pod["metadata"]["labels"].update({
        jobset.JOBSET_NAME: name, jobset.REPLICATED_JOB: "node", jobset.JOB_INDEX: "0",
        trainjob.ANCESTOR: trainjob.TRAINER_STEP})
    pod["spec"]["containers"] = [{"name": "node"}, {"name": "sidecar"}]
    pod["status"]["containerStatuses"][0]["name"] = "node"
    pod["status"]["containerStatuses"].insert(0, {
        "name": "sidecar", "restartCount": 0,
        "state": {"running": {"startedAt": "2025-01-02T03:04:00Z"}}})
    return pod


def test_logs_and_status_read_the_container_named_node(api, kdist, spec):
    """Trainer's webhook and the Kubeflow SDK know the trainer step's container as `node`:
    kdist names its container so on this backend, and reads its log and exit by that name."""
    job, runtime = submitted(api, kdist, spec)
    containers = trainjob.BACKEND.pod_templates(runtime)[0]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["node"]
    for rank, code in ((0, 0), (1, 7)):
        (pod,) = api.add(trainer_pod(job, rank, exit_code=code))
        api.set_log(pod["metadata"]["name"], objects.step_log(rank))
    out = kdist("logs", "demo", "--rank", "0")
    assert out.code == 0, out.describe()
    assert '"step": 6' in out.stdout, out.describe()
    reads = [r for r in out.requests if r.path.endswith("/log")]
    assert reads and {r.query.get("container") for r in reads} == {"node"}, out.describe()
    status = kdist("status", "demo", "-o", "json")
    ranks = {r["rank"]: r for r in json.loads(status.stdout)["ranks"]}
    assert status.code == 0 and ranks[1]["exit_code"] == 7, status.describe()
