"""`kdist check` against the fake API: each line's pass and fail, with its fix, and exit codes.

Every line must be able to fail here: a fixture makes the fake API refuse or lack
exactly the thing that line checks. Nothing `kdist check` sends may be stored.
"""

from __future__ import annotations

import json
import socket

import pytest

from tests.api.fakeapi import FakeApi
from tests.api.kubeconfigs import kubeconfig_text, self_signed, write_kubeconfig

pytestmark = pytest.mark.timeout(60)


def verdicts(out) -> dict[str, dict[str, str]]:
    """`kdist check -o json`'s list, by check name."""
    assert out.crash is None, out.describe()
    listed = json.loads(out.stdout)
    assert isinstance(listed, list) and listed, out.describe()
    return {v["check"]: v for v in listed}


def line(out, check: str) -> str:
    """The text line of `check` (and its fix line, when there is one)."""
    lines = out.stdout.splitlines()
    for i, text in enumerate(lines):
        if text.split()[1:2] == check.split()[:1] and check in text:
            fix = lines[i + 1] if i + 1 < len(lines) and "fix:" in lines[i + 1] else ""
            return f"{text}\n{fix}"
    raise AssertionError(f"no {check!r} line:\n{out.describe()}")


def serve(api: FakeApi, **options: bool) -> None:
    """Turn the running fake API's features on or off (a frozen dataclass: its options are
    read per request)."""
    for name, value in options.items():
        object.__setattr__(api, name, value)


def nothing_stored(api: FakeApi) -> None:
    for plural in ("pods", "jobs", "configmaps"):
        assert api.store.names(plural) == [], f"kdist check stored {plural}"


def test_a_ready_cluster_passes_every_required_check(api, kdist):
    out = kdist("check")
    assert out.code == 0, out.describe()
    for check in ("kubeconfig", "connection", "credentials", "namespace", "access jobs.batch",
                  "access services", "access configmaps", "access pods", "access pods/log",
                  "access pytorchjobs.kubeflow.org", "pytorchjob", "restart rules"):
        assert line(out, check).startswith("ok "), line(out, check)
    assert "v1.37.2-fake" in line(out, "connection")
    assert "as fake-user" in line(out, "credentials")
    assert "ready" in out.stdout
    nothing_stored(api)


def test_json_lists_every_check_with_its_status(api, kdist):
    out = kdist("check", "-o", "json")
    assert out.code == 0, out.describe()
    got = verdicts(out)
    assert set(got["kubeconfig"]) == {"check", "status", "detail", "fix"}
    assert got["namespace"]["status"] == "ok"
    # Optional and absent: said, never a failure.
    assert got["jobset"]["status"] == "not served"
    assert got["kueue"]["status"] == "not served"
    assert "access workloads.kueue.x-k8s.io" not in got  # not asked where Kueue is absent


