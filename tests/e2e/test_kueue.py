"""Kueue on a real cluster: a job with `scheduling.queue` is admitted whole or not at all.

A queued job is created suspended (kdist renders it so; Kueue's webhook would too),
Kueue admits it when its ClusterQueue has quota for every pod, and only then do its
pods exist. Every backend: Kueue's kubeflow.org/pytorchjob integration against the
training operator v1, its jobset.x-k8s.io/jobset integration against JobSet v0.12.

Needs Kueue and the ClusterQueue `kdist-e2e` open to every namespace, with quota for
exactly one 2-pod job of this suite's usual size (500m CPU and 1Gi per pod):
tests/cluster/kueue.sh makes it. Each test makes LocalQueue `team-a` in its own
namespace. Skipped where the cluster has no such ClusterQueue (a failure on the
test harness's own cluster, which must have it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kdist import backends
from kdist.kube.watch.objects import terminal_condition

from .conftest import REQUEST_TIMEOUT, Kube
from .conftest_cli import job_file_fixture, kdist_fixture  # noqa: F401 - fixtures

BACKENDS = list(backends.NAMES)
KUEUE = ("kueue.x-k8s.io", "v1beta2")
CLUSTER_QUEUE = "kdist-e2e"
QUEUE = "team-a"
JOB_LABEL = "kdist.dev/job-name"
HARNESS_NODE = "kdist-node"  # tests/cluster/lib.sh NODE_NAME
pytestmark = pytest.mark.timeout(600)


def _custom(kube: Kube) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube.api)


@pytest.fixture
def team_a(kube: Kube, namespace: str) -> str:
    """LocalQueue team-a in the test's namespace, feeding ClusterQueue kdist-e2e."""
    try:
        _custom(kube).get_cluster_custom_object(
            *KUEUE, "clusterqueues", CLUSTER_QUEUE, _request_timeout=REQUEST_TIMEOUT
        )
    except ApiException as e:
        if e.status != 404:
            raise
        missing = f"no Kueue ClusterQueue {CLUSTER_QUEUE} (tests/cluster/kueue.sh makes it)"
        if on_test_harness(kube):
            pytest.fail(missing)
        pytest.skip(missing)
    body = {
        "apiVersion": "/".join(KUEUE),
        "kind": "LocalQueue",
        "metadata": {"name": QUEUE, "namespace": namespace},
        "spec": {"clusterQueue": CLUSTER_QUEUE},
    }
    _custom(kube).create_namespaced_custom_object(
        *KUEUE, namespace, "localqueues", body, _request_timeout=REQUEST_TIMEOUT
    )
    kube.wait_for(
        _custom(kube).list_namespaced_custom_object,
        *KUEUE,
        namespace,
        "localqueues",
        name=QUEUE,
        timeout=30,
        done=lambda lq: _condition(lq, "Active") == "True",
    )
    return QUEUE


def on_test_harness(kube: Kube) -> bool:
    """The cluster is tests/cluster's (its one node's name): what it provides must be there."""
    nodes = kube.core.list_node(_request_timeout=REQUEST_TIMEOUT).items
    return [n.metadata.name for n in nodes] == [HARNESS_NODE]


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return c["status"]
    return None


def _message(obj: dict[str, Any], kind: str) -> str:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return c.get("message", "")
    return ""


def get_job(kube: Kube, namespace: str, name: str, backend: str) -> dict[str, Any]:
    """The job object (Job, PyTorchJob, JobSet) as a dict."""
    b = backends.get(backend)
    if b.installs:  # an operator's custom resource
        return _custom(kube).get_namespaced_custom_object(
            b.kind.group, b.kind.api_version.split("/")[1], namespace, b.kind.plural, name,
            _request_timeout=REQUEST_TIMEOUT)
    job = client.BatchV1Api(kube.api).read_namespaced_job(
        name, namespace, _request_timeout=REQUEST_TIMEOUT
    )
    return kube.api.sanitize_for_serialization(job)


def suspended(job: dict[str, Any], backend: str) -> bool:
    return backends.get(backend).suspended(job)


def outcome(job: dict[str, Any], backend: str) -> str | None:
    """'succeeded' / 'failed' once the job has ended, else None."""
    done = {"Complete": "succeeded", "Succeeded": "succeeded", "Completed": "succeeded",
            "Failed": "failed"}
    for c in (job.get("status") or {}).get("conditions") or []:
        if c["type"] in done and c["status"] == "True":
            return done[c["type"]]
    return None


