"""The resources kdist touches, one descriptor each: where they live in the API.

Every URL kdist requests is built here. `Kind.item` refuses a name or
namespace that is not one, so no code path can turn an empty or odd name into
a collection URL (``DELETE .../jobs/`` deletes every Job in a namespace).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from kdist.shared.errors import UsageError
from kdist.shared.names import namespace_problem, object_name_problem

KF_GROUP, KF_VERSION, KF_PLURAL = "kubeflow.org", "v1", "pytorchjobs"


@dataclass(frozen=True)
class Kind:
    kind: str
    api_version: str  # "v1" (core) or "group/version"
    plural: str
    ref: str  # as kubectl names it: job.batch, service, ...

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def _root(self) -> str:
        return f"/apis/{self.api_version}" if "/" in self.api_version else \
            f"/api/{self.api_version}"

    def collection(self, namespace: str | None) -> str:
        """The list/watch/create URL, in `namespace` or (None) in every namespace."""
        if namespace is None:
            return f"{self._root()}/{self.plural}"
        return f"{self._root()}/namespaces/{_checked_namespace(namespace)}/{self.plural}"

    def item(self, namespace: str, name: str, subresource: str = "") -> str:
        """One object's URL; refuses anything that is not a valid name."""
        problem = object_name_problem(name)
        if problem:
            raise UsageError(f"{self.plural}: {problem}")
        url = f"{self.collection(namespace)}/{quote(name, safe='')}"
        return f"{url}/{subresource}" if subresource else url

    def discovery(self) -> str:
        return self._root()


def _checked_namespace(namespace: str) -> str:
    problem = namespace_problem(namespace)
    if problem:
        raise UsageError(problem)
    return namespace


JOB = Kind("Job", "batch/v1", "jobs", "job.batch")
PYTORCHJOB = Kind("PyTorchJob", f"{KF_GROUP}/{KF_VERSION}", KF_PLURAL, "pytorchjob.kubeflow.org")
SERVICE = Kind("Service", "v1", "services", "service")
CONFIGMAP = Kind("ConfigMap", "v1", "configmaps", "configmap")
POD = Kind("Pod", "v1", "pods", "pod")
WORKLOAD = Kind("Workload", "kueue.x-k8s.io/v1beta2", "workloads", "workload.kueue.x-k8s.io")
# A native gang (distributed.gang, kdist.rendering.gang): created with the job, owned by it.
PODGROUP = Kind("PodGroup", "scheduling.k8s.io/v1beta1", "podgroups", "podgroup.scheduling.k8s.io")
# Only asked about by `kdist check` (kdist.kube.probe): served or not, and the queues there.
JOBSET = Kind("JobSet", "jobset.x-k8s.io/v1alpha2", "jobsets", "jobset.jobset.x-k8s.io")
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
TRAINING = (JOB, PYTORCHJOB)
BY_KIND = {k.kind: k for k in (JOB, PYTORCHJOB, SERVICE, CONFIGMAP, POD, ENDPOINTSLICE,
                                WORKLOAD, PODGROUP)}


def of(obj: dict) -> Kind:
    """The descriptor of an object kdist renders or reads."""
    try:
        return BY_KIND[obj.get("kind", "")]
    except KeyError:
        raise UsageError(f"kdist does not handle objects of kind {obj.get('kind')!r}") from None
