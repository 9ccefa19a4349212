"""The field rules of the spec, as plain functions the model's validators call.

Each raises ValueError with a message that names the value; the model adds
the field path. Every pattern is matched with ``fullmatch`` (``$`` would let
a trailing newline through), and every rule the API server would enforce
anyway is checked here first, so a bad spec never reaches it.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from kdist import backends
from kdist.shared import env as E
from kdist.shared.labels import is_reserved
from kdist.shared.names import DNS1123_LABEL, DNS1123_SUBDOMAIN, job_name_problem, not_ascii
from kdist.spec.quantity import parse_quantity

API_VERSION = "kdist/v1alpha1"
KIND = "TrainingJob"
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_IMAGE = re.compile(r"[^\s\x00-\x1f\x7f-\x9f\u2028\u2029]+")
_PATH = re.compile(r"/[^\x00-\x1f\x7f-\x9f:\u2028\u2029]*")
# Directories a volume must not be mounted over: the container would lose its
# own system files, or shadow what the kubelet mounts (/dev/shm, secrets).
SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
               "/run", "/sbin", "/sys", "/usr", "/var/run", "/var/lib/kubelet")


def job_name(value: str) -> str:
    problem = job_name_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def namespace(value: str | None) -> str | None:
    if value is not None and (len(value) > 63 or not DNS1123_LABEL.fullmatch(value)):
        raise ValueError(f"namespace {value!a} must be a DNS-1123 label of at most 63 "
                         f"characters{not_ascii(value)}")
    return value


def subdomain(value: str, what: str) -> str:
    if len(value) > 253 or not DNS1123_SUBDOMAIN.fullmatch(value):
        raise ValueError(f"{what} {value!a} must be a DNS-1123 subdomain{not_ascii(value)}")
    return value


def label_key(key: str) -> str:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        raise ValueError(f"label key {key!r}: the prefix before '/' must be a DNS subdomain")
    if not name or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        raise ValueError(
            f"label key {key!r}: name must be 1-63 characters of letters, digits, '-', '_', '.', "
            "starting and ending with a letter or digit"
        )
    return key


def label_value(key: str, value: str) -> str:
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        raise ValueError(
            f"label {key!r}: value {value!r} must be at most 63 characters of letters, digits, "
            "'-', '_', '.', starting and ending with a letter or digit"
        )
    return value


def queue_name(value: str) -> str:
    """A Kueue LocalQueue's name: Kueue refuses a queue-name label that is not a DNS-1123
    subdomain (the name a LocalQueue can have), and a label value is at most 63."""
    if len(value) > 63 or not DNS1123_SUBDOMAIN.fullmatch(value):
        raise ValueError(f"queue {value!a} cannot name a Kueue LocalQueue: it must be a "
                         "DNS-1123 subdomain of at most 63 characters (lower-case letters, "
                         "digits, '-' and '.', starting and ending with a letter or "
                         f"digit){not_ascii(value)}")
    return value


def labels(values: dict[str, str], *, user_labels: bool = False) -> dict[str, str]:
    """Label-shaped maps (labels, nodeSelector); `user_labels` refuses kdist's own keys."""
    for key, value in values.items():
        label_key(key)
        label_value(key, value)
        if user_labels and is_reserved(key):
            raise ValueError(f"label {key!r} is set by kdist or the Job controller and cannot "
                             "be given")
    return values


# Quantities beyond what the API server stores (int64 milli-units) are refused
# here rather than crashing later arithmetic or the server.
_MAX_QUANTITY = Decimal(INT64_MAX) / 1000


def quantity(value: str, what: str) -> Decimal:
    if len(value) > 64:
        raise ValueError(f"{what} {value[:20]!r}... is not a Kubernetes quantity (too long)")
    try:
        amount = parse_quantity(value)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
    if amount > _MAX_QUANTITY:
        raise ValueError(f"{what} {value!r} is larger than Kubernetes can store")
    return amount


def scalar_str(value: Any) -> Any:
    """A YAML number where a string is meant, kept only when YAML did not change its text.

    `cpu: 2` and `--steps 200` are fine; `1.10`, `010`, `1:30`, `0x1F`, `.nan`
    and `1e3` reach the container as `1.1`, `8`, `90`, `31`, `nan`, `1000.0`:
    refused with "quote it". Numbers from Python (no YAML text) are converted.
    """
    if isinstance(value, bool):
        return value  # refused by the str type with a "quote it" hint
    if isinstance(value, (int, float)):
        text = str(value)
        source = getattr(value, "yaml_text", None)
        if source is not None and source != text:
            raise ValueError(f"YAML reads {source} as the number {_short_number(text)}, not the "
                             f"text {source!r}: quote it")
        return text
    return value


