"""Cluster objects as the API would hold them for a kdist job, and a job.yaml to submit.

Only the fields kdist reads are filled in. The label keys are kdist's documented
contract (docs/user-guide.md: `kdist.dev/job-name` is the selector every verb uses).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kdist.shared.facts import ANNOTATION, Facts

JOB_NAME = "kdist.dev/job-name"
MANAGED_BY = "app.kubernetes.io/managed-by"
BACKEND = "kdist.dev/backend"
INDEX = "batch.kubernetes.io/job-completion-index"


def labels(name: str, backend: str = "indexed-job") -> dict[str, str]:
    return {JOB_NAME: name, MANAGED_BY: "kdist", BACKEND: backend,
            "app.kubernetes.io/name": "kdist", "app.kubernetes.io/instance": name}


def job(name: str, *, nodes: int = 2, namespace: str = "default",
        outcome: str | None = None, procs_per_node: int | str = 1) -> dict[str, Any]:
    """An Indexed Job as kdist renders it: running, or ended ("Complete" or "Failed")."""
    conditions = [{"type": outcome, "status": "True"}] if outcome else []
    complete = outcome == "Complete"
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": labels(name, "indexed-job"),
                     "annotations": {ANNOTATION: Facts(
                         max_steps=6, max_restarts=0,
                         procs_per_node=procs_per_node if isinstance(procs_per_node, int)
                         else None).encode()}},
        "spec": {"completions": nodes, "parallelism": nodes, "completionMode": "Indexed",
                 "template": {"metadata": {"labels": labels(name)}, "spec": {"containers": [
                     {"name": "pytorch", "image": "kdist-train:dev-cpu",
                      "args": ["--max-steps", "6"],
                      "env": [{"name": "KDIST_NPROC_PER_NODE",
                               "value": str(procs_per_node)}]}]}}},
        "status": {"conditions": conditions, "ready": 0 if outcome else nodes,
                   "succeeded": nodes if complete else 0},
    }


def pytorchjob(name: str, *, nodes: int = 2, namespace: str = "default") -> dict[str, Any]:
    replicas = {"Master": {"replicas": 1, "template": {}}}
    if nodes > 1:
        replicas["Worker"] = {"replicas": nodes - 1, "template": {}}
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": labels(name, "pytorchjob")},
        "spec": {"pytorchReplicaSpecs": replicas},
        "status": {"conditions": [{"type": "Running", "status": "True"}]},
    }


def service(name: str, owner: dict[str, Any] | None = None,
            namespace: str = "default") -> dict[str, Any]:
    """The headless Service kdist creates with an indexed-job (owned by the Job)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels(name)}
    if owner is not None:
        meta["ownerReferences"] = [_owner_ref(owner)]
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta,
            "spec": {"clusterIP": "None", "selector": {JOB_NAME: name}}}


def pod(owner: dict[str, Any], rank: int, *, exit_code: int | None = None) -> dict[str, Any]:
    """Rank `rank`'s pod of an Indexed Job `owner`: running, or ended with `exit_code`."""
    name = owner["metadata"]["name"]
    if exit_code is None:
        phase, state = "Running", {"running": {"startedAt": "2025-01-02T03:04:00Z"}}
    else:
        phase = "Succeeded" if exit_code == 0 else "Failed"
        state = {"terminated": {"exitCode": exit_code,
                                "reason": "Completed" if exit_code == 0 else "Error",
                                "finishedAt": "2025-01-02T03:05:00Z"}}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-{rank}-abcde", "namespace": owner["metadata"]["namespace"],
                     "labels": {**labels(name), INDEX: str(rank)},
                     "annotations": {INDEX: str(rank)},
                     "ownerReferences": [_owner_ref(owner)]},
        "spec": {"nodeName": "node-1", "containers": [{"name": "pytorch"}]},
        "status": {"phase": phase, "containerStatuses": [
            {"name": "pytorch", "restartCount": 0, "state": state}]},
    }


def _owner_ref(owner: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"],
            "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
            "blockOwnerDeletion": True}


def step_log(rank: int, steps: int = 6, world: int = 2) -> str:
    """What a kdist workload prints: JSON step lines every 2 steps, then done."""
    lines = [f"rank {rank} starting"]
    for step in range(2, steps + 1, 2):
        lines.append(json.dumps({"event": "step", "step": step, "loss": round(1 / step, 4),
                                 "rank": rank, "world_size": world}))
    lines.append(json.dumps({"event": "done", "step": steps, "rank": rank, "world_size": world}))
    return "\n".join(lines) + "\n"


def job_yaml(path: Path, name: str = "demo", *, backend: str = "indexed-job",
             namespace: str | None = None) -> Path:
    """A valid job.yaml. `name` goes in as a JSON string, so any text reaches the loader."""
    ns = f"\n  namespace: {json.dumps(namespace)}" if namespace is not None else ""
    path.write_text(
        "apiVersion: kdist/v1alpha1\nkind: TrainingJob\n"
        f"metadata:\n  name: {json.dumps(name)}{ns}\n"
        "spec:\n"
        f"  backend: {backend}\n"
        "  image: kdist-train:dev-cpu\n"
        "  nodes: 2\n"
        "  workload:\n"
        "    module: kdist.workloads.ddp\n"
        '    args: ["--max-steps", "6"]\n'
        "  distributed: {backend: gloo}\n"
        "  resources: {cpu: '1', memory: 1Gi}\n")
    return path
