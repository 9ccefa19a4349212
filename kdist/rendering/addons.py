"""Cluster add-ons shipped in manifests/: a restricted namespace and least-privilege RBAC."""

from __future__ import annotations

from typing import Any

from kdist import backends

NAMESPACE = "kdist-jobs"
SERVICE_ACCOUNT = "kdist-submitter"
_LABELS = {"app.kubernetes.io/name": "kdist", "app.kubernetes.io/managed-by": "kdist"}

# Exactly what kdist's verbs call: submit (create + ownerReference), watch,
# status/list, logs, delete (foreground, then wait until gone); patch: the watch keeps
# the goodput ledger on the training object (kdist.shared.ledger).
# Each training kind's rules are its backend's (kdist.backends).
RULES: list[dict[str, Any]] = [
    *backends.rbac_rules(),
    # spec.workdir's code: created with the job; `kdist delete` lists the ones no
    # object owns (applied with kubectl) to delete them, then watches until all are gone.
    {"apiGroups": [""], "resources": ["configmaps"],
     "verbs": ["create", "list", "watch", "delete"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    # A native gang (distributed.gang): its PodGroup, created with the job and owned by it
    # (get: a create left unanswered is read back; delete: a failed submission is undone);
    # its state while the pods wait (only where scheduling.k8s.io/v1beta1 is served).
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["podgroups"],
     "verbs": ["create", "get", "list", "watch", "delete"]},
    # A queued job's state while it waits: Kueue's Workload (only where Kueue runs).
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"],
     "verbs": ["get", "list", "watch"]},
]


def namespace(name: str = NAMESPACE) -> dict[str, Any]:
    """A namespace that enforces Pod Security "restricted" (kdist's pods pass it)."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {
                **_LABELS,
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
                "pod-security.kubernetes.io/warn": "restricted",
                "pod-security.kubernetes.io/audit": "restricted",
            },
        },
    }


def rbac(namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """A ServiceAccount, Role and RoleBinding allowing exactly what kdist does."""
    meta = {"namespace": namespace, "labels": dict(_LABELS)}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": SERVICE_ACCOUNT, **meta}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": SERVICE_ACCOUNT, **meta}, "rules": RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": SERVICE_ACCOUNT, **meta},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": SERVICE_ACCOUNT},
         "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT,
                       "namespace": namespace}]},
    ]