def _short_number(text: str) -> str:
    return text if len(text) <= 30 else text[:27] + "..."


def no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError(f"{value[:40]!r} contains a NUL character, which no process can receive")
    return value


def env_name(name: str) -> str:
    if not ENV_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a valid environment variable name")
    if E.contract_owned(name):
        raise ValueError(f"{name!r} is set by kdist's launcher and cannot be given")
    return name


def env_prefix(prefix: str) -> str:
    if not ENV_NAME.fullmatch(prefix):
        raise ValueError(f"prefix {prefix!r} is not a valid environment variable prefix")
    reserved = E.reserved_by_prefix(prefix)
    if reserved is not None:
        raise ValueError(f"prefix {prefix!r} can make {reserved}, which kdist's launcher owns: "
                         "use a prefix that no reserved name starts with (e.g. APP_)")
    return prefix


def module(value: str) -> str:
    if not _MODULE.fullmatch(value):
        raise ValueError(f"{value!r} is not a Python module path (e.g. kdist.workloads.ddp)")
    return value


def image(value: str) -> str:
    if not value or len(value) > 512 or not _IMAGE.fullmatch(value):
        raise ValueError(f"{value!r} is not a container image reference")
    return value


def mount_path(value: str) -> str:
    """An absolute directory for a volume: not a system directory, no '.' or '..'."""
    if not _PATH.fullmatch(value):
        raise ValueError(f"{value!r} must be an absolute path without control characters or ':'")
    parts = value.split("/")
    if any(part in (".", "..") for part in parts):
        raise ValueError(f"{value!r} must not contain '.' or '..' components")
    norm = "/" + "/".join(p for p in parts if p)
    if norm == "/" or any(norm == d or norm.startswith(d + "/") for d in SYSTEM_DIRS):
        raise ValueError(f"{value!r} is (or is inside) a system directory; use e.g. /checkpoints")
    return value


def workdir(value: str) -> str:
    """A local directory to ship with the job (read when packing, never by the model)."""
    if not value.strip() or "\0" in value or len(value) > 4096:
        raise ValueError(f"{value[:60]!r} must be a directory path (relative to the job file)")
    return value


# A Linux interface name (IFNAMSIZ 16 with the NUL); NCCL and gloo take a comma list.
_IFACE = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")


def socket_interface(value: str) -> str:
    """`eth0` or `eth0,eth1`: names both NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME read."""
    names = value.split(",")
    if not all(_IFACE.fullmatch(n) and n not in (".", "..") for n in names):
        raise ValueError(
            f"{value!r} must be network interface names (e.g. eth0 or eth0,eth1); NCCL's "
            "^prefix and =exact forms go in spec.env.NCCL_SOCKET_IFNAME")
    return value


# Native resources (cpu, memory, hugepages-*, ...) live in the kubernetes.io domain.
_NATIVE_DOMAIN = re.compile(r"(.+\.)?kubernetes\.io")
GPU_RESOURCE = "nvidia.com/gpu"


def extended_name(name: str) -> str:
    """An extended resource's name: `domain/name`, outside the kubernetes.io domain."""
    prefix, slash, _ = name.partition("/")
    if not slash:
        raise ValueError(f"{name!r} is not an extended resource: it needs a domain, e.g. "
                         "rdma/hca or vpc.amazonaws.com/efa")
    label_key(name)
    if _NATIVE_DOMAIN.fullmatch(prefix) or prefix.startswith("requests."):
        raise ValueError(f"{name!r} is a native resource name, not an extended one")
    if name == GPU_RESOURCE:
        raise ValueError(f"{name}: use resources.gpus")
    return name


def extended_count(value: Any) -> Any:
    """How many of an extended resource: a whole number >= 1, as text."""
    text = scalar_str(value)  # a YAML number only when its text is its value (010 is not 10)
    if not isinstance(text, str) or not re.fullmatch(r"[1-9][0-9]{0,17}", text):
        raise ValueError(f"{value!r} must be a whole number >= 1 (extended resources cannot "
                         "be fractional)")
    return text


# NCCL reads NCCL_DEBUG case-insensitively and ignores a value it does not know.
NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE", "ABORT")


