"""kdist: distributed PyTorch training on Kubernetes from one job.yaml.

The Python API (docs/DESIGN.md, "Python API"; the CLI is a shell over it):

    job = kdist.load_job("job.yaml")    # validate; raises kdist.SpecError
    objects = kdist.render(job)         # pure: list of Kubernetes objects (dicts)
    client = kdist.Client(namespace="team-a")   # the target once, one connection
    client.submit(job)                  # create, follow to the end; JobFailed if it fails
    client.status(name), client.logs(name, follow=True), client.metrics(name), ...
    client.train(fn, nodes=2)           # a function on every rank; rank 0's return value
    kdist.submit(job), kdist.status(name), ...  # the same over a default client

In a training script (docs/byo-script.md): ``kdist.preemption_requested()``
once per step, then save and ``sys.exit(kdist.PREEMPTED)``.

Everything is imported on first use: the container side (``kdist.launch``,
``kdist.workloads``) imports this package too, and must not pay for
pydantic, jinja2, yaml or the kubernetes client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "ClusterError": "kdist.shared.errors",
    "JobFailed": "kdist.shared.errors",
    "JobNotFound": "kdist.shared.errors",
    "KdistError": "kdist.shared.errors",
    "SpecError": "kdist.shared.errors",
    "TimedOut": "kdist.shared.errors",
    "UsageError": "kdist.shared.errors",
    "TrainingJob": "kdist.spec.model",
    # The job-file functions through kdist.api, which checks their arguments first.
    "load_job": "kdist.api.files",
    "parse_job": "kdist.api.files",
    "render": "kdist.api.files",
    "to_yaml": "kdist.api.files",
    "Client": "kdist.api",
    "metrics": "kdist.api",
    "train": "kdist.api",
    "wait_many": "kdist.api",
    "submit": "kdist.api",
    "wait": "kdist.api",
    "status": "kdist.api",
    "logs": "kdist.api",
    "list_jobs": "kdist.api",
    "delete": "kdist.api",
    # For a user's own training script (the runtime: torch, no CLI libraries).
    "preemption_requested": "kdist.runtime.preemption",
    "PREEMPTED": "kdist.runtime.preemption",
}
__all__ = [
    "PREEMPTED", "preemption_requested",
    "Client", "ClusterError", "JobFailed", "JobNotFound", "KdistError", "SpecError", "TimedOut",
    "TrainingJob", "UsageError", "delete", "list_jobs", "load_job", "logs", "metrics",
    "parse_job", "render", "status", "submit", "to_yaml", "train", "wait", "wait_many",
]

if TYPE_CHECKING:
    from kdist.api import (
        Client,
        delete,
        list_jobs,
        logs,
        metrics,
        status,
        submit,
        train,
        wait,
        wait_many,
    )
    from kdist.api.files import load_job, parse_job, render, to_yaml
    from kdist.runtime.preemption import PREEMPTED, preemption_requested
    from kdist.shared.errors import (
        ClusterError,
        JobFailed,
        JobNotFound,
        KdistError,
        SpecError,
        TimedOut,
        UsageError,
    )
    from kdist.spec.model import TrainingJob


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kdist' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
