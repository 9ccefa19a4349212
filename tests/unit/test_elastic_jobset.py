"""Elastic jobs on a JobSet (issue 55, ``spec.minNodes`` with backend jobset): its one Job
succeeds on minNodes indexes and ignores a fenced pod, as the Indexed Job does, and its
launchers restart their workers in process though the JobSet never restarts a container
in place. PyTorchJob and TrainJob stay refused, with the reason."""

from __future__ import annotations

import pytest

from kdist.rendering import render
from kdist.runtime import restarts
from kdist.runtime.plan import resolve_env
from kdist.shared import env as E
from kdist.shared import exitcodes
from kdist.shared.errors import SpecError
from kdist.spec import validate_job
from tests.unit import crd, restricted

from .helpers import spec_with

ELASTIC = {"spec.nodes": 2, "spec.minNodes": 1, "spec.backend": "jobset",
           "spec.distributed": {"maxRestarts": 2}}


def _render(**changes):
    return render(validate_job(spec_with(**{**ELASTIC, **changes})))


def _node_job(obj):
    (node,) = obj["spec"]["replicatedJobs"]
    return node["template"]["spec"]


def _container(obj):
    return _node_job(obj)["template"]["spec"]["containers"][0]


def test_an_elastic_jobsets_job_succeeds_on_min_nodes_and_ignores_a_fenced_pod():
    (obj,) = _render()
    spec = _node_job(obj)
    assert (spec["completions"], spec["parallelism"]) == (2, 2)
    assert spec["successPolicy"] == {"rules": [{"succeededCount": 1}]}
    ignored = [r["onExitCodes"]["values"] for r in spec["podFailurePolicy"]["rules"]
               if r["action"] == "Ignore" and "onExitCodes" in r]
    # fenced (206) is not a failure; a lost peer (203) stays an echo, as before
    assert ignored == [[exitcodes.FENCED], [exitcodes.PEER_LOST]]
    env = {e["name"]: e.get("value") for e in _container(obj)["env"]}
    assert env[E.MIN_NODES] == "1" and env[E.NNODES] == "2"


def test_an_elastic_jobsets_launchers_restart_their_workers_in_process():
    """A shrink and a grow are restarts in process: the pods count them on an emptyDir
    (KDIST_RESTART_DIR) with no container restart rule (a JobSet recreates, never in
    place), and the launcher of such a pod restarts its workers itself."""
    (obj,) = _render()
    container = _container(obj)
    assert "restartPolicyRules" not in container
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[E.RESTART_DIR] == E.DEFAULT_RESTART_DIR and E.RESTART_WORKERS not in env
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in _node_job(obj)["template"]["spec"]["volumes"]}
    assert E.DEFAULT_RESTART_DIR in mounts and "emptyDir" in volumes["kdist-restarts"]
    pod_env = {E.NNODES: "2", E.NODE_RANK: "1", E.MASTER_ADDR: "m", E.DIST_BACKEND: "gloo",
               E.MAX_RESTARTS: "2", E.MIN_NODES: "1", E.RESTART_COUNT: "0",
               E.RESTART_DIR: env[E.RESTART_DIR]}
    plan = resolve_env(pod_env)
    assert plan.elastic and plan.tracks_members and plan.restart_count == 0
    directory = restarts.in_place_dir(pod_env)
    assert restarts.restart_workers(plan, exitcodes.PEER_LOST, False, directory, pod_env)


def test_an_elastic_jobset_passes_its_crd_the_job_schema_and_restricted():
    import kubernetes_validate

    (obj,) = _render()
    assert crd.errors(obj) == []
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "unit-job-node-0"},
           "spec": _node_job(obj)}
    kubernetes_validate.validate(job, "1.37", strict=True)
    for spec in restricted.pod_specs(obj):
        assert restricted.violations(spec) == []


def test_a_jobset_not_elastic_renders_as_before():
    plain = _render(**{"spec.minNodes": None})
    same = _render(**{"spec.minNodes": 2})
    assert plain == same
    spec = _node_job(plain[0])
    assert "successPolicy" not in spec
    assert E.RESTART_DIR not in {e["name"] for e in _container(plain[0])["env"]}


def test_an_elastic_indexed_job_rendered_recreate_restarts_in_process_too():
    """Without a cluster to ask, auto renders recreate: an elastic job's launchers must
    still re-form the gang in process, so its pods count their restarts on the emptyDir."""
    job, _ = _render(**{"spec.backend": "indexed-job"})
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert "restartPolicyRules" not in container
    assert E.RESTART_DIR in {e["name"] for e in container["env"]}


@pytest.mark.parametrize(("backend", "why"), [
    ("pytorchjob", "no success on fewer ranks"),  # or on some of its pods (spares)
    ("trainjob", "Kubeflow Trainer removed elastic training"),
])
def test_min_nodes_is_refused_on_pytorchjob_and_trainjob_with_the_reason(backend, why):
    with pytest.raises(SpecError) as e:
        validate_job(spec_with(**{**ELASTIC, "spec.backend": backend}))
    said = str(e.value)
    assert f"spec.minNodes: not served on {backend} (" in said and why in said
    assert "use backend indexed-job or jobset" in said and "\n" not in said.strip()


def test_min_nodes_on_a_jobset_still_needs_restarts_in_process():
    with pytest.raises(SpecError, match="restart their workers in process"):
        validate_job(spec_with(**{**ELASTIC, "spec.distributed": {
            "maxRestarts": 2, "restartMode": "recreate"}}))
