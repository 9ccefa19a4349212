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
    WithJsonSchema,
    field_validator,
    model_validator,
)

from kdist import backends
from kdist.shared import env as E
from kdist.shared.limits import MAX_NODES, MAX_PROCS_PER_NODE
from kdist.spec import checks as C
from kdist.spec.checkpoint import Checkpoint
from kdist.spec.checks import INT32_MAX, INT64_MAX
from kdist.spec.overlay import check_overlay
from kdist.spec.pod import PodModel as _Model
from kdist.spec.pod import PodSettings
from kdist.spec.scheduling import Scheduling
from kdist.spec.trainjob import TrainJobSettings, uncarried

EnvName = Annotated[str, AfterValidator(C.env_name)]
# A string a process receives (args, env values): YAML numbers only when their
# text is unchanged, never a NUL. The JSON Schema says so too, or editors would
# flag `--steps 200`'s 200.
ProcStr = Annotated[str, BeforeValidator(C.scalar_str), AfterValidator(C.no_nul),
                    Field(max_length=100_000),
                    WithJsonSchema({"type": ["string", "number"], "maxLength": 100_000})]
# A Kubernetes quantity (`cpu: 2`, `memory: 4Gi`): a YAML number is read as its text.
Quantity = Annotated[str, WithJsonSchema({"type": ["string", "number"]})]


ExtendedName = Annotated[str, AfterValidator(C.extended_name)]
ExtendedCount = Annotated[str, BeforeValidator(C.extended_count),
                          WithJsonSchema({"type": ["string", "integer"]})]


class Metadata(_Model):
    """The job's name, namespace and labels."""

    name: str = Field(description="The job's name: a DNS-1035 label (a letter first, "
                      "lower-case letters, digits, '-'), at most 50 characters.")
    namespace: str | None = Field(default=None, description="Where the job runs; else -n, else the "
                                  "kubeconfig context's namespace.")
    labels: dict[str, str] = Field(default={}, description="Copied onto every object and pod.")

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
    """What each process runs: exactly one of module or command."""

    module: str | None = Field(default=None, description="`python -m MODULE`, launched per process "
                               "(kdist.workloads.ddp, .pipeline, .fsdp or your own).")
    command: list[ProcStr] | None = Field(
        default=None, description="Your own program, launched per "
        "process, e.g. [python, train.py].")
    args: list[ProcStr] = Field(default=[], description="Arguments after the module or command; "
                                "$(VAR) expands as the kubelet expands it.")

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
    """How the ranks find each other, and when the gang restarts."""

    backend: Literal["auto", "nccl", "gloo"] = Field(
        default="auto",
        description="The process-group backend; auto = nccl with GPUs, gloo without.")
    port: Annotated[StrictInt, Field(ge=1024, le=65535)] = Field(
        default=E.DEFAULT_PORT, description="The master's port: rendezvous and torch's store.")
    max_restarts: Annotated[StrictInt, Field(ge=0, le=100)] = Field(
        default=0, description="Whole-job restarts after infrastructure failures (a kill, a lost "
        "pod or peer, a hang), each resuming from the newest checkpoint.")
    restart_mode: Literal["auto", "inPlace", "recreate"] = Field(
        default="auto", description="How the gang restarts: inPlace = every pod's containers "
        "restart where they are (container restart rules; seconds, pods and IPs kept); "
        "recreate = new pods; auto = inPlace where the cluster serves it (asked at submit), "
        "else recreate. inPlace needs backend indexed-job.")
    restart_workers: StrictBool = Field(
        default=True, description="Where the gang restarts in place: a worker killed, hung or "
        "cut off from a peer, while every pod is still there, is restarted by the launchers "
        "themselves across the gang (no container restarted); false = the containers restart.")
    warm_workers: StrictBool = Field(
        default=False, description="Keep a standby process per local rank that has already "
        "imported torch, which becomes the rank's next worker after a restart in process "
        "(a new standby follows it), and the first workers of any Python command. Costs a "
        "Python with torch's memory per local rank for the job's life; a standby that died "
        "or hung falls back to a cold start.")
    warm_start: StrictBool = Field(
        default=False, description="The first workers of a script that imports torch start "
        "from processes that imported it while the launcher met the other nodes (kept for "
        "nothing after; warmWorkers does it too). Off by default: under a pod's CPU limit "
        "the import's CPU is the wait, and the script finds torch imported before its "
        "first line (docs/restarts.md).")
    gang: Literal["auto", "native", "none"] = Field(default="auto", description=C.GANG_DOC)
    rendezvous_timeout_seconds: Annotated[StrictInt, Field(ge=1, le=86400)] = Field(
        default=E.DEFAULT_RDZV_TIMEOUT_S, description="How long a node waits for the others to "
        "arrive (also after a restart) before the job fails.")
    collective_timeout_seconds: Annotated[StrictInt, Field(ge=1, le=86400)] = Field(
        default=E.DEFAULT_PG_TIMEOUT_S, description="How long a collective waits on a silent "
        "peer (torch's default process-group timeout, for any script).")
    # The hang watchdog lives in kdist.runtime.watchdog.
    progress_timeout_seconds: Annotated[StrictInt, Field(ge=0, le=86400)] = Field(
        default=0, description="Hang watchdog: no rank printed anything for this long -> the gang "
        "restarts. 0 = off.")
    # The heartbeat lives in kdist.runtime.heartbeat.
    node_loss_seconds: Annotated[StrictInt, Field(ge=2, le=3600)] = Field(
        default=E.DEFAULT_NODE_LOSS_S, description="A node whose launcher's heartbeat is "
        "silent this long (a frozen or partitioned node) is lost: the others stop their "
        "workers at once and the gang restarts, instead of waiting out the collective "
        "timeout or Kubernetes marking the node NotReady.")
    # A spare's side lives in kdist.runtime.membership.
    spares: Annotated[StrictInt, Field(ge=0, le=64)] = Field(
        default=0, description="Warm spare pods started with the job (indexed-job, jobset): "
        "each imports torch ahead and waits at the rendezvous holding no rank, and when a node "
        "is lost the first free "
        "spare takes its rank, in seconds; the node's pod, if it comes back, is fenced "
        "(exit 206). Each costs a pod's resources for the job's life.")
    socket_interface: str | None = Field(default=None, description="The interface(s) NCCL and gloo "
                                         "use (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME) unless "
                                         "spec.env sets them; for hostNetwork, Multus.")

    @field_validator("socket_interface")
    @classmethod
    def _iface(cls, v: str | None) -> str | None:
        return v if v is None else C.socket_interface(v)


