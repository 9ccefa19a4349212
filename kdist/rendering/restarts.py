"""How a rendered gang restarts (``distributed.restartMode``): new pods, or in place.

``recreate``: a failed pod fails, the Job controller makes a new one
(the Job's per-index backoff limit counts them), the training operator likewise.

``inPlace`` (Indexed Job only): the ``pytorch`` container carries a restart rule
(KEP-5307's ``restartPolicyRules``) with the ``RestartAllContainers`` action
(KEP-5532) on every retryable exit code (``exitcodes.in_place_codes``): the kubelet
restarts the pod's containers where they are (sandbox, IP and volumes kept), with no
pod recreated and no Job backoff. Every peer of a failed rank exits retryably too, so
the whole gang restarts in place. The Job controller never sees these restarts, so the
launcher counts its own starts on an emptyDir the restart keeps
(``kdist.runtime.restarts``) and, with ``maxRestarts`` used, exits
``exitcodes.RESTARTS_SPENT``, on which the podFailurePolicy fails the job (as on a
code error; the rule is the same in both modes). A pod that
is really gone (deleted, evicted, its node lost) still goes through the Job controller:
its replacement joins the survivors, which restarted in place and wait at the
rendezvous.

``auto`` is resolved by the submitter from what the cluster answers, never from a
version string: before rendering it asks ``kdist check``'s restart-rules probe
(``kdist.kube.probe.restarts``), and renders in place where the rule is kept, else
``recreate`` (dropped, refused, or the probe could not tell).
What the created object says is the mode (``kdist.kube.watch.objects.restart_mode_of``).
Without a cluster (``kdist render``, ``--dry-run=client``) ``auto`` renders
``recreate``, the form every cluster accepts.
"""

from __future__ import annotations

from typing import Any

from kdist import backends
from kdist.shared import env as E
from kdist.shared import exitcodes
from kdist.shared.errors import RenderError
from kdist.spec.model import TrainingJob

IN_PLACE, RECREATE = "inPlace", "recreate"
MODES = (IN_PLACE, RECREATE)
VOLUME = "kdist-restarts"
#: The action of KEP-5532 (beta and on by default since Kubernetes 1.36).
ACTION = "RestartAllContainers"


def can_restart_in_place(job: TrainingJob) -> bool:
    """Whether the spec allows in place at all (Indexed Job, restartMode not recreate)."""
    return backends.get(job.spec.backend).in_place_restarts and \
        job.spec.distributed.restart_mode != RECREATE


def resolve(job: TrainingJob, cluster: bool = False) -> str:
    """The mode to render: the spec's; for auto, inPlace when sent to a `cluster` (whose
    answer decides), else recreate (the form every cluster accepts)."""
    asked = job.spec.distributed.restart_mode
    if asked != "auto":
        return asked
    return IN_PLACE if cluster and can_restart_in_place(job) else RECREATE


def rule() -> dict[str, Any]:
    """The container's restart rule: the whole pod restarts on a retryable exit."""
    return {"action": ACTION,
            "exitCodes": {"operator": "In", "values": exitcodes.in_place_codes()}}


def apply(job: TrainingJob, mode: str, ctx: dict[str, Any]) -> None:
    """Add `mode`'s fields to the template context."""
    if mode not in MODES:
        raise RenderError(f"restart mode {mode!r} is not one of {', '.join(MODES)}")
    if mode == RECREATE:
        # the gang re-forms (smaller, or with a spare) in process, whatever the containers do
        if job.spec.elastic or job.spec.distributed.spares:
            in_process(job, ctx)
        return
    if not backends.get(job.spec.backend).in_place_restarts:
        raise RenderError("restart mode inPlace needs backend "
                          f"{backends.able('in_place_restarts')}")
    ctx["pod_spec"]["restart_rule"] = rule()
    in_process(job, ctx)


def in_process(job: TrainingJob, ctx: dict[str, Any]) -> None:
    """The launchers restart their workers in process (KDIST_RESTART_DIR, on an emptyDir
    where they count their restarts). In place, every pod has it; recreating, an elastic
    job's (spec.minNodes) and a job with spares have it too, because a shrink, a grow and a
    spare taking a rank are restarts in process (a JobSet never restarts a container in
    place; an Indexed Job rendered without a cluster to ask is recreate): only a launcher
    that must go itself fails its pod, and the controller recreates it (a JobSet, the
    whole gang)."""
    pod = ctx["pod_spec"]
    pod["env"].append({"name": E.RESTART_DIR, "value": E.DEFAULT_RESTART_DIR})
    if not job.spec.distributed.restart_workers:
        pod["env"].append({"name": E.RESTART_WORKERS, "value": "0"})
    pod["volume_mounts"].append({"name": VOLUME, "mountPath": E.DEFAULT_RESTART_DIR})
    pod["volumes"].append({"name": VOLUME, "emptyDir": {"sizeLimit": "1Mi"}})
