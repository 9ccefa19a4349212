"""backend trainjob renders what the Kubeflow SDK (kubeflow 0.5) needs to read the job
(issue 57 slice 2): the runtime's framework label and mlPolicy.numNodes, the trainer step's
label on its replicated Job and pods, kdist's container named `node` (its logs, its status,
its podFailurePolicy); the other backends keep `pytorch`. An overlay names kdist's container
`pytorch` on every backend."""

from __future__ import annotations

from typing import Any

import pytest

from kdist import backends
from kdist.backends import trainjob
from kdist.rendering import render
from kdist.shared.errors import SpecError
from kdist.spec.load import validate_job
from tests.unit.crd import errors
from tests.unit.helpers import spec_with


def rendered(backend: str, **changes: Any) -> list[dict[str, Any]]:
    return render(validate_job(spec_with(**{"spec.backend": backend, **changes})))


def runtime_of(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (runtime,) = [o for o in objects if o["kind"] == "TrainingRuntime"]
    return runtime


def test_the_runtime_is_one_the_sdk_reads():
    objects = rendered("trainjob", **{"spec.nodes": 3})
    runtime = runtime_of(objects)
    assert runtime["metadata"]["labels"][trainjob.FRAMEWORK] == "torch"
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 3}
    (rjob,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert rjob["name"] == "node"
    assert rjob["template"]["metadata"]["labels"] == {trainjob.ANCESTOR: "trainer"}
    pod = rjob["template"]["spec"]["template"]
    assert pod["metadata"]["labels"][trainjob.ANCESTOR] == "trainer"
    assert [c["name"] for c in pod["spec"]["containers"]] == ["node"]
    rules = rjob["template"]["spec"]["podFailurePolicy"]["rules"]
    assert {r["onExitCodes"]["containerName"] for r in rules if "onExitCodes" in r} == {"node"}
    for obj in objects:
        if obj["kind"] in ("TrainJob", "TrainingRuntime"):
            assert errors(obj) == [], obj["kind"]


@pytest.mark.parametrize("backend", ["indexed-job", "pytorchjob", "jobset"])
def test_the_other_backends_keep_pytorch(backend):
    assert backends.get(backend).container == "pytorch"
    for obj in rendered(backend):
        b = backends.holding(obj["kind"])
        for template in b.pod_templates(obj) if b is not None else []:
            assert template["spec"]["containers"][0]["name"] == "pytorch"
            assert trainjob.ANCESTOR not in template["metadata"]["labels"]


def test_an_overlay_of_pytorch_lands_on_node():
    overlay = {"spec": {"containers": [
        {"name": "pytorch", "workingDir": "/work"}, {"name": "side", "image": "busybox"}]}}
    runtime = runtime_of(rendered("trainjob", **{"spec.podTemplateOverlay": overlay}))
    pod = trainjob.BACKEND.pod_templates(runtime)[0]
    (node, side) = pod["spec"]["containers"]
    assert (node["name"], node["workingDir"], side["name"]) == ("node", "/work", "side")


def test_an_overlay_naming_node_is_refused_on_trainjob():
    overlay = {"spec": {"containers": [{"name": "node", "command": ["sh"]}]}}
    with pytest.raises(SpecError) as e:
        rendered("trainjob", **{"spec.podTemplateOverlay": overlay})
    assert "spec.podTemplateOverlay.spec.containers[0].name: 'node' is kdist's container" \
        in str(e.value)
    # Elsewhere `node` is a sidecar's name like any other.
    objects = rendered("jobset", **{"spec.podTemplateOverlay": {"spec": {"containers": [
        {"name": "node", "image": "busybox"}]}}})
    names = [c["name"] for c in backends.get("jobset").pod_templates(objects[0])[0]["spec"][
        "containers"]]
    assert names == ["pytorch", "node"]
