"""Least privilege: kdist works as the ServiceAccount of manifests/rbac.yaml and
nothing more, and a missing permission is reported as the verb, resource and
namespace that were refused."""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes import utils

from kdist import backends
from kdist.rendering import addons

from .conftest import Kube
from .conftest_cli import job_file_fixture, kdist_fixture, kubectl, leftovers  # noqa: F401


def kubeconfig_for(sa: str, namespace: str, path) -> str:
    """A kubeconfig that authenticates with a fresh token of ServiceAccount `sa`."""
    token = kubectl("-n", namespace, "create", "token", sa, "--duration=1h").stdout.strip()
    server = kubectl("config", "view", "--minify", "-o",
                     "jsonpath={.clusters[0].cluster.server}").stdout
    ca = kubectl("config", "view", "--minify", "--raw", "-o",
                 "jsonpath={.clusters[0].cluster.certificate-authority-data}").stdout
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": sa,
        "clusters": [{"name": "c", "cluster": {"server": server,
                                               "certificate-authority-data": ca}}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": sa, "context": {"cluster": "c", "user": sa,
                                              "namespace": namespace}}],
    }))
    return str(path)


def install_rbac(kube: Kube, namespace: str, drop: tuple[str, str] | None = None) -> None:
    objects = copy.deepcopy(addons.rbac(namespace))
    if drop is not None:
        resource, verb = drop
        for rule in objects[1]["rules"]:
            if resource in rule["resources"]:
                rule["verbs"].remove(verb)
    for obj in objects:
        utils.create_from_dict(kube.api, obj, namespace=namespace)


@pytest.mark.parametrize("backend", backends.NAMES)
def test_every_verb_works_as_the_least_privilege_account(
    backend, kube, namespace, kdist, job_file, tmp_path
):
    install_rbac(kube, namespace)
    cfg = kubeconfig_for(addons.SERVICE_ACCOUNT, namespace, tmp_path / "sa.kubeconfig")
    path = job_file("least", backend=backend, paced={"PACE": "0.2"},
                    args=["--max-steps", "5"])
    submit = kdist("--kubeconfig", cfg, "submit", path, "--timeout", "200")
    assert submit.returncode == 0, submit.stderr
    for verb in (["status", "least"], ["logs", "least"], ["list"],
                 ["status", "least", "-o", "json"]):
        res = kdist("--kubeconfig", cfg, *verb)
        assert res.returncode == 0, (verb, res.stderr)
    assert "[rank 1]" in kdist("--kubeconfig", cfg, "logs", "least").stdout
    deleted = kdist("--kubeconfig", cfg, "delete", "least")
    assert deleted.returncode == 0, deleted.stderr
    assert leftovers(namespace, "least") == []


def test_missing_permission_names_verb_resource_namespace(
    kube, namespace, kdist, job_file, tmp_path
):
    install_rbac(kube, namespace, drop=("pytorchjobs", "create"))
    cfg = kubeconfig_for(addons.SERVICE_ACCOUNT, namespace, tmp_path / "sa.kubeconfig")
    path = job_file("denied", backend="pytorchjob", paced={}, args=["--max-steps", "1"])
    res = kdist("--kubeconfig", cfg, "submit", path, "--no-wait")
    assert res.returncode == 3
    assert f"error: forbidden: create pytorchjobs in namespace {namespace}" in res.stderr
    assert leftovers(namespace, "denied") == []


def test_training_pods_get_no_api_token(kube, namespace, kdist, job_file):
    path = job_file("notoken", resources={"gpus": 64, "cpu": "100m", "memory": "256Mi"})
    assert kdist("submit", path, "--no-wait").returncode == 0
    pods = kube.core.list_namespaced_pod(namespace, label_selector="kdist.dev/job-name=notoken")
    assert pods.items
    for pod in pods.items:
        assert pod.spec.automount_service_account_token is False
        mounts = [m.mount_path for c in pod.spec.containers for m in c.volume_mounts or []]
        assert not any("serviceaccount" in m for m in mounts)
