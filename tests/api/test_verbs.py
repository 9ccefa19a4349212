"""Every cluster verb on its happy path: the exact requests, the output, the exit code."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kdist import backends
from tests.api import objects
from tests.api.checks import assert_calls, collapse, error_line
from tests.api.fakeapi import FakeApi

# In-process runs: a hang fails the one test, not the session.
pytestmark = pytest.mark.timeout(60)

NS = "/namespaces/default"
JOBS = f"/apis/batch/v1{NS}/jobs"
PTJS = f"/apis/kubeflow.org/v1{NS}/pytorchjobs"
SVCS = f"/api/v1{NS}/services"
PODS = f"/api/v1{NS}/pods"
SLICES = f"/apis/discovery.k8s.io/v1{NS}/endpointslices"
CONFIGMAPS = f"/api/v1{NS}/configmaps"
KUBEFLOW = "/apis/kubeflow.org/v1"  # discovery: is the training operator there?
JOBSET = "/apis/jobset.x-k8s.io/v1alpha2"  # ... and the JobSet controller?
#: Discovery of every operated backend's kind, in the registry's order (kdist.backends).
DISCOVERY = [("GET", b.kind.discovery()) for b in backends.BACKENDS if b.installs]
assert DISCOVERY[:2] == [("GET", KUBEFLOW), ("GET", JOBSET)]
# discovery before a submission: does the cluster serve PodGroups (distributed.gang auto)?
GANG = ("GET", "/apis/scheduling.k8s.io/v1beta1")
# A submit asks kdist check's restart-rules probe (a dry-run pod) before it renders.
PROBE = ("POST", PODS)


def running_job(api: FakeApi, name: str = "old") -> dict[str, Any]:
    """A 2-node Indexed Job with its Service and two running pods that have logged steps."""
    job = api.add(objects.job(name))[0]
    api.add(objects.service(name, job), objects.pod(job, 0), objects.pod(job, 1))
    for rank in (0, 1):
        api.set_log(f"{name}-{rank}-abcde", objects.step_log(rank))
    return job


def delete_calls(name: str, *, job: str | None = JOBS, service: bool = True,
                 kubeflow: bool = True, wait: bool = True) -> list[tuple[str, str]]:
    """What deleting job `name` sends: discovery, a look at each kind that can hold it (both
    training kinds, the Service), foreground DELETEs of what is there and kdist's (`job`: the
    collection the training object is in, None when there is none), a look for its
    ConfigMaps; then, to wait, list (+ watch while anything is left) per kind that can be
    left over."""
    calls = [*DISCOVERY, ("GET", f"{JOBS}/{name}")]
    if kubeflow:
        calls.append(("GET", f"{PTJS}/{name}"))
    calls.append(("GET", f"{SVCS}/{name}"))
    if job is not None:
        calls.append(("DELETE", f"{job}/{name}"))
    if service:
        calls.append(("DELETE", f"{SVCS}/{name}"))
    calls.append(("GET", CONFIGMAPS))
    if wait:
        calls += [("GET", JOBS)] + ([("GET", PTJS)] if kubeflow else [])
        calls += [("GET", PODS), ("GET", SVCS), ("GET", SLICES), ("GET", CONFIGMAPS)]
    return calls


def watched(outcome: Any) -> set[str]:
    return {r.path for r in outcome.requests if r.is_watch}


def propagation(request: Any) -> str | None:
    body = request.body if isinstance(request.body, dict) else {}
    return request.query.get("propagationPolicy") or body.get("propagationPolicy")


# ---- list ---------------------------------------------------------------------------------


def test_list_shows_both_backends_in_the_namespace(api, kdist):
    api.add(objects.job("alpha"), objects.pytorchjob("beta"),
            objects.job("elsewhere", namespace="team-b"))
    out = kdist("list")
    assert out.code == 0, out.describe()
    assert_calls(out, [*DISCOVERY, ("GET", JOBS), ("GET", PTJS)])
    selector = "app.kubernetes.io/managed-by=kdist"
    assert all(r.query.get("labelSelector") == selector for r in out.requests[len(DISCOVERY):]), \
        out.describe()
    assert "alpha" in out.stdout and "beta" in out.stdout, out.describe()
    assert "elsewhere" not in out.stdout, out.describe()


def test_list_all_namespaces(api, kdist):
    api.add(objects.job("alpha"), objects.job("elsewhere", namespace="team-b"))
    out = kdist("list", "-A")
    assert out.code == 0, out.describe()
    assert_calls(out, [*DISCOVERY, ("GET", "/apis/batch/v1/jobs"),
                       ("GET", "/apis/kubeflow.org/v1/pytorchjobs")])
    assert "alpha" in out.stdout and "elsewhere" in out.stdout and "team-b" in out.stdout


# ---- status, logs -------------------------------------------------------------------------


def test_status_reads_job_pods_and_each_ranks_log(api, kdist):
    running_job(api, "old")
    out = kdist("status", "old", "-o", "json")
    assert out.code == 0, out.describe()
    # The logs are read a few at a time (kdist.api.statuslogs): in either order.
    calls = collapse(out.calls)
    # The job first: an Indexed Job is built in, no discovery is asked before it.
    assert calls[:-2] == [("GET", f"{JOBS}/old"), ("GET", PODS)], out.describe()
    assert sorted(calls[-2:]) == [("GET", f"{PODS}/old-0-abcde/log"),
                                  ("GET", f"{PODS}/old-1-abcde/log")], out.describe()
    state = json.loads(out.stdout)
    assert [(r["rank"], r["step"]) for r in state["ranks"]] == [(0, 6), (1, 6)], out.stdout


def test_status_falls_back_to_a_pytorchjob(api, kdist):
    api.add(objects.pytorchjob("ptj"))
    out = kdist("status", "ptj", "-o", "json")
    assert out.code == 0, out.describe()
    # Discovery of kubeflow.org only once no Indexed Job has the name; not of the others.
    assert_calls(out, [("GET", f"{JOBS}/ptj"), ("GET", KUBEFLOW), ("GET", f"{PTJS}/ptj"),
                       ("GET", PODS)])
    assert json.loads(out.stdout)["kind"] == "PyTorchJob"


def test_logs_prefix_every_line_with_its_rank(api, kdist):
    running_job(api, "old")
    out = kdist("logs", "old")
    assert out.code == 0, out.describe()
    assert_calls(out, [("GET", f"{JOBS}/old"), ("GET", PODS),
                       ("GET", f"{PODS}/old-0-abcde/log"), ("GET", f"{PODS}/old-1-abcde/log")])
    lines = out.stdout.splitlines()
    assert lines[0] == "[rank 0] rank 0 starting" and "[rank 1] rank 1 starting" in lines


def test_logs_one_rank_tail(api, kdist):
    running_job(api, "old")
    out = kdist("logs", "old", "--rank", "1", "--tail", "2")
    assert out.code == 0, out.describe()
    assert_calls(out, [("GET", f"{JOBS}/old"), ("GET", PODS),
                       ("GET", f"{PODS}/old-1-abcde/log")])
    assert out.requests[-1].query.get("tailLines") == "2", out.describe()
    assert len(out.stdout.splitlines()) == 2 and out.stdout.startswith("[rank 1] ")


def test_logs_follow_a_finished_job_to_its_end(api, kdist):
    job = api.add(objects.job("done", outcome="Complete"))[0]
    api.add(objects.pod(job, 0, exit_code=0), objects.pod(job, 1, exit_code=0))
    for rank in (0, 1):
        api.set_log(f"done-{rank}-abcde", objects.step_log(rank))
    out = kdist("logs", "-f", "done")
    assert out.code == 0, out.describe()
    follows = [r for r in out.requests if r.path.endswith("/log")]
    assert follows and all(r.query.get("follow") == "true" for r in follows), out.describe()
    for rank in (0, 1):
        assert f'[rank {rank}] {{"event": "done"' in out.stdout, out.describe()


# ---- submit -------------------------------------------------------------------------------


def test_submit_no_wait_creates_job_then_service_owned_by_it(api, kdist, spec):
    out = kdist("submit", "--no-wait", str(spec))
    assert out.code == 0, out.describe()
    assert_calls(out, [PROBE, GANG, ("POST", JOBS), ("POST", SVCS)])
    assert all(r.query.get("fieldManager") == "kdist" for r in out.requests
               if r.method == "POST"), out.describe()
    job = api.store.get_stored("jobs", "demo")
    assert job is not None and api.store.get_stored("services", "demo") is not None
    owners = out.requests[3].body["metadata"]["ownerReferences"]
    assert owners == [{"apiVersion": "batch/v1", "kind": "Job", "name": "demo",
                       "uid": job["metadata"]["uid"], "blockOwnerDeletion": True}], owners
    assert "job.batch/demo created in namespace default" in out.stdout
    assert "service/demo created in namespace default" in out.stdout


def test_submit_dry_run_server_persists_nothing(api, kdist, spec):
    out = kdist("submit", "--dry-run=server", str(spec))
    assert out.code == 0, out.describe()
    assert_calls(out, [PROBE, GANG, ("POST", JOBS), ("POST", SVCS)])
    assert all(r.query.get("dryRun") == "All" for r in out.requests
               if r.method == "POST"), out.describe()
    assert api.store.names("jobs") == [] and api.store.names("services") == []
    assert "nothing persisted" in out.stdout


def test_submit_replace_deletes_waits_then_creates(api, kdist, spec):
    old = running_job(api, "demo")
    out = kdist("submit", "--replace", "--no-wait", str(spec))
    assert out.code == 0, out.describe()
    assert_calls(out, delete_calls("demo") + [PROBE, GANG, ("POST", JOBS), ("POST", SVCS)])
    assert {JOBS, PODS, SVCS} <= watched(out), out.describe()
    new = api.store.get_stored("jobs", "demo")
    assert new is not None and new["metadata"]["uid"] != old["metadata"]["uid"]
    assert api.store.names("pods") == []


def test_submit_replace_of_a_job_that_is_not_there(api, kdist, spec):
    out = kdist("submit", "--replace", "--no-wait", str(spec))
    assert out.code == 0, out.describe()
    assert_calls(out, delete_calls("demo", job=None, service=False, wait=False)
                 + [PROBE, GANG, ("POST", JOBS), ("POST", SVCS)])


def _finish(api: FakeApi, job: dict[str, Any], exit_codes: tuple[int, ...]) -> None:
    """Play the Job controller: the pods of `job` end with `exit_codes`, then the Job gets
    its terminal condition."""
    name = job["metadata"]["name"]
    for rank, code in enumerate(exit_codes):
        api.set_log(f"{name}-{rank}-abcde", objects.step_log(rank))
        api.add(objects.pod(job, rank, exit_code=code))
    failed = any(exit_codes)
    api.store.update(dict(job, status={"conditions": [
        {"type": "Failed" if failed else "Complete", "status": "True"}]}))


def test_submit_waits_for_success(api, kdist, spec):
    api.on_watch["jobs"] = lambda: _finish(api, api.store.get_stored("jobs", "demo"), (0, 0))
    out = kdist("submit", "--timeout", "10", str(spec))
    assert out.code == 0, out.describe()
    assert "job demo succeeded" in out.stdout, out.describe()
    assert out.calls[:4] == [PROBE, GANG, ("POST", JOBS), ("POST", SVCS)], out.describe()
    assert {JOBS, PODS} <= watched(out), out.describe()


def test_submit_timeout_ends_the_watch_of_a_job_that_never_finishes(api, kdist, spec):
    out = kdist("submit", "--timeout", "3", str(spec))
    error_line(out, 1, "timed out after 3s", "job demo has not finished")
    assert out.seconds < 30, out.describe()


def test_submit_reports_the_failed_rank(api, kdist, spec):
    api.on_watch["jobs"] = lambda: _finish(api, api.store.get_stored("jobs", "demo"), (0, 1))
    out = kdist("submit", "--timeout", "10", str(spec))
    error_line(out, 1, "job demo failed", "rank 1", "code 1")


def test_submit_sees_a_job_that_ended_before_the_watch_began(api, kdist, spec):
    """A list's items carry no `kind` (the API leaves it out; the recorded fixtures in
    tests/unit show it): the job's terminal condition must still count when it first
    shows up in the watch's initial list rather than in an event."""
    api.after_create["jobs"] = lambda job: _finish(api, job, (0, 0))
    out = kdist("submit", "--timeout", "5", str(spec))
    assert out.code == 0, out.describe()
    assert "job demo succeeded" in out.stdout, out.describe()


