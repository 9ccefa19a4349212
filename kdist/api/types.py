"""What the Python API returns and takes: results, the observer protocol, the target."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kdist.kube.config import ClusterOptions, KubeConfig, resolve_namespace
from kdist.shared.errors import UsageError
from kdist.shared.names import job_name_problem

if TYPE_CHECKING:
    from kdist.kube.client import Cluster
    from kdist.kube.tracker import JobState

#: Names kdist looks up may be any DNS-1035 label a Job or PyTorchJob can have.
LOOKUP_NAME_LIMIT = 63


class Observer(Protocol):
    """What `wait` reports to while it follows a job (the CLI's displays are observers)."""

    def start(self, state: JobState) -> None: ...
    def update(self, state: JobState) -> None: ...
    def tick(self, state: JobState) -> None: ...
    def warning(self, text: str) -> None: ...
    def log(self, rank: int | None, line: str) -> None: ...
    def stop(self) -> None: ...


class Quiet:
    """An observer that ignores everything (the default)."""

    def start(self, state: JobState) -> None: ...
    def update(self, state: JobState) -> None: ...
    def tick(self, state: JobState) -> None: ...
    def warning(self, text: str) -> None: ...
    def log(self, rank: int | None, line: str) -> None: ...
    def stop(self) -> None: ...


@dataclass(frozen=True)
class Submission:
    """What `submit` did: the objects as created (or as they would be), and what was said."""

    name: str
    namespace: str
    objects: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)  # what --replace deleted first
    dry_run: str | None = None  # None, "client" or "server"
    state: JobState | None = None  # the end state, when submitted with wait=True


@dataclass(frozen=True)
class JobSummary:
    """One row of `list_jobs`."""

    name: str
    namespace: str
    backend: str
    nodes: int | None
    phase: str
    age_s: float | None


@dataclass(frozen=True)
class RankLog:
    """One rank's log as `logs` reads it; `note` says why there are no lines."""

    rank: int
    pod: str
    lines: list[str]
    note: str = ""


def target(**options: Any) -> ClusterOptions:
    """The cluster target from keyword options (None = the kubeconfig's default)."""
    unknown = set(options) - {"kubeconfig", "context", "namespace", "request_timeout"}
    if unknown:
        raise TypeError(f"unknown option(s): {', '.join(sorted(unknown))}")
    return ClusterOptions(**options)


def check_name(name: str) -> str:
    """`name` if it can name a job; UsageError otherwise (before any request)."""
    problem = job_name_problem(name, LOOKUP_NAME_LIMIT)
    if problem:
        raise UsageError(problem)
    return name


def connect(opts: ClusterOptions) -> tuple[Cluster, str]:
    """A client and the namespace to use (-n, else the context's, else "default")."""
    from kdist.kube.client import Cluster

    kubeconfig = KubeConfig.load(opts)
    return Cluster.connect(opts, kubeconfig), resolve_namespace(opts, None, kubeconfig)


@dataclass(frozen=True)
class Deleted:
    """What `delete` deleted (`job.batch/x`, `service/x`), and where."""

    namespace: str
    objects: list[str]


def namespace(**options: Any) -> str:
    """The namespace the other functions use for these options."""
    opts = target(**options)
    return resolve_namespace(opts, None, KubeConfig.load(opts))


def reattach_hint(name: str, namespace: str) -> str:
    return (f"job {name} keeps running in namespace {namespace}; reattach with "
            f"`kdist -n {namespace} status {name}` or `kdist -n {namespace} logs -f {name}`, "
            f"stop it with `kdist -n {namespace} delete {name}`")
