"""How a rendered job's pods are scheduled (``distributed.gang``): all at once, or pod by pod.

``native``: a PodGroup (``scheduling.k8s.io/v1beta1``, KEP-4671/KEP-5832; served where the
``GenericWorkload`` gate is on, beta and off by default in Kubernetes 1.37; ``v1`` where the
cluster's discovery lists podgroups there, as it will once GA) named after
the job, with ``schedulingPolicy.gang.minCount`` = nodes, and every pod's
``spec.schedulingGroup.podGroupName`` naming it. kube-scheduler's GangScheduling plugin
then holds the pods until all of them can be placed at once: two jobs that each need the
whole cluster never both half-start (each holding part of it while waiting for the
rest). The PodGroup comes after the training object, so the submitter makes it owned by
it (``kdist.kube.write.creating``): deleting the job deletes it. A dry-run create of it comes
before the job: a refused PodGroup then leaves nothing to undo (``kdist.api.jobs.create``).
A Job whose pod template names a schedulingGroup is left alone by the Job controller's
own Workload integration (KEP-5547, gate ``WorkloadWithJob``): kdist's PodGroup is the
one its pods use.

``none``: pods are scheduled one by one (and Kueue, ``scheduling.queue``, stays the
portable way to admit a job whole: a queued job gets no native gang).

``auto`` is resolved by the submitter: ``native`` where discovery shows the PodGroup
resource, else ``none``. Without a cluster (``kdist render``, ``--dry-run=client``)
``auto`` renders ``none``, the form every cluster accepts, and ``native`` a v1beta1 PodGroup
(the submitter passes the version discovery found). A PyTorchJob never gets one:
the training operator's schema prunes a pod template's ``schedulingGroup``.
"""

from __future__ import annotations

from typing import Any

from kdist import backends
from kdist.rendering.labels import object_labels
from kdist.shared.errors import RenderError
from kdist.spec.model import TrainingJob

NATIVE, NONE = "native", "none"
MODES = (NATIVE, NONE)
#: The PodGroup's apiVersion without a cluster to ask (Kubernetes 1.37 and 1.38 serve it).
API_VERSION = "scheduling.k8s.io/v1beta1"


def can_gang(job: TrainingJob) -> bool:
    """Whether the spec allows a native gang at all (Indexed Job, no Kueue queue, not none)."""
    s = job.spec
    return backends.get(s.backend).native_gang and not s.scheduling.queue and \
        s.distributed.gang != NONE


def resolve(job: TrainingJob, served: bool = False) -> str:
    """The gang to render: the spec's; for auto, native where the cluster `served` the
    PodGroup resource (and the spec allows one), else none."""
    asked = job.spec.distributed.gang
    if asked != "auto":
        return asked
    return NATIVE if served and can_gang(job) else NONE


def refused(error: Exception) -> bool:
    """Whether the training object's create was refused for its pods' schedulingGroup: it
    is sent without one instead (nothing was made: it is the first object). A PodGroup a
    Role refuses is asked by a dry run before (``kdist.kube.write.creating.refusal``)."""
    return "schedulingGroup" in str(error)


def podgroup_name(job: TrainingJob) -> str:
    """The PodGroup's name: the job's (one PodGroup per job, in its namespace)."""
    return job.metadata.name


def podgroup(job: TrainingJob, api_version: str = API_VERSION) -> dict[str, Any]:
    """The job's PodGroup: its pods are placed all together (minCount = nodes) or not at all;
    `api_version`: the one the cluster serves."""
    meta: dict[str, Any] = {"name": podgroup_name(job), "labels": object_labels(job, "gang")}
    if job.metadata.namespace:
        meta["namespace"] = job.metadata.namespace
    return {"apiVersion": api_version, "kind": "PodGroup", "metadata": meta,
            "spec": {"schedulingPolicy": {"gang": {"minCount": job.spec.nodes}}}}


def apply(job: TrainingJob, mode: str, ctx: dict[str, Any],
          api_version: str = API_VERSION) -> list[dict[str, Any]]:
    """Add `mode`'s fields to the template context; the objects it adds (the PodGroup, of
    `api_version`)."""
    if mode not in MODES:
        raise RenderError(f"gang {mode!r} is not one of {', '.join(MODES)}")
    if mode == NONE:
        return []
    if not backends.get(job.spec.backend).native_gang:
        raise RenderError(f"gang native needs backend {backends.able('native_gang')}")
    if job.spec.scheduling.queue:
        raise RenderError("gang native with scheduling.queue: Kueue admits the job whole")
    ctx["pod_spec"]["scheduling_group"] = {"podGroupName": podgroup_name(job)}
    return [podgroup(job, api_version)]
