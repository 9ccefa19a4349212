"""The training image's entrypoint: ``python -m kdist.launch [--module M] -- ARG...``.

One launcher runs per pod (or per local process group). It reads the kdist
environment contract (or what the Kubeflow training operator injects into a
PyTorchJob pod), meets the other nodes' launchers, and starts this node's
worker processes with what torchrun's agent would give them (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``, ``TORCHELASTIC_*``; ``kdist.runtime.workers``).

The launcher does not import torch: each worker imports it once, and they all
start at about the same moment, which is what a pod's start to its first step
costs (issue 13). The store torchrun's agent would host on the master port is
served by rank 0's worker (``kdist.runtime.sitehook``) on the socket node 0's
launcher bound first thing; the launchers talk to each other on that port in
torch's store protocol (``kdist.runtime.store``, ``kdist.runtime.rendezvous``).

Rendezvous: **static**, with the node rank taken from the pod
(``KDIST_NODE_RANK`` = the Indexed Job's completion index, or the operator's
node rank). Why not c10d:

- ranks are deterministic: global rank = node rank * procs per node + local
  rank, so pod ``<job>-1`` always holds ranks 1*P..2*P-1 (``kdist logs --rank``,
  pipeline stage placement and log prefixes can rely on it); c10d ranks nodes
  by sorting host names and pids, which moves ranks between pods;
- one port: the store lives on the master's declared port (the one the
  headless Service and the PyTorchJob's ``pytorchjob-port`` publish); c10d's
  shared store binds a second, random port on rank 0's own FQDN, which a pod
  need not resolve;
- no host-name matching: node rank 0 hosts the store because it *is* rank 0,
  not because its host name happens to match the master address;
- the gang is fixed in size (a Job of N pods): nothing elastic is lost.

Every node waits, bounded by ``KDIST_RDZV_TIMEOUT`` from its start, until the
master resolves and accepts TCP and every node's launcher has joined; only then
do workers start (exit 2 when the master never answers, 1 when not every node
joined, as under torch's static rendezvous).

Restarts belong to the job, not to the launcher (see ``kdist.exitcodes``):
the launcher never restarts workers itself. A failed worker ends this
launcher with an exit code that says whether it is worth a retry; every peer
then fails its next collective and exits ``PEER_LOST``; and whoever runs the
launchers makes the whole gang anew, up to ``maxRestarts`` times, each worker
resuming from the newest checkpoint: the kubelet, restarting every pod's
containers in place (``distributed.restartMode``, ``kdist.rendering.restarts``;
the launcher then counts and bounds the restarts itself), or the Job
controller, the training operator or ``kdist run --local``, making new ones.

This module is the entrypoint (argv, then the order of things); the pieces
live in ``kdist.runtime`` (the plan, the rendezvous, the agent, the workers and
their environment, their output, the watchdog, failure classification, restart
counts).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import sys
import time
from collections.abc import Sequence

from kdist.launch_code import use_shipped_code
from kdist.runtime import rendezvous, restarts
from kdist.runtime.agent import Said, run, say
from kdist.runtime.failures import cause as _cause
from kdist.runtime.failures import pick_failure
from kdist.runtime.plan import LaunchPlan, resolve_env, wait_for_master
from kdist.runtime.worker_exec import command as _entrypoint
from kdist.shared import env as E
from kdist.shared import exitcodes
from kdist.shared.errors import LaunchError

# Names other modules and tests knew here before the launcher was split up.
__all__ = ["LaunchError", "LaunchPlan", "_cause", "_entrypoint", "main",
           "parse_argv", "pick_failure", "resolve_env", "run", "wait_for_master"]
_say = say
# The end of a launcher line that names the exit code it was about to exit with.
_EXITING = re.compile(r"; exiting \d+(: .*)?$")


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


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _stop_on(sig: int, frame: object) -> None:
    # Until the agent takes over the signals (a pod deleted while it waits for
    # the master): exit as the signal would. As a pod's PID 1 the launcher
    # would otherwise ignore SIGTERM until the grace period ends.
    raise SystemExit(128 + sig)


def main(argv: Sequence[str] | None = None) -> int:
    started = time.monotonic()
    module, rest = parse_argv(sys.argv[1:] if argv is None else argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_on)
    counter = in_place = None
    listener = None
    try:
        plan = resolve_env(os.environ)
        listener = rendezvous.bind(plan)  # node 0: the master port answers from now on
        in_place = restarts.in_place_dir(os.environ)
        if in_place is not None:  # restarted in place: this pod's starts count too
            plan = dataclasses.replace(plan, restart_count=(plan.restart_count or 0)
                                       + restarts.count_start(in_place))
        else:
            counter = restarts.counter_path(plan)
        if counter is not None:
            plan = dataclasses.replace(plan, restart_count=restarts.take(counter))
        _say(
            f"job {plan.job_name}: node {plan.node_rank}/{plan.nnodes}, "
            f"ranks {plan.global_ranks.start}-{plan.global_ranks.stop - 1} of "
            f"{plan.world_size}, master {plan.master_addr}:{plan.master_port}, "
            f"backend {plan.backend}, restart {plan.restart_count or 0} of "
            f"{plan.max_restarts} allowed"
        )
        code_dir = use_shipped_code(os.environ)  # spec.workdir: the workers start in it
        if code_dir is not None:
            _say(f"code {os.environ[E.CODE_SHA256][:12]} unpacked into {code_dir}")
        waited = wait_for_master(plan)
        if waited >= 1.0:
            _say(f"master {plan.master_addr}:{plan.master_port} answered after {waited:.1f}s")
        waited = rendezvous.rendezvous(plan, listener, started)
        if waited >= 1.0:
            _say(f"all {plan.nnodes} nodes joined after {waited:.1f}s")
    except LaunchError as e:
        _say(str(e))
        if listener is not None:
            listener.close()
        return e.exit_code
    os.environ.update(plan.worker_env(os.environ, _cpu_count()))
    prefix = os.environ.get(E.LOG_PREFIX, "") not in ("", "0")
    try:
        code = run(plan, module, rest, prefix_lines=prefix, listener=listener)
    finally:
        if listener is not None:
            listener.close()
    if counter is not None and exitcodes.is_retryable(code):
        restarts.leave(counter, (plan.restart_count or 0) + 1)  # for the next gang's pod
    if in_place is not None and restarts.spent(plan, code, Said.stopped_by is not None):
        # The kubelet would restart this pod again: the job fails instead (podFailurePolicy).
        why = _EXITING.sub("", Said.last)
        spent = exitcodes.RESTARTS_SPENT
        _say(f"no restart left ({plan.restart_count or 0} of maxRestarts="
             f"{plan.max_restarts} used): exiting {spent}, the job fails; the failure: {why} "
             f"(exit {code}: {exitcodes.describe(code)})")
        return spent
    return code


if __name__ == "__main__":
    sys.exit(main())
