"""The training image's entrypoint: ``python -m kdist.launch [--module M] -- ARG...``.

One launcher runs per pod (or per local process group). It reads the kdist
environment contract (or what the Kubeflow training operator injects into a
PyTorchJob pod), waits until the master answers, and hands the worker
processes to torch's elastic agent, which sets ``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` and
``GROUP_RANK`` for each of them.

Rendezvous: **static**, with the node rank taken from the pod
(``KDIST_NODE_RANK`` = the Indexed Job's completion index, or the operator's
node rank). Why not c10d:

- ranks are deterministic: global rank = node rank * procs per node + local
  rank, so pod ``<job>-1`` always holds ranks 1*P..2*P-1 (``kdist logs --rank``,
  pipeline stage placement and log prefixes can rely on it); c10d ranks nodes
  by sorting host names and pids, which moves ranks between pods;
- one port: the TCP store lives on the master's declared port (the one the
  headless Service and the PyTorchJob's ``pytorchjob-port`` publish); c10d's
  shared store binds a second, random port on rank 0's own FQDN, which a pod
  need not resolve;
- no host-name matching: node rank 0 hosts the store because it *is* rank 0,
  not because its host name happens to match the master address;
- the gang is fixed in size (a Job of N pods): nothing elastic is lost.

Restarts belong to the job, not to the launcher (see ``kdist.exitcodes``):
the agent never restarts workers in place. A failed worker ends this
launcher with an exit code that says whether it is worth a retry; every peer
then fails its next collective and exits ``PEER_LOST``; and whoever runs the
launchers (the Job controller, the training operator, ``kdist run --local``)
makes the whole gang anew, up to ``maxRestarts`` times, each worker resuming
from the newest checkpoint. In-place restarts cannot work across pods: a
replaced pod's launcher starts at restart 0 while the survivors would be at
1, and a dead node 0 takes the store with it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kdist.shared import env as E
from kdist.shared import exitcodes
from kdist.shared.errors import LaunchError

DEFAULT_PORT = 29500
DEFAULT_RDZV_TIMEOUT_S = 300
# A dead peer must fail the job in minutes, not in torch's default 30 min.
DEFAULT_PG_TIMEOUT_S = 300
BACKENDS = ("nccl", "gloo")
# Set by the local runner: prefix each worker line with "[rank N] ".
LOG_PREFIX_ENV = E.LOG_PREFIX
LOG_PREFIX_TEMPLATE = "[rank ${rank}] "


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
            E.MASTER_PORT: str(self.master_port),
            E.DIST_BACKEND: self.backend,
            E.MAX_RESTARTS: str(self.max_restarts),
            E.PG_TIMEOUT: str(self.pg_timeout_s),
            # Every node runs the same number of workers: torch may compute
            # ranks as node_rank * nproc + local_rank instead of gathering
            # role info through the store on every (re)start.
            "TORCH_ELASTIC_WORKER_IDENTICAL": "1",
        }
        if self.checkpoint_dir:
            env[E.CHECKPOINT_DIR] = self.checkpoint_dir
        if not environ.get("OMP_NUM_THREADS"):
            env["OMP_NUM_THREADS"] = str(max(1, cpu_count // self.nproc_per_node))
        return env


def _first(environ: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return name, value
    return None


def _int(found: tuple[str, str], minimum: int = 0) -> int:
    name, value = found
    try:
        number = int(value)
    except ValueError:
        raise LaunchError(f"{name}={value!r} is not an integer") from None
    if number < minimum:
        raise LaunchError(f"{name}={value!r} must be >= {minimum}")
    return number


def _nnodes(found: tuple[str, str]) -> int:
    # PET_NNODES may be an elastic range "MIN:MAX"; kdist gangs are fixed.
    name, value = found
    low, sep, high = value.partition(":")
    if sep and low != high:
        raise LaunchError(f"{name}={value!r}: elastic node ranges are not supported")
    return _int((name, low), minimum=1)


def _nproc(found: tuple[str, str] | None, gpu_count: Callable[[], int]) -> int:
    if found is None:
        return 1
    if found[1] == "auto":
        return max(1, gpu_count())
    return _int(found, minimum=1)


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
    if node_rank >= nnodes:
        raise LaunchError(f"{rank_var[0]}={node_rank} is out of range for {nnodes} nodes")
    addr_var = _first(environ, E.MASTER_ADDR, "PET_MASTER_ADDR", "MASTER_ADDR")
    if addr_var is None and nnodes > 1:
        raise LaunchError(f"KDIST_MASTER_ADDR is not set and there are {nnodes} nodes")
    port_var = _first(environ, E.MASTER_PORT, "PET_MASTER_PORT", "MASTER_PORT")
    port = _int(port_var, minimum=1) if port_var else DEFAULT_PORT
    if port > 65535:
        raise LaunchError(f"{port_var[0]}={port} is not a TCP port")
    backend = environ.get(E.DIST_BACKEND, "").strip() or "auto"
    if backend == "auto":
        backend = "nccl" if gpu_count() > 0 else "gloo"
    if backend not in BACKENDS:
        raise LaunchError(f"KDIST_DIST_BACKEND={backend!r} must be one of nccl, gloo, auto")
    restarts = _first(environ, E.MAX_RESTARTS)
    rdzv = _first(environ, E.RDZV_TIMEOUT)
    pg = _first(environ, E.PG_TIMEOUT)
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
    )


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
        sleep(min(delay, remaining))
        delay = min(2.0, delay * 2)


def parse_argv(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """Split ``[--module M] -- ARG...`` into (module, args).

    With a module the args go to ``python -m M``; without, they are the
    command itself.
    """
    argv = list(argv)
    if "--" in argv:
        split = argv.index("--")
        own, rest = argv[:split], argv[split + 1 :]
    else:
        own, rest = argv, []
    parser = argparse.ArgumentParser(
        prog="python -m kdist.launch",
        usage="python -m kdist.launch [-h] [-m MODULE] -- ARG...",
        description="Start this node's training workers (kdist's container entrypoint).",
        epilog="Everything after -- goes to the module, or is the command to run.",
    )
    parser.add_argument("-m", "--module", help="run `python -m MODULE ARG...` per worker")
    ns = parser.parse_args(own)
    if ns.module is None and not rest:
        parser.error("give --module MODULE, or a command after --")
    return ns.module, rest


def _entrypoint(module: str | None, rest: list[str]) -> tuple[str, list[str]]:
    if module is not None:
        return sys.executable, ["-u", "-m", module, *rest]
    # "python" means the interpreter running kdist (a venv locally, the image's
    # python in a pod), not whatever PATH finds first.
    if rest[0] in ("python", "python3"):
        return sys.executable, rest[1:]
    return rest[0], rest[1:]


def pick_failure(failures: Mapping[int, tuple[int, float]]) -> int:
    """The global rank whose failure the launcher reports, from {rank: (exitcode, time)}.

    ``exitcode`` as torch gives it (negative: killed by that signal). The
    most telling failure wins (``exitcodes.severity``), then the earliest.
    """
    return min(
        failures,
        key=lambda r: (exitcodes.severity(exitcodes.of_returncode(failures[r][0])),
                       failures[r][1], r),
    )


def _describe_exit(exitcode: int) -> str:
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def _cause(message: object) -> str:
    """The worker's own error (from its torch error file), as one short clause."""
    if isinstance(message, dict):  # the error file's {"message": ..., "extraInfo": ...}
        message = message.get("message")
    text = str(message or "").strip()
    if not text or text.startswith("To enable traceback"):  # torch's "no error file" text
        return ""
    last = text.splitlines()[-1]
    return f": {last[:200]}"


