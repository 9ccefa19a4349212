"""The environment contract between a rendered pod (or a local process group)
and `kdist.launch`, plus the launcher command line. Rendering and the local
runner both build pods' processes from here, so they cannot drift apart."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from kdist.shared import env as E
from kdist.spec.model import TrainingJob
from kdist.spec.quantity import parse_quantity

LAUNCHER = ["python", "-m", "kdist.launch"]


def launch_argv(job: TrainingJob) -> list[str]:
    """The container's command line: the launcher, then what each worker runs."""
    w = job.spec.workload
    if w.module is not None:
        return [*LAUNCHER, "--module", w.module, "--", *w.args]
    return [*LAUNCHER, "--", *(w.command or []), *w.args]


def procs_hint(job: TrainingJob) -> int:
    """Processes per pod as far as the spec knows (`auto` = one per requested GPU)."""
    ppn = job.spec.procs_per_node
    if isinstance(ppn, int):
        return ppn
    return max(1, job.spec.resources.gpus)  # "auto"


def omp_threads(job: TrainingJob) -> int:
    """Threads per process: the pod's CPU limit shared by its processes."""
    cpus = parse_quantity(job.spec.resources.cpu)
    return max(1, math.floor(cpus / procs_hint(job)))


def env_contract(
    job: TrainingJob, *, node_rank: int | None, master_addr: str | None,
    slot_addr: str | None = None, local: bool = False,
) -> dict[str, str]:
    """KDIST_* variables, OMP_NUM_THREADS, then the user's env (which may override OMP).

    `node_rank`/`master_addr` are None where the pod learns them elsewhere (its
    backend's `rank_env`, or its operator's env). `slot_addr`: each pod's address, where
    the store may move with spares (`local`: one address, a port per node).
    """
    s = job.spec
    env = {
        E.JOB_NAME: job.metadata.name,
        E.NNODES: str(s.nodes),
        E.NPROC_PER_NODE: str(s.procs_per_node),
    }
    if node_rank is not None:
        env[E.NODE_RANK] = str(node_rank)
    if master_addr is not None:
        env[E.MASTER_ADDR] = master_addr
    env[E.MASTER_PORT] = str(s.distributed.port)
    env[E.DIST_BACKEND] = s.dist_backend
    env[E.MAX_RESTARTS] = str(s.distributed.max_restarts)
    env[E.RDZV_TIMEOUT] = str(s.distributed.rendezvous_timeout_seconds)
    env[E.PG_TIMEOUT] = str(s.distributed.collective_timeout_seconds)
    if s.distributed.progress_timeout_seconds:
        env[E.PROGRESS_TIMEOUT] = str(s.distributed.progress_timeout_seconds)
    if s.distributed.node_loss_seconds != E.DEFAULT_NODE_LOSS_S:
        env[E.NODE_LOSS] = str(s.distributed.node_loss_seconds)
    if s.distributed.warm_workers:
        env[E.WARM_WORKERS] = "1"
    elif s.distributed.warm_start:
        env[E.WARM_WORKERS] = "first"
    if s.distributed.spares:
        env[E.SPARES] = str(s.distributed.spares)
    if s.elastic:
        env[E.MIN_NODES] = str(s.min_nodes)
    if (s.distributed.spares or s.elastic) and slot_addr is not None:
        env[E.SLOT_ADDR] = slot_addr  # where the store moves if node 0 is lost
        if local:
            env[E.SLOT_PORTS] = "1"
    if s.checkpoint is not None:
        env[E.CHECKPOINT_DIR] = s.checkpoint.path
    env["OMP_NUM_THREADS"] = str(omp_threads(job))
    env.update(s.env)
    return env


def pod_env(job: TrainingJob, *, node_rank: int | None, master_addr: str | None,
            code_sha256: str | None = None, runtime_sha256: str | None = None,
            local: bool = False, slot_addr: str | None = None) -> dict[str, str]:
    """A pod's (or, `local`, a local node's) whole literal env, assembled here once:
    the contract, the shipped code's and runtime's digests, the GPU defaults and, in a
    pod, HOME and the socket interface (a local run keeps the user's HOME, and talks over
    loopback: a pod's interface name would not exist here)."""
    from kdist.rendering import podspec

    env = env_contract(job, node_rank=node_rank, master_addr=master_addr,
                       slot_addr=slot_addr, local=local)
    # HOME first, so $(HOME) expands in spec.env's values and args: a pod's is kdist's
    # writable one; a local run keeps this machine's.
    host_home = os.environ.get("HOME")
    home = podspec.home_env(job) if not local else (
        {"HOME": host_home} if host_home and "HOME" not in job.spec.env else {})
    env = {**home, **env}
    if code_sha256 is not None:
        env[E.CODE_SHA256] = code_sha256
    if runtime_sha256 is not None:
        env[E.RUNTIME_SHA256] = runtime_sha256
    env.update(podspec.gpu_env(job, env))
    if not local:
        env.update(podspec.socket_env(job, env))
    return env


def expand_refs(text: str, env: Mapping[str, str]) -> str:
    """``$(NAME)`` in ``text`` replaced as the kubelet replaces it in a container's args.

    Kubernetes' own rules (third_party/forked/golang/expansion): ``$(NAME)`` of a
    variable in ``env`` becomes its value; ``$$`` is one ``$``; an unknown name,
    an unclosed ``$(`` and ``$`` before anything else stay as written. ``kdist run
    --local`` applies it with the container's env (the contract and spec.env, as
    rendered), never the host's; ``$(HOME)`` is the HOME each gets (a pod's is kdist's
    ``DEFAULT_HOME`` unless spec.env sets one; a local run's is this machine's).
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        dollar = text.find("$", i)
        if dollar < 0 or dollar + 1 >= len(text):
            out.append(text[i:])
            break
        out.append(text[i:dollar])
        after = text[dollar + 1]
        if after == "$":
            out.append("$")
            i = dollar + 2
        elif after == "(" and (close := text.find(")", dollar + 2)) >= 0:
            name = text[dollar + 2:close]
            out.append(env[name] if name in env else text[dollar:close + 1])
            i = close + 1
        else:  # "$(" unclosed, or "$x": kept; scanning goes on after the "$"
            out.append("$")
            i = dollar + 1
    return "".join(out)


def expanded_env(env: Mapping[str, str]) -> dict[str, str]:
    """The container's env with ``$(NAME)`` in values expanded as the kubelet does:
    each value from the variables listed before it, in order."""
    done: dict[str, str] = {}
    for name, value in env.items():
        done[name] = expand_refs(value, done)
    return done