class Resources(_Model):
    """What each pod gets; requests = limits."""

    gpus: Annotated[StrictInt, Field(ge=0, le=64)] = Field(
        default=0, description="nvidia.com/gpu per pod.")
    cpu: Quantity = Field(
        default="1", description="CPU per pod; OMP_NUM_THREADS = cpu / procsPerNode.")
    memory: Quantity = Field(default="2Gi", description="Memory per pod.")
    shm: Quantity | None = Field(default=None, description="The size of /dev/shm (an in-memory "
                                 "emptyDir, counted in memory); default half of memory.")
    extended: dict[ExtendedName, ExtendedCount] = Field(
        default={}, description="Extended resources (rdma/hca, vpc.amazonaws.com/efa, ...): whole "
        "numbers.")

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
    """A Secret or ConfigMap in the job's namespace."""

    name: str = Field(description="Its name.")
    optional: StrictBool | None = Field(
        default=None, description="true: a missing one is no error.")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return C.subdomain(v, "name")


class EnvFromSource(_Model):
    """Environment variables from a Secret or a ConfigMap (one of them)."""

    secret_ref: KeyRef | None = Field(default=None, description="Every key of this Secret.")
    config_map_ref: KeyRef | None = Field(default=None, description="Every key of this ConfigMap.")
    prefix: str | None = Field(
        default=None, description="Put before every name; one that could make "
        "a name kdist's launcher owns is refused.")

    @model_validator(mode="after")
    def _one(self) -> EnvFromSource:
        if (self.secret_ref is None) == (self.config_map_ref is None):
            raise ValueError("give exactly one of secretRef or configMapRef")
        if self.prefix is not None:
            C.env_prefix(self.prefix)
        return self


