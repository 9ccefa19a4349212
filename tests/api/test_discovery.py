"""A cluster without the Kubeflow training operator: kubeflow.org/v1 answers 404.

No operator means no PyTorchJobs, silently: every verb works on Indexed Jobs as
usual. Today discovery's 404 becomes "job not found" (exit 2) after the delete,
and `submit --replace` stops waiting for the old job.
"""

from __future__ import annotations

import pytest

from tests.api import objects
from tests.api.checks import error_line
from tests.api.test_verbs import JOBS, PODS, SVCS, running_job, watched

# In-process runs: a hang fails the one test, not the session.
pytestmark = pytest.mark.timeout(60)

FAKEAPI_OPTIONS = {"kubeflow": False}


def test_delete_a_job_without_the_operator(api, kdist):
    running_job(api, "old")
    out = kdist("delete", "old")
    assert out.code == 0, out.describe()
    assert "deleted job.batch/old, service/old in namespace default" in out.stdout
    assert {JOBS, PODS, SVCS} <= watched(out), "delete must wait by watching:\n" + out.describe()
    assert api.store.names("jobs") == [] and api.store.names("pods") == []


def test_list_without_the_operator(api, kdist):
    api.add(objects.job("alpha"))
    out = kdist("list")
    assert out.code == 0, out.describe()
    assert "alpha" in out.stdout


def test_list_all_namespaces_without_the_operator(api, kdist):
    api.add(objects.job("alpha"), objects.job("beta", namespace="team-b"))
    out = kdist("list", "-A")
    assert out.code == 0, out.describe()
    assert "alpha" in out.stdout and "beta" in out.stdout


def test_status_of_a_missing_job_without_the_operator(api, kdist):
    out = kdist("status", "ghost")
    error_line(out, 2, "no job ghost in namespace default")


def test_status_of_a_job_without_the_operator(api, kdist):
    running_job(api, "old")
    out = kdist("status", "old", "-o", "json")
    assert out.code == 0, out.describe()


def test_submit_replace_waits_without_the_operator(api, kdist, spec):
    old = running_job(api, "demo")
    out = kdist("submit", "--replace", "--no-wait", str(spec))
    assert out.code == 0, out.describe()
    posts = [i for i, r in enumerate(out.requests) if r.method == "POST"]
    job_watches = [i for i, r in enumerate(out.requests) if r.path == JOBS and r.is_watch]
    assert job_watches and posts and job_watches[0] < posts[0], \
        "the old job must be watched until gone before the new one is created:\n" \
        + out.describe()
    new = api.store.get_stored("jobs", "demo")
    assert new is not None and new["metadata"]["uid"] != old["metadata"]["uid"], out.describe()


@pytest.mark.parametrize(("backend", "said"), [
    ("pytorchjob", "the Kubeflow training operator is not installed (no kubeflow.org/v1 "
     "PyTorchJob resource)"),
    ("jobset", "the JobSet controller is not installed (no jobset.x-k8s.io/v1alpha2 JobSet "
     "resource)")])
def test_submit_without_the_backends_operator(api, kdist, tmp_path, backend, said):
    spec = objects.job_yaml(tmp_path / "job.yaml", backend=backend)
    out = kdist("submit", "--no-wait", str(spec))
    error_line(out, 3, said)
    # Discovery is asked first: no restart-rules probe, no create, nothing half-made.
    assert [r for r in out.requests if r.method != "GET"] == [], out.describe()
