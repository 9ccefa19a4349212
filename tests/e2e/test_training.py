"""kdist's rendered jobs really train on the cluster: DDP and the pipeline on
every backend, applied by the kubernetes client or by `kubectl apply` of
manifests/, all in namespaces that enforce Pod Security "restricted"."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, utils

from kdist import backends
from kdist.kube.watch import objects
from kdist.rendering import render
from kdist.shared import labels as L
from kdist.spec import validate_job

from .conftest import Kube, kdist_container
from .conftest_cli import IMAGE, job_file_fixture, job_spec, kdist_fixture  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
FINISH = 300  # seconds a tiny 2-rank job may take on 2 shared cores
# A small model that visibly learns in 20 steps on a shared 2-core node.
DDP_ARGS = ["--max-steps", "20", "--batch-size", "32", "--log-every", "4", "--dataset-size", "4096",
            "--lr", "0.3", "--classes", "4", "--hidden", "128", "--layers", "2"]


def create(kube: Kube, namespace: str, objects: list[dict[str, Any]]) -> None:
    """Create rendered objects with the plain kubernetes client (no kdist submit), in the
    order `kubectl apply` of `kdist render`'s output makes them (a TrainJob's runtime first)."""
    custom = {k.kind: k for b in backends.BACKENDS if b.installs
              for k in (b.kind, *b.created_first)}
    for obj in (objects[i] for i in backends.creation_order(objects)):
        k = custom.get(obj["kind"])
        if k is not None:  # an operator's custom resource
            client.CustomObjectsApi(kube.api).create_namespaced_custom_object(
                k.group, k.api_version.split("/")[1], namespace, k.plural, obj)
        else:
            utils.create_from_dict(kube.api, obj, namespace=namespace)


def job_finished(obj: Any) -> bool:
    conds = obj.status.conditions or [] if not isinstance(obj, dict) else (
        (obj.get("status") or {}).get("conditions") or [])
    types = {(c.type, c.status) if not isinstance(c, dict) else (c["type"], c["status"])
             for c in conds}
    return bool(types & {("Complete", "True"), ("Failed", "True"),
                         ("Succeeded", "True"), ("Completed", "True")})


def wait_job(kube: Kube, namespace: str, name: str, backend: str) -> str:
    """Wait for the job's terminal condition; return 'succeeded' or 'failed'."""
    b = backends.get(backend)
    if b.installs:  # an operator's custom resource
        obj = kube.wait_for(
            client.CustomObjectsApi(kube.api).list_namespaced_custom_object,
            b.kind.group, b.kind.api_version.split("/")[1], namespace, b.kind.plural,
            name=name, done=job_finished, timeout=FINISH,
        )
        done = objects.terminal_condition(obj)
        return "succeeded" if done and done[0] == objects.SUCCEEDED else "failed"
    obj = kube.wait_for(
        client.BatchV1Api(kube.api).list_namespaced_job, namespace,
        name=name, done=job_finished, timeout=FINISH,
    )
    conds = {c.type: c.status for c in obj.status.conditions}
    return "succeeded" if conds.get("Complete") == "True" else "failed"


def rank_records(kube: Kube, namespace: str, name: str) -> dict[int, list[dict[str, Any]]]:
    """The JSON log lines of every pod of the job, grouped by the rank they report."""
    pods = kube.core.list_namespaced_pod(
        namespace, label_selector=L.selector_string(name)).items
    records: dict[int, list[dict[str, Any]]] = {}
    for pod in pods:
        log = kube.pod_log(namespace, pod.metadata.name, kdist_container(namespace, pod))
        for line in log.splitlines():
            start = line.find("{")
            if start < 0:
                continue
            try:
                rec = json.loads(line[start:])
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and "event" in rec:
                records.setdefault(rec["rank"], []).append(rec)
    return records


def assert_trained(records: dict[int, list[dict[str, Any]]], world: int) -> None:
    assert sorted(records) == list(range(world)), f"ranks that logged: {sorted(records)}"
    for rank, recs in records.items():
        steps = [r for r in recs if r["event"] == "step"]
        assert steps, f"rank {rank} logged no step"
        assert {r["world_size"] for r in recs} == {world}
        assert recs[-1]["event"] == "done", f"rank {rank} did not finish"
    losses = [r["loss"] for r in records[0] if r["event"] == "step"]
    assert losses[-1] < losses[0], f"loss did not fall: {losses}"


@pytest.mark.parametrize("backend", backends.NAMES)
def test_ddp_two_pods_trains(kube: Kube, namespace: str, backend: str):
    name = f"ddp-{backend.split('-')[0]}"
    job = validate_job(job_spec(name, backend=backend, args=DDP_ARGS))
    create(kube, namespace, render(job))
    assert wait_job(kube, namespace, name, backend) == "succeeded"
    assert_trained(rank_records(kube, namespace, name), world=2)


