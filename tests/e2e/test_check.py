"""`kdist check` on the real test cluster: it passes, -o json parses, and what is missing
is named (a namespace that does not exist, a verb kdist's Role lacks)."""

from __future__ import annotations

import json

from kdist.rendering import addons

from .conftest_cli import kdist_fixture  # noqa: F401
from .test_rbac import install_rbac, kubeconfig_for

REQUIRED = ("kubeconfig", "connection", "credentials", "namespace", "access jobs.batch",
            "access services", "access configmaps", "access pods", "access pods/log")


def _verdicts(stdout: str) -> dict[str, dict[str, str]]:
    listed = json.loads(stdout)
    assert isinstance(listed, list) and listed
    return {v["check"]: v for v in listed}


def test_check_passes_against_the_test_cluster(kdist, namespace):
    res = kdist("check")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"namespace {namespace} exists" in res.stdout, res.stdout
    assert "ready: every required check passed" in res.stdout


def test_check_json_parses_and_names_what_the_cluster_serves(kdist):
    res = kdist("check", "-o", "json")
    assert res.returncode == 0, res.stdout + res.stderr
    got = _verdicts(res.stdout)
    for check in REQUIRED:
        assert got[check]["status"] == "ok", got[check]
    # The test clusters run the training operator (and the single node the JobSet
    # controller) and turn ContainerRestartRules on (tests/cluster/versions.env).
    assert got["pytorchjob"]["status"] == "ok", got["pytorchjob"]
    assert got["jobset"]["status"] in ("ok", "not served"), got["jobset"]
    if got["jobset"]["status"] == "ok":  # its access review too, as for every served kind
        assert got["access jobsets.jobset.x-k8s.io"]["status"] == "ok", got
    assert got["trainjob"]["status"] in ("ok", "not served"), got["trainjob"]
    if got["trainjob"]["status"] == "ok":  # served: what Trainer cannot do is said
        assert "never in place" in got["trainjob"]["detail"], got["trainjob"]
        assert got["access trainjobs.trainer.kubeflow.org"]["status"] == "ok", got
    assert got["restart rules"]["status"] == "ok", got["restart rules"]
    assert got["kueue"]["status"] in ("ok", "not served")
    assert not any(v["status"] == "fail" for v in got.values()), got


def test_a_namespace_that_does_not_exist_is_named(kdist):
    res = kdist("check", "-n", "kdist-check-no-such-namespace")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "namespace kdist-check-no-such-namespace not found" in res.stdout, res.stdout
    assert "kubectl create namespace kdist-check-no-such-namespace" in res.stdout


def test_the_least_privilege_account_passes_and_a_missing_verb_fails(kube, namespace, kdist,
                                                                     tmp_path):
    install_rbac(kube, namespace, drop=("configmaps", "delete"))
    cfg = kubeconfig_for(addons.SERVICE_ACCOUNT, namespace, tmp_path / "sa.kubeconfig")
    res = kdist("--kubeconfig", cfg, "check", "-o", "json")
    assert res.returncode == 1, res.stdout + res.stderr
    got = _verdicts(res.stdout)
    assert got["access configmaps"]["status"] == "fail"
    assert "may not delete configmaps" in got["access configmaps"]["detail"]
    assert got["access jobs.batch"]["status"] == "ok"
    # No get on namespaces, no create on pods: the namespace and restart rules are still told.
    assert got["namespace"]["status"] == "ok", got["namespace"]
    assert got["restart rules"]["status"] == "ok", got["restart rules"]
    assert f"system:serviceaccount:{namespace}:{addons.SERVICE_ACCOUNT}" in \
        got["credentials"]["detail"]
