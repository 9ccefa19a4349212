"""spec.trainjob: what backend trainjob takes beyond the others (issue 57).

``runtimeRef: NAME`` renders the TrainJob alone, pointing at an existing
ClusterTrainingRuntime (an admin's, e.g. Kubeflow's stock ``torch-distributed``) instead of
the job's own TrainingRuntime. kdist's image, launcher command, env (the node rank and
restart count from the pod's own metadata too), node count and resources then go in the
TrainJob's ``spec.trainer``; its volumes, mounts, security contexts, labels, annotations,
service account and placement in ``spec.runtimePatches`` (v2.3.0: a strategic-merge patch
of the runtime's JobSet, by replicated Job and container name). What neither carries is
refused here, naming the field (`uncarried`); the runtime's own JobSet decides the rest
(its failure policy: the restarts).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from kdist.spec import checks as C
from kdist.spec.pod import PodModel as _Model


class TrainJobSettings(_Model):
    """Backend trainjob only."""

    runtime_ref: str | None = Field(default=None, description=(
        "An existing ClusterTrainingRuntime to run on (its replicated Job `node` with a "
        "container `node`, labelled trainer.kubeflow.org/trainjob-ancestor-step: trainer): "
        "only the TrainJob is made; the runtime's JobSet decides restarts. None: the job's own "
        "TrainingRuntime, kdist's JobSet."))

    @field_validator("runtime_ref")
    @classmethod
    def _ref(cls, v: str | None) -> str | None:
        return v if v is None else C.subdomain(v, "trainjob.runtimeRef")


#: spec fields a TrainJob on a runtimeRef cannot carry, and why: (path, is it set?, why).
_UNCARRIED: tuple[tuple[str, Any, str], ...] = (
    ("distributed.maxRestarts", lambda s: s.distributed.max_restarts != 0,
     "the runtime's JobSet failure policy decides restarts"),
    ("ttlSecondsAfterFinished", lambda s: "ttl_seconds_after_finished" in s.model_fields_set,
     "the runtime's JobSet says it"),
    ("envFrom", lambda s: bool(s.env_from), "a TrainJob's trainer env has no envFrom"),
    ("podTemplateOverlay", lambda s: s.pod_template_overlay is not None,
     "runtimePatches carry only some pod fields"),
    ("scheduling.priorityClassName", lambda s: bool(s.scheduling.priority_class_name), ""),
    ("scheduling.schedulerName", lambda s: bool(s.scheduling.scheduler_name), ""),
    ("scheduling.topologySpreadConstraints",
     lambda s: bool(s.scheduling.topology_spread_constraints), ""),
    ("pod.runtimeClassName", lambda s: s.pod.runtime_class_name is not None, ""),
    ("pod.hostNetwork", lambda s: s.pod.host_network, ""),
    ("pod.automountServiceAccountToken",
     lambda s: s.pod.automount_service_account_token is not None, ""),
)


def uncarried(spec: Any) -> str:
    """Why `spec` (a JobSpec) cannot be a TrainJob on its trainjob.runtimeRef, one line
    naming every field at fault; "" when it can (or names no runtimeRef)."""
    if spec.trainjob.runtime_ref is None:
        return ""
    if spec.backend != "trainjob":
        return f"trainjob.runtimeRef: needs backend trainjob (not {spec.backend})"
    fields = [f"{path} ({why or 'runtimePatches (v2.3.0) have no such pod field'})"
              for path, is_set, why in _UNCARRIED if is_set(spec)]
    return ("trainjob.runtimeRef: a TrainJob on a ClusterTrainingRuntime cannot carry "
            + "; ".join(fields)) if fields else ""