def nccl_env(env: dict[str, str]) -> dict[str, str]:
    """NCCL_DEBUG passes through as given, but a typo would silently log nothing."""
    level = env.get("NCCL_DEBUG")
    if level is not None and level.upper() not in NCCL_DEBUG_LEVELS:
        raise ValueError(f"NCCL_DEBUG {level!r} is not one of {', '.join(NCCL_DEBUG_LEVELS)}")
    return env


GANG_DOC = (
    "All pods scheduled at once or none (so two jobs never both half-start): native = a "
    "Kubernetes PodGroup with minCount = nodes (scheduling.k8s.io/v1 where discovery lists "
    "it, else v1beta1, gate GenericWorkload); none = pod by pod; auto = native where the "
    "cluster serves PodGroups (asked at submit), else none. native needs backend indexed-job "
    "and no scheduling.queue (Kueue admits a queued job whole already).")


def in_place(restart_mode: str, backend: str) -> None:
    """distributed.restartMode inPlace only on a backend whose pods restart where they are."""
    b = backends.get(backend)
    if restart_mode == "inPlace" and not b.in_place_restarts:
        raise ValueError(f"distributed.restartMode inPlace needs backend "
                         f"{backends.able('in_place_restarts')} ({b.no_in_place_why}); "
                         "use auto or recreate")


def native_gang(gang: str, backend: str, queue: str) -> None:
    """distributed.gang native only where kdist can render one (kdist.rendering.gang)."""
    if gang == "native" and not backends.get(backend).native_gang:
        raise ValueError(f"distributed.gang native needs backend {backends.able('native_gang')} "
                         f"({backends.get(backend).no_gang_why}); use auto or none")
    if gang == "native" and queue:
        raise ValueError("distributed.gang native with scheduling.queue: Kueue admits the "
                         "queued job's pods all at once already; use auto or none")


def spares(distributed: Any, backend: str, nodes: int) -> None:
    """distributed.spares: a spare takes a lost node's rank where the launchers re-form the
    gang in process (kdist.runtime.membership) and the Job succeeds on its node ranks'
    indexes (Backend.elastic: an Indexed Job, a JobSet's one Job)."""
    if not distributed.spares:
        return
    b = backends.get(backend)
    if not b.elastic:
        raise ValueError(f"distributed.spares: not served on {backend} ({b.no_elastic_why}); "
                         f"use backend {backends.able('elastic')}")
    if nodes < 2:
        raise ValueError("distributed.spares needs nodes >= 2 (a spare takes a lost node's "
                         "rank; node 0, the store's host, is replaced as today)")
    if not distributed.max_restarts:
        raise ValueError("distributed.spares needs maxRestarts >= 1 (a spare taking a rank "
                         "is a restart of the gang)")
    if distributed.restart_mode == "recreate" or not distributed.restart_workers:
        raise ValueError("distributed.spares needs the launchers to restart their workers "
                         "in process (restartMode auto or inPlace, restartWorkers true)")


def min_nodes(least: int | None, distributed: Any, backend: str, nodes: int) -> None:
    """spec.minNodes: the survivors of a lost node re-form smaller in process
    (kdist.runtime.elastic), as a spare takes a rank: an Indexed Job restarting in place."""
    if least is None:
        return
    if least > nodes:
        raise ValueError(f"spec.minNodes {least} exceeds spec.nodes {nodes} (nodes is the "
                         "most the job runs on)")
    if least == nodes:
        return  # the default: not elastic
    b = backends.get(backend)
    if not b.elastic:
        raise ValueError(f"spec.minNodes: not served on {backend} ({b.no_elastic_why}); use "
                         f"backend {backends.able('elastic')}")
    if not distributed.max_restarts:
        raise ValueError("spec.minNodes needs distributed.maxRestarts >= 1 (the gang "
                         "re-forming smaller is a restart)")
    if distributed.restart_mode == "recreate" or not distributed.restart_workers:
        raise ValueError("spec.minNodes needs the launchers to restart their workers in "
                         "process (distributed.restartMode auto or inPlace, restartWorkers "
                         "true)")


def mount_free(path: str, others: list[str], what: str) -> None:
    """Refuse a second volume at `path` (the API server refuses duplicate mount paths)."""
    norm = path.rstrip("/") or "/"
    if any((o.rstrip("/") or "/") == norm for o in others):
        raise ValueError(f"{what} {path!r} is also a spec.pod.volumes mountPath")