# ---- delete -------------------------------------------------------------------------------


def test_delete_is_foreground_and_waits_by_watching(api, kdist):
    running_job(api, "old")
    bystander = api.add(objects.job("bystander"))[0]
    out = kdist("delete", "old")
    assert out.code == 0, out.describe()
    assert_calls(out, delete_calls("old"))
    deletes = [r for r in out.requests if r.method == "DELETE"]
    assert all(propagation(r) == "Foreground" for r in deletes), out.describe()
    assert {JOBS, PODS, SVCS} <= watched(out), out.describe()
    assert "deleted job.batch/old, service/old in namespace default" in out.stdout
    assert api.store.names("jobs") == ["bystander"], "only job old may go"
    assert api.store.names("pods") == [] and api.store.names("services") == []
    assert api.store.get_stored("jobs", "bystander")["metadata"]["uid"] == \
        bystander["metadata"]["uid"]


def test_delete_a_pytorchjob(api, kdist):
    api.add(objects.pytorchjob("ptj"))
    out = kdist("delete", "ptj")
    assert out.code == 0, out.describe()
    assert_calls(out, delete_calls("ptj", job=PTJS, service=False))
    assert "pytorchjob.kubeflow.org/ptj" in out.stdout
    assert api.store.names("pytorchjobs") == []


@pytest.mark.timeout(30)
def test_delete_times_out_while_objects_remain(api, kdist):
    running_job(api, "old")
    api.store.gc = "never"  # a finalizer that never clears
    out = kdist("delete", "old", "--timeout", "1")
    error_line(out, 3, "timed out")
    assert out.seconds < 5, out.describe()
    assert api.store.names("jobs") == ["old"]


def test_delete_no_wait_sends_the_deletes_only(api, kdist):
    running_job(api, "old")
    out = kdist("delete", "--no-wait", "old")
    assert out.code == 0, out.describe()
    assert_calls(out, delete_calls("old", wait=False))
    assert not watched(out), out.describe()


def test_replace_with_server_dry_run_is_refused_before_any_request(api, kdist, spec):
    running_job(api, "demo")
    out = kdist("submit", "--replace", "--dry-run=server", str(spec))
    error_line(out, 2, "replace", "dry run")
    assert out.requests == [] and api.store.alive("jobs") == ["demo"], out.describe()