class JobSpec(_Model):
    """What runs, on how many pods, with what."""

    backend: Literal[backends.NAMES] = Field(  # type: ignore[valid-type]
        default=backends.DEFAULT, description="; ".join(
            f"{b.name}: {b.summary}" for b in backends.BACKENDS) + ".")
    image: str = Field(description="Any image with Python >= 3.10, torch 2.8-2.15 and your "
                       "dependencies (see runtime).")
    runtime: Literal["auto", "image", "shipped"] = Field(default="auto", description=(
        "Where kdist's launcher comes from: image (installed in it), shipped (with the job, "
        "a digest-checked ConfigMap), auto (image for kdist's own kdist-train, else shipped)."))
    nodes: Annotated[StrictInt, Field(ge=1, le=MAX_NODES)] = Field(default=1, description="Pods.")
    # The runtime side lives in kdist.runtime.elastic.
    min_nodes: Annotated[StrictInt, Field(ge=1, le=MAX_NODES)] | None = Field(
        default=None, description="Elastic (indexed-job, jobset): when a node is lost and no "
        "spare takes its rank, the survivors go on at the smaller size, down to this many nodes, "
        "resuming from the newest checkpoint with the new WORLD_SIZE and RANK (node 0's loss "
        "waits for its replacement, as below it). Default (unset) = nodes: off.")
    procs_per_node: Annotated[int | str, WithJsonSchema({"anyOf": [
        {"type": "integer", "minimum": 1, "maximum": MAX_PROCS_PER_NODE},
        {"const": "auto"}]})] = Field(
        default=1, description='Processes per pod; "auto" = one per GPU (1 on CPU).')
    workload: Workload = Field(description="What each process runs.")
    distributed: Distributed = Field(default=Distributed(), description="Restarts, timeouts.")
    resources: Resources = Field(default=Resources(), description="Per pod; requests = limits.")
    env: dict[EnvName, ProcStr] = Field(
        default={}, description="Plain values; names kdist's launcher "
        "owns (RANK, MASTER_ADDR, KDIST_*, ...) are refused.")
    env_from: list[EnvFromSource] = Field(default=[], description="Secrets as variables.")
    checkpoint: Checkpoint | None = Field(default=None, description="Where checkpoints go; none: "
                                          "no checkpoints, a restart starts over.")
    scheduling: Scheduling = Field(default=Scheduling(), description="Placement, priority, queues.")
    pod: PodSettings = Field(default=PodSettings(), description="Pod settings a production cluster "
                             "asks for: service account, host network, volumes, ...")
    trainjob: TrainJobSettings = Field(default=TrainJobSettings(), description="Backend "
                                       "trainjob: an existing ClusterTrainingRuntime to run on.")
    pod_template_overlay: dict[str, Any] | None = Field(
        default=None,
        description="A strategic-merge patch on every pod template, for what spec.pod "
        "lacks; what the launcher relies on is refused.")
    ttl_seconds_after_finished: Annotated[StrictInt, Field(ge=0, le=INT32_MAX)] | None = Field(
        default=3600, description="Delete the finished job after this long; null = keep it.")
    active_deadline_seconds: Annotated[StrictInt, Field(ge=0, le=INT64_MAX)] = Field(
        default=0, description="Fail the job after this long. 0 = no deadline.")
    # Relative to the job file; load_job resolves it.
    workdir: str | None = Field(default=None, description="A local directory shipped with the job "
                                "(relative to the job file) and unpacked in /workspace, where "
                                "the workers start: your code without an image rebuild.")

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
        C.in_place(self.distributed.restart_mode, self.backend)
        C.native_gang(self.distributed.gang, self.backend, self.scheduling.queue)
        C.spares(self.distributed, self.backend, self.nodes)
        C.min_nodes(self.min_nodes, self.distributed, self.backend, self.nodes)
        refused = uncarried(self)
        if refused:
            raise ValueError(refused)
        if self.checkpoint is not None:
            C.mount_free(self.checkpoint.path, [v.mount_path for v in self.pod.volumes],
                         "spec.checkpoint.path")
        return self

    @property
    def elastic(self) -> bool:
        """Whether the gang may shrink (spec.minNodes below spec.nodes)."""
        return self.min_nodes is not None and self.min_nodes < self.nodes

    @property
    def dist_backend(self) -> str:
        """The process-group backend the pods use: `auto` resolved."""
        if self.distributed.backend != "auto":
            return self.distributed.backend
        return "nccl" if self.resources.gpus else "gloo"


class TrainingJob(_Model):
    """A distributed PyTorch training job: what `kdist submit` renders and runs."""

    api_version: Literal["kdist/v1alpha1"] = Field(alias="apiVersion",
                                                   description="Always kdist/v1alpha1.")
    kind: Literal["TrainingJob"] = Field(description="Always TrainingJob.")
    metadata: Metadata = Field(description="Name, namespace, labels.")
    spec: JobSpec = Field(description="The job.")


