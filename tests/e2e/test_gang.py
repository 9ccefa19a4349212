"""Native gang scheduling on the real cluster (distributed.gang), without Kueue: two jobs
that each need the whole node never both half-start; one runs, then the other.

The test clusters serve scheduling.k8s.io/v1beta1 PodGroups (gate GenericWorkload), so
`auto` gangs every Indexed Job: kdist makes a PodGroup (minCount = nodes) owned by the
Job, and kube-scheduler's GangScheduling plugin places all of a job's pods at once or
none. Pod by pod, two such jobs can each get one pod of the node and wait for ever.

Where a Role refuses PodGroups, `auto` falls back: kdist asks for the PodGroup with a
dry run before the Job, so the Job is created once, without a gang, and runs.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
from kubernetes import client, utils
from kubernetes.client.exceptions import ApiException

from kdist.rendering import addons
from kdist.spec.quantity import parse_quantity

from .conftest import REQUEST_TIMEOUT, Kube
from .conftest_cli import (  # noqa: F401
    IMAGE,
    job_file_fixture,
    kdist_fixture,
    kubectl,
    leftovers,
)
from .test_rbac import kubeconfig_for

JOBS = ("first", "second")


def free_millicores(kube: Kube) -> int:
    """CPU the single node has left for requests (allocatable less every live pod's), once
    no running pod on it is terminating (an earlier test's, whose CPU would free up
    meanwhile)."""
    nodes = kube.core.list_node(_request_timeout=REQUEST_TIMEOUT).items
    if len(nodes) != 1:
        pytest.skip("needs a single-node cluster, whose CPU two gangs compete for")
    node, deadline = nodes[0], time.monotonic() + 120
    while True:
        pods = kube.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node.metadata.name}",
            _request_timeout=REQUEST_TIMEOUT).items
        going = [p.metadata.name for p in pods if p.metadata.deletion_timestamp
                 and p.status.phase not in ("Succeeded", "Failed")]  # ended: hold no CPU
        if not going:
            break
        assert time.monotonic() < deadline, f"pods still terminating after 120s: {going}"
        time.sleep(1)
    used = sum(parse_quantity(str((c.resources.requests or {}).get("cpu", "0")))
               for p in pods if p.status.phase not in ("Succeeded", "Failed")
               for c in p.spec.containers)
    return int((parse_quantity(node.status.allocatable["cpu"]) - used) * 1000)


def filler(namespace: str, millicores: int) -> client.V1Pod:
    """A pod that holds `millicores` of the node until deleted (Pod Security restricted)."""
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="filler", namespace=namespace),
        spec=client.V1PodSpec(
            restart_policy="Never", termination_grace_period_seconds=0,
            security_context=client.V1PodSecurityContext(
                run_as_non_root=True, run_as_user=1000,
                seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault")),
            containers=[client.V1Container(
                name="filler", image=IMAGE, image_pull_policy="IfNotPresent",
                command=["python", "-c", "import time; time.sleep(3600)"],
                resources=client.V1ResourceRequirements(
                    requests={"cpu": f"{millicores}m", "memory": "32Mi"},
                    limits={"cpu": f"{millicores}m", "memory": "32Mi"}),
                security_context=client.V1SecurityContext(
                    allow_privilege_escalation=False,
                    capabilities=client.V1Capabilities(drop=["ALL"])))]))


def holding(kube: Kube, namespace: str) -> dict[str, int]:
    """Per job, how many of its pods are on the node and not finished (hold CPU)."""
    pods = kube.core.list_namespaced_pod(namespace, label_selector="kdist.dev/job-name",
                                         _request_timeout=REQUEST_TIMEOUT).items
    held = dict.fromkeys(JOBS, 0)
    for p in pods:
        job = p.metadata.labels.get("kdist.dev/job-name")
        if job in held and p.spec.node_name and p.status.phase in ("Pending", "Running"):
            held[job] += 1
    return held


def job_obj(namespace: str, name: str) -> dict[str, Any]:
    return json.loads(kubectl("-n", namespace, "get", "job", name, "-o", "json").stdout)


def done(job: dict[str, Any]) -> str | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c["type"] in ("Complete", "Failed") and c["status"] == "True":
            return c["type"]
    return None


@pytest.mark.exclusive  # each job asks for the whole node, on purpose
def test_two_jobs_that_each_need_the_whole_node_never_both_half_start(
        kube, namespace, kdist, job_file):
    free = free_millicores(kube)
    cpu = free * 45 // 100  # two pods of a job fit the node, three do not
    assert cpu >= 200, f"only {free}m CPU free on the node"
    # First the node has room for one pod of either job, not two: pod by pod, one job
    # would half-start there (and hold its share while waiting for its peer).
    kube.core.create_namespaced_pod(namespace, filler(namespace, free - cpu * 3 // 2),
                                    _request_timeout=REQUEST_TIMEOUT)
    kube.wait_for_pod(namespace, "filler", phases=("Running",), timeout=120)
    paths = {name: job_file(name, nodes=2, args=["--max-steps", "8"], paced={"PACE": "0.5"},
                            resources={"cpu": f"{cpu}m", "memory": "512Mi"},
                            distributed={"backend": "gloo", "rendezvousTimeoutSeconds": 600})
             for name in JOBS}
    for name in JOBS:
        sub = kdist("submit", paths[name], "--no-wait")
        assert sub.returncode == 0, sub.stdout + sub.stderr
        assert f"scheduling: as a gang (podgroup/{name}" in sub.stdout, sub.stdout

    # What kdist made: a PodGroup of both pods, owned by the Job; every pod names it.
    for name in JOBS:
        group = json.loads(kubectl("-n", namespace, "get", "podgroups.scheduling.k8s.io",
                                   name, "-o", "json").stdout)
        assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}, group["spec"]
        (owner,) = group["metadata"]["ownerReferences"]
        job = job_obj(namespace, name)
        assert (owner["kind"], owner["uid"]) == ("Job", job["metadata"]["uid"]), owner
        template = job["spec"]["template"]["spec"]
        assert template["schedulingGroup"] == {"podGroupName": name}, template

    # Both wait whole while the node has room for one pod: none placed; status says why.
    deadline = time.monotonic() + 60
    while len(kube.core.list_namespaced_pod(namespace, label_selector="kdist.dev/job-name",
                                            _request_timeout=REQUEST_TIMEOUT).items) < 4:
        assert time.monotonic() < deadline, "the Job controller did not make all 4 pods"
        time.sleep(0.5)
    time.sleep(3)  # a scheduling attempt or two
    assert holding(kube, namespace) == {"first": 0, "second": 0}
    status = kdist("status", "first")
    assert "waits as a gang (PodGroup first)" in status.stdout, status.stdout + status.stderr
    report = json.loads(kdist("status", "first", "-o", "json").stdout)
    assert report["gang"]["podGroup"] == "first" and report["gang"]["minCount"] == 2, report

    # The node frees up: four pods compete for room for two. One gang runs, whole.
    kube.core.delete_namespaced_pod("filler", namespace, grace_period_seconds=0,
                                    _request_timeout=REQUEST_TIMEOUT)
    samples, half_both = [], []
    deadline = time.monotonic() + 300
    while not all(done(job_obj(namespace, n)) for n in JOBS):
        assert time.monotonic() < deadline, f"jobs not done after 300s: {samples[-5:]}"
        held = holding(kube, namespace)
        samples.append(held)
        if all(0 < held[n] < 2 for n in JOBS):
            half_both.append(held)
        time.sleep(0.5)
    assert [done(job_obj(namespace, n)) for n in JOBS] == ["Complete", "Complete"]
    assert half_both == [], f"both jobs half-started at once: {half_both[:5]}"
    assert {"first": 2, "second": 2} not in samples  # never both whole: 4 pods do not fit
    assert any(s[n] == 2 for s in samples for n in JOBS), samples  # one ran whole

    # One after the other: the later gang was placed only once the earlier one ended.
    pods = kube.core.list_namespaced_pod(namespace, label_selector="kdist.dev/job-name",
                                         _request_timeout=REQUEST_TIMEOUT).items

    def placed(p: client.V1Pod) -> Any:
        return next(c.last_transition_time for c in p.status.conditions
                    if c.type == "PodScheduled" and c.status == "True")

    def ended(p: client.V1Pod) -> Any:
        return p.status.container_statuses[0].state.terminated.finished_at

    by_job = {n: [p for p in pods if p.metadata.labels["kdist.dev/job-name"] == n]
              for n in JOBS}
    earlier, later = sorted(JOBS, key=lambda n: min(placed(p) for p in by_job[n]))
    assert min(placed(p) for p in by_job[later]) >= max(ended(p) for p in by_job[earlier]), \
        [(p.metadata.name, placed(p), ended(p)) for p in pods]
    # Deleting a job deletes its PodGroup (owned): nothing of kdist's is left.
    assert kdist("delete", earlier).returncode == 0
    left = kubectl("-n", namespace, "get", "podgroups.scheduling.k8s.io", "-o", "name").stdout
    assert left.split() == [f"podgroup.scheduling.k8s.io/{later}"], left


def serves_podgroups(kube: Kube) -> bool:
    try:
        found = client.CustomObjectsApi(kube.api).get_api_resources(
            "scheduling.k8s.io", "v1beta1", _request_timeout=REQUEST_TIMEOUT)
    except ApiException as e:
        if e.status != 404:
            raise
        return False
    return any(r.name == "podgroups" for r in found.resources)


def install_role_without_podgroups(kube: Kube, namespace: str) -> None:
    """kdist's ServiceAccount, Role and RoleBinding, less the Role's podgroups rule: every
    request about a PodGroup is refused (403), as a Role written before gangs would."""
    objects = copy.deepcopy(addons.rbac(namespace))
    role = next(o for o in objects if o["kind"] == "Role")
    role["rules"] = [r for r in role["rules"] if "podgroups" not in r["resources"]]
    assert len(role["rules"]) == len(addons.RULES) - 1, role["rules"]
    for obj in objects:
        utils.create_from_dict(kube.api, obj, namespace=namespace)


def test_a_role_that_refuses_podgroups_runs_the_job_without_a_gang(
        kube, namespace, kdist, job_file, tmp_path):
    """The fallback on a real API server, which holds a deleted Job while its deletion
    runs: kdist used to create the Job, have its PodGroup refused, delete the Job and
    create it again at once, and the second create collided with the first ("already
    exists"). Now the PodGroup's dry run comes first and the Job is created once."""
    if not serves_podgroups(kube):
        pytest.skip("the cluster does not serve scheduling.k8s.io/v1beta1 PodGroups")
    install_role_without_podgroups(kube, namespace)
    cfg = kubeconfig_for(addons.SERVICE_ACCOUNT, namespace, tmp_path / "sa.kubeconfig")

    path = job_file("gangless", paced={"PACE": "0.2"}, args=["--max-steps", "5"])
    sub = kdist("--kubeconfig", cfg, "submit", path, "--timeout", "200")
    assert sub.returncode == 0, sub.stdout + sub.stderr
    warned = [line for line in sub.stderr.splitlines()
              if line.startswith("warning: PodGroup gangless is refused")]
    assert len(warned) == 1 and "forbidden" in warned[0], sub.stderr
    assert "pod by pod" in warned[0], warned
    assert "scheduling: as a gang" not in sub.stdout, sub.stdout
    assert sub.stdout.count("job.batch/gangless created") == 1, sub.stdout

    # The Job, made once, names no PodGroup and ran to its end; there is no PodGroup.
    job, deadline = job_obj(namespace, "gangless"), time.monotonic() + 60
    while done(job) is None and time.monotonic() < deadline:  # Complete follows success
        time.sleep(0.5)
        job = job_obj(namespace, "gangless")
    assert "schedulingGroup" not in job["spec"]["template"]["spec"], job["spec"]["template"]
    assert done(job) == "Complete", job.get("status")
    # kdist made no PodGroup (the Job controller's own, under WorkloadWithJob, is not kdist's:
    # it is named for the Job's Workload, `gangless-<hash>-...`).
    groups = kubectl("-n", namespace, "get", "podgroups.scheduling.k8s.io", "-o", "name")
    assert "podgroup.scheduling.k8s.io/gangless" not in groups.stdout.split(), groups.stdout
    status = kdist("--kubeconfig", cfg, "status", "gangless", "-o", "json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["phase"] == "Succeeded" and report["gang"] is None, report

    # gang native asks for a gang or nothing: refused before anything is made.
    native = job_file("native", paced={"PACE": "0.2"}, args=["--max-steps", "2"],
                      distributed={"backend": "gloo", "gang": "native"})
    res = kdist("--kubeconfig", cfg, "submit", native, "--no-wait")
    assert res.returncode == 3, res.stdout + res.stderr
    assert "spec.distributed.gang native: the PodGroup is refused: forbidden" in res.stderr, \
        res.stderr
    assert leftovers(namespace, "native") == []

    deleted = kdist("--kubeconfig", cfg, "delete", "gangless")
    assert deleted.returncode == 0, deleted.stderr
    assert leftovers(namespace, "gangless") == []
