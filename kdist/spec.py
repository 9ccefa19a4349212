"""The TrainingJob spec: one frozen model, validated in one place.

`load_job(path)` reads a job.yaml and returns a `TrainingJob` or raises
`SpecError` carrying every problem found, each as `FILE: field.path: what`.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from kdist.errors import SpecError
from kdist.labels import RESERVED_LABEL_PREFIXES
from kdist.quantity import parse_quantity
from kdist.yamlsafe import MAX_BYTES, YamlProblem, load_document

API_VERSION = "kdist/v1alpha1"
KIND = "TrainingJob"
MAX_NAME = 50  # pods are <name>-<index>-<5 chars> and hostnames <= 63
MAX_NODES = 1000

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_IMAGE = re.compile(r"^[^\s\x00-\x1f\x7f]+$")
_PATH = re.compile(r"^/[^\x00-\x1f\x7f:]*$")

# Variables the launcher owns: a user value would silently break rank wiring.
RESERVED_ENV = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "JOB_COMPLETION_INDEX",
}
RESERVED_ENV_PREFIXES = ("KDIST_", "PET_", "TORCHELASTIC_")


def _dns1035(value: str, what: str = "name", limit: int = MAX_NAME) -> str:
    if len(value) > limit:
        raise ValueError(f"{what} {value!r} is {len(value)} characters, at most {limit} allowed")
    if not _DNS1035.match(value):
        raise ValueError(
            f"{what} {value!r} must be a DNS-1035 label: lower-case letters, digits and '-', "
            "starting with a letter and ending with a letter or digit"
        )
    return value


def _label_key(key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        raise ValueError(f"label key {key!r}: prefix must be a DNS subdomain")
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        raise ValueError(
            f"label key {key!r}: name must be 1-63 characters of letters, digits, '-', '_', '.', "
            "starting and ending with a letter or digit"
        )
    return key


def _label_value(key: str, value: str) -> str:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise ValueError(
            f"label {key!r}: value {value!r} must be at most 63 characters of letters, digits, "
            "'-', '_', '.', starting and ending with a letter or digit"
        )
    return value


def _check_labels(labels: dict[str, str], reserved: tuple[str, ...] = ()) -> dict[str, str]:
    for key, value in labels.items():
        _label_key(key)
        _label_value(key, value)
        if any(key.startswith(p) for p in reserved):
            raise ValueError(f"label {key!r} is set by kdist itself and cannot be given")
    return labels


def _quantity(value: str, what: str) -> str:
    try:
        parse_quantity(value)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
    return value


def _scalar_str(value: Any) -> Any:
    """YAML turns `cpu: 2` into an int; Kubernetes wants the string."""
    if isinstance(value, bool):
        return value  # refused by the str type with a clear message
    if isinstance(value, (int, float)):
        return str(value)
    return value


def _env_name(name: str) -> str:
    if not _ENV_NAME.match(name):
        raise ValueError(f"{name!r} is not a valid environment variable name")
    if name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES):
        raise ValueError(f"{name!r} is set by kdist's launcher and cannot be given")
    return name


EnvName = Annotated[str, AfterValidator(_env_name)]


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        str_strict=True,
    )


StrList = list[Annotated[str, Field(max_length=100_000)]]


class Metadata(_Model):
    name: str
    namespace: str | None = None
    labels: dict[str, str] = {}

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _dns1035(v)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str | None) -> str | None:
        if v is not None and (len(v) > 63 or not _DNS1123_LABEL.match(v)):
            raise ValueError(f"namespace {v!r} must be a DNS-1123 label of at most 63 characters")
        return v

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        return _check_labels(v, RESERVED_LABEL_PREFIXES)


class Workload(_Model):
    module: str | None = None
    command: list[str] | None = None
    args: StrList = []

    @field_validator("module")
    @classmethod
    def _module(cls, v: str | None) -> str | None:
        if v is not None and not _MODULE.match(v):
            raise ValueError(f"{v!r} is not a Python module path (e.g. kdist.workloads.ddp)")
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or not v[0].strip()):
            raise ValueError("command must be a non-empty list whose first item is a program")
        return v

    @field_validator("args", mode="before")
    @classmethod
    def _args(cls, v: Any) -> Any:
        return [_scalar_str(a) for a in v] if isinstance(v, list) else v

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


class Resources(_Model):
    gpus: Annotated[StrictInt, Field(ge=0, le=64)] = 0
    cpu: str = "1"
    memory: str = "2Gi"
    shm: str | None = None

    _str = field_validator("cpu", "memory", "shm", mode="before")(classmethod(
        lambda cls, v: _scalar_str(v)))

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, v: str) -> str:
        _quantity(v, "cpu")
        if parse_quantity(v) < parse_quantity("1m"):
            raise ValueError(f"cpu {v!r} must be at least 1m")
        return v

    @field_validator("memory", "shm")
    @classmethod
    def _bytes(cls, v: str | None) -> str | None:
        if v is None:
            return v
        _quantity(v, "memory")
        if parse_quantity(v) < 1 << 20:
            raise ValueError(f"{v!r} is less than 1Mi")
        return v

    @model_validator(mode="after")
    def _shm_fits(self) -> Resources:
        if self.shm is not None and parse_quantity(self.shm) > parse_quantity(self.memory):
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
        if len(v) > 253 or not _DNS1123_SUBDOMAIN.match(v):
            raise ValueError(f"{v!r} must be a DNS-1123 subdomain")
        return v


class EnvFromSource(_Model):
    secret_ref: KeyRef | None = None
    config_map_ref: KeyRef | None = None
    prefix: str | None = None

    @model_validator(mode="after")
    def _one(self) -> EnvFromSource:
        if (self.secret_ref is None) == (self.config_map_ref is None):
            raise ValueError("give exactly one of secretRef or configMapRef")
        if self.prefix is not None and not _ENV_NAME.match(self.prefix):
            raise ValueError(f"prefix {self.prefix!r} is not a valid environment variable prefix")
        return self


class PVCSource(_Model):
    claim_name: str
    read_only: StrictBool | None = None

    @field_validator("claim_name")
    @classmethod
    def _claim(cls, v: str) -> str:
        if len(v) > 253 or not _DNS1123_SUBDOMAIN.match(v):
            raise ValueError(f"claimName {v!r} must be a DNS-1123 subdomain")
        return v


class EmptyDirSource(_Model):
    medium: Literal["", "Memory"] | None = None
    size_limit: str | None = None

    _str = field_validator("size_limit", mode="before")(classmethod(lambda cls, v: _scalar_str(v)))

    @field_validator("size_limit")
    @classmethod
    def _size(cls, v: str | None) -> str | None:
        return v if v is None else _quantity(v, "sizeLimit")


class CheckpointVolume(_Model):
    persistent_volume_claim: PVCSource | None = None
    empty_dir: EmptyDirSource | None = None

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
        if not _PATH.match(v) or v.rstrip("/") in ("", "/dev", "/proc", "/sys", "/dev/shm", "/etc"):
            raise ValueError(f"{v!r} must be an absolute directory path that is not a system path")
        if any(part in (".", "..") for part in v.split("/")):
            raise ValueError(f"{v!r} must not contain '.' or '..' components")
        return v


class Toleration(_Model):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = None
    toleration_seconds: StrictInt | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("value must be empty when operator is Exists")
        if self.key is None and self.operator != "Exists":
            raise ValueError("a toleration without key needs operator: Exists")
        if self.key is not None:
            _label_key(self.key)
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds needs effect: NoExecute")
        return self


class Scheduling(_Model):
    node_selector: dict[str, str] = {}
    tolerations: list[Toleration] = []
    priority_class_name: str = ""
    queue: str = ""

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, v: dict[str, str]) -> dict[str, str]:
        return _check_labels(v)

    @field_validator("priority_class_name")
    @classmethod
    def _priority(cls, v: str) -> str:
        if v and (len(v) > 253 or not _DNS1123_SUBDOMAIN.match(v)):
            raise ValueError(f"priorityClassName {v!r} must be a DNS-1123 subdomain")
        return v

    @field_validator("queue")
    @classmethod
    def _queue(cls, v: str) -> str:
        return _label_value("kueue.x-k8s.io/queue-name", v) if v else v


class JobSpec(_Model):
    backend: Literal["indexed-job", "pytorchjob"] = "indexed-job"
    image: str
    nodes: Annotated[StrictInt, Field(ge=1, le=MAX_NODES)] = 1
    procs_per_node: int | str = 1
    workload: Workload
    distributed: Distributed = Distributed()
    resources: Resources = Resources()
    env: dict[EnvName, str] = {}
    env_from: list[EnvFromSource] = []
    checkpoint: Checkpoint | None = None
    scheduling: Scheduling = Scheduling()
    ttl_seconds_after_finished: Annotated[StrictInt, Field(ge=0)] | None = 3600
    active_deadline_seconds: Annotated[StrictInt, Field(ge=0)] = 0

    @field_validator("procs_per_node", mode="before")
    @classmethod
    def _procs(cls, v: Any) -> Any:
        if v == "auto" or (type(v) is int and 1 <= v <= 64):
            return v
        raise ValueError(f'must be an integer from 1 to 64 or "auto", got {v!r}')

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        if not v or len(v) > 512 or not _IMAGE.match(v):
            raise ValueError(f"{v!r} is not a container image reference")
        return v

    @field_validator("env", mode="before")
    @classmethod
    def _env_scalars(cls, v: Any) -> Any:
        return {k: _scalar_str(x) for k, x in v.items()} if isinstance(v, dict) else v

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


# ---- loading and error reporting -------------------------------------------------------


def advice(job: TrainingJob) -> list[str]:
    """Valid but probably not meant: one line each, `field.path: why`, for the CLI to warn."""
    s, out = job.spec, []
    ephemeral = s.checkpoint is not None and s.checkpoint.volume.empty_dir is not None
    if s.distributed.max_restarts and ephemeral:
        out.append("spec.checkpoint.volume: an emptyDir is new with every pod, so a restarted "
                   "job starts from step 0; use a persistentVolumeClaim every pod mounts")
    if s.backend == "pytorchjob" and s.distributed.max_restarts and not s.active_deadline_seconds:
        out.append("spec.distributed.maxRestarts: the Kubeflow training operator (v1.9) does not "
                   "bound a PyTorchJob's restarts (exit >= 128) by it; set "
                   "spec.activeDeadlineSeconds to bound a job that keeps failing")
    return out


def load_job(path: str | Path) -> TrainingJob:
    """Read and validate a job file; raise SpecError with every problem found."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise SpecError([f"{path}: cannot read: {e.strerror or e}"]) from None
    return parse_job(data, source=str(path))


