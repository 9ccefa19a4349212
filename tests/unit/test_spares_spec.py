"""Warm spares (issue 54): the spec refuses them where they cannot serve, the Indexed Job
and the JobSet's one Job run nodes + spares pods and succeed on nodes of them, a fenced pod
is no failure, and the launchers restart their workers in process in every form rendered."""

from __future__ import annotations

import pytest

from kdist import backends
from kdist.rendering import render
from kdist.shared import exitcodes
from kdist.shared.errors import SpecError
from kdist.spec import validate_job

from .helpers import spec_with

WITH_SPARE = {"spec.distributed": {"spares": 1, "maxRestarts": 2}}


def _job(**changes):
    return validate_job(spec_with(**changes))


# --- the spec ------------------------------------------------------------------------------


@pytest.mark.parametrize(("changes", "words"), [
    ({"spec.backend": "pytorchjob"}, "distributed.spares: not served on pytorchjob (the "
     "training operator's PyTorchJob has no success on fewer ranks or on some of its pods"),
    ({"spec.backend": "trainjob"}, "distributed.spares: not served on trainjob (Kubeflow "
     "Trainer"),
    ({"spec.backend": "jobset", "spec.distributed": {"spares": 1, "maxRestarts": 1,
                                                     "restartMode": "recreate"}},
     "restart their workers in process"),
    ({"spec.nodes": 1}, "distributed.spares needs nodes >= 2"),
    ({"spec.distributed": {"spares": 1}}, "distributed.spares needs maxRestarts >= 1"),
    ({"spec.distributed": {"spares": 1, "maxRestarts": 1, "restartMode": "recreate"}},
     "restart their workers in process"),
])
def test_spares_are_refused_where_they_cannot_serve_in_one_line(changes, words):
    with pytest.raises(SpecError) as e:
        _job(**{**WITH_SPARE, **changes})
    assert words in str(e.value)
    assert "\n" not in str(e.value).strip()


def test_the_job_runs_nodes_plus_spares_pods_and_succeeds_on_nodes_of_them():
    job, service = render(_job(**WITH_SPARE))
    spec = job["spec"]
    assert (spec["completions"], spec["parallelism"]) == (3, 3)
    assert spec["successPolicy"] == {"rules": [{"succeededCount": 2}]}
    rules = spec["podFailurePolicy"]["rules"]
    ignored = [r for r in rules if r["action"] == "Ignore" and "onExitCodes" in r]
    assert [r["onExitCodes"]["values"] for r in ignored] == [[exitcodes.FENCED]]
    assert rules.index(ignored[0]) < [r["action"] for r in rules].index("FailJob")
    env = {e["name"]: e.get("value") for e in
           spec["template"]["spec"]["containers"][0]["env"]}
    assert env["KDIST_SPARES"] == "1" and env["KDIST_NNODES"] == "2"
    # each pod's stable DNS name through the headless Service: where the store moves when
    # node 0 is lost (kdist.runtime.hostmove)
    name = job["metadata"]["name"]
    assert env["KDIST_SLOT_ADDR"] == f"{name}-{{slot}}.{service['metadata']['name']}"
    assert spec["template"]["spec"]["subdomain"] == service["metadata"]["name"]
    assert "KDIST_SLOT_PORTS" not in env  # a local run's only
    assert backends.of(job).nodes(job) == 2  # the watch counts node ranks, not spares


def test_a_job_without_spares_renders_as_before():
    job, _ = render(_job())
    assert "successPolicy" not in job["spec"] and job["spec"]["completions"] == 2
    env = {e["name"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "KDIST_SLOT_ADDR" not in env
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert all(exitcodes.FENCED not in r.get("onExitCodes", {}).get("values", []) for r in rules)


def test_fenced_is_neither_a_failure_to_retry_nor_the_jobs_cause():
    assert not exitcodes.is_retryable(exitcodes.FENCED)
    assert exitcodes.severity(exitcodes.FENCED) > exitcodes.severity(exitcodes.PEER_LOST)
    assert "fenced" in exitcodes.describe(exitcodes.FENCED)


def test_a_local_run_gives_each_node_a_port_of_its_own_for_the_store():
    from kdist.local.runner import LOCAL_MASTER
    from kdist.rendering import contract
    from kdist.runtime.plan import resolve_env

    job = _job(**WITH_SPARE)
    env = contract.pod_env(job, node_rank=1, master_addr=LOCAL_MASTER, local=True,
                           slot_addr=LOCAL_MASTER)
    assert (env["KDIST_SLOT_ADDR"], env["KDIST_SLOT_PORTS"]) == (LOCAL_MASTER, "1")
    plan = resolve_env({**env, "KDIST_DIST_BACKEND": "gloo"})
    port = int(env["KDIST_MASTER_PORT"])
    assert plan.store_moves and plan.address_of(1) == (LOCAL_MASTER, port + 1)


def _env(container):
    return {e["name"]: e.get("value") for e in container["env"]}


def test_rendered_without_a_cluster_the_launchers_still_restart_in_process():
    """`kdist render` (auto renders recreate without a cluster to ask): a spare taking a
    rank is a restart in process, so the pods count their restarts on the emptyDir."""
    job, _ = render(_job(**WITH_SPARE))
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert "restartPolicyRules" not in container
    assert _env(container)["KDIST_RESTART_DIR"]


def test_a_jobsets_one_job_runs_the_spares_and_succeeds_on_the_node_ranks():
    import kubernetes_validate

    from tests.unit import crd, restricted

    (obj,) = render(_job(**{**WITH_SPARE, "spec.backend": "jobset"}))
    (node,) = obj["spec"]["replicatedJobs"]
    spec = node["template"]["spec"]
    assert (spec["completions"], spec["parallelism"]) == (3, 3)
    assert spec["successPolicy"] == {"rules": [{"succeededCount": 2}]}
    ignored = [r["onExitCodes"]["values"] for r in spec["podFailurePolicy"]["rules"]
               if r["action"] == "Ignore" and "onExitCodes" in r]
    assert ignored == [[exitcodes.FENCED], [exitcodes.PEER_LOST]]
    env = _env(spec["template"]["spec"]["containers"][0])
    name = obj["metadata"]["name"]
    assert env["KDIST_SPARES"] == "1" and env["KDIST_NNODES"] == "2"
    assert env["KDIST_SLOT_ADDR"] == f"{name}-node-0-{{slot}}.{name}" and env["KDIST_RESTART_DIR"]
    assert backends.of(obj).nodes(obj) == 2  # the watch counts node ranks, not spares
    assert crd.errors(obj) == []
    kubernetes_validate.validate({"apiVersion": "batch/v1", "kind": "Job",
                                  "metadata": {"name": f"{name}-node-0"}, "spec": spec},
                                 "1.37", strict=True)
    for pod in restricted.pod_specs(obj):
        assert restricted.violations(pod) == []
