"""What the Python API returns and takes: results, the observer protocol, the target."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

# spec.backend's choices (the CLI's --backend), from the registry (kdist.backends).
from kdist.api.choices import BACKEND_DEFAULT, BACKEND_NAMES  # noqa: F401 (re-exported)
from kdist.shared.target import ClusterOptions

# The cluster client's modules are imported where used: the CLI imports this module for
# every verb, `kdist render` too.
if TYPE_CHECKING:
    from kdist.kube.client import Cluster
    from kdist.kube.connect.config import KubeConfig
    from kdist.kube.watch.tracker import JobState, RankState


__all__ = ["BACKEND_NAMES", "ClusterOptions", "Connection", "Deleted", "JobState", "JobSummary",
           "Observer", "Quiet", "RankLog", "RankState", "Submission", "check_name", "connect",
           "parse_time", "reattach_hint", "target"]


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
    notes: list[str] = field(default_factory=list)  # kdist's own, e.g. a gang fallback

    @property
    def restart_mode(self) -> str:
        """How the gang restarts: "inPlace" or "recreate" (distributed.restartMode), as the
        objects created say (auto: as the cluster kept them; a client dry run: recreate)."""
        from kdist.kube.watch.objects import restart_mode_of

        return restart_mode_of(self.objects[0]) if self.objects else ""

    @property
    def gang(self) -> str:
        """The PodGroup the job's pods are gang-scheduled in (distributed.gang native, as the
        objects created say), "" when they are scheduled pod by pod."""
        from kdist.kube.watch.objects import gang_of

        return gang_of(self.objects[0]) if self.objects else ""


@dataclass(frozen=True)
class JobSummary:
    """One row of `list_jobs`."""

    name: str
    namespace: str
    backend: str
    nodes: int | None
    phase: str
    age_s: float | None
    kind: str = ""  # the job object's kind: Job, JobSet, PyTorchJob
    created: str | None = None  # its creationTimestamp, as the cluster wrote it

    def to_dict(self) -> dict[str, Any]:
        """The row for `kdist list -o json|yaml` (camelCase, as `status -o json`)."""
        return {"name": self.name, "namespace": self.namespace, "kind": self.kind,
                "backend": self.backend, "nodes": self.nodes, "phase": self.phase,
                "created": self.created, "ageSeconds": self.age_s}


@dataclass(frozen=True)
class RankLog:
    """One rank's log as `logs` reads it; `note` says why there are no lines."""

    rank: int
    pod: str
    lines: list[str]
    note: str = ""
    # The job's spec.procsPerNode (None: unknown or "auto"): above 1, `rank` is the node's
    # index, and its log holds the lines of several torch ranks.
    procs_per_node: int | None = None


def target(**options: Any) -> ClusterOptions:
    """The cluster target from keyword options (None = the kubeconfig's default), checked."""
    from kdist.api import checks

    unknown = set(options) - {"kubeconfig", "context", "namespace", "request_timeout"}
    if unknown:
        raise TypeError(f"unknown option(s): {', '.join(sorted(unknown))}")
    return checks.target(**options)


def check_name(name: str) -> str:
    """`name` if it can name a job; UsageError otherwise (before any request)."""
    from kdist.api import checks

    return checks.name(name)


class Connection:
    """One client's cluster target: the kubeconfig read once, one connection pool.

    Both are made on first use, so a client made where no cluster is reachable
    (or before a kubeconfig exists) costs nothing until a verb needs them.
    """

    def __init__(self, options: ClusterOptions) -> None:
        self.options = options
        self._lock = threading.Lock()
        self._kubeconfig: KubeConfig | None = None
        self._cluster: Cluster | None = None
        self._namespace: str | None = None

    def kubeconfig(self, missing_ok: bool = False) -> KubeConfig | None:
        with self._lock:
            if self._kubeconfig is None:
                from kdist.kube.connect.config import KubeConfig

                self._kubeconfig = KubeConfig.load(self.options, missing_ok=missing_ok)
            return self._kubeconfig

    def cluster(self) -> Cluster:
        from kdist.kube.client import Cluster

        kubeconfig = self.kubeconfig()
        with self._lock:
            if self._cluster is None:
                self._cluster = Cluster.connect(self.options, kubeconfig)
            return self._cluster

    def namespace(self) -> str:
        """-n, else the context's, else "default" (the kubeconfig is read only when there
        is no -n: `Client(namespace="team-a").namespace` needs none)."""
        if self._namespace is None and self.options.namespace is not None:
            self._namespace = self.options.namespace  # checked by kdist.api.checks.target
        if self._namespace is None:
            from kdist.kube.connect.config import resolve_namespace

            self._namespace = resolve_namespace(self.options, None, self.kubeconfig())
        return self._namespace


def connect(opts: ClusterOptions) -> tuple[Cluster, str]:
    """A client and the namespace to use (-n, else the context's, else "default")."""
    conn = Connection(opts)
    return conn.cluster(), conn.namespace()


@dataclass(frozen=True)
class Deleted:
    """What `delete` deleted (`job.batch/x`, `service/x`), and where."""

    namespace: str
    objects: list[str]


def reattach_hint(name: str, namespace: str) -> str:
    return (f"job {name} keeps running in namespace {namespace}; reattach with "
            f"`kdist -n {namespace} status {name}` or `kdist -n {namespace} logs -f {name}`, "
            f"stop it with `kdist -n {namespace} delete {name}`")


def parse_time(stamp: str | None) -> float | None:
    """An RFC 3339 API timestamp as epoch seconds (None when it is not one)."""
    from kdist.kube.watch.objects import parse_time as parse

    return parse(stamp)
