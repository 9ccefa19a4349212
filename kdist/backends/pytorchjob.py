"""backend pytorchjob: a Kubeflow PyTorchJob, run by the training operator (v1.9).

The operator names node 0 (the Master replica) and sets each pod's rank and
master address in its env; its `ExitCode` restart policy and the run policy's
backoffLimit are kdist's restart rule (pytorchjob.yaml.j2). It recreates pods, so
restarts are never in place, and it drops a pod's schedulingGroup (no native gang).
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
    Map,
    bad_answer,
    node_count,
    rank_int,
    spec_of,
)
from kdist.shared.kind import Kind
from kdist.shared.limits import MAX_NODES

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
PYTORCHJOB = Kind("PyTorchJob", f"{GROUP}/{VERSION}", PLURAL, "pytorchjob.kubeflow.org")
# The operator's pod labels.
REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
JOB_NAME = "training.kubeflow.org/job-name"
SPECS = "pytorchReplicaSpecs"


class PyTorchJobBackend(Backend):
    name = "pytorchjob"
    kind = PYTORCHJOB
    templates = ("pytorchjob.yaml.j2",)
    summary = "a Kubeflow PyTorchJob (the training operator)"
    installs = "the Kubeflow training operator"
    no_in_place_why = "the training operator recreates a PyTorchJob's pods"
    no_gang_why = "the training operator's PyTorchJob drops a pod's schedulingGroup"
    no_elastic_why = ("the training operator's PyTorchJob has no success on fewer ranks or "
                      "on some of its pods, and no rule to ignore a fenced pod; its "
                      "elasticPolicy is torchrun's")
    unbounded_restarts = ("the Kubeflow training operator (v1.9) does not bound a PyTorchJob's "
                          "restarts (exit >= 128) by it")
    port_name = "pytorchjob-port"
    terminal = {"Succeeded": SUCCEEDED, "Failed": FAILED}
    rbac = [{"apiGroups": [GROUP], "resources": [PLURAL], "verbs": [*TRAINING_VERBS]}]
    shape = {"spec": {SPECS: Map({"template": POD_TEMPLATE}), "runPolicy": dict},
             "status": {"conditions": CONDITIONS}}

    def context(self, ctx: dict[str, Any]) -> dict[str, Any]:
        workers = ctx["nodes"] - 1
        return {"replicas": [{"type": "Master", "count": 1}]
                + ([{"type": "Worker", "count": workers}] if workers else [])}

    def rendered_kinds(self) -> list[str]:
        return ["PyTorchJob"]

    def pod_templates(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        reps = spec_of(obj).get(SPECS) or {}
        return [r.get("template") or {} for r in reps.values() if isinstance(r, dict)] \
            if isinstance(reps, dict) else []

    def nodes(self, obj: dict[str, Any]) -> int | None:
        reps = spec_of(obj).get(SPECS) or {}
        if not isinstance(reps, dict):
            raise bad_answer(obj, f"spec.{SPECS}", reps)
        total = 0
        for rtype, r in reps.items():
            value = r.get("replicas", 1) if isinstance(r, dict) else r
            total += node_count(obj, f"spec.{SPECS}.{rtype}.replicas",
                                1 if value is None else value, minimum=0)
        return node_count(obj, f"spec.{SPECS} (replicas in all)", total) if total else None

    def pod_rank(self, labels: dict[str, Any], annotations: dict[str, Any]) -> int | None:
        """Master is 0, worker i is i + 1."""
        replica_type = str(labels.get(REPLICA_TYPE) or "").lower()
        replica_index = rank_int(labels.get(REPLICA_INDEX))
        if replica_type == "master":
            return 0
        if replica_type == "worker" and replica_index is not None and \
                replica_index + 1 < MAX_NODES:
            return replica_index + 1
        return None

    def own_pod_selector(self, name: str) -> str:
        return f"{JOB_NAME}={name}"

    def suspended(self, obj: dict[str, Any]) -> bool:
        return bool((spec_of(obj).get("runPolicy") or {}).get("suspend"))

    def running(self, obj: dict[str, Any], conditions: dict[str, Any]) -> bool:
        return conditions.get("Running") == "True"


BACKEND = PyTorchJobBackend()
