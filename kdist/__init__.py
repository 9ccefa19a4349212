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

# Private names only (and no `from __future__ import annotations`, which would leave
# `annotations` behind): `dir(kdist)` is what a notebook offers, kdist's API alone.
import importlib as _importlib
import typing as _typing

__version__ = "0.1.0"

#: Everything `kdist.api` exports is importable from `kdist` too (docs/python-api.md says
#: so; a test holds this list equal to `kdist.api.__all__`).
_API = (
    "Client", "ClusterOptions", "Connection", "DELETE_TIMEOUT", "Deleted", "JobSummary", "Observer",
    "Quiet", "RankLog", "Submission", "Validated", "check", "check_name", "client", "connect",
    "delete", "follow", "list_jobs", "load", "load_file", "logs", "metrics", "namespace",
    "pack_code", "plot", "pod_security", "rank_logs", "reattach_hint", "render_objects",
    "run_local", "security_note", "status", "submit", "target", "timeout_line", "to_json",
    "to_yaml", "train", "validate", "validate_file", "wait", "wait_many", "watch_jobs",
    "with_namespace",
)
_LAZY = {
    **dict.fromkeys(_API, "kdist.api"),
    "ClusterError": "kdist.shared.errors",
    "JobFailed": "kdist.shared.errors",
    "JobNotFound": "kdist.shared.errors",
    "KdistError": "kdist.shared.errors",
    "SpecError": "kdist.shared.errors",
    "TimedOut": "kdist.shared.errors",
    "UsageError": "kdist.shared.errors",
    "TrainingJob": "kdist.spec.model",
    # The results the API's docs name: a job's state, a step, a `kdist check` verdict.
    "JobState": "kdist.kube.watch.state",
    "Step": "kdist.api.steps",
    "Verdict": "kdist.kube.probe.verdict",
    # The job-file functions through kdist.api, which checks their arguments first.
    "load_job": "kdist.api.files",
    "parse_job": "kdist.api.files",
    "render": "kdist.api.files",
    "to_yaml": "kdist.api.files",
    # For a user's own training script (the runtime: torch, no CLI libraries).
    "preemption_requested": "kdist.runtime.preemption",
    "PREEMPTED": "kdist.runtime.preemption",
}
__all__ = [  # every name of _LAZY (a test holds them equal)
    "Client", "ClusterError", "ClusterOptions", "Connection", "DELETE_TIMEOUT", "Deleted",
    "JobFailed", "JobNotFound", "JobState", "JobSummary", "KdistError", "Observer", "PREEMPTED",
    "Quiet", "RankLog", "SpecError", "Step", "Submission", "TimedOut", "TrainingJob", "UsageError",
    "Validated", "Verdict", "check", "check_name", "client", "connect", "delete", "follow",
    "list_jobs", "load", "load_file", "load_job", "logs", "metrics", "namespace", "pack_code",
    "parse_job", "plot", "pod_security", "preemption_requested", "rank_logs", "reattach_hint",
    "render", "render_objects", "run_local", "security_note", "status", "submit", "target",
    "timeout_line", "to_json", "to_yaml", "train", "validate", "validate_file", "wait", "wait_many",
    "watch_jobs", "with_namespace",
]

if _typing.TYPE_CHECKING:
    from kdist.api import (
        DELETE_TIMEOUT,
        Client,
        ClusterOptions,
        Connection,
        Deleted,
        JobSummary,
        Observer,
        Quiet,
        RankLog,
        Submission,
        Validated,
        check,
        check_name,
        connect,
        delete,
        follow,
        list_jobs,
        load,
        load_file,
        logs,
        metrics,
        namespace,
        pack_code,
        plot,
        pod_security,
        rank_logs,
        reattach_hint,
        render_objects,
        run_local,
        security_note,
        status,
        submit,
        target,
        timeout_line,
        to_json,
        train,
        validate,
        validate_file,
        wait,
        wait_many,
        watch_jobs,
        with_namespace,
    )
    from kdist.api.files import load_job, parse_job, render, to_yaml

    # The function, not the module kdist.api.clients (mypy may take either from kdist.api).
    from kdist.api.shortcuts import client
    from kdist.api.steps import Step
    from kdist.kube.probe.verdict import Verdict
    from kdist.kube.watch.state import JobState
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


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kdist' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """What a notebook's completion offers: the API's names (the lazy ones too, before first
    use), the submodules imported so far, __version__; no helper of this module's own."""
    public = {n for n in globals() if not n.startswith("_")}
    return sorted(public | set(_LAZY) | {"__version__"})