def parse_job(data: bytes | str, source: str = "<job>") -> TrainingJob:
    """Validate job text already in memory; `source` names it in messages."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        doc = load_document(data)
    except YamlProblem as e:
        raise SpecError([f"{source}: {e}"]) from None
    if not isinstance(doc, dict):
        kind = type(doc).__name__ if doc is not None else "nothing"
        raise SpecError([f"{source}: expected a mapping with apiVersion, kind, metadata, spec; "
                         f"got {kind}"])
    return validate_job(doc, source)


def validate_job(doc: dict[str, Any], source: str = "<job>") -> TrainingJob:
    """Validate an already-parsed document."""
    try:
        return TrainingJob.model_validate(doc)
    except ValidationError as e:
        raise SpecError([f"{source}: {p}" for p in _problems(e, doc)]) from None


def _problems(err: ValidationError, doc: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for item in err.errors(include_url=False):
        loc = _clean_loc(item["loc"])
        message = _message(item, loc, doc)
        line = f"{_path(loc)}: {message}" if loc else message
        if line not in out:
            out.append(line)
    return out


def _clean_loc(loc: tuple[Any, ...]) -> list[Any]:
    # Unions add the branch's type name to the path (`int`, `literal['auto']`);
    # users never wrote those, so drop them.
    tags = ("int", "str", "literal[", "constrained-", "function-", "json-or-python")
    return [
        p for p in loc
        if p != "[key]" and not (isinstance(p, str) and p.startswith(tags) and p != "str")
    ]


def _path(loc: list[Any]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _ENV_NAME.match(str(part)) and "." not in str(part):
            text += f".{part}" if text else str(part)
        else:
            text += f"[{str(part)!r}]"
    return text


def _message(item: dict[str, Any], loc: list[Any], doc: dict[str, Any]) -> str:
    kind, ctx = item["type"], item.get("ctx") or {}
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "unknown field" + _suggest(loc, doc)
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '')}, got {item.get('input')!r}"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        op = {"greater_than_equal": ">=", "less_than_equal": "<=",
              "greater_than": ">", "less_than": "<"}[kind]
        bound = next(iter(ctx.values()), "")
        return f"must be {op} {bound}, got {item.get('input')!r}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer, got {_short(item.get('input'))}"
    if kind in ("string_type", "str_type"):
        hint = " (quote it in YAML)" if isinstance(item.get("input"), bool) else ""
        return f"must be a string, got {_short(item.get('input'))}{hint}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping, got {_short(item.get('input'))}"
    if kind == "list_type":
        return f"must be a list, got {_short(item.get('input'))}"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false, got {_short(item.get('input'))}"
    if kind == "value_error":
        return str(ctx.get("error", item["msg"]))
    if kind == "string_too_long":
        return f"is longer than {ctx.get('max_length')} characters"
    return item["msg"]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _suggest(loc: list[Any], doc: dict[str, Any]) -> str:
    """'did you mean X' for a misspelt field, from the model's own field names."""
    if not loc or not isinstance(loc[-1], str):
        return ""
    model: Any = TrainingJob
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = _field(model, part)
        if field is None:
            return ""
        model = _model_of(field.annotation)
        if model is None:
            return ""
    names = [f.alias or n for n, f in model.model_fields.items()]
    match = difflib.get_close_matches(loc[-1], names, n=1)
    return f" (did you mean {match[0]!r}?)" if match else f" (known: {', '.join(names)})"


def _field(model: Any, name: str) -> Any:
    for n, f in model.model_fields.items():
        if name in (n, f.alias):
            return f
    return None


def _model_of(annotation: Any) -> Any:
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None
