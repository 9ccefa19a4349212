"""The cluster verbs on a real cluster: submit, status, logs, list, delete, both backends.

No mocks: every test runs `python -m kdist` against $KUBECONFIG in a fresh
namespace (conftest.py). Jobs are tiny (a few steps) — the test machine has
two cores.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from kdist import backends

from .conftest_cli import (  # noqa: F401 - the fixtures register by being imported
    job_file_fixture,
    kdist_fixture,
    kdist_popen_fixture,
    kubectl,
    leftovers,
)

BACKENDS = list(backends.NAMES)
pytestmark = pytest.mark.timeout(420)


def _wait_for_line(proc: subprocess.Popen[str], needle: str, timeout: float = 180) -> list[str]:
    """Read `proc`'s stdout until a line contains `needle`; return the lines read."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return lines
    raise AssertionError(f"no {needle!r} in kdist's output: {''.join(lines)}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_submit_status_logs_list_delete(backend, namespace, kdist, job_file):
    path = job_file("ok", backend=backend)
    started = time.monotonic()
    sub = kdist("submit", path, "--timeout", "200")
    took = time.monotonic() - started
    assert sub.returncode == 0, sub.stderr
    assert f"{backends.get(backend).kind.ref}/ok created in namespace {namespace}" in sub.stdout
    # A PyTorchJob succeeds when its master does; the operator (cleanPodPolicy: Running)
    # then deletes a worker still running, so rank 1's last lines may never be seen.
    to_the_end = (0,) if backend == "pytorchjob" else (0, 1)
    for rank in (0, 1):  # per-rank progress lines, up to the last step
        last = "step 6/6 loss" if rank in to_the_end else " step "
        assert any(f"rank {rank} pod ok-" in line and last in line
                   for line in sub.stdout.splitlines()), sub.stdout
    assert "job ok succeeded in" in sub.stdout.splitlines()[-1]
    print(f"submit --wait of a 2-pod {backend} job took {took:.1f}s")

    status = kdist("status", "ok", "-o", "json")
    assert status.returncode == 0
    state = json.loads(status.stdout)
    assert (state["phase"], state["backend"], state["nodes"], state["maxSteps"]) == (
        "Succeeded", backend, 2, 6)
    ranks = state["ranks"]
    assert (ranks[0]["phase"], ranks[0]["step"], ranks[0]["exit_code"]) == ("Succeeded", 6, 0)
    assert len(ranks[0]["losses"]) == 3
    if backend != "pytorchjob":
        assert (ranks[1]["phase"], ranks[1]["step"], ranks[1]["exit_code"]) == ("Succeeded", 6, 0)
    else:
        assert ranks[1]["phase"] in ("Succeeded", "Gone")
    table = kdist("status", "ok")
    assert table.returncode == 0 and "Succeeded" in table.stdout and "LOSS HISTORY" in table.stdout

    logs = kdist("logs", "ok")
    assert logs.returncode == 0
    for rank in to_the_end:
        assert f'[rank {rank}] {{"event": "done"' in logs.stdout
    one = kdist("logs", "ok", "--rank", "0", "--tail", "1")
    assert one.stdout.splitlines() == [line for line in logs.stdout.splitlines()
                                       if line.startswith("[rank 0]")][-1:]
    assert kdist("logs", "ok", "--rank", "2").returncode == 2

    listed = kdist("list")
    row = next(line.split() for line in listed.stdout.splitlines() if line.startswith("ok "))
    assert row[:4] == ["ok", backend, "2", "Succeeded"]

    gone = kdist("delete", "ok")
    assert gone.returncode == 0 and "every object is gone" in gone.stdout
    assert leftovers(namespace, "ok") == []
    assert kdist("status", "ok").returncode == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_failing_job_names_rank_and_exit_code(backend, namespace, kdist, job_file):
    path = job_file("bad", backend=backend, args=["--max-steps", "6"],
                    paced={"PACE": "0.3", "FAIL_RANK": "1", "FAIL_AT": "3", "FAIL_CODE": "3"})
    sub = kdist("submit", path, "--follow", "--timeout", "200")
    assert sub.returncode == 1, sub.stdout + sub.stderr
    error = [line for line in sub.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1, sub.stderr
    assert "job bad failed: rank 1 (pod bad-" in error[0]
    assert "exited with code 3" in error[0]
    assert "[rank 1] rank 1: failing on purpose" in sub.stdout  # --follow streams the logs
    status = json.loads(kdist("status", "bad", "-o", "json").stdout)
    assert status["phase"] == "Failed"
    if backend != "pytorchjob":  # the training operator deletes a PyTorchJob's failed pod
        # node 0 may add a 203 from its exit barrier: the code error is still the one named
        assert (1, 3) in [(f["rank"], f["exit_code"]) for f in status["failures"]]
        first = status["firstFailure"]
        assert (first["rank"], first["exit_code"]) == (1, 3), status["failures"]


def test_unschedulable_job_warns_once_and_times_out(namespace, kdist, job_file):
    path = job_file("gpu", resources={"gpus": 64, "cpu": "250m", "memory": "512Mi"})
    sub = kdist("submit", path, "--timeout", "15")
    assert sub.returncode == 1
    warnings = [line for line in sub.stderr.splitlines() if "FailedScheduling" in line]
    assert len(warnings) == 1, sub.stderr
    assert "Insufficient nvidia.com/gpu" in warnings[0]
    assert "timed out after 15s: job gpu has not finished (rank 0 Pending (Unschedulable)" \
        in sub.stderr
    assert f"kdist -n {namespace} delete gpu" in sub.stderr
    assert kdist("delete", "gpu").returncode == 0
    assert leftovers(namespace, "gpu") == []


@pytest.mark.parametrize("backend,how", [("indexed-job", signal.SIGINT),
                                          ("pytorchjob", signal.SIGKILL)])
def test_reattach_after_kdist_is_stopped(backend, how, namespace, kdist, kdist_popen, job_file):
    path = job_file("long", backend=backend, args=["--max-steps", "30"], paced={"PACE": "0.5"})
    proc = kdist_popen("submit", path)
    _wait_for_line(proc, "step ")  # it is training
    proc.send_signal(how)
    rc = proc.wait(30)
    if how == signal.SIGINT:  # Ctrl-C: the job keeps running, and kdist says how to reattach
        assert rc == 130
        err = proc.stderr.read()
        assert f"`kdist -n {namespace} logs -f long`" in err
        assert f"`kdist -n {namespace} status long`" in err
    running = json.loads(kdist("status", "long", "-o", "json").stdout)
    assert running["phase"] == "Running"
    assert all(r["phase"] == "Running" and 0 < r["step"] < 30 for r in running["ranks"])

    follow = kdist("logs", "-f", "long")
    assert follow.returncode == 0, follow.stderr
    for rank in (0, 1):
        steps = [json.loads(line.split("] ", 1)[1])["step"] for line in follow.stdout.splitlines()
                 if line.startswith(f"[rank {rank}] {{")]
        if rank == 0 or backend == "indexed-job":
            assert steps == list(range(1, 31)) + [30], steps  # every line once, in order, done
        else:  # a PyTorchJob's worker may be deleted as soon as the master has succeeded
            assert steps[:30] == list(range(1, min(len(steps), 30) + 1)), steps
    done = json.loads(kdist("status", "long", "-o", "json").stdout)
    assert done["phase"] == "Succeeded"


@pytest.mark.parametrize("backend", BACKENDS)
def test_status_and_logs_of_a_job_made_by_kubectl_apply(backend, namespace, kdist, job_file):
    path = job_file("applied", backend=backend, args=["--max-steps", "4"],
                    paced={"PACE": "0.3"})
    rendered = kdist("render", path)
    assert rendered.returncode == 0
    kubectl("apply", "-f", "-", stdin=rendered.stdout)
    follow = kdist("logs", "-f", "applied", "--rank", "0")
    assert follow.returncode == 0, follow.stderr
    assert all(line.startswith("[rank 0] ") for line in follow.stdout.splitlines())
    assert '[rank 0] {"event": "done"' in follow.stdout
    state = json.loads(kdist("status", "applied", "-o", "json").stdout)
    assert state["phase"] == "Succeeded"
    assert state["ranks"][0]["step"] == 4  # rank 1 of a PyTorchJob may be gone (see above)
    if backend == "indexed-job":
        assert state["ranks"][1]["step"] == 4
    assert kdist("delete", "applied").returncode == 0  # the Service has no owner here
    assert leftovers(namespace, "applied") == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_dry_runs(backend, namespace, kdist, job_file):
    path = job_file("dry", backend=backend)
    client = kdist("submit", path, "--dry-run=client")
    assert client.returncode == 0
    assert client.stdout == kdist("render", path).stdout
    assert f"namespace: {namespace}" in client.stdout
    server = kdist("submit", path, "--dry-run=server")
    assert server.returncode == 0, server.stderr
    assert "(server dry run: accepted, nothing persisted)" in server.stdout
    assert leftovers(namespace, "dry") == []


def test_conflict_replace_and_forbidden(namespace, kdist, job_file, tmp_path):
    # gpus: 64 keeps the pods Pending (the test node has 4 fake GPUs): nothing runs.
    path = job_file("twice", resources={"gpus": 64, "cpu": "100m", "memory": "256Mi"})
    assert kdist("submit", path, "--no-wait").returncode == 0
    again = kdist("submit", path, "--no-wait")
    assert again.returncode == 3
    assert (f"error: job twice already exists in namespace {namespace}: use --replace or "
            "`kdist delete twice`") in again.stderr
    assert leftovers(namespace, "twice")  # the failed second submission undid nothing of the first
    replaced = kdist("submit", path, "--no-wait", "--replace")
    assert replaced.returncode == 0 and "replaced: deleted job.batch/twice" in replaced.stdout
    svc = json.loads(kubectl("-n", namespace, "get", "service", "twice", "-o", "json").stdout)
    job = json.loads(kubectl("-n", namespace, "get", "job", "twice", "-o", "json").stdout)
    assert [(o["kind"], o["uid"]) for o in svc["metadata"]["ownerReferences"]] == [
        ("Job", job["metadata"]["uid"])]
    kubectl("-n", namespace, "delete", "job", "twice", "--cascade=foreground", "--wait=true")
    kubectl("-n", namespace, "wait", "--for=delete", "service/twice", "--timeout=60s")
    assert leftovers(namespace, "twice") == []  # the owned Service went with the Job

    # A user that may not create jobs: the error names the verb, resource and namespace.
    kubectl("-n", namespace, "create", "serviceaccount", "nobody")
    token = kubectl("-n", namespace, "create", "token", "nobody").stdout.strip()
    server = kubectl("config", "view", "--minify", "-o",
                     "jsonpath={.clusters[0].cluster.server}").stdout
    ca = kubectl("config", "view", "--minify", "--raw", "-o",
                 "jsonpath={.clusters[0].cluster.certificate-authority-data}").stdout
    kubeconfig = tmp_path / "nobody.kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "nobody",
        "clusters": [{"name": "c", "cluster": {"server": server,
                                               "certificate-authority-data": ca}}],
        "users": [{"name": "nobody", "user": {"token": token}}],
        "contexts": [{"name": "nobody", "context": {"cluster": "c", "user": "nobody",
                                                    "namespace": namespace}}]}))
    denied = kdist("--kubeconfig", str(kubeconfig), "submit", path, "--no-wait")
    assert denied.returncode == 3
    assert f"error: forbidden: create jobs in namespace {namespace}" in denied.stderr
    bad = kdist("--kubeconfig", str(tmp_path / "missing"), "list")
    assert bad.returncode == 2 and "missing: kubeconfig not found" in bad.stderr