def test_pipeline_two_stages_across_pods(kube: Kube, namespace: str):
    args = ["--max-steps", "12", "--log-every", "4", "--microbatches", "4",
            "--schedule", "1f1b"]
    job = validate_job(job_spec("pipe", args=args,
                                workload={"module": "kdist.workloads.pipeline", "args": args}))
    create(kube, namespace, render(job))
    assert wait_job(kube, namespace, "pipe", "indexed-job") == "succeeded"
    records = rank_records(kube, namespace, "pipe")
    assert sorted(records) == [0, 1]
    assert all(recs[-1]["event"] == "done" for recs in records.values())


@pytest.mark.exclusive  # the examples ask 1 CPU per pod: the whole node for their two pods
@pytest.mark.parametrize(("manifest", "backend"),
                         [("ddp-cpu.yaml", "indexed-job"), ("pytorchjob.yaml", "pytorchjob"),
                          ("jobset.yaml", "jobset"), ("trainjob.yaml", "trainjob")])
def test_kubectl_apply_of_committed_manifests(kube: Kube, namespace: str, manifest, backend):
    path = REPO / "manifests" / manifest
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    name = next(d for d in docs if backends.of_kind(d["kind"]))["metadata"]["name"]
    assert {d["spec"].get("template", d["spec"]).get("spec", {}).get("containers", [{}])[0]
            .get("image", IMAGE) for d in docs if d["kind"] == "Job"} <= {IMAGE}
    subprocess.run(["kubectl", "-n", namespace, "apply", "-f", str(path)],
                   check=True, capture_output=True, timeout=60)
    assert wait_job(kube, namespace, name, backend) == "succeeded"
    assert sorted(rank_records(kube, namespace, name)) == [0, 1]


def test_restricted_namespace_admits_every_kdist_pod(kube: Kube, namespace: str):
    """PodSecurity enforces on pods: dry-run each rendered pod template as a Pod.

    Pods kdist reports as needing only "restricted" are admitted; the ones it
    reports as needing more (hostNetwork, IPC_LOCK: the RDMA example) are
    refused, so `kdist validate`'s Pod Security report agrees with admission.
    """
    from kdist.rendering.security import RESTRICTED, assess

    specs = sorted((REPO / "examples").glob("*.yaml")) + sorted(
        (REPO / "tests" / "unit" / "cases").glob("*.yaml"))
    checked = refused = 0
    for path in specs:
        doc = yaml.safe_load(path.read_text())
        doc["spec"].pop("workdir", None)  # the code volume is covered by test_workdir.py
        for backend in ("indexed-job", "pytorchjob"):
            doc["spec"]["backend"] = backend
            objects = render(validate_job(doc))
            restricted = assess(objects).level == RESTRICTED
            for obj in objects:
                templates = ([obj["spec"]["template"]] if obj["kind"] == "Job" else
                             [r["template"] for r in obj["spec"].get("pytorchReplicaSpecs",
                                                                    {}).values()])
                for template in templates:
                    # PriorityClasses and RuntimeClasses are cluster-specific, not what this
                    # test is about.
                    template["spec"].pop("priorityClassName", None)
                    template["spec"].pop("runtimeClassName", None)
                    account = template["spec"].get("serviceAccountName")
                    if account:
                        _ensure_service_account(kube, namespace, account)
                    pod = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": f"probe-{checked}"}, "spec": template["spec"]}
                    checked += 1
                    if restricted:
                        kube.core.create_namespaced_pod(namespace, pod, dry_run="All")
                        continue
                    with pytest.raises(client.ApiException) as e:
                        kube.core.create_namespaced_pod(namespace, pod, dry_run="All")
                    assert e.value.status == 403 and "restricted" in e.value.body, path
                    refused += 1
    assert checked >= 12 and refused >= 2
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root"},
           "spec": {"containers": [{"name": "c", "image": IMAGE}]}}
    with pytest.raises(client.ApiException) as e:
        kube.core.create_namespaced_pod(namespace, bad, dry_run="All")
    assert e.value.status == 403 and "restricted" in e.value.body


def test_bad_image_is_a_clear_failure_not_a_hang(namespace, kdist, job_file):
    path = job_file("badimage", image="kdist-train:no-such-tag", paced={},
                    args=["--max-steps", "1"])
    res = kdist("submit", path, "--timeout", "45", timeout=120)
    assert res.returncode == 1
    out = res.stdout + res.stderr
    assert "kdist-train:no-such-tag" in out and "pull" in out.lower(), out


def _ensure_service_account(kube: Kube, namespace: str, name: str) -> None:
    try:
        kube.core.create_namespaced_service_account(
            namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
    except client.ApiException as e:
        if e.status != 409:
            raise
