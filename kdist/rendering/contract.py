"""The environment contract between a rendered pod (or a local process group)
and `kdist.launch`, plus the launcher command line. Rendering and the local
runner both build pods' processes from here, so they cannot drift apart."""

from __future__ import annotations

import math

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
    if ppn == "auto":
        return max(1, job.spec.resources.gpus)
    return ppn


def omp_threads(job: TrainingJob) -> int:
    """Threads per process: the pod's CPU limit shared by its processes."""
    cpus = parse_quantity(job.spec.resources.cpu)
    return max(1, math.floor(cpus / procs_hint(job)))


def master_service_addr(job: TrainingJob) -> str:
    """Node 0's stable DNS name behind the headless Service (Indexed Job backend)."""
    name = job.metadata.name
    return f"{name}-0.{name}"


def env_contract(
    job: TrainingJob, *, node_rank: int | None, master_addr: str | None
) -> dict[str, str]:
    """KDIST_* variables, OMP_NUM_THREADS, then the user's env (which may override OMP).

    `node_rank`/`master_addr` are None where the pod learns them elsewhere
    (a fieldRef on Indexed Jobs, the training operator's env on PyTorchJobs).
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
    if s.checkpoint is not None:
        env[E.CHECKPOINT_DIR] = s.checkpoint.path
    env["OMP_NUM_THREADS"] = str(omp_threads(job))
    env.update(s.env)
    return env
