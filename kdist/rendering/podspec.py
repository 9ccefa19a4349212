"""The pod settings (``spec.pod``, ``spec.scheduling``'s affinity and spread,
``resources.extended``) as pod-template fields, and the environment defaults a
GPU job gets. Pure; the template lays these out (``templates/_pod.yaml.j2``).
"""

from __future__ import annotations

from typing import Any

from kdist.shared import env as E
from kdist.shared import labels as L
from kdist.spec.model import TrainingJob

# Makes NCCL abort its communicators and end the worker when a collective fails
# or times out (torch's elastic agent sets the same when unset); rendered so the
# pod says what it runs with, and a user's spec.env value wins.
NCCL_ASYNC_ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
SOCKET_IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
HOME_VOLUME = "kdist-home"


def pod_fields(job: TrainingJob) -> dict[str, Any]:
    """Template context for the pod-level settings (empty values are not rendered)."""
    s = job.spec
    p, sched = s.pod, s.scheduling
    return {
        "annotations": dict(p.annotations),
        "termination_grace_period_seconds": p.termination_grace_period_seconds,
        "service_account_name": p.service_account_name or "",
        "automount_token": p.mounts_token,
        # Under hostNetwork the pod still resolves cluster names (the master's) only
        # with this policy; the default would use the node's resolv.conf.
        "host_network": p.host_network,
        "dns_policy": "ClusterFirstWithHostNet" if p.host_network else "",
        "runtime_class_name": p.runtime_class_name or "",
        "scheduler_name": sched.scheduler_name,
        "affinity": _dump(sched.affinity) if sched.affinity is not None else None,
        "topology_spread_constraints": [_spread(job, c) for c in
                                        sched.topology_spread_constraints],
        "capabilities": {"drop": ["ALL"], **({"add": list(p.capabilities)}
                                             if p.capabilities else {})},
    }


def _dump(model: Any) -> dict[str, Any]:
    return model.model_dump(by_alias=True, exclude_none=True)


def _spread(job: TrainingJob, constraint: Any) -> dict[str, Any]:
    out = _dump(constraint)
    if "labelSelector" not in out:  # without one the constraint counts no pods at all
        out = {**out, "labelSelector": {"matchLabels": L.selector(job.metadata.name)}}
    return out


def extended_resources(job: TrainingJob) -> dict[str, str]:
    """Extended resources, for requests and limits alike (they cannot be overcommitted)."""
    return dict(job.spec.resources.extended)


def volume_mounts(job: TrainingJob) -> list[dict[str, Any]]:
    home = [{"name": HOME_VOLUME, "mountPath": E.DEFAULT_HOME}] if _own_home(job) else []
    return home + [v.mount() for v in job.spec.pod.volumes]


def volumes(job: TrainingJob) -> list[dict[str, Any]]:
    home = [{"name": HOME_VOLUME, "emptyDir": {}}] if _own_home(job) else []
    return home + [v.source() for v in job.spec.pod.volumes]


def home_env(job: TrainingJob) -> dict[str, str]:
    """HOME for a pod, unless spec.env sets it: a writable directory whatever the image
    (one without a UID-1000 user would give the pods HOME=/). First in the env, so
    spec.env's values can say $(HOME)."""
    return {} if "HOME" in job.spec.env else {"HOME": E.DEFAULT_HOME}


def _own_home(job: TrainingJob) -> bool:
    """Whether kdist mounts the pods' HOME: not when spec.env sets HOME, nor when a volume
    of the spec (spec.pod.volumes, the checkpoint) is already mounted there."""
    s = job.spec
    if "HOME" in s.env:
        return False
    mounted = [v.mount_path for v in s.pod.volumes]
    if s.checkpoint is not None:
        mounted.append(s.checkpoint.path)
    return all(p.rstrip("/") != E.DEFAULT_HOME for p in mounted)


def gpu_env(job: TrainingJob, env: dict[str, str]) -> dict[str, str]:
    """Variables a pod and a local node get on top of the env contract, unless `env` has them.

    ``KDIST_GPUS`` with ``procsPerNode: auto``: the launcher starts one worker
    per *requested* GPU, never counting GPUs a CPU pod's runtime exposes
    (``NVIDIA_VISIBLE_DEVICES=all`` in CUDA base images).
    """
    s, out = job.spec, {}
    if s.procs_per_node == "auto":
        out[E.GPUS] = str(s.resources.gpus)
    if s.resources.gpus:
        out[NCCL_ASYNC_ERROR_HANDLING] = "1"
    return {k: v for k, v in out.items() if k not in env}


def socket_env(job: TrainingJob, env: dict[str, str]) -> dict[str, str]:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME from ``distributed.socketInterface``.

    Only when given: kdist cannot know a node's interface names (eth0, ens5,
    bond0...), a wrong guess makes NCCL find no interface at all, and NCCL's own
    choice (skipping lo and docker*) is right on most hosts. spec.env wins.
    """
    iface = job.spec.distributed.socket_interface
    if not iface:
        return {}
    return {k: iface for k in SOCKET_IFNAME_VARS if k not in env}