def workload_of(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The Kueue Workload that Kueue made for job `name`, if any yet."""
    listing = _custom(kube).list_namespaced_custom_object(
        *KUEUE, namespace, "workloads", _request_timeout=REQUEST_TIMEOUT
    )
    for wl in listing["items"]:
        if any(o["name"] == name for o in wl["metadata"].get("ownerReferences") or []):
            return wl
    return None


def pods_of(kube: Kube, namespace: str, name: str) -> list[client.V1Pod]:
    return kube.core.list_namespaced_pod(
        namespace, label_selector=f"{JOB_LABEL}={name}", _request_timeout=REQUEST_TIMEOUT
    ).items


def wait_until(what: str, check: Callable[[], Any], timeout: float, every: float = 1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _time(stamp: str | datetime) -> datetime:
    if isinstance(stamp, datetime):
        return stamp
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def queued_spec(backend: str, steps: int) -> dict[str, Any]:
    return {
        "backend": backend,
        "paced": {"PACE": "1"},
        "args": ["--max-steps", str(steps)],
        "scheduling": {"queue": QUEUE},
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_queued_job_is_rendered_suspended(backend, job_file):
    """What kdist sends for a queued job is suspended already: no pod may start in the
    moment before Kueue's webhook (where there is one) or its controller sees it."""
    path = job_file("queued", **queued_spec(backend, 1))
    res = subprocess.run([sys.executable, "-m", "kdist", "render", str(path), "-o", "json"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    (job,) = [o for o in json.loads(res.stdout)["items"] if backends.of_kind(o["kind"])]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == QUEUE
    assert suspended(job, backend), json.dumps(job["spec"], indent=1)[:2000]


@pytest.mark.exclusive  # it fills ClusterQueue kdist-e2e's quota, which every test shares
@pytest.mark.parametrize("backend", BACKENDS)
def test_second_job_waits_for_quota_then_runs(backend, kube, namespace, team_a, kdist,
                                              job_file):
    first = job_file("first", **queued_spec(backend, 15))
    second = job_file("second", **queued_spec(backend, 3))
    assert kdist("submit", first, "--no-wait").returncode == 0
    wait_until("Kueue to admit job first",
               lambda: (wl := workload_of(kube, namespace, "first"))
               and _condition(wl, "Admitted") == "True", timeout=60)
    assert kdist("submit", second, "--no-wait").returncode == 0

    # While the first runs, the second waits whole: suspended, without a single pod,
    # its Workload pending for quota.
    waited, status_out, list_out, reason = 0, "", "", ""
    while outcome(get_job(kube, namespace, "first", backend), backend) is None:
        job = get_job(kube, namespace, "second", backend)
        wl = workload_of(kube, namespace, "second")
        pods = pods_of(kube, namespace, "second")
        if outcome(get_job(kube, namespace, "first", backend), backend) is not None:
            break  # the first ended between the two reads: the second may start now
        assert pods == [], [p.metadata.name for p in pods]
        assert suspended(job, backend), job["spec"]
        if wl is not None:
            assert _condition(wl, "Admitted") != "True", wl["status"]
            if _condition(wl, "QuotaReserved") == "False":
                waited += 1
                if waited == 3:  # what the user sees meanwhile
                    status_out = (r := kdist("status", "second")).stdout + r.stderr
                    list_out = (r := kdist("list")).stdout + r.stderr
                    reason = _message(wl, "QuotaReserved")
        time.sleep(1)
    assert waited >= 3, "job second was never seen waiting for quota while job first ran"
    assert "insufficient unused quota" in reason, reason  # Kueue's words for "wait"

    assert wait_until("job second to end",
                      lambda: outcome(get_job(kube, namespace, "second", backend), backend),
                      timeout=300) == "succeeded"
    first_job = get_job(kube, namespace, "first", backend)
    assert outcome(first_job, backend) == "succeeded"
    # No pod of the second was created before the first had completed.
    # A Job and a PyTorchJob say when they completed; a JobSet, in its Completed condition.
    ended = first_job["status"].get("completionTime") or terminal_condition(first_job)[1][
        "lastTransitionTime"]
    first_done = _time(ended)
    created = [_time(p.metadata.creation_timestamp) for p in pods_of(kube, namespace, "second")]
    assert len(created) == 2 and min(created) >= first_done, (created, first_done)

    # kdist shows the queue state while a job waits (issue 17): status and list.
    assert "queued" in status_out.lower() and QUEUE in status_out, status_out
    assert "queued" in list_out.lower(), list_out


def test_job_that_can_never_fit_says_so(kube, namespace, team_a, kdist, job_file):
    """Three 500m pods exceed the ClusterQueue's 1 CPU for good: submit says it is queued,
    and why (Kueue's reason), instead of waiting silently, and fails at its timeout."""
    path = job_file("toobig", **{**queued_spec("indexed-job", 1), "nodes": 3})
    started = time.monotonic()
    res = kdist("submit", path, "--timeout", "45", timeout=120)
    took = time.monotonic() - started
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert f"LocalQueue {QUEUE}" in out, out
    assert "insufficient quota" in out, out  # Kueue's: "... > maximum capacity (1)"
    assert took < 90, took
    assert pods_of(kube, namespace, "toobig") == []
    wl = workload_of(kube, namespace, "toobig")
    assert wl is not None and _condition(wl, "QuotaReserved") == "False", wl


def test_queue_name_label_reaches_the_api_server(kube, namespace, team_a, kdist, job_file):
    """kdist's queue label is the one Kueue reads; a job without it is not Kueue's."""
    queued = job_file("labelled", **queued_spec("indexed-job", 1))
    plain = job_file("plain", paced={"PACE": "0.1"}, args=["--max-steps", "1"])
    assert kdist("submit", queued, "--no-wait").returncode == 0
    assert kdist("submit", plain, "--no-wait").returncode == 0
    wl = wait_until("a Workload for job labelled",
                    lambda: workload_of(kube, namespace, "labelled"), timeout=60)
    assert wl["spec"]["queueName"] == QUEUE
    assert [ps["count"] for ps in wl["spec"]["podSets"]] == [2]
    time.sleep(3)
    assert workload_of(kube, namespace, "plain") is None
    assert not suspended(get_job(kube, namespace, "plain", "indexed-job"), "indexed-job")
