"""backend indexed-job: an Indexed Job and a headless Service; any cluster, no operator.

The completion index is the node rank; node 0 is `<job>-0.<job>` behind the
Service (`publishNotReadyAddresses`, so it resolves before a pod is Ready). The
Job's podFailurePolicy and backoffLimitPerIndex are kdist's restart rule
(job.yaml.j2); the launcher counts restarts by the Job controller's per-index
failure annotations.
"""

from __future__ import annotations

from typing import Any

from kdist.backends.base import (
    CONDITIONS,
    FAILED,
    POD_TEMPLATE,
    SUCCEEDED,
    TRAINING_VERBS,
    Backend,
    completion_index,
    field_path,
    index_failures,
    less_spares,
    node_count,
    spec_of,
)
from kdist.shared import env as E
from kdist.shared import labels as L
from kdist.shared.kind import Kind

JOB = Kind("Job", "batch/v1", "jobs", "job.batch")


class IndexedJob(Backend):
    name = "indexed-job"
    kind = JOB
    templates = ("job.yaml.j2", "service.yaml.j2")
    summary = "an Indexed Job + headless Service (any cluster)"
    in_place_restarts = True
    native_gang = True
    elastic = True
    # FailureTarget/SuccessCriteriaMet come first on recent Kubernetes (1.31+);
    # Failed/Complete only once every pod has stopped.
    terminal = {"Complete": SUCCEEDED, "SuccessCriteriaMet": SUCCEEDED,
                "Failed": FAILED, "FailureTarget": FAILED}
    rbac = [
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": [*TRAINING_VERBS]},
        {"apiGroups": [""], "resources": ["services"],
         "verbs": ["create", "get", "list", "watch", "delete"]},
        # `kdist delete` waits until the Service's EndpointSlices are gone too.
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
         "verbs": ["list", "watch"]},
    ]
    shape = {"spec": {"template": POD_TEMPLATE},
             "status": {"conditions": CONDITIONS, "completionTime": str}}

    def master_addr(self, name: str) -> str | None:
        return f"{name}-0.{name}"

    def subdomain(self, name: str) -> str:
        return name

    def slot_addr(self, name: str) -> str | None:
        return f"{name}-{{slot}}.{name}"

    def rank_env(self, max_restarts: int) -> list[dict[str, str]]:
        """The completion index; with restarts allowed, the Job controller's failure counts
        of the index, from which the launcher tells which restart this is
        (kdist.runtime.restarts)."""
        out = [{"name": E.NODE_RANK, "path": field_path(L.COMPLETION_INDEX)}]
        if max_restarts:
            failed, ignored = L.INDEX_FAILURES
            out += [{"name": E.INDEX_FAILURES, "path": field_path(failed)},
                    {"name": E.INDEX_IGNORED_FAILURES, "path": field_path(ignored)}]
        return out

    def rendered_kinds(self) -> list[str]:
        return ["Job", "Service"]

    def pod_templates(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        return [spec_of(obj).get("template") or {}]

    def nodes(self, obj: dict[str, Any]) -> int | None:
        value = spec_of(obj).get("completions")
        if value is None:
            return None
        return less_spares(obj, node_count(obj, "spec.completions", value))

    def pod_rank(self, labels: dict[str, Any], annotations: dict[str, Any]) -> int | None:
        return completion_index(labels, annotations)

    def earlier_pods(self, labels: dict[str, Any], annotations: dict[str, Any]) -> int:
        """The Job controller's failures of the pod's index, counted and ignored."""
        return index_failures(annotations)

    def own_pod_selector(self, name: str) -> str:
        return f"batch.kubernetes.io/job-name={name}"


BACKEND = IndexedJob()
