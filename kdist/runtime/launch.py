"""The training image's entrypoint: ``python -m kdist.launch [--module M] -- ARG...``.

One launcher runs per pod (or per local process group). It reads the kdist
environment contract (or what the Kubeflow training operator injects into a
PyTorchJob pod), meets the other nodes' launchers, and starts this node's
worker processes with what torchrun's agent would give them (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``, ``TORCHELASTIC_*``; ``kdist.runtime.workers``).

The launcher does not import torch: each worker imports it once, and they all
start at about the same moment, which is what a pod's start to its first step
costs (issue 13). A standby per local rank imports it ahead, while the launcher meets
the others, and becomes the worker (``kdist.runtime.standby``): at the first start of a
script that imports torch (``kdist.runtime.warmstart``), and with warm workers
(``spec.distributed.warmWorkers``) after each restart in process too. The store
torchrun's agent would host on the master port is served by rank 0's worker
(``kdist.runtime.sitehook``) on the socket node 0's launcher bound first thing; the
launchers talk to each other on that port in torch's store protocol
(``kdist.runtime.store``, ``kdist.runtime.rendezvous``).

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

Restarts belong to the job (see ``kdist.exitcodes``): a failed worker ends its
node's workers with an exit code that says whether it is worth a retry; every peer
then fails its next collective (``PEER_LOST``) or the watchdog stops it (``HUNG``,
node 0 gone); and the whole gang starts anew, up to ``maxRestarts`` times, each
worker resuming from the newest checkpoint. Who starts it anew, fastest first:

- **the launchers, in process**, where the pods restart in place
  (``distributed.restartMode``, ``KDIST_RESTART_DIR``) and ``restartWorkers`` is on:
  every launcher whose workers failed retryably, and that no signal is stopping,
  meets the others again in a new rendezvous on the same port and starts its workers
  on the next restart count, its container never restarted (``_again``);
- **the kubelet**, restarting every pod's containers in place (a launcher that must
  go: the gang did not meet again, or restartWorkers is off; the launcher then counts
  and bounds the restarts itself, ``kdist.runtime.restarts``);
- **the Job controller**, the training operator or ``kdist run --local``, making new
  pods (a pod really gone: deleted, evicted, its node lost; and every restart where
  the cluster does not serve restarts in place). Survivors restarting in process wait
  in their rendezvous for the replacement.

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
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from kdist.runtime import (
    elastic,
    hostmove,
    rendezvous,
    restarts,
    spares,
    standby,
    torchcheck,
    warmstart,
    worker_exec,
)
from kdist.runtime.agent import Said, run, say
from kdist.runtime.failures import cause as _cause
from kdist.runtime.failures import pick_failure
from kdist.runtime.membership import Fenced, took_line
from kdist.runtime.output import seal
from kdist.runtime.plan import LaunchPlan, resolve_env, wait_for_master
from kdist.runtime.standby import Standbys
from kdist.runtime.workdir import use_shipped_code
from kdist.runtime.worker_exec import command as _entrypoint
from kdist.shared import env as E
from kdist.shared import exitcodes
from kdist.shared.errors import LaunchError
from kdist.shared.ledger import in_process_line

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
    seal()  # no worker writes into this container's stream but through it (output.seal)
    module, rest = parse_argv(sys.argv[1:] if argv is None else argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_on)
    counter = in_place = None
    listener = None
    standbys: Standbys | None = None
    base = starts = 0
    try:
        torchcheck.check(os.environ)  # before the master port answers: the gang fails at once
        plan = resolve_env(os.environ)
        listener = rendezvous.bind(plan)  # node 0: the master port answers from now on
        in_place = restarts.in_place_dir(os.environ)
        if in_place is not None:  # restarted in place: this pod's starts count too
            base = plan.restart_count or 0
            starts = restarts.count_start(in_place)
            plan = dataclasses.replace(plan, restart_count=base + starts)
        else:
            counter = restarts.counter_path(plan)
        if counter is not None:
            plan = dataclasses.replace(plan, restart_count=restarts.take(counter))
        _say(_start_line(plan))
        code_dir = use_shipped_code(os.environ)  # spec.workdir: the workers start in it
        if code_dir is not None:
            _say(f"code {os.environ[E.CODE_SHA256][:12]} unpacked into {code_dir}")
        # Before the rendezvous, which overlaps the standbys' import of torch
        # (kdist.runtime.standby); after the code's unpacking, whose script tells whether
        # an unasked first start may be warm. A spare's wait for a rank, likewise.
        standbys = _standbys(plan, module, rest, listener, in_place)
        waited = wait_for_master(plan)
        if waited >= 1.0:
            _say(f"master {plan.master_addr}:{plan.master_port} answered after {waited:.1f}s")
        hosting = listener
        plan, listener = _first_meet(plan, listener, started)
        if listener is not hosting and standbys is not None:
            standbys.close()  # they hold the socket this pod no longer hosts the store on
            standbys = None
        if in_place is not None and plan.restart_count != base + starts:
            restarts.note_restart(in_place, plan.restart_count or 0, base)
    except LaunchError as e:
        _say(str(e))
        if standbys is not None:
            standbys.close()
        if listener is not None:
            listener.close()
        return e.exit_code
    except BaseException:
        if standbys is not None:
            standbys.close()
        raise
    prefix = os.environ.get(E.LOG_PREFIX, "") not in ("", "0")
    try:
        while True:
            os.environ.update(plan.worker_env(os.environ, _cpu_count()))
            code = run(plan, module, rest, prefix_lines=prefix, listener=listener,
                       standbys=standbys)
            if in_place is None or not restarts.restart_workers(
                    plan, code, Said.stopped_by is not None, in_place, os.environ):
                break
            hosting = listener
            plan, code, listener = _again(plan, code, listener, in_place, base)
            if listener is not hosting and standbys is not None:
                # this node hosts the store now: its standbys hold no socket to serve it on
                standbys.close()
                standbys = None
            if code:
                break
    finally:
        if standbys is not None:
            standbys.close()
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


def _standbys(plan: LaunchPlan, module: str | None, rest: list[str],
              listener: socket.socket | None, in_place: Path | None) -> Standbys | None:
    """This node's standby workers, started: where the pod asks for warm workers and they
    can run its command, or (unasked) where its first start may be warm
    (``kdist.runtime.warmstart``) and warmStart asked for it or this pod is a spare (a
    spare waits for a rank with its workers' torch imported, kdist's own workloads with
    all that DDP imports: its first step after taking a rank is the gang's). New ones
    follow handovers only where warm workers were asked and the launcher restarts its
    workers itself."""
    argv = worker_exec.worker_argv(module, rest)
    asked = standby.asked(os.environ)
    if asked:
        why = standby.cold_because(argv)
        if why:
            _say(f"warm workers: {why}; the workers start cold")
            return None
    elif not (plan.is_spare or standby.first_asked(os.environ)) or \
            not warmstart.first_start(argv, os.environ, os.getcwd()):
        return None
    preload = () if asked or (plan.is_spare and warmstart.own(argv)) else warmstart.PRELOAD
    os.environ.update(plan.worker_env(os.environ, _cpu_count()))  # as the workers get it
    refill = asked and in_place is not None and plan.max_restarts > 0 and \
        os.environ.get(E.RESTART_WORKERS, "").strip() != "0"
    directory = Path(tempfile.mkdtemp(prefix=f"kdist-launch-{os.getpid()}-standby-"))
    return Standbys(plan, os.environ, directory, None if listener is None else listener.fileno(),
                    refill=refill, announce=asked or plan.is_spare, argv=argv,
                    preload=preload, say=_say).start_all()


def _start_line(plan: LaunchPlan) -> str:
    where = f"master {plan.master_addr}:{plan.master_port}"
    if plan.is_spare:
        return (f"job {plan.job_name}: spare in slot {plan.home_slot} ({plan.nnodes} nodes, "
                f"{plan.spares} spare(s)), {where}")
    return (f"job {plan.job_name}: node {plan.node_rank}/{plan.nnodes}, "
            f"ranks {plan.global_ranks.start}-{plan.global_ranks.stop - 1} of "
            f"{plan.world_size}, {where}, backend {plan.backend}, restart "
            f"{plan.restart_count or 0} of {plan.max_restarts} allowed")


def _first_meet(plan: LaunchPlan, listener: socket.socket | None,
                started: float) -> tuple[LaunchPlan, socket.socket | None]:
    """The first rendezvous, and the socket this launcher hosts the store on; a spare
    (``spec.distributed.spares``) waits first, holding no rank, until it takes one
    (``kdist.runtime.spares``), and a pod whose slot's rank a spare took (it was replaced)
    becomes a spare. A replaced host's pod first looks for the store moved elsewhere
    (``kdist.runtime.hostmove``): found, it hosts nothing."""
    if listener is not None and plan.store_moves and (plan.restart_count or 0) > 0:
        others = range(1, plan.full_nodes + plan.spares)
        moved = hostmove.best(plan, others, 0)
        if moved is not None and moved[0].host_slot != plan.home_slot:
            listener.close()
            listener = None
            plan = dataclasses.replace(plan, master_addr=moved[1], master_port=moved[2],
                                       job_port=plan.master_port)
            _say(f"the store moved to {moved[1]}:{moved[2]} (generation "
                 f"{moved[0].generation}): this pod hosts nothing")
    while True:
        if plan.is_spare:
            rank, members = spares.wait_for_rank(plan, _say)
            _say(took_line(plan.home_slot, rank))
            plan = dataclasses.replace(plan.at_host(members), node_rank=rank)
            if plan.elastic and members.generation:  # admitted by the gang grown to them
                plan = dataclasses.replace(plan, nnodes=len(members.slots))
            started = time.monotonic()  # its rendezvous begins now, however long it waited
        try:
            return _meet(plan, listener, started), listener
        except spares.Taken as e:
            _say(f"{e}: this pod waits as a spare")
            plan = dataclasses.replace(plan, node_rank=plan.nnodes + plan.home_slot)


def _meet(plan: LaunchPlan, listener: socket.socket | None, started: float,
          lost: Sequence[int] = (), cause: str = "") -> LaunchPlan:
    """The rendezvous: every node's launcher joined, on the highest restart count any
    brought (``rendezvous.meet``); ``lost``: the node ranks this one found lost;
    ``cause``: why it restarts, told to the nodes still running."""
    mine = plan.restart_count or 0
    met = rendezvous.meet(plan, listener, started, mine, lost, cause=cause)
    if met.waited >= 1.0:  # the nodes that met: fewer where an elastic gang shrank
        met_nodes = plan.nnodes if met.members is None else len(met.members.slots)
        _say(f"all {met_nodes} nodes joined after {met.waited:.1f}s")
    if plan.tracks_members and met.members is not None and met.members != plan.members:
        plan, said = elastic.adopt(plan, met.members)  # Fenced: it went on without this node
        if said:
            _say(said)
        plan = plan.at_host(met.members)  # the store's address, where it moved
    if met.restart == mine:
        return plan
    _say(f"the gang is on restart {met.restart} (this node counted {mine})")
    return dataclasses.replace(plan, restart_count=met.restart)


def _again(plan: LaunchPlan, code: int, listener: socket.socket | None, in_place: Path,
           base: int) -> tuple[LaunchPlan, int, socket.socket | None]:
    """Restart this node's workers in process after the retryable ``code``: the
    launchers meet again and the workers start anew on the next restart count (resuming
    from the newest checkpoint). (the plan, 0, the socket this launcher hosts the store
    on); or (the plan, ``code``, ...) when the gang did not meet again, and the container
    then restarts in place as it would have.
    Node 0 of an elastic gang that stopped its workers at a step to admit newcomers
    (``Said.grow``) leads the rendezvous at the larger size (``kdist.runtime.elastic``).
    A survivor of the store's host (its store silent) meets the gang where the store moves
    (``kdist.runtime.hostmove``), hosting it if it is the successor."""
    count = (plan.restart_count or 0) + 1
    why = _EXITING.sub("", Said.last)
    try:
        # back from a silence that cost this node its rank (the host's store, silent,
        # would say nothing: asked only where it still answers)
        if plan.tracks_members and not (Said.host_lost and plan.store_moves):
            spares.probe(plan)
    except Fenced as e:
        _say(f"{e}; exiting {e.exit_code}")
        return plan, e.exit_code, listener
    meeting = dataclasses.replace(plan, restart_count=count)
    if Said.grow and plan.members is not None:  # node 0 leads the gang's re-form larger
        meeting = dataclasses.replace(meeting, members=(grown := elastic.grown(
            plan.members, Said.grow, plan.full_nodes)), nnodes=len(grown.slots))
        why = f"the gang grows to {len(grown.slots)} nodes (a planned re-form at a step boundary)"
    _say(in_process_line(count, plan.max_restarts, why, code))
    lost = [] if Said.lost_node is None else [Said.lost_node]
    try:
        meeting, hosting, vacant = hostmove.find(meeting, Said.host_lost, _say)
        listener = listener if hosting is None else hosting
        again = _meet(meeting, listener, time.monotonic(), vacant or lost, cause=why)
        if Said.grow and meeting.members is not None and meeting.members != plan.members:
            _say(elastic.grow_line(plan.members or meeting.members, meeting.members))
    except Fenced as e:
        _say(f"{e}; exiting {e.exit_code}")
        return plan, e.exit_code, listener
    except LaunchError as e:
        _say(f"{e}; exiting {code}: {exitcodes.describe(code)}")
        return plan, code, listener
    if (again.restart_count or 0) > plan.max_restarts:  # the others used more than this node
        return dataclasses.replace(plan, restart_count=plan.max_restarts), code, listener
    restarts.note_restart(in_place, again.restart_count or 0, base)
    return again, 0, listener


if __name__ == "__main__":
    sys.exit(main())
