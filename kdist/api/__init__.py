"""kdist's Python API: what the CLI does, as functions (docs/DESIGN.md, "Python API").

    import kdist
    job = kdist.load_job("job.yaml")
    sub = kdist.submit(job, wait=False)             # create; returns what was sent
    state = kdist.wait(job.metadata.name)           # follow to the end; JobFailed if it failed
    print(kdist.status("mnist-ddp").ranks[0].loss)
    kdist.delete("mnist-ddp")

Every function takes the cluster target as keywords (``kubeconfig=``,
``context=``, ``namespace=``, ``request_timeout=``; the kubeconfig's defaults
otherwise), validates names before sending anything, and raises the typed
errors of ``kdist.shared.errors`` (``UsageError``, ``JobNotFound``,
``ClusterError``, ``JobFailed``, ``TimedOut``). Results are plain dataclasses.
"""

from kdist.api.jobs import (
    DELETE_TIMEOUT,
    delete,
    follow,
    list_jobs,
    logs,
    status,
    submit,
    timeout_line,
    wait,
    with_namespace,
)
from kdist.api.many import wait_many, watch_jobs
from kdist.api.types import (
    Deleted,
    JobSummary,
    Observer,
    Quiet,
    RankLog,
    Submission,
    check_name,
    connect,
    namespace,
    reattach_hint,
    target,
)

__all__ = [
    "DELETE_TIMEOUT", "Deleted", "JobSummary", "Observer", "Quiet", "RankLog", "Submission",
    "check_name", "connect", "delete", "follow", "list_jobs", "logs", "namespace",
    "reattach_hint", "status", "submit", "target", "timeout_line", "wait", "wait_many",
    "watch_jobs", "with_namespace",
]
