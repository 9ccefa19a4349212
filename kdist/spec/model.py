"""The TrainingJob spec: one frozen model (docs/DESIGN.md, "The job spec").

Field rules live in ``kdist.spec.checks``; reading files and reporting
problems in ``kdist.spec.load``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from kdist.shared.limits import MAX_NODES, MAX_PROCS_PER_NODE
from kdist.spec import checks as C
from kdist.spec.affinity import Affinity, TopologySpreadConstraint
from kdist.spec.checks import INT32_MAX, INT64_MAX
from kdist.spec.overlay import check_overlay
from kdist.spec.pod import ClaimSource, PodSettings, ScratchSource
from kdist.spec.pod import PodModel as _Model

EnvName = Annotated[str, AfterValidator(C.env_name)]
# A string a process receives (args, env values): YAML numbers only when their
# text is unchanged, never a NUL.
ProcStr = Annotated[str, BeforeValidator(C.scalar_str), AfterValidator(C.no_nul),
                    Field(max_length=100_000)]


ExtendedName = Annotated[str, AfterValidator(C.extended_name)]
ExtendedCount = Annotated[str, BeforeValidator(C.extended_count)]


class Metadata(_Model):
    name: str
    namespace: str | None = None
    labels: dict[str, str] = {}

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return C.job_name(v)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str | None) -> str | None:
        return C.namespace(v)

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        return C.labels(v, user_labels=True)


class Workload(_Model):
    module: str | None = None
    command: list[ProcStr] | None = None
    args: list[ProcStr] = []

    @field_validator("module")
    @classmethod
    def _module(cls, v: str | None) -> str | None:
        return v if v is None else C.module(v)

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or not v[0].strip()):
            raise ValueError("command must be a non-empty list whose first item is a program")
        return v

    @model_validator(mode="after")
    def _exactly_one(self) -> Workload:
        if (self.module is None) == (self.command is None):
            raise ValueError("give exactly one of module or command")
        return self


class Distributed(_Model):
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    port: Annotated[StrictInt, Field(ge=1024, le=65535)] = 29500
    max_restarts: Annotated[StrictInt, Field(ge=0, le=100)] = 0
    # How long a node waits for the others to arrive (also after a restart), and
    # how long a collective may wait on a silent peer before the job fails.
    rendezvous_timeout_seconds: Annotated[StrictInt, Field(ge=1, le=86400)] = 300
    collective_timeout_seconds: Annotated[StrictInt, Field(ge=1, le=86400)] = 300
    # The hang watchdog (kdist.runtime.watchdog): no rank printed anything (kdist's
    # workloads: no log line) for this long -> a retryable hang, the gang restarts. 0 = off.
    progress_timeout_seconds: Annotated[StrictInt, Field(ge=0, le=86400)] = 0
    # The interface(s) NCCL and gloo use for their sockets (hostNetwork, Multus):
    # rendered as NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME unless spec.env sets them.
    socket_interface: str | None = None

    @field_validator("socket_interface")
    @classmethod
    def _iface(cls, v: str | None) -> str | None:
        return v if v is None else C.socket_interface(v)


class Resources(_Model):
    gpus: Annotated[StrictInt, Field(ge=0, le=64)] = 0
    cpu: str = "1"
    memory: str = "2Gi"
    shm: str | None = None
    # Extended resources (rdma/*, vpc.amazonaws.com/efa, ...): whole numbers, requests = limits.
    extended: dict[ExtendedName, ExtendedCount] = {}

    _str = field_validator("cpu", "memory", "shm", mode="before")(classmethod(
        lambda cls, v: C.scalar_str(v)))

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, v: str) -> str:
        if C.quantity(v, "cpu") < C.quantity("1m", "cpu"):
            raise ValueError(f"cpu {v!r} must be at least 1m")
        return v

    @field_validator("memory", "shm")
    @classmethod
    def _bytes(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if C.quantity(v, "memory") < 1 << 20:
            raise ValueError(f"{v!r} is less than 1Mi")
        return v

    @model_validator(mode="after")
    def _shm_fits(self) -> Resources:
        if self.shm is not None and C.quantity(self.shm, "shm") > C.quantity(self.memory,
                                                                               "memory"):
            raise ValueError(
                f"shm {self.shm} exceeds memory {self.memory}: /dev/shm counts against the pod's "
                "memory limit"
            )
        return self


class KeyRef(_Model):
    name: str
    optional: StrictBool | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return C.subdomain(v, "name")


class EnvFromSource(_Model):
    secret_ref: KeyRef | None = None
    config_map_ref: KeyRef | None = None
    prefix: str | None = None

    @model_validator(mode="after")
    def _one(self) -> EnvFromSource:
        if (self.secret_ref is None) == (self.config_map_ref is None):
            raise ValueError("give exactly one of secretRef or configMapRef")
        if self.prefix is not None:
            C.env_prefix(self.prefix)
        return self


class CheckpointVolume(_Model):
    persistent_volume_claim: ClaimSource | None = None
    empty_dir: ScratchSource | None = None

    @model_validator(mode="after")
    def _one(self) -> CheckpointVolume:
        if (self.persistent_volume_claim is None) == (self.empty_dir is None):
            raise ValueError("give exactly one of persistentVolumeClaim or emptyDir")
        return self


class Checkpoint(_Model):
    path: str
    volume: CheckpointVolume

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        return C.mount_path(v)


class Toleration(_Model):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = None
    toleration_seconds: Annotated[StrictInt, Field(ge=-INT64_MAX - 1, le=INT64_MAX)] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("value must be empty when operator is Exists")
        if self.key is None and self.operator != "Exists":
            raise ValueError("a toleration without key needs operator: Exists")
        if self.key is not None:
            C.label_key(self.key)
        if self.value:
            C.label_value(self.key or "", self.value)
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds needs effect: NoExecute")
        return self


class Scheduling(_Model):
    node_selector: dict[str, str] = {}
    tolerations: list[Toleration] = []
    priority_class_name: str = ""
    queue: str = ""
    affinity: Affinity | None = None
    topology_spread_constraints: list[TopologySpreadConstraint] = []
    scheduler_name: str = ""

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, v: dict[str, str]) -> dict[str, str]:
        return C.labels(v)

    @field_validator("priority_class_name")
    @classmethod
    def _priority(cls, v: str) -> str:
        return C.subdomain(v, "priorityClassName") if v else v

    @field_validator("scheduler_name")
    @classmethod
    def _scheduler(cls, v: str) -> str:
        return C.subdomain(v, "schedulerName") if v else v

    @field_validator("queue")
    @classmethod
    def _queue(cls, v: str) -> str:
        return C.queue_name(v) if v else v


class JobSpec(_Model):
    backend: Literal["indexed-job", "pytorchjob"] = "indexed-job"
    image: str
    nodes: Annotated[StrictInt, Field(ge=1, le=MAX_NODES)] = 1
    procs_per_node: int | str = 1
    workload: Workload
    distributed: Distributed = Distributed()
    resources: Resources = Resources()
    env: dict[EnvName, ProcStr] = {}
    env_from: list[EnvFromSource] = []
    checkpoint: Checkpoint | None = None
    scheduling: Scheduling = Scheduling()
    pod: PodSettings = PodSettings()
    pod_template_overlay: dict[str, Any] | None = None
    ttl_seconds_after_finished: Annotated[StrictInt, Field(ge=0, le=INT32_MAX)] | None = 3600
    active_deadline_seconds: Annotated[StrictInt, Field(ge=0, le=INT64_MAX)] = 0
    # A directory shipped with the job (relative to the job file; load_job resolves it).
    workdir: str | None = None

    @field_validator("procs_per_node", mode="before")
    @classmethod
    def _procs(cls, v: Any) -> Any:
        if v == "auto":
            return v
        if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_PROCS_PER_NODE:
            return int(v)
        raise ValueError(
            f'must be an integer from 1 to {MAX_PROCS_PER_NODE} or "auto", got {v!r}')

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        return C.image(v)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        return C.nccl_env(v)

    @field_validator("pod_template_overlay")
    @classmethod
    def _overlay(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        return v if v is None else check_overlay(v)

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, v: str | None) -> str | None:
        return v if v is None else C.workdir(v)

    @model_validator(mode="after")
    def _cross_field(self) -> JobSpec:
        if self.distributed.backend == "nccl" and self.resources.gpus == 0:
            raise ValueError("distributed.backend nccl needs resources.gpus >= 1")
        if (
            self.resources.gpus
            and isinstance(self.procs_per_node, int)
            and self.procs_per_node > self.resources.gpus
        ):
            raise ValueError(
                f"procsPerNode {self.procs_per_node} exceeds resources.gpus "
                f"{self.resources.gpus}: each process drives one GPU"
            )
        if self.checkpoint is not None:
            C.mount_free(self.checkpoint.path, [v.mount_path for v in self.pod.volumes],
                         "spec.checkpoint.path")
        return self

    @property
    def dist_backend(self) -> str:
        """The process-group backend the pods use: `auto` resolved."""
        if self.distributed.backend != "auto":
            return self.distributed.backend
        return "nccl" if self.resources.gpus else "gloo"


class TrainingJob(_Model):
    api_version: Literal["kdist/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["TrainingJob"]
    metadata: Metadata
    spec: JobSpec


