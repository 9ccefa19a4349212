"""A JobSet is read only in the shape kdist writes (issue 50): one replicated Job, `node`,
of one replica, whose pods' completion indexes are the ranks.

Before: a kdist-labelled JobSet with `replicas: 2` (two child Jobs, each with a pod of
completion index 0 and 1) read as 4 ranks: ranks 0 and 1 each showed a restart that never
happened (two pods for one rank), ranks 2 and 3 stayed Pending for good. Now its node
count is not read, only the pods of Job `node` 0 are ranks, and one note says so.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

import kdist
from kdist.api.types import Quiet
from kdist.backends import jobset
from tests.api import objects

FAKEAPI_OPTIONS = {"jobset": True}
pytestmark = pytest.mark.timeout(60)


def a_jobset(**replicated: Any) -> dict[str, Any]:
    """A JobSet as kdist renders it (the fields kdist reads), `replicated` changed in its
    one replicated Job."""
    name = "demo"
    pod_template = {"metadata": {"labels": objects.labels(name, "jobset")},
                    "spec": {"containers": [{"name": "pytorch", "image": "kdist-train:dev-cpu"}]}}
    job = {"name": jobset.NODE_JOB, "replicas": 1,
           "template": {"spec": {"completionMode": "Indexed", "completions": 2,
                                 "parallelism": 2, "template": pod_template}}}
    job.update(replicated)
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "default",
                         "labels": objects.labels(name, "jobset")},
            "spec": {"replicatedJobs": [job], "failurePolicy": {"maxRestarts": 0},
                     "network": {"enableDNSHostnames": True}},
            "status": {"replicatedJobsStatus": [{"name": "node", "active": 2}]}}


def a_pod(owner: dict[str, Any], rank: int, job_index: int = 0,
          replicated_job: str = jobset.NODE_JOB, exit_code: int | None = None) -> dict[str, Any]:
    pod = copy.deepcopy(objects.pod(owner, rank, exit_code=exit_code))
    pod["metadata"]["name"] = f"demo-{replicated_job}-{job_index}-{rank}-abcde"
    pod["metadata"]["labels"].update({
        jobset.JOBSET_NAME: "demo", jobset.RESTART_ATTEMPT: "0",
        # The JobSet controller's labels (its docs: "JobSet labels").
        "jobset.sigs.k8s.io/replicatedjob-name": replicated_job,
        "jobset.sigs.k8s.io/job-index": str(job_index)})
    return pod


def shown(kdist) -> tuple[dict[str, Any], str]:
    out = kdist("status", "demo", "-o", "json")
    assert out.code == 0 and out.crash is None, out.describe()
    return json.loads(out.stdout), out.stderr


def ranks(status: dict[str, Any]) -> list[tuple[int, str, int]]:
    return [(r["rank"], r["phase"], r["restarts"]) for r in status["ranks"]]


def test_kdists_own_shape_reads_as_before_without_a_note(api, kdist):
    owner = api.add(a_jobset())[0]
    api.add(a_pod(owner, 0), a_pod(owner, 1))
    status, err = shown(kdist)
    assert ranks(status) == [(0, "Running", 0), (1, "Running", 0)]
    assert status["nodes"] == 2 and "note:" not in err


@pytest.mark.parametrize("change", [{"replicas": 2}, {"name": "workers"}],
                         ids=["replicas 2", "another name"])
def test_another_shape_shows_no_phantom_restart_nor_a_rank_stuck_pending(api, kdist, change):
    owner = api.add(a_jobset(**change))[0]
    name = change.get("name", jobset.NODE_JOB)
    for job_index in range(change.get("replicas", 1)):
        api.add(a_pod(owner, 0, job_index, name), a_pod(owner, 1, job_index, name))
    status, err = shown(kdist)
    want = "replicas is 2, not 1" if "replicas" in change else "name is 'workers', not 'node'"
    assert f"note: JobSet demo is not of the shape kdist writes (spec.replicatedJobs[0]." \
           f"{want})" in err, err
    assert err.count("note:") == 1, err
    assert status["nodes"] is None  # not read from a shape kdist does not write
    if "replicas" in change:  # Job node-0's pods are the ranks; node-1's are none
        assert ranks(status) == [(0, "Running", 0), (1, "Running", 0)]
    else:
        assert ranks(status) == []
    text = kdist("status", "demo")
    assert text.code == 0 and "is not of the shape kdist writes" in text.stdout, \
        text.describe()


def test_two_replicated_jobs_are_named(api, kdist):
    owner = a_jobset()
    owner["spec"]["replicatedJobs"].append(dict(owner["spec"]["replicatedJobs"][0],
                                                name="extra"))
    owner = api.add(owner)[0]
    api.add(a_pod(owner, 0), a_pod(owner, 1), a_pod(owner, 0, 0, "extra"))
    status, err = shown(kdist)
    assert "spec.replicatedJobs has 2 Jobs, not 1" in err, err
    assert ranks(status) == [(0, "Running", 0), (1, "Running", 0)]


class Said(Quiet):
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, text: str) -> None:
        self.warnings.append(text)


def test_the_watch_says_it_once(api, kubeconfig):
    done = a_jobset(replicas=2)
    done["status"] = {"conditions": [{"type": "Completed", "status": "True"}]}
    owner = api.add(done)[0]
    for job_index in (0, 1):
        api.add(a_pod(owner, 0, job_index, exit_code=0), a_pod(owner, 1, job_index, exit_code=0))
    said = Said()
    state = kdist.Client(kubeconfig=kubeconfig).wait("demo", observer=said, timeout=20)
    assert state.outcome == "Succeeded"
    notes = [w for w in said.warnings if "is not of the shape kdist writes" in w]
    assert len(notes) == 1 and "replicas is 2" in notes[0], said.warnings
    assert [(r.rank, r.restarts) for r in state.ranks.values()] == [(0, 0), (1, 0)]
