"""Cluster objects as the API would hold them for a kdist job, and a job.yaml to submit.

Only the fields kdist reads are filled in. The label keys are kdist's documented
contract (docs/user-guide.md: `kdist.dev/job-name` is the selector every verb uses).
"""

from __future__ import annotations

import copy
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


def full_pod(owner: dict[str, Any], rank: int, *, exit_code: int | None = None,
             restarts: int = 0, last_exit: int | None = None) -> dict[str, Any]:
    """`pod` as kube-apiserver lists it, ~6 KB as a kdist pod on kwok's nodes is: the
    template's spec with what the scheduler and the admission plugins add, the kubelet's
    status, managedFields. `restarts` in place, the last one exiting `last_exit`."""
    p = pod(owner, rank, exit_code=exit_code)
    meta, uid = p["metadata"], owner["metadata"]["uid"]
    meta.update(generateName=f"{owner['metadata']['name']}-{rank}-",
                creationTimestamp="2025-01-02T03:04:00Z")
    meta["ownerReferences"][0]["controller"] = True
    meta["labels"].update({"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
                           "batch.kubernetes.io/job-name": owner["metadata"]["name"]})
    fields = {f"f:{k}": {} for k in meta["labels"]}
    spec = copy.deepcopy(owner["spec"]["template"]["spec"])
    container = spec["containers"][0]
    env = container.setdefault("env", []) + [
        {"name": f"KDIST_{k}", "value": f"value-of-{k.lower()}-{rank}"}
        for k in ("MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK", "RUN_ID", "STORE")]
    container.update(env=env, command=["python", "-m", "kdist.launch"], imagePullPolicy="Never",
                     resources={"limits": {"cpu": "1", "memory": "1Gi"},
                                "requests": {"cpu": "1", "memory": "1Gi"}},
                     terminationMessagePath="/dev/termination-log",
                     terminationMessagePolicy="FallbackToLogsOnError",
                     volumeMounts=[{"name": "kube-api-access-x", "readOnly": True,
                                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}])
    spec.update(nodeName=f"kwok-node-{rank}", hostname=f"{meta['name'][:-6]}",
                subdomain=owner["metadata"]["name"], restartPolicy="Never",
                schedulerName="default-scheduler", serviceAccountName="default",
                terminationGracePeriodSeconds=30, dnsPolicy="ClusterFirst", priority=0,
                enableServiceLinks=True, preemptionPolicy="PreemptLowerPriority",
                tolerations=[{"key": k, "operator": "Exists", "effect": "NoExecute",
                              "tolerationSeconds": 300} for k in
                             ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")],
                volumes=[{"name": "kube-api-access-x", "projected": {"defaultMode": 420,
                          "sources": [{"serviceAccountToken": {"expirationSeconds": 3607,
                                                               "path": "token"}},
                                      {"configMap": {"name": "kube-root-ca.crt", "items": [
                                          {"key": "ca.crt", "path": "ca.crt"}]}}]}}])
    p["spec"] = spec
    ip = f"10.1.{rank // 250}.{rank % 250}"
    status = p["status"]
    cs = status["containerStatuses"][0]
    cs.update(restartCount=restarts, ready=exit_code is None, started=exit_code is None,
              image="kdist-train:dev-cpu", imageID="", containerID=f"kwok://{rank:064x}")
    if last_exit is not None:
        cs["lastState"] = {"terminated": {"exitCode": last_exit, "reason": "Error",
                                          "finishedAt": "2025-01-02T03:04:30Z"}}
    status.update(hostIP="10.0.0.1", podIP=ip, podIPs=[{"ip": ip}], qosClass="Guaranteed",
                  startTime="2025-01-02T03:04:00Z", conditions=[
                      {"type": t, "status": "True", "lastProbeTime": None,
                       "lastTransitionTime": "2025-01-02T03:04:01Z"}
                      for t in ("PodReadyToStartContainers", "Initialized", "Ready",
                                "ContainersReady", "PodScheduled")])
    meta["managedFields"] = [
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
         "time": "2025-01-02T03:04:00Z", "fieldsType": "FieldsV1", "fieldsV1": {
             "f:metadata": {"f:labels": fields, "f:generateName": {}},
             "f:spec": {"f:containers": {'k:{"name":"pytorch"}': {
                 ".": {}, "f:args": {}, "f:command": {}, "f:image": {}, "f:resources": {},
                 "f:env": {f'k:{{"name":"{e["name"]}"}}': {".": {}, "f:name": {}, "f:value": {}}
                           for e in env}}}}}},
        {"manager": "kwok", "operation": "Update", "apiVersion": "v1", "subresource": "status",
         "time": "2025-01-02T03:04:01Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {
             "f:conditions": {f'k:{{"type":"{c["type"]}"}}': {
                 ".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {},
                 "f:type": {}} for c in status["conditions"]},
             "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {},
             "f:podIPs": {}, "f:startTime": {}}}}]
    return p


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
