"""Every label and annotation key kdist sets or reads (``kdist.rendering.labels`` builds them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DOMAIN = "kdist.dev"
JOB_NAME = f"{DOMAIN}/job-name"
BACKEND = f"{DOMAIN}/backend"
COMPONENT = "app.kubernetes.io/component"
NAME = "app.kubernetes.io/name"
INSTANCE = "app.kubernetes.io/instance"
MANAGED_BY = "app.kubernetes.io/managed-by"
QUEUE = "kueue.x-k8s.io/queue-name"
#: Kueue's label on a Workload naming the uid of the job it admits.
KUEUE_JOB_UID = "kueue.x-k8s.io/job-uid"
# On each ConfigMap of a shipped workdir (the mounted files cannot carry them).
CODE_SHA256 = f"{DOMAIN}/code-sha256"
#: On the shipped runtime's ConfigMap (spec.runtime): the zip's sha256.
RUNTIME_SHA256 = f"{DOMAIN}/runtime-sha256"
CODE_PART = f"{DOMAIN}/code-part"
CODE_PARTS = f"{DOMAIN}/code-parts"
#: On every object a submission creates: a token of that submission alone, by which it
#: knows what it made when a create's answer never came (``kdist.kube.write.creating``).
SUBMISSION = f"{DOMAIN}/submission"

# Where the rank of a pod can be read, per backend.
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# The Job controller's count of an index's earlier pods that failed (its per-index limit),
# counted and not counted: a deleted pod is gone, this remembers it.
INDEX_FAILURES = ("batch.kubernetes.io/job-index-failure-count",
                  "batch.kubernetes.io/job-index-ignored-failure-count")

#: Keys a user's labels may not set: the ones kdist sets, and the ones the Job
#: controller owns (it refuses or overwrites them). Other app.kubernetes.io/*
#: keys (part-of, version, ...) are the user's.
RESERVED_LABEL_KEYS = frozenset({NAME, INSTANCE, COMPONENT, MANAGED_BY, QUEUE,
                                 "job-name", "controller-uid"})
RESERVED_LABEL_PREFIXES = (f"{DOMAIN}/", "batch.kubernetes.io/")


def is_reserved(key: str) -> bool:
    """Whether `key` is a label kdist or the Job controller sets (a user may not)."""
    return key in RESERVED_LABEL_KEYS or key.startswith(RESERVED_LABEL_PREFIXES)


def selector(name: str) -> dict[str, str]:
    """Labels that select every object and pod of job `name` (every backend)."""
    return {JOB_NAME: name}


def selector_string(name: str) -> str:
    return ",".join(f"{k}={v}" for k, v in selector(name).items())


def made_by_kdist(obj: Mapping[str, Any], job_name: str) -> bool:
    """Whether `obj` is kdist's, of job `job_name`: labelled managed-by kdist (what
    `kdist list` shows) and with that job's name. The one rule for every kind kdist
    deletes; a user's own object of the same name has neither label."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(MANAGED_BY) == "kdist" and labels.get(JOB_NAME) == job_name


def kdist_labels_text(job_name: str) -> str:
    """The labels `made_by_kdist` asks for, as a selector a message can show."""
    return f"{MANAGED_BY}=kdist,{JOB_NAME}={job_name}"
