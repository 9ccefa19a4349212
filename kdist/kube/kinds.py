"""The resources kdist touches, one descriptor each (`kdist.shared.kind.Kind`): where they
live in the API. The training objects' come from their backends (`kdist.backends`)."""

from __future__ import annotations

from collections.abc import Callable

from kdist import backends
from kdist.backends.indexed_job import JOB  # noqa: F401 (a plain Job: `kdist check` probes with one)
from kdist.shared.errors import UsageError
from kdist.shared.kind import Kind

SERVICE = Kind("Service", "v1", "services", "service")
CONFIGMAP = Kind("ConfigMap", "v1", "configmaps", "configmap")
POD = Kind("Pod", "v1", "pods", "pod")
WORKLOAD = Kind("Workload", "kueue.x-k8s.io/v1beta2", "workloads", "workload.kueue.x-k8s.io")
# A native gang (distributed.gang, kdist.rendering.gang): created with the job, owned by it.
# Beta in Kubernetes 1.37 and 1.38; GA (v1) targeted at 1.39 (KEP-5832).
PODGROUP = Kind("PodGroup", "scheduling.k8s.io/v1beta1", "podgroups", "podgroup.scheduling.k8s.io")
PODGROUP_V1 = Kind("PodGroup", "scheduling.k8s.io/v1", "podgroups", "podgroup.scheduling.k8s.io")
#: The PodGroup versions kdist speaks, the one it prefers first.
PODGROUPS = (PODGROUP_V1, PODGROUP)
# Only asked about by `kdist check` (kdist.kube.probe.check): served or not, and the queues there.
LOCALQUEUE = Kind("LocalQueue", "kueue.x-k8s.io/v1beta2", "localqueues",
                  "localqueue.kueue.x-k8s.io")
# The reviews `kdist check` creates: answered, never stored.
ACCESS_REVIEW = Kind("SelfSubjectAccessReview", "authorization.k8s.io/v1",
                     "selfsubjectaccessreviews", "selfsubjectaccessreview")
SELF_REVIEW = Kind("SelfSubjectReview", "authentication.k8s.io/v1", "selfsubjectreviews",
                   "selfsubjectreview")
NAMESPACE = Kind("Namespace", "v1", "namespaces", "namespace")
ENDPOINTSLICE = Kind("EndpointSlice", "discovery.k8s.io/v1", "endpointslices",
                     "endpointslice.discovery.k8s.io")

#: The training objects, in the order a name is looked up.
TRAINING: tuple[Kind, ...] = backends.KINDS
#: What a training object is built from, created before it (a TrainJob's TrainingRuntime).
COMPANIONS: tuple[Kind, ...] = tuple(k for b in backends.BACKENDS for k in b.created_first)
BY_KIND = {k.kind: k for k in (*TRAINING, *COMPANIONS, SERVICE, CONFIGMAP, POD, ENDPOINTSLICE,
                                WORKLOAD, PODGROUP)}


def podgroup(serves: Callable[[Kind], bool]) -> Kind | None:
    """The PodGroup version a cluster serves (`serves`: its discovery), v1 where it lists
    podgroups there, else v1beta1; None where neither does."""
    return next((k for k in PODGROUPS if serves(k)), None)


def of(obj: dict) -> Kind:
    """The descriptor of an object kdist renders or reads (a PodGroup's by its apiVersion)."""
    if obj.get("kind") == PODGROUP.kind and obj.get("apiVersion") == PODGROUP_V1.api_version:
        return PODGROUP_V1
    try:
        return BY_KIND[obj.get("kind", "")]
    except KeyError:
        raise UsageError(f"kdist does not handle objects of kind {obj.get('kind')!r}") from None
