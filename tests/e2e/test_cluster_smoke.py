"""The cluster can run kdist at all: the training image starts under Pod
Security "restricted" and imports torch and kdist; headless-Service DNS, which
every multi-pod job relies on, resolves from inside a pod; names outside the
cluster fail fast instead of leaving the machine; the training operator runs a
two-rank gloo PyTorchJob there (its webhook, init container and DNS)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .conftest import Kube

IMAGE = "kdist-train:dev-cpu"

# Inside the client pod: resolve the target's per-pod name (through the
# search path, as torch's rendezvous does) and the Service name, bounded,
# since headless-Service records can lag; then check an outside name fails.
DNS_CLIENT = """
import json, socket, time
def resolve(name):
    deadline = time.monotonic() + 60
    while True:
        try:
            return sorted({a[4][0] for a in socket.getaddrinfo(name, None, socket.AF_INET)})
        except socket.gaierror:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
result = {"pod": resolve("target-0.probe"), "service": resolve("probe")}
start = time.monotonic()
try:
    socket.getaddrinfo("example.com", None)
    result["outside"] = "resolved"
except socket.gaierror:
    result["outside"] = "failed"
result["outside_s"] = round(time.monotonic() - start, 2)
print(json.dumps(result))
"""


def restricted_pod(name: str, command: list[str], **spec: object) -> client.V1Pod:
    """A pod that Pod Security "restricted" admits, running the training image."""
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": name}),
        spec=client.V1PodSpec(
            restart_policy="Never",
            security_context=client.V1PodSecurityContext(
                run_as_non_root=True,
                run_as_user=1000,
                run_as_group=1000,
                seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
            ),
            containers=[
                client.V1Container(
                    name="main",
                    image=IMAGE,
                    image_pull_policy="IfNotPresent",
                    command=command,
                    resources=client.V1ResourceRequirements(
                        requests={"cpu": "100m", "memory": "256Mi"}, limits={"memory": "2Gi"}
                    ),
                    security_context=client.V1SecurityContext(
                        allow_privilege_escalation=False,
                        capabilities=client.V1Capabilities(drop=["ALL"]),
                    ),
                )
            ],
            termination_grace_period_seconds=5,
            **spec,
        ),
    )


def test_training_image_imports_torch_and_kdist(kube: Kube, namespace: str) -> None:
    pod = restricted_pod(
        "import", ["python", "-c", "import torch, kdist; print(torch.__version__)"]
    )
    kube.core.create_namespaced_pod(namespace, pod)

    done = kube.wait_for_pod(namespace, "import", timeout=240)

    assert done.status.phase == "Succeeded"
    version = kube.pod_log(namespace, "import").strip()
    assert version.split(".")[0].isdigit(), version


def test_headless_service_dns_resolves_from_a_pod(kube: Kube, namespace: str) -> None:
    kube.core.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="probe"),
            spec=client.V1ServiceSpec(
                cluster_ip="None",
                selector={"app": "target"},
                publish_not_ready_addresses=True,
                ports=[client.V1ServicePort(name="rdzv", port=29500)],
            ),
        ),
    )
    target = restricted_pod("target", ["sleep", "600"], hostname="target-0", subdomain="probe")
    kube.core.create_namespaced_pod(namespace, target)
    kube.core.create_namespaced_pod(
        namespace, restricted_pod("client", ["python", "-c", DNS_CLIENT])
    )

    running = kube.wait_for_pod(namespace, "target", phases=("Running",), timeout=120)
    done = kube.wait_for_pod(namespace, "client", timeout=180)

    assert done.status.phase == "Succeeded"
    result = json.loads(kube.pod_log(namespace, "client").strip().splitlines()[-1])
    assert result["pod"] == [running.status.pod_ip]
    assert result["service"] == [running.status.pod_ip]
    assert result["outside"] == "failed"
    assert result["outside_s"] < 5


def test_namespace_refuses_pods_that_break_restricted(kube: Kube, namespace: str) -> None:
    pod = restricted_pod("root", ["true"])
    pod.spec.security_context = None
    pod.spec.containers[0].security_context = None

    with pytest.raises(ApiException) as refused:
        kube.core.create_namespaced_pod(namespace, pod)

    assert refused.value.status == 403
    assert "restricted" in refused.value.body


# Both ranks of a PyTorchJob: rendezvous on what the operator injects
# (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), then one gloo all-reduce.
RENDEZVOUS = """
import datetime, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
t = torch.ones(1)
dist.all_reduce(t)
print(f"rank {dist.get_rank()}/{dist.get_world_size()} sum {int(t.item())}")
dist.destroy_process_group()
"""


def test_pytorchjob_ranks_rendezvous_in_a_restricted_namespace(kube: Kube, namespace: str) -> None:
    template = kube.api.sanitize_for_serialization(
        restricted_pod("rank", ["python", "-c", RENDEZVOUS])
    )
    template["spec"]["containers"][0]["name"] = "pytorch"  # the operator's contract
    replica = {"replicas": 1, "restartPolicy": "Never", "template": {"spec": template["spec"]}}
    custom = client.CustomObjectsApi(kube.api)
    custom.create_namespaced_custom_object(
        "kubeflow.org",
        "v1",
        namespace,
        "pytorchjobs",
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "rdzv"},
            "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": replica}},
        },
    )

    job = kube.wait_for(
        custom.list_namespaced_custom_object,
        "kubeflow.org",
        "v1",
        namespace,
        "pytorchjobs",
        name="rdzv",
        timeout=300,
        done=_job_finished,
    )

    assert _job_finished(job) == "Succeeded", job.get("status")
    pods = kube.core.list_namespaced_pod(
        namespace, label_selector="training.kubeflow.org/job-name=rdzv"
    ).items
    logs = sorted(
        kube.pod_log(
            namespace,
            kube.wait_for_pod(namespace, p.metadata.name).metadata.name,
            container="pytorch",
        ).strip()
        for p in pods
    )
    assert logs == ["rank 0/2 sum 2", "rank 1/2 sum 2"]


def _job_finished(job: dict) -> str | None:
    """ "Succeeded" or "Failed" once the job has that condition, else None."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond["type"] in ("Succeeded", "Failed") and cond["status"] == "True":
            return cond["type"]
    return None
