"""Rendering: golden files, determinism, schemas, restricted profile, no torch."""

from __future__ import annotations

import subprocess
import sys

import kubernetes_validate
import pytest

from kdist.rendering import render, security, to_json, to_yaml, with_backend
from kdist.shared import exitcodes
from kdist.shared import labels as L
from kdist.spec import load_job, validate_job
from tests.unit import crd, golden, restricted
from tests.unit.helpers import spec_with

CASES = golden.cases()
IDS = [g.name for _, _, g in CASES]
K8S_VERSION = "1.37"


@pytest.mark.parametrize(("spec", "backend", "golden_file"), CASES, ids=IDS)
def test_matches_golden_file(spec, backend, golden_file):
    assert golden_file.is_file(), f"missing {golden_file.name}: run `make golden`"
    assert golden.rendered(spec, backend) == golden_file.read_text(), (
        f"{golden_file.name} differs: review, then `make golden`"
    )


def test_no_stray_golden_files():
    assert {p.name for p in golden.GOLDEN.glob("*.yaml")} == set(IDS)


@pytest.mark.parametrize(("spec", "backend", "golden_file"), CASES, ids=IDS)
def test_objects_pass_kubernetes_schemas(spec, backend, golden_file):
    for obj in render(with_backend(load_job(spec), backend)):
        if obj["kind"] in crd.CRDS:
            assert crd.errors(obj) == []
            for pod_spec in restricted.pod_specs(obj):
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                       "spec": pod_spec}
                kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
        else:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize(("spec", "backend", "golden_file"), CASES, ids=IDS)
def test_pods_meet_restricted_profile(spec, backend, golden_file):
    objects = render(with_backend(load_job(spec), backend))
    specs = [p for o in objects for p in restricted.pod_specs(o)]
    assert specs
    # Examples that leave "restricted" on purpose (RDMA) are the security report's.
    is_restricted = security.assess(objects).level == security.RESTRICTED
    for pod_spec in specs:
        assert (restricted.violations(pod_spec) == []) is is_restricted
        assert pod_spec["automountServiceAccountToken"] is ("serviceAccountName" in pod_spec)


def test_restricted_checker_catches_violations():
    obj = render(validate_job(spec_with()))[0]
    pod_spec = restricted.pod_specs(obj)[0]
    pod_spec["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    pod_spec["volumes"].append({"name": "h", "hostPath": {"path": "/"}})
    found = restricted.violations(pod_spec)
    assert any("allowPrivilegeEscalation" in v for v in found)
    assert any("hostPath" in v for v in found)


def test_crd_validation_is_strict():
    obj = render(validate_job(spec_with(**{"spec.backend": "pytorchjob"})))[0]
    obj["spec"]["runPolicy"]["cleanPodPolicy"] = 7
    obj["spec"]["bogus"] = True
    assert len(crd.errors(obj)) == 2


def test_render_is_deterministic():
    job = load_job(golden.ROOT / "examples" / "ddp-gpu.yaml")
    assert to_yaml(render(job)) == to_yaml(render(job))
    assert to_json(render(job)) == to_json(render(job))


def test_indexed_job_shape():
    job = validate_job(spec_with(**{"spec.nodes": 3, "spec.distributed": {"maxRestarts": 2}}))
    jobobj, svc = render(job)
    spec = jobobj["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    # A gang restart fails every index once: restarts are counted per index.
    assert (spec["backoffLimitPerIndex"], spec["maxFailedIndexes"]) == (2, 0)
    assert "backoffLimit" not in spec
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "Ignore"
    assert rules[1]["action"] == "FailJob"
    assert rules[1]["onExitCodes"]["values"] == [*range(1, 128), exitcodes.RESTARTS_SPENT]
    assert exitcodes.PEER_LOST not in rules[1]["onExitCodes"]["values"]
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == svc["metadata"]["name"] == "unit-job"
    assert pod["restartPolicy"] == "Never"
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["KDIST_MASTER_ADDR"]["value"] == "unit-job-0.unit-job"
    assert "job-completion-index" in env["KDIST_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"]
    assert svc["spec"]["selector"] == L.selector("unit-job")


def test_pytorchjob_shape():
    job = validate_job(spec_with(**{"spec.backend": "pytorchjob", "spec.nodes": 4}))
    (obj,) = render(job)
    replicas = obj["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 3
    (container,) = replicas["Worker"]["template"]["spec"]["containers"]
    assert container["name"] == "pytorch"
    assert container["ports"] == [
        {"name": "pytorchjob-port", "containerPort": 29500, "protocol": "TCP"}
    ]
    assert "KDIST_MASTER_ADDR" not in {e["name"] for e in container["env"]}
    single = render(validate_job(spec_with(**{"spec.backend": "pytorchjob", "spec.nodes": 1})))
    assert list(single[0]["spec"]["pytorchReplicaSpecs"]) == ["Master"]


def test_resources_shm_and_threads():
    job = validate_job(spec_with(**{
        "spec.resources": {"gpus": 2, "cpu": "7", "memory": "3Gi"}, "spec.procsPerNode": 2,
    }))
    pod = render(job)[0]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["resources"]["limits"] == {"cpu": "7", "memory": "3Gi", "nvidia.com/gpu": "2"}
    assert c["resources"]["requests"] == {"cpu": "7", "memory": "3Gi"}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["OMP_NUM_THREADS"] == "3"
    assert env["KDIST_DIST_BACKEND"] == "nccl"
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "1536Mi"}


def test_user_labels_on_every_object_and_pod():
    job = validate_job(spec_with(**{"metadata.labels": {"team": "nlp"},
                                    "spec.scheduling": {"queue": "q1"}}))
    objs = render(job)
    for obj in objs:
        assert obj["metadata"]["labels"]["team"] == "nlp"
        assert obj["metadata"]["labels"][L.JOB_NAME] == "unit-job"
    assert objs[0]["metadata"]["labels"][L.QUEUE] == "q1"
    assert objs[0]["spec"]["template"]["metadata"]["labels"]["team"] == "nlp"


def test_render_path_never_imports_torch(tmp_path):
    code = (
        "import sys; from click.testing import CliRunner; from kdist.cli import main; "
        "r = CliRunner().invoke(main, ['render', 'examples/ddp-cpu.yaml']); "
        "r2 = CliRunner().invoke(main, ['validate', 'examples/ddp-cpu.yaml']); "
        "assert r.exit_code == 0 and r2.exit_code == 0, (r.output, r2.output); "
        "bad = [m for m in ('torch', 'kubernetes', 'numpy') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=golden.ROOT)
