"""Restarts in place on the real cluster (distributed.restartMode): what `auto` picks, the
restart bound kept by the launchers, and the failure it ends with.

The faults themselves (a SIGKILLed worker, a deleted or evicted pod, in place and
recreated) are tests/e2e/test_restarts.py's; a hung rank is test_byo_script.py's (auto,
so in place here).
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from .conftest import REQUEST_TIMEOUT
from .conftest_cli import job_file_fixture, kdist_fixture, kubectl  # noqa: F401


def test_auto_restarts_in_place_where_the_cluster_serves_it(kube, namespace, kdist, job_file):
    """The test clusters serve container restart rules: the in-place form kdist sends is
    kept, and the job restarts in place (no version string was read)."""
    path = job_file("auto", nodes=1, args=["--max-steps", "2"],
                    distributed={"backend": "gloo", "maxRestarts": 1})
    sub = kdist("submit", path, "--timeout", "200")
    assert sub.returncode == 0, sub.stdout + sub.stderr
    assert "restarts: in place" in sub.stdout, sub.stdout
    job = client.BatchV1Api(kube.api).read_namespaced_job("auto", namespace,
                                                         _request_timeout=REQUEST_TIMEOUT)
    (c,) = job.spec.template.spec.containers
    assert c.restart_policy == "Never"
    assert [r.action for r in c.restart_policy_rules] == ["RestartAllContainers"]
    status = json.loads(kdist("status", "auto", "-o", "json").stdout)
    assert status["restartMode"] == "inPlace", status
    # render, without a cluster, gives the form every cluster accepts
    rendered = kdist("render", path)
    assert rendered.returncode == 0 and "kind: Job" in rendered.stdout, rendered.stderr
    assert "restartPolicyRules" not in rendered.stdout


@pytest.mark.parametrize("workers", [True, False], ids=["in-process", "containers"])
def test_past_max_restarts_the_job_fails_naming_the_failure(
        workers, kube, namespace, kdist, job_file):
    """Exit 137 every attempt, maxRestarts 1: one restart in place (the launcher restarts
    its workers in process; with restartWorkers false the kubelet restarts the
    container), then the launcher ends the job with exit 205 naming the kill; the Job
    controller never made a second pod."""
    name = "spent" if workers else "spent-c"
    # One pod: this script has no collective, so a second pod's rank would not notice its
    # peer fail, and would finish or be stopped as the timing falls (two nodes are drilled
    # with real collectives in test_restarts.py and tests/dist/test_worker_restarts.py).
    nodes, failing = 1, "0"
    path = job_file(name, nodes=nodes, args=["--max-steps", "4"],
                    distributed={"backend": "gloo", "maxRestarts": 1,
                                 "restartWorkers": workers},
                    paced={"PACE": "0.3", "FAIL_RANK": failing, "FAIL_AT": "2",
                           "FAIL_CODE": "137"})
    sub = kdist("submit", path, "--timeout", "200")
    out = sub.stdout + sub.stderr
    assert sub.returncode == 1, out
    assert "restarts: in place" in sub.stdout, out
    # The failure named is the kill, through the launcher's last line, not a counter.
    assert "exited with code 205" in sub.stderr, out
    assert "no restart left (1 of maxRestarts=1 used)" in sub.stderr, out
    assert "exit 137: killed by SIGKILL" in sub.stderr, out
    pods = json.loads(kubectl("-n", namespace, "get", "pods", "-l", f"kdist.dev/job-name={name}",
                              "-o", "json").stdout)["items"]
    assert len(pods) == nodes, [p["metadata"]["name"] for p in pods]  # none recreated
    for pod in pods:
        (cs,) = pod["status"]["containerStatuses"]
        # in process: no container restarted; else once in place, then the job failed
        assert cs["restartCount"] == (0 if workers else 1), cs
        assert cs["state"]["terminated"]["exitCode"] == 205, cs
    job = json.loads(kubectl("-n", namespace, "get", "job", name, "-o", "json").stdout)
    reasons = {c["type"]: c.get("reason") for c in job["status"]["conditions"]}
    assert "PodFailurePolicy" in reasons.values(), reasons  # FailureTarget, then Failed
    status = json.loads(kdist("status", name, "-o", "json").stdout)
    assert status["phase"] == "Failed" and status["restartMode"] == "inPlace", status
    # A restart in place keeps no exit code (the kubelet's lastState says 137 for every
    # container it restarted): the watch saw the 137 as it happened; status has the 205s.
    codes = sorted(f["exit_code"] for f in status["failures"])
    assert codes == [205] * nodes, status["failures"]
    assert "exit 137: killed by SIGKILL" in status["firstFailure"]["said"], status
    assert all(r["restarts"] == 1 for r in status["ranks"]), status["ranks"]
    ledger = status["ledger"]
    assert ledger is not None and ledger["restartsUsed"] == 1, ledger
    if workers:  # the launchers' lines name the kill; a container restarted in place may
        # leave the watch only its peer's exit (the kubelet's record of it is no exit)
        assert ledger["restarts"][0]["exitCode"] == 137, ledger
