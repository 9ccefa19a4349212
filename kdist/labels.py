"""Every label and annotation key kdist sets, and the one function that builds them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kdist.spec import TrainingJob

DOMAIN = "kdist.dev"
JOB_NAME = f"{DOMAIN}/job-name"
BACKEND = f"{DOMAIN}/backend"
COMPONENT = "app.kubernetes.io/component"
NAME = "app.kubernetes.io/name"
INSTANCE = "app.kubernetes.io/instance"
MANAGED_BY = "app.kubernetes.io/managed-by"
QUEUE = "kueue.x-k8s.io/queue-name"

# Where the rank of a pod can be read, per backend.
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# The Job controller's count of an index's earlier pods that failed (backoffLimitPerIndex),
# counted and not counted: a deleted pod is gone, this remembers it.
INDEX_FAILURES = ("batch.kubernetes.io/job-index-failure-count",
                  "batch.kubernetes.io/job-index-ignored-failure-count")
KF_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KF_REPLICA_INDEX = "training.kubeflow.org/replica-index"
KF_JOB_NAME = "training.kubeflow.org/job-name"

RESERVED_LABEL_PREFIXES = (f"{DOMAIN}/", "app.kubernetes.io/", "kueue.x-k8s.io/")


def selector(name: str) -> dict[str, str]:
    """Labels that select every object and pod of job `name` (both backends)."""
    return {JOB_NAME: name}


def selector_string(name: str) -> str:
    return ",".join(f"{k}={v}" for k, v in selector(name).items())


def object_labels(job: TrainingJob, component: str) -> dict[str, str]:
    """The labels on every object kdist renders for `job`: the user's, then kdist's."""
    labels = dict(job.metadata.labels)
    labels.update({
        NAME: "kdist",
        INSTANCE: job.metadata.name,
        COMPONENT: component,
        MANAGED_BY: "kdist",
        BACKEND: job.spec.backend,
        **selector(job.metadata.name),
    })
    return labels
