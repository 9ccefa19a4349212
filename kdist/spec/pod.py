"""Typed pod settings a production cluster asks for (issue 17), ``spec.pod``:
service account, annotations, runtime class, host network, added capabilities,
grace period and extra volumes (affinity and topology spread, under
``spec.scheduling``, are in ``kdist.spec.affinity``).

Validated structurally, so a mistake is reported with its field path before
anything is rendered; the API server (``--dry-run=server``) still has the last
word. Rendering lives in ``kdist.rendering.podspec``; what a setting costs in
Pod Security terms in ``kdist.rendering.security``.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from kdist.shared.labels import RESERVED_LABEL_PREFIXES
from kdist.shared.names import DNS1123_LABEL
from kdist.spec import checks as C
from kdist.spec.checks import INT64_MAX

# Volume names kdist renders itself (/dev/shm, the checkpoint, spec.workdir's code).
# `kdist-` is kept for whatever kdist adds next.
RESERVED_VOLUMES = frozenset({"dshm", "checkpoint"})
RESERVED_VOLUME_PREFIX = "kdist-"
_CAPABILITY = re.compile(r"[A-Z][A-Z0-9_]*")
_CSI_DRIVER = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?")
# What the API server allows for all of a pod's annotations together.
MAX_ANNOTATION_BYTES = 256 * 1024
DEFAULT_GRACE_SECONDS = 60


class PodModel(BaseModel):
    """The base of every spec model: frozen, unknown fields refused, camelCase in YAML."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel)


def _capability(cap: str) -> str:
    if cap.upper().startswith("CAP_"):
        raise ValueError(f"capability {cap!r}: write it without CAP_ ({cap[4:].upper()})")
    if cap == "ALL" or not _CAPABILITY.fullmatch(cap):
        raise ValueError(f"{cap!r} is not a Linux capability name (e.g. IPC_LOCK)")
    return cap


Capability = Annotated[str, AfterValidator(_capability)]


# --- volumes ----------------------------------------------------------------------------


def _relative_path(value: str, what: str) -> str:
    """A path inside a volume: relative, no '..' component, no control characters."""
    if not value or value.startswith("/") or ".." in value.split("/") or "\x00" in value \
            or any(ord(ch) < 32 for ch in value):
        raise ValueError(f"{what} {value!r} must be a relative path without '..'")
    return value


FileMode = Annotated[StrictInt, Field(ge=0, le=0o777)]


class KeyToPath(PodModel):
    """One key of a ConfigMap or Secret, as a file (as Kubernetes)."""

    key: str
    path: str
    mode: FileMode | None = None

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        return _relative_path(v, "path")


class ClaimSource(PodModel):
    """A PersistentVolumeClaim in the job's namespace (as Kubernetes)."""

    claim_name: str
    read_only: StrictBool | None = None

    @field_validator("claim_name")
    @classmethod
    def _claim(cls, v: str) -> str:
        return C.subdomain(v, "claimName")


class ConfigMapSource(PodModel):
    """A ConfigMap's keys as files (as Kubernetes)."""

    name: str
    items: list[KeyToPath] | None = None
    default_mode: FileMode | None = None
    optional: StrictBool | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return C.subdomain(v, "name")


class SecretSource(PodModel):
    """A Secret's keys as files (as Kubernetes)."""

    secret_name: str
    items: list[KeyToPath] | None = None
    default_mode: FileMode | None = None
    optional: StrictBool | None = None

    @field_validator("secret_name")
    @classmethod
    def _name(cls, v: str) -> str:
        return C.subdomain(v, "secretName")


class LocalRef(PodModel):
    """An object in the job's namespace, by name."""

    name: str

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return C.subdomain(v, "name")


class CSISource(PodModel):
    """An inline CSI volume (as Kubernetes)."""

    driver: str
    read_only: StrictBool | None = None
    fs_type: str | None = None
    volume_attributes: dict[str, str] | None = None
    node_publish_secret_ref: LocalRef | None = None

    @field_validator("driver")
    @classmethod
    def _driver(cls, v: str) -> str:
        if len(v) > 63 or not _CSI_DRIVER.fullmatch(v):
            raise ValueError(f"driver {v!r} must be at most 63 letters, digits, '-' and '.', "
                             "starting and ending with a letter or digit")
        return v


class ScratchSource(PodModel):
    """An emptyDir: scratch space that lives as long as the pod (as Kubernetes)."""

    medium: Literal["", "Memory"] | None = None
    size_limit: str | None = None

    @field_validator("size_limit", mode="before")
    @classmethod
    def _size(cls, v: object) -> object:
        v = C.scalar_str(v)
        if isinstance(v, str):
            C.quantity(v, "sizeLimit")
        return v


_SOURCES = ("persistent_volume_claim", "config_map", "secret", "csi", "empty_dir")


