"""Failure semantics on the real cluster: a code error fails at once, even with
restarts to spare; an infrastructure-style exit (>= 128) is retried, at most maxRestarts
times (the Job controller's per-index limit, or a JobSet's failurePolicy)."""

from __future__ import annotations

import json
import time

import pytest

from .conftest_cli import job_file_fixture, kdist_fixture, kubectl  # noqa: F401


@pytest.mark.parametrize("backend", ["indexed-job", "pytorchjob", "jobset", "trainjob"])
def test_code_error_fails_fast_without_burning_retries(backend, namespace, kdist, job_file):
    path = job_file("codeerr", backend=backend, args=["--max-steps", "5"],
                    distributed={"backend": "gloo", "maxRestarts": 3},
                    paced={"PACE": "0.2", "FAIL_RANK": "0", "FAIL_AT": "2", "FAIL_CODE": "1"})
    sub = kdist("submit", path, "--timeout", "200")
    assert sub.returncode == 1, sub.stdout + sub.stderr
    assert "rank 0" in sub.stderr and "exited with code 1" in sub.stderr
    if backend == "indexed-job":
        job = json.loads(kubectl("-n", namespace, "get", "job", "codeerr", "-o", "json").stdout)
        # Both ranks failed once (rank 1 lost its peer); no index got a retry pod.
        assert job["status"].get("failed", 0) <= 2, job["status"]
        pods = kubectl("-n", namespace, "get", "pods", "-l", "kdist.dev/job-name=codeerr",
                       "-o", "name").stdout.split()
        assert len(pods) <= 2, pods  # the Job controller removes the still-running one
        reasons = {c["type"]: c.get("reason") for c in job["status"]["conditions"]}
        assert "PodFailurePolicy" in reasons.values(), reasons  # FailureTarget, then Failed
    elif backend in ("jobset", "trainjob"):  # a TrainJob's JobSet: Trainer's, its name
        js = json.loads(kubectl("-n", namespace, "get", "jobsets.jobset.x-k8s.io", "codeerr",
                                "-o", "json").stdout)
        # Failed by its failurePolicy's FailJobSet rule, not one of 3 restarts spent.
        assert js["status"].get("restarts", 0) == 0, js["status"]
        reasons = {c["type"]: c.get("reason") for c in js["status"]["conditions"]}
        assert reasons.get("Failed") == "FailJobSetFailurePolicyAction", reasons
    else:
        pj = json.loads(kubectl("-n", namespace, "get", "pytorchjob", "codeerr",
                                "-o", "json").stdout)
        master = pj["status"]["replicaStatuses"]["Master"]
        assert master.get("failed", 0) == 1, pj["status"]


def test_infrastructure_exit_is_retried_then_gives_up(namespace, kdist, job_file):
    """restartMode recreate: exit 137 (what SIGKILL/OOM looks like) counts against
    maxRestarts: the Job makes a new pod for the index each time, and fails once they
    are spent (backoffLimitPerIndex: the index is failed for good, and no index may be).
    In place: tests/e2e/test_inplace.py."""
    path = job_file("infra", nodes=1, args=["--max-steps", "3"],
                    distributed={"backend": "gloo", "maxRestarts": 1,
                                 "restartMode": "recreate"},
                    paced={"PACE": "0.2", "FAIL_RANK": "0", "FAIL_AT": "1", "FAIL_CODE": "137"})
    sub = kdist("submit", path, "--timeout", "200")
    assert sub.returncode == 1, sub.stdout + sub.stderr
    for _ in range(40):  # the Job controller counts the last failed pod a moment later
        job = json.loads(kubectl("-n", namespace, "get", "job", "infra", "-o", "json").stdout)
        if job["status"].get("failed", 0) >= 2:
            break
        time.sleep(0.5)
    assert job["status"].get("failed", 0) == 2, job["status"]  # the first try + 1 restart
    reasons = {c["type"]: c.get("reason") for c in job["status"]["conditions"]}
    assert "MaxFailedIndexesExceeded" in reasons.values(), reasons
    assert job["status"].get("failedIndexes") == "0", job["status"]
    assert "rank 0" in sub.stderr and "exited with code 137" in sub.stderr, sub.stderr


def test_a_jobset_restarts_the_gang_on_an_infrastructure_exit_then_gives_up(
        namespace, kdist, job_file):
    """backend jobset: exit 137 fails the child Job (backoffLimit 0); the JobSet's
    failurePolicy recreates it (restart 1, which its pods read as KDIST_RESTART_COUNT),
    and fails the JobSet once maxRestarts are spent."""
    path = job_file("infra", backend="jobset", nodes=1, args=["--max-steps", "3"],
                    distributed={"backend": "gloo", "maxRestarts": 1},
                    paced={"PACE": "0.2", "FAIL_RANK": "0", "FAIL_AT": "1", "FAIL_CODE": "137"})
    sub = kdist("submit", path, "--timeout", "200")
    assert sub.returncode == 1, sub.stdout + sub.stderr
    js = json.loads(kubectl("-n", namespace, "get", "jobset", "infra", "-o", "json").stdout)
    assert js["status"].get("restarts") == 1, js["status"]  # the first try + 1 restart
    reasons = {c["type"]: c.get("reason") for c in js["status"]["conditions"]}
    assert reasons.get("Failed") == "ReachedMaxRestarts", reasons
    assert "rank 0" in sub.stderr and "exited with code 137" in sub.stderr, sub.stderr
    status = json.loads(kdist("status", "infra", "-o", "json").stdout)
    assert status["phase"] == "Failed" and status["ranks"][0]["restarts"] >= 1, status
