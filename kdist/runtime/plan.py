"""The launcher's plan: a pod's (or a local process group's) environment, resolved.

Both pod kinds (an Indexed Job's ``KDIST_*`` contract, a PyTorchJob's
operator-injected ``PET_*``/``RANK``/``MASTER_ADDR``) map onto one
``LaunchPlan``; ``wait_for_master`` is the bounded wait before the rendezvous.
"""

from __future__ import annotations

import dataclasses
import functools
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kdist.runtime.membership import Members
from kdist.shared import env as E
from kdist.shared.errors import LaunchError
from kdist.shared.limits import MAX_NODES, MAX_PROCS_PER_NODE

DEFAULT_PORT, DEFAULT_RDZV_TIMEOUT_S = E.DEFAULT_PORT, E.DEFAULT_RDZV_TIMEOUT_S
DEFAULT_PG_TIMEOUT_S = E.DEFAULT_PG_TIMEOUT_S
BACKENDS = ("nccl", "gloo")
REFUSED_RETRY_S = 0.2


@dataclass(frozen=True)
class LaunchPlan:
    """What one launcher does, resolved from its environment."""

    job_name: str
    nnodes: int
    nproc_per_node: int
    node_rank: int
    master_addr: str
    master_port: int
    backend: str
    checkpoint_dir: str | None
    max_restarts: int
    rdzv_timeout_s: int
    pg_timeout_s: int
    # Which whole-job restart this is, when the environment says (None: ask
    # kdist.runtime.restarts), and the hang watchdog's limit (0: off).
    restart_count: int | None = None
    progress_timeout_s: int = 0
    # A node silent this long is lost (kdist.runtime.heartbeat).
    node_loss_s: int = E.DEFAULT_NODE_LOSS_S
    # Warm spares (kdist.runtime.membership): this pod's slot (its index; None: its node
    # rank), the job's spares, and the gang's members as this launcher last met them
    # (None: it has not met the gang yet).
    slot: int | None = None
    spares: int = 0
    members: Members | None = None
    # Elastic (kdist.runtime.elastic): the fewest nodes the gang goes on with (0: off), and
    # the node ranks it started with (None: nnodes; nnodes is the size it has now).
    min_nodes: int = 0
    max_nodes: int | None = None
    # Where a slot hosts the store if it must move (kdist.runtime.hostmove): a template of
    # its address (``{slot}``; None: the store never moves), whether each slot listens on
    # a port of its own (master port + slot: a local run), and the master port as the
    # job started with it (``master_addr``/``master_port`` follow the store's host).
    slot_addr: str | None = None
    slot_ports: bool = False
    job_port: int | None = None

    @property
    def full_nodes(self) -> int:
        """The node ranks the job has at full size (``spec.nodes``): the spares' slots
        follow them."""
        return self.nnodes if self.max_nodes is None else self.max_nodes

    @property
    def elastic(self) -> bool:
        return 0 < self.min_nodes < self.full_nodes

    @property
    def tracks_members(self) -> bool:
        """Whether the gang keeps its members (generations, fencing): with warm spares, or
        elastic."""
        return bool(self.spares) or self.elastic

    @property
    def home_slot(self) -> int:
        """This pod's slot: its completion index, whichever rank it holds."""
        return self.node_rank if self.slot is None else self.slot

    @property
    def hosts_store(self) -> bool:
        """Whether this launcher serves the store: it holds the members' host rank (node
        rank 0 until the store moves)."""
        return self.node_rank == (0 if self.members is None else self.members.host)

    @property
    def store_moves(self) -> bool:
        """Whether the survivors of a lost host move the store (warm spares or an elastic
        gang, and a slot address to move it to) rather than wait for the host's
        replacement."""
        return self.tracks_members and self.slot_addr is not None

    def address_of(self, slot: int) -> tuple[str, int]:
        """Where ``slot`` serves the store when it hosts it."""
        port = self.master_port if self.job_port is None else self.job_port
        if self.slot_addr is None:
            return self.master_addr, port
        return self.slot_addr.replace("{slot}", str(slot)), port + (slot if self.slot_ports
                                                                    else 0)

    def at_host(self, members: Members) -> LaunchPlan:
        """This plan with ``members``, its master the address of their host's slot."""
        if self.slot_addr is None:
            return dataclasses.replace(self, members=members)
        addr, port = self.address_of(members.host_slot)
        return dataclasses.replace(self, members=members, master_addr=addr, master_port=port,
                                   job_port=self.master_port if self.job_port is None
                                   else self.job_port)

    @property
    def is_spare(self) -> bool:
        """A spare holding no rank yet (its node rank is its slot, beyond the ranks)."""
        return self.node_rank >= self.full_nodes

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def global_ranks(self) -> range:
        """The global ranks of this node's workers (static rendezvous)."""
        first = self.node_rank * self.nproc_per_node
        return range(first, first + self.nproc_per_node)

    def worker_env(self, environ: Mapping[str, str], cpu_count: int) -> dict[str, str]:
        """Variables to add to the launcher's env before starting workers.

        Workloads read ``KDIST_*`` (the same names on both pod kinds, so a
        PyTorchJob pod sees ``KDIST_NODE_RANK`` too) and ``KDIST_PG_TIMEOUT``.
        """
        env = {
            E.JOB_NAME: self.job_name,
            E.NNODES: str(self.nnodes),
            E.NPROC_PER_NODE: str(self.nproc_per_node),
            E.NODE_RANK: str(self.node_rank),
            E.MASTER_ADDR: self.master_addr,
            # the job's port, not the store's (kdist's DDP names its memory files by it)
            E.MASTER_PORT: str(self.master_port if self.job_port is None else self.job_port),
            E.DIST_BACKEND: self.backend,
            E.MAX_RESTARTS: str(self.max_restarts),
            E.PG_TIMEOUT: str(self.pg_timeout_s),
            E.RESTART_COUNT: str(self.restart_count or 0),
            # Every node runs the same number of workers: torch may compute
            # ranks as node_rank * nproc + local_rank instead of gathering
            # role info through the store on every (re)start.
            "TORCH_ELASTIC_WORKER_IDENTICAL": "1",
        }
        if self.checkpoint_dir:
            env[E.CHECKPOINT_DIR] = self.checkpoint_dir
        if self.elastic:
            env[E.FULL_WORLD_SIZE] = str(self.full_nodes * self.nproc_per_node)
        if not environ.get("OMP_NUM_THREADS"):
            env["OMP_NUM_THREADS"] = str(max(1, cpu_count // self.nproc_per_node))
        return env


def _first(environ: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return name, value
    return None


def _int(found: tuple[str, str], minimum: int = 0, maximum: int | None = None) -> int:
    name, value = found
    try:
        number = int(value)
    except ValueError:
        raise LaunchError(f"{name}={value!r} is not an integer") from None
    if number < minimum:
        raise LaunchError(f"{name}={value!r} must be >= {minimum}")
    if maximum is not None and number > maximum:
        raise LaunchError(f"{name}={value!r} must be <= {maximum}")
    return number


def _nnodes(found: tuple[str, str]) -> int:
    # PET_NNODES may be an elastic range "MIN:MAX"; kdist gangs are fixed.
    name, value = found
    low, sep, high = value.partition(":")
    if sep and low != high:
        raise LaunchError(f"{name}={value!r}: elastic node ranges are not supported")
    return _int((name, low), minimum=1, maximum=MAX_NODES)


def _nproc(found: tuple[str, str] | None, gpu_count: Callable[[], int]) -> int:
    if found is None:
        return 1
    if found[1] == "auto":
        return max(1, min(gpu_count(), MAX_PROCS_PER_NODE))
    # One pipe, error file and process each: kdist's bound, not the machine's fd limit.
    return _int(found, minimum=1, maximum=MAX_PROCS_PER_NODE)


def _visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_env(
    environ: Mapping[str, str], *, gpu_count: Callable[[], int] = _visible_gpus
) -> LaunchPlan:
    """Map a pod's (or a local process group's) environment onto a plan.

    The kdist contract (``KDIST_*``, from an Indexed Job or a local run) wins;
    in a PyTorchJob pod the node rank and master come from what the training
    operator injects (``PET_NODE_RANK``/``RANK``, ``PET_MASTER_ADDR``/
    ``MASTER_ADDR``, ...). The same pod described either way gives the same
    plan. ``gpu_count`` is only called for ``auto`` values. Raises
    ``LaunchError`` naming the variable that is missing or wrong.
    """
    nnodes_var = _first(environ, E.NNODES, "PET_NNODES", "WORLD_SIZE")
    nnodes = _nnodes(nnodes_var) if nnodes_var else 1
    rank_var = _first(
        environ, E.NODE_RANK, "JOB_COMPLETION_INDEX", "PET_NODE_RANK", "RANK"
    )
    if rank_var is None and nnodes > 1:
        raise LaunchError(f"KDIST_NODE_RANK is not set and there are {nnodes} nodes")
    node_rank = _int(rank_var) if rank_var else 0
    spares_var = _first(environ, E.SPARES)
    spares = _int(spares_var) if spares_var else 0
    if node_rank >= nnodes + spares:  # only a variable that is set can be out of range
        name = rank_var[0] if rank_var else E.NODE_RANK
        more = f" and {spares} spare(s)" if spares else ""
        raise LaunchError(f"{name}={node_rank} is out of range for {nnodes} nodes{more}")
    addr_var = _first(environ, E.MASTER_ADDR, "PET_MASTER_ADDR", "MASTER_ADDR")
    if addr_var is None and nnodes > 1:
        raise LaunchError(f"KDIST_MASTER_ADDR is not set and there are {nnodes} nodes")
    gpus = _first(environ, E.GPUS)
    if gpus is not None:  # `auto` counts the pod's GPUs, not all its CUDA image exposes
        gpu_count = functools.partial(_int, gpus)
    port_var = _first(environ, E.MASTER_PORT, "PET_MASTER_PORT", "MASTER_PORT")
    port = _int(port_var, minimum=1) if port_var else DEFAULT_PORT
    if port > 65535:
        raise LaunchError(f"{port_var[0] if port_var else E.MASTER_PORT}={port} is not a TCP port")
    backend = environ.get(E.DIST_BACKEND, "").strip() or "auto"
    if backend == "auto":
        backend = "nccl" if gpu_count() > 0 else "gloo"
    if backend not in BACKENDS:
        raise LaunchError(f"KDIST_DIST_BACKEND={backend!r} must be one of nccl, gloo, auto")
    restarts = _first(environ, E.MAX_RESTARTS)
    rdzv = _first(environ, E.RDZV_TIMEOUT)
    pg = _first(environ, E.PG_TIMEOUT)
    progress = _first(environ, E.PROGRESS_TIMEOUT)
    node_loss = _first(environ, E.NODE_LOSS)
    least = _first(environ, E.MIN_NODES)
    min_nodes = _int(least, minimum=1, maximum=nnodes) if least else 0
    elastic = 0 < min_nodes < nnodes  # minNodes = nodes (the default) is off
    return LaunchPlan(
        job_name=environ.get(E.JOB_NAME, "").strip() or "kdist",
        nnodes=nnodes,
        nproc_per_node=_nproc(
            _first(environ, E.NPROC_PER_NODE, "PET_NPROC_PER_NODE"), gpu_count
        ),
        node_rank=node_rank,
        master_addr=addr_var[1] if addr_var else "127.0.0.1",
        master_port=port,
        backend=backend,
        checkpoint_dir=environ.get(E.CHECKPOINT_DIR, "").strip() or None,
        max_restarts=_int(restarts) if restarts else 0,
        rdzv_timeout_s=_int(rdzv, minimum=1) if rdzv else DEFAULT_RDZV_TIMEOUT_S,
        pg_timeout_s=_int(pg, minimum=1) if pg else DEFAULT_PG_TIMEOUT_S,
        restart_count=_restart_count(environ),
        progress_timeout_s=_int(progress) if progress else 0,
        node_loss_s=_int(node_loss, minimum=2) if node_loss else E.DEFAULT_NODE_LOSS_S,
        slot=node_rank if spares or elastic else None,
        spares=spares,
        min_nodes=min_nodes if elastic else 0,
        max_nodes=nnodes if elastic else None,
        slot_addr=_slot_addr(environ) if spares or elastic else None,
        slot_ports=environ.get(E.SLOT_PORTS, "").strip() == "1",
    )


def _slot_addr(environ: Mapping[str, str]) -> str | None:
    found = _first(environ, E.SLOT_ADDR)
    if found is None:
        return None
    if "{slot}" not in found[1] and environ.get(E.SLOT_PORTS, "").strip() != "1":
        raise LaunchError(f"{found[0]}={found[1]!r} must contain {{slot}} (each slot's "
                          "address), or every slot listen on a port of its own")
    return found[1]


def _restart_count(environ: Mapping[str, str]) -> int | None:
    """The restart count the environment states: the local runner's, or (Indexed Job) the
    Job controller's failures of this pod's index, counted and ignored ones together
    (an evicted pod is ignored by kdist's podFailurePolicy, yet its replacement is a
    restart all the same). None when neither is there (a PyTorchJob pod)."""
    given = _first(environ, E.RESTART_COUNT)
    if given:
        return _int(given)
    failed = _first(environ, E.INDEX_FAILURES)
    if failed is None:
        return None
    ignored = _first(environ, E.INDEX_IGNORED_FAILURES)  # set only once it is not 0
    return _int(failed) + (_int(ignored) if ignored else 0)


def wait_for_master(
    plan: LaunchPlan,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Block until the master's name resolves and (off node 0) its port accepts TCP.

    Headless-Service DNS lags pod start by up to ~30 s, and a resolving
    name may refuse connections for a while after; a torch store fails at
    once on either. Bounded by ``plan.rdzv_timeout_s``; raises ``LaunchError``
    naming the address on timeout. Node rank 0 hosts the store itself, so it
    only waits for its own name. Returns the seconds it waited.
    """
    started = clock()
    deadline = started + plan.rdzv_timeout_s
    where = f"{plan.master_addr}:{plan.master_port}"
    delay = 0.1
    while True:
        try:
            socket.getaddrinfo(plan.master_addr, plan.master_port, type=socket.SOCK_STREAM)
        except OSError as e:
            problem = f"does not resolve ({e})"
        else:
            if plan.node_rank == 0:
                return clock() - started
            try:
                timeout = max(0.1, min(5.0, deadline - clock()))
                socket.create_connection((plan.master_addr, plan.master_port), timeout).close()
                return clock() - started
            except OSError as e:
                problem = f"does not accept TCP connections ({e})"
        remaining = deadline - clock()
        if remaining <= 0:
            raise LaunchError(
                f"master {where} {problem} after {plan.rdzv_timeout_s}s (KDIST_RDZV_TIMEOUT)"
            )
        # A refused connection is cheap and ends the moment node 0's launcher binds the
        # port (first thing it does): ask often, or this node's workers start late.
        cap = 2.0 if problem.startswith("does not resolve") else REFUSED_RETRY_S
        sleep(min(delay, cap, remaining))
        delay = min(cap, delay * 2)