class PodVolume(PodModel):
    """One extra volume and where the container mounts it (kdist's pods have one container)."""

    name: str = Field(description="A DNS-1123 label; dshm, checkpoint and kdist-* are "
                      "kdist's own.")
    mount_path: str = Field(description="Where the container mounts it.")
    read_only: StrictBool | None = Field(default=None, description="Mount it read-only.")
    sub_path: str | None = Field(
        default=None, description="Mount only this path inside the volume.")
    persistent_volume_claim: ClaimSource | None = Field(default=None, description="A claim.")
    config_map: ConfigMapSource | None = Field(
        default=None, description="A ConfigMap's keys as files.")
    secret: SecretSource | None = Field(default=None, description="A Secret's keys as files.")
    csi: CSISource | None = Field(default=None, description="An inline CSI volume.")
    empty_dir: ScratchSource | None = Field(default=None, description="Scratch space for the pod's "
                                            "life.")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if len(v) > 63 or not DNS1123_LABEL.fullmatch(v):
            raise ValueError(f"volume name {v!r} must be a DNS-1123 label of at most 63 "
                             "characters")
        if v in RESERVED_VOLUMES or v.startswith(RESERVED_VOLUME_PREFIX):
            raise ValueError(f"volume name {v!r} is kdist's own (dshm, checkpoint, kdist-*); "
                             "choose another")
        return v

    @field_validator("mount_path")
    @classmethod
    def _mount(cls, v: str) -> str:
        return C.mount_path(v)

    @field_validator("sub_path")
    @classmethod
    def _sub(cls, v: str | None) -> str | None:
        return v if v is None else _relative_path(v, "subPath")

    @model_validator(mode="after")
    def _one_source(self) -> PodVolume:
        given = [s for s in _SOURCES if getattr(self, s) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of persistentVolumeClaim, configMap, secret, "
                             "csi or emptyDir")
        return self

    def source(self) -> dict[str, object]:
        """The Kubernetes volume (name + source)."""
        source = next(s for s in _SOURCES if getattr(self, s) is not None)
        body = getattr(self, source).model_dump(by_alias=True, exclude_none=True)
        return {"name": self.name, to_camel(source): body}

    def mount(self) -> dict[str, object]:
        """The container's volumeMount for it."""
        mount: dict[str, object] = {"name": self.name, "mountPath": self.mount_path}
        if self.read_only is not None:
            mount["readOnly"] = self.read_only
        if self.sub_path is not None:
            mount["subPath"] = self.sub_path
        return mount


# --- spec.pod ---------------------------------------------------------------------------


class PodSettings(PodModel):
    """What the pod needs from the cluster beyond the training itself (spec.pod)."""

    service_account_name: str | None = Field(default=None, description="The pods' service account; "
                                             "its API token is mounted.")
    automount_service_account_token: StrictBool | None = Field(
        default=None, description="Mount the account's token; default: exactly when "
        "serviceAccountName is given.")
    annotations: dict[str, str] = Field(default={}, description="Pod annotations (e.g. "
                                        "k8s.v1.cni.cncf.io/networks for Multus).")
    runtime_class_name: str | None = Field(default=None, description="The pods' RuntimeClass.")
    host_network: StrictBool = Field(default=False, description="The node's network (dnsPolicy "
                                     "ClusterFirstWithHostNet); Pod Security privileged.")
    capabilities: list[Capability] = Field(default=[], description="Added to the container (e.g. "
                                           "IPC_LOCK); all others stay dropped.")
    termination_grace_period_seconds: Annotated[StrictInt, Field(ge=0, le=INT64_MAX)] = Field(
        default=DEFAULT_GRACE_SECONDS, description="SIGTERM to SIGKILL: the room to checkpoint.")
    volumes: list[PodVolume] = Field(default=[], description="Extra volumes and where they are "
                                     "mounted.")

    @field_validator("service_account_name", "runtime_class_name")
    @classmethod
    def _subdomain(cls, v: str | None, info: ValidationInfo) -> str | None:
        return v if v is None else C.subdomain(v, to_camel(info.field_name or "name"))

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, v: dict[str, str]) -> dict[str, str]:
        size = 0
        for key, value in v.items():
            C.label_key(key)
            if key.startswith(RESERVED_LABEL_PREFIXES):
                raise ValueError(f"annotation {key!r} is set by kdist or the Job controller and "
                                 "cannot be given")
            C.no_nul(value)
            size += len(key.encode()) + len(value.encode())
        if size > MAX_ANNOTATION_BYTES:
            raise ValueError(f"annotations total {size} bytes, more than the "
                             f"{MAX_ANNOTATION_BYTES} the API server accepts")
        return v

    @field_validator("capabilities")
    @classmethod
    def _caps(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("capabilities lists a capability twice")
        return v

    @model_validator(mode="after")
    def _volumes_distinct(self) -> PodSettings:
        names = [v.name for v in self.volumes]
        paths = [v.mount_path.rstrip("/") for v in self.volumes]
        for what, items in (("name", names), ("mountPath", paths)):
            dup = next((x for x in items if items.count(x) > 1), None)
            if dup is not None:
                raise ValueError(f"volumes: two volumes have the {what} {dup!r}")
        return self

    @property
    def mounts_token(self) -> bool:
        """Whether the pod gets its service account's API token."""
        if self.automount_service_account_token is not None:
            return self.automount_service_account_token
        return bool(self.service_account_name)