def _say(message: str) -> None:
    print(f"kdist.launch: {message}", file=sys.stderr, flush=True)


def run(plan: LaunchPlan, module: str | None, rest: list[str], *, prefix_lines: bool) -> int:
    """Run this node's workers under torch's elastic agent; return the exit code."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    log_dir = tempfile.mkdtemp(prefix="kdist-launch-")
    std = Std.ALL if prefix_lines else Std.NONE
    config = LaunchConfig(
        min_nodes=plan.nnodes,
        max_nodes=plan.nnodes,
        nproc_per_node=plan.nproc_per_node,
        run_id=plan.job_name,
        role="trainer",
        rdzv_backend="static",
        rdzv_endpoint=f"{plan.master_addr}:{plan.master_port}",
        rdzv_configs={"rank": plan.node_rank, "timeout": plan.rdzv_timeout_s},
        max_restarts=0,  # restarts belong to the job: see the module's docstring
        logs_specs=DefaultLogsSpecs(log_dir=log_dir, redirects=std, tee=std),
        log_line_prefix_template=LOG_PREFIX_TEMPLATE if prefix_lines else None,
        shutdown_timeout=15,
    )
    entrypoint, args = _entrypoint(module, rest)
    try:
        elastic_launch(config, entrypoint)(*args)
        return 0
    except ChildFailedError as e:
        rank = pick_failure({r: (f.exitcode, f.timestamp) for r, f in e.failures.items()})
        failure = e.failures[rank]
        code = exitcodes.of_returncode(failure.exitcode)
        _say(
            f"worker rank {rank} (node {plan.node_rank}, local rank {failure.local_rank}, "
            f"pid {failure.pid}) {_describe_exit(failure.exitcode)}{_cause(failure.message)}; "
            f"exiting {code}: {exitcodes.describe(code)}"
        )
        return code
    except SignalException as e:
        _say(f"stopped by {signal.Signals(e.sigval).name}")
        return 128 + int(e.sigval)
    except Exception as e:  # rendezvous and store errors: one line, no traceback
        _say(
            f"rendezvous of {plan.nnodes} node(s) at {plan.master_addr}:{plan.master_port} "
            f"failed (KDIST_RDZV_TIMEOUT={plan.rdzv_timeout_s}s): {' '.join(str(e).split())}"
        )
        return 1
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def main(argv: Sequence[str] | None = None) -> int:
    module, rest = parse_argv(sys.argv[1:] if argv is None else argv)
    try:
        plan = resolve_env(os.environ)
        _say(
            f"job {plan.job_name}: node {plan.node_rank}/{plan.nnodes}, "
            f"ranks {plan.global_ranks.start}-{plan.global_ranks.stop - 1} of "
            f"{plan.world_size}, master {plan.master_addr}:{plan.master_port}, "
            f"backend {plan.backend}, job restarts allowed {plan.max_restarts}"
        )
        waited = wait_for_master(plan)
        if waited >= 1.0:
            _say(f"master {plan.master_addr}:{plan.master_port} answered after {waited:.1f}s")
    except LaunchError as e:
        _say(str(e))
        return e.exit_code
    os.environ.update(plan.worker_env(os.environ, _cpu_count()))
    prefix = os.environ.get(LOG_PREFIX_ENV, "") not in ("", "0")
    return run(plan, module, rest, prefix_lines=prefix)


if __name__ == "__main__":
    sys.exit(main())
