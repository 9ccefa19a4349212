"""spec.trainjob.runtimeRef (issue 57): only the TrainJob is rendered, on an existing
ClusterTrainingRuntime; kdist's container in spec.trainer, the rest of its pod in
runtimePatches; CRD-valid (v2.3.0) and Pod Security restricted; what a TrainJob cannot
carry refused at validate, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from kdist.backends import trainjob
from kdist.rendering import render
from kdist.rendering.render import pod_templates_of
from kdist.shared import env as E
from kdist.shared.errors import SpecError
from kdist.spec.load import validate_job
from tests.unit import restricted
from tests.unit.crd import errors
from tests.unit.helpers import spec_with

REF = {"spec.backend": "trainjob", "spec.trainjob": {"runtimeRef": "torch-distributed"}}


def rendered(**changes: Any) -> list[dict[str, Any]]:
    return render(validate_job(spec_with(**{**REF, **changes})))


def test_only_the_trainjob_is_rendered_and_it_is_crd_valid():
    objects = rendered(**{"spec.activeDeadlineSeconds": 600, "spec.pod": {
        "volumes": [{"name": "data", "mountPath": "/data", "emptyDir": {}}],
        "annotations": {"a": "b"}, "serviceAccountName": "trainer"}})
    assert [o["kind"] for o in objects] == ["TrainJob"]  # no runtime of its own
    (job,) = [o for o in objects if o["kind"] == "TrainJob"]
    assert errors(job) == []
    spec = job["spec"]
    assert spec["runtimeRef"]["kind"] == "ClusterTrainingRuntime"
    assert spec["runtimeRef"]["name"] == "torch-distributed"
    assert spec["activeDeadlineSeconds"] == 600
    trainer = spec["trainer"]
    assert trainer["numNodes"] == 2 and trainer["image"] == "registry.example/kdist-train:0.1.0"
    env = {e["name"]: e for e in trainer["env"]}
    assert "fieldRef" in env[E.NODE_RANK]["valueFrom"]  # from the pod's own index
    assert trainer["resourcesPerNode"]["limits"]["cpu"]
    (patch,) = spec["runtimePatches"]
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert rjob["name"] == "node"
    pod = rjob["template"]["spec"]["template"]
    assert pod["metadata"]["annotations"] == {"a": "b"}
    assert pod["spec"]["serviceAccountName"] == "trainer"
    (node,) = pod["spec"]["containers"]
    assert node["name"] == "node" and "env" not in node  # Trainer refuses env there
    assert "/data" in [m["mountPath"] for m in node["volumeMounts"]]


def test_the_pod_kdist_reads_back_is_restricted_and_complete():
    import kubernetes_validate

    objects = rendered(**{"spec.checkpoint": {"path": "/ckpt", "volume": {"emptyDir": {}}}})
    (template,) = pod_templates_of(objects)
    assert restricted.pod_specs(objects[0]) == [template["spec"]]
    assert restricted.violations(template["spec"]) == []
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "ref-node-0-0", **template["metadata"]}, "spec": template["spec"]},
        "1.37", strict=True)
    (node,) = template["spec"]["containers"]
    assert node["image"] == "registry.example/kdist-train:0.1.0" and node["command"]


@pytest.mark.parametrize(("change", "field"), [
    ({"spec.distributed": {"maxRestarts": 2}}, "distributed.maxRestarts"),
    ({"spec.ttlSecondsAfterFinished": 60}, "ttlSecondsAfterFinished"),
    ({"spec.envFrom": [{"secretRef": {"name": "s"}}]}, "envFrom"),
    ({"spec.podTemplateOverlay": {"metadata": {"labels": {"a": "b"}}}}, "podTemplateOverlay"),
    ({"spec.scheduling": {"priorityClassName": "high"}}, "scheduling.priorityClassName"),
    ({"spec.scheduling": {"schedulerName": "volcano"}}, "scheduling.schedulerName"),
    ({"spec.pod": {"runtimeClassName": "gvisor"}}, "pod.runtimeClassName"),
    ({"spec.pod": {"hostNetwork": True}}, "pod.hostNetwork"),
    ({"spec.pod": {"automountServiceAccountToken": True}}, "pod.automountServiceAccountToken"),
])
def test_what_a_trainjob_cannot_carry_is_refused_naming_the_field(change, field):
    with pytest.raises(SpecError) as e:
        validate_job(spec_with(**{**REF, **change}))
    assert f"cannot carry {field} (" in str(e.value)
    validate_job(spec_with(**{**change, "spec.backend": "trainjob"}))  # its own runtime: fine


def test_runtime_ref_needs_backend_trainjob_and_a_name():
    with pytest.raises(SpecError, match="trainjob.runtimeRef: needs backend trainjob"):
        validate_job(spec_with(**{**REF, "spec.backend": "jobset"}))
    with pytest.raises(SpecError, match="must be a DNS-1123 subdomain"):
        validate_job(spec_with(**{**REF, "spec.trainjob": {"runtimeRef": "Not_A_Name"}}))


def test_the_runtime_kdist_can_run_on():
    stock = {"spec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
        "metadata": {"labels": {trainjob.ANCESTOR: "trainer"}},
        "spec": {"template": {"spec": {"containers": [{"name": "node"}]}}}}}]}}}}
    assert trainjob.BACKEND.runtime_problem(stock) == ""
    assert trainjob.BACKEND.runtime_problem([]) == "has no spec.template.spec.replicatedJobs"