def test_a_refused_connection_is_named_with_its_fix_and_the_rest_skipped(kdist, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kc = tmp_path / "refused"
    kc.write_text(kubeconfig_text(f"http://127.0.0.1:{port}"))
    out = kdist("check", kubeconfig=kc)
    assert out.code == 1, out.describe()
    text = line(out, "connection")
    assert text.startswith("FAIL") and "refused" in text.lower(), text
    assert "fix: nothing listens there" in text, text
    assert "request-timeout" not in text, text
    assert out.seconds < 10, out.describe()
    got = verdicts(kdist("check", "-o", "json", kubeconfig=kc))
    assert got["namespace"]["status"] == got["restart rules"]["status"] == "skipped"


def test_an_unverifiable_certificate_is_a_tls_failure(kdist, tmp_path):
    pair = self_signed(tmp_path)
    if pair is None:
        pytest.skip("no openssl to make a certificate")
    server = FakeApi(tls=pair).start()
    try:
        kc = write_kubeconfig(tmp_path / "kc", server.url)  # no CA: the cert cannot verify
        out = kdist("check", kubeconfig=kc)
    finally:
        server.stop()
    assert out.code == 1, out.describe()
    assert "certificate does not verify" in line(out, "connection"), out.describe()


def test_a_missing_kubeconfig_is_the_kubeconfig_line(kdist, tmp_path):
    out = kdist("check", "--kubeconfig", str(tmp_path / "nope"))
    assert out.code == 1, out.describe()
    assert line(out, "kubeconfig").startswith("FAIL"), out.describe()
    assert "kubeconfig not found" in line(out, "kubeconfig")
    assert out.requests == [], out.describe()


def test_refused_credentials_fail_the_credentials_line(api, kdist, tmp_path):
    kc = tmp_path / "badtoken"
    kc.write_text(kubeconfig_text(api.url, token="wrong"))
    out = kdist("check", kubeconfig=kc)
    assert out.code == 1, out.describe()
    text = line(out, "credentials")
    assert text.startswith("FAIL") and "refused the kubeconfig's credentials" in text, text
    assert "fix: log in again" in text


def test_a_namespace_that_does_not_exist_is_named(api, kdist):
    out = kdist("check", "-n", "ghost")
    assert out.code == 1, out.describe()
    text = line(out, "namespace")
    assert text.startswith("FAIL") and "namespace ghost not found" in text, text
    assert "kubectl create namespace ghost" in text


@pytest.mark.parametrize("exists", [True, False])
def test_without_get_on_namespaces_a_dry_run_create_tells(api, kdist, exists):
    """A namespaced Role gives no get on the namespace itself: a dry-run ConfigMap
    create in it answers 404 when it is not there."""
    ns = "team-a" if exists else "ghost"
    if exists:
        api.store.namespaces.add(ns)
    api.fail(403, method="GET", path=f"/api/v1/namespaces/{ns}$")
    got = verdicts(kdist("check", "-o", "json", "-n", ns))
    assert got["namespace"]["status"] == ("ok" if exists else "fail"), got["namespace"]
    nothing_stored(api)


def test_unreadable_pods_fail_the_namespace_line(api, kdist):
    api.fail(403, method="GET", path="/namespaces/default/pods$")
    got = verdicts(kdist("check", "-o", "json"))
    assert got["namespace"]["status"] == "fail"
    assert "kdist-submitter" in got["namespace"]["fix"]


def test_a_verb_kdist_needs_and_may_not_use_is_a_failure_with_the_role_as_fix(api, kdist):
    api.denied.update({"delete jobs", "get pods/log"})
    out = kdist("check")
    assert out.code == 1, out.describe()
    jobs = line(out, "access jobs.batch")
    assert jobs.startswith("FAIL") and "may not delete jobs.batch" in jobs, jobs
    assert "--role kdist-submitter" in jobs
    assert line(out, "access pods/log").startswith("FAIL")
    assert line(out, "access services").startswith("ok")
    asked = [r.body["spec"]["resourceAttributes"] for r in out.requests
             if r.path.endswith("/selfsubjectaccessreviews")]
    assert {"namespace": "default", "verb": "get", "group": "", "resource": "pods",
            "subresource": "log"} in asked


def test_no_training_operator_is_not_served_and_not_reviewed(api, kdist):
    serve(api, kubeflow=False)
    out = kdist("check", "-o", "json")
    assert out.code == 0, out.describe()
    got = verdicts(out)
    assert got["pytorchjob"]["status"] == "not served"
    assert "Kubeflow training operator" in got["pytorchjob"]["detail"]
    assert "access pytorchjobs.kubeflow.org" not in got


def test_kueue_and_jobset_when_served(api, kdist):
    serve(api, kueue=True, jobset=True)
    api.add({"kind": "LocalQueue", "metadata": {"name": "team-q"}})
    got = verdicts(kdist("check", "-o", "json"))
    assert got["kueue"]["status"] == "ok" and "team-q" in got["kueue"]["detail"]
    assert got["jobset"]["status"] == "ok"
    assert got["access workloads.kueue.x-k8s.io"]["status"] == "ok"


def test_restart_rules_dropped_by_the_server_are_not_served(api, kdist):
    serve(api, restart_rules=False)
    out = kdist("check", "-o", "json")
    assert out.code == 0, out.describe()
    assert verdicts(out)["restart rules"]["status"] == "not served"
    pods = [r for r in out.requests if r.method == "POST" and r.path.endswith("/pods")]
    assert pods and all(r.query.get("dryRun") == "All" for r in pods), out.describe()
    nothing_stored(api)


def test_restart_rules_are_asked_with_a_job_where_pods_may_not_be_created(api, kdist):
    api.fail(403, method="POST", path="/namespaces/default/pods$")
    out = kdist("check", "-o", "json")
    got = verdicts(out)["restart rules"]
    assert got["status"] == "ok" and "of a job" in got["detail"], got
    assert any(r.method == "POST" and r.path.endswith("/jobs") and r.query.get("dryRun") == "All"
               for r in out.requests), out.describe()
    nothing_stored(api)
