"""One node's workers, run by kdist's own light agent, and the exit code that tells what happened.

The launcher does what torch's elastic agent did for kdist (static rendezvous,
no restarts in place: restarts belong to the job), without importing torch: the
workers import it, once each. The launchers' rendezvous and exit barrier are in
``kdist.runtime.rendezvous``; the workers' environment (torchrun's) in
``kdist.runtime.workers``. What the agent adds:

- every worker's output goes through the launcher (``kdist.runtime.output``);
- a worker that exits 1-127 after its output shows a lost peer (gloo, NCCL or
  the store losing the other end) ends the node with ``exitcodes.PEER_LOST``,
  for any script: it is another rank's failure, worth a gang restart;
- once a worker fails, the others get SIGTERM (then SIGKILL after
  ``STOP_GRACE_S``); the failure named is the most telling one among the workers
  that ended on their own, never one the agent stopped (``failures.pick_failure``);
- ``progressTimeoutSeconds`` (``kdist.runtime.watchdog``): a silent job ends
  with ``exitcodes.HUNG``; a node that finds another lost (its heartbeat silent for
  ``nodeLossSeconds``, ``kdist.runtime.heartbeat``; node 0: its store silent) SIGKILLs
  its workers at once and ends with ``PEER_LOST``;
- a SIGTERM, SIGINT, SIGHUP or SIGQUIT (a deleted, evicted or drained pod) reaches
  every worker as that signal, and they get ``STOP_GRACE_S`` to finish (kdist's
  workloads save a checkpoint) before SIGKILL; the node exits 128 + the signal.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kdist.runtime import failures as F
from kdist.runtime import stacks, worker_exec
from kdist.runtime import workers as W
from kdist.runtime.output import EMITTING, Output, break_lines
from kdist.runtime.plan import LaunchPlan
from kdist.runtime.rendezvous import ExitBarrier
from kdist.runtime.standby import Standbys
from kdist.runtime.watchdog import JobProgress, Watchdog
from kdist.shared import exitcodes

# How long workers get between SIGTERM and SIGKILL: within the pods' default
# terminationGracePeriodSeconds (60), leaving the launcher time to report.
STOP_GRACE_S = 45
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
_TICK_S = 0.05
# At a hang, how long a node that found the hung rank waits before stopping it, and
# how long the other nodes wait to hear of one (``_Stopper._blame``).
HUNG_TELL_S = 3.0


class Said:
    """What the launcher said last, and the signal that stopped `run` (None: none did)."""

    last = ""
    stopped_by: int | None = None
    # The node rank the last run found lost (its heartbeat silent): vacant for a spare.
    lost_node: int | None = None
    # The last run found the store's host lost (its store silent): the store moves.
    host_lost = False
    # Node 0 of an elastic gang running smaller: the newcomers' slots it stopped its
    # workers at a step boundary for, to admit them (``kdist.runtime.elastic``).
    grow: tuple[int, ...] = ()


def say(message: str) -> None:
    # One write, newline included: unbuffered, print() writes the text and its end apart.
    # One line (a worker's words it quotes, an error file's message, start none), on the
    # stream the workers' lines go out on, between two of them (output.break_lines): on
    # stderr it could land between the pieces a container runtime cuts a long line into,
    # whose rest would then start a line of the log.
    Said.last = message
    line = message.replace("\r", " ").replace("\n", " ")
    with EMITTING:
        break_lines()
        sys.stdout.write(f"kdist.launch: {line}\n")
        sys.stdout.flush()


def _is_json_event(line: str) -> bool:
    return line.startswith('{"event": ')


class Signalled(Exception):
    def __init__(self, sig: int) -> None:
        super().__init__(sig)
        self.sig = sig


def _raise(sig: int, frame: object) -> None:
    raise Signalled(sig)


class _Stopper:
    """What the watchdog found (a hang, or node 0 gone), and stopping the node's workers."""

    def __init__(self, plan: LaunchPlan, output: Output, workers: list[W.Worker]) -> None:
        self.plan, self.output, self.workers = plan, output, workers
        self.counts = Path(os.devnull)  # the workers' counts of collectives (workers.start)
        self.progress: JobProgress | None = None  # several nodes: tells them what hung
        self.detail = ""
        self.lock = threading.Lock()

    def lost(self, reason: str) -> None:
        # A lost node's words start "node N lost (silent for X s)" (kdist.runtime.heartbeat):
        # the ledger blames that node, not this one's lost peers.
        with self.lock:
            self.detail = (f"node {self.plan.node_rank}: {reason}"
                           if reason.startswith("the gang is restarting") else reason)
        say(f"{self.detail}; stopping this node's workers")
        W.signal_all(self.workers, signal.SIGKILL)

    def __call__(self, silent_s: float) -> None:
        ranks = self.plan.global_ranks
        quiet = {ranks[i]: self.output.silent_for(i) for i in range(len(ranks))}
        silence = ", ".join(
            f"rank {r} {'never printed' if s is None else f'silent {s:.0f}s'}"
            for r, s in quiet.items())
        rank, node, seen = self._blame(quiet)
        with self.lock:
            self.detail = (
                f"rank {rank} (node {node}) hung: no rank of the job made "
                f"progress for {silent_s:.0f}s (progressTimeoutSeconds="
                f"{self.plan.progress_timeout_s}; {seen}this node: {silence})")
        say(f"{self.detail}; stopping this node's workers")
        # SIGKILL: a hung worker would not act on SIGTERM
        W.signal_all(self.workers, signal.SIGKILL)

    def _blame(self, quiet: dict[int, float | None]) -> tuple[int, int, str]:
        """(rank, node, what its stacks showed) of the rank that hung: one whose stacks
        are outside torch.distributed (``kdist.runtime.stacks``), here or on another
        node; else this node's longest silent one."""
        def silent_first(r: int) -> tuple[bool, float]:
            return quiet[r] is None, quiet[r] or 0.0

        pids = [w.pid if w.poll() is None else 0 for w in self.workers]
        found = stacks.dump(pids, self.output.tail)
        shown = {w.rank: s for w, s in zip(self.workers, found, strict=False) if s is not None}
        # Counts of collectives started tell what frames cannot (DDP's all-reduce inside
        # backward): the ranks behind, on any node, never reached the collective the
        # others wait in.
        counts = {w.rank: stacks.collectives(self.counts / str(w.local_rank))
                  for w in self.workers}
        if self.progress is not None and self.plan.nnodes > 1:
            self.progress.tell_counts(counts)
            counts = {**self.progress.counts_everywhere(HUNG_TELL_S), **counts}
        late, ahead = stacks.behind(counts)
        stuck = [r for r in late if r in quiet] if late else \
            [r for r, s in shown.items() if not s.in_collective]
        waiting = ", ".join(str(r) for r in ahead) or \
            ", ".join(str(r) for r, s in shown.items() if s.in_collective)
        waits = f"rank(s) {waiting} wait in torch.distributed; " if waiting else ""
        if stuck:
            rank = max(stuck, key=silent_first)
            where = (shown[rank].where if rank in shown else "") or \
                "code outside torch.distributed"
            if self.progress is not None:
                self.progress.tell_hung(f"{rank}\t{self.plan.node_rank}\t{where}")
                if self.plan.nnodes > 1:
                    # The other nodes' watchdogs fire within a tick of this one: give
                    # them time to read this before the kill below (which may take
                    # rank 0's store with it) ends their ranks as lost peers.
                    time.sleep(HUNG_TELL_S)
            return rank, self.plan.node_rank, f"rank {rank} stopped at {where}; {waits}"
        told = None
        if shown and self.progress is not None:  # every rank here waits: on another node?
            told = self.progress.hung_elsewhere(HUNG_TELL_S)
        if told is not None and told.count("\t") == 2:
            rank_s, node_s, where = told.split("\t")
            if rank_s.isdigit() and node_s.isdigit():
                return int(rank_s), int(node_s), (
                    f"rank {rank_s} stopped at {where} (node {node_s}'s stacks); {waits}")
        if late:  # another node's rank, whose node did not say where it stopped
            rank = min(late)
            return rank, rank // len(self.plan.global_ranks), (
                f"rank {rank} never reached the collective the others wait in; {waits}")
        # No stack tells: this node's longest silent rank (which one caused it, no
        # output can tell).
        return max(quiet, key=silent_first), self.plan.node_rank, waits


def _grow(plan: LaunchPlan, workers: list[W.Worker], slots: list[int]) -> None:
    """Node 0 of an elastic gang running smaller, newcomers waiting: its workers stop at a
    step boundary, as on a preemption (every rank agrees on the step and saves it), and the
    launchers meet again at the larger size (``kdist.launch._again``)."""
    Said.grow = tuple(slots)
    say(f"slot {', '.join(map(str, slots))} waits to join the gang of {plan.nnodes} of "
        f"{plan.full_nodes} nodes: stopping the workers at the next step boundary (SIGTERM, "
        "saved as on a preemption) to grow")
    W.signal_all(workers, signal.SIGTERM)


def _failed(plan: LaunchPlan, failed: list[W.Worker], output: Output) -> int:
    """The node's exit code from its failed workers."""
    seen: dict[int, tuple[int, float]] = {}
    for w in failed:
        code = w.exitcode if w.exitcode is not None else 1
        if exitcodes.of_returncode(code) in exitcodes.CODE_ERRORS and \
                F.output_says_peer_lost(output.tail(w.local_rank), plan.master_port):
            code = exitcodes.PEER_LOST
        seen[w.rank] = (code, w.ended_at)
    stopped = {w.rank for w in failed if w.stopped}
    # Blame a worker that failed on its own, never one this agent stopped.
    rank = F.pick_failure({r: v for r, v in seen.items() if r not in stopped} or seen)
    w = next(w for w in failed if w.rank == rank)
    code = exitcodes.of_returncode(seen[rank][0])
    say(f"worker rank {rank} (node {plan.node_rank}, local rank {w.local_rank}, "
        f"pid {w.pid}) {F.describe_exit(w.exitcode or 0)}"
        f"{F.cause(w.error_message(), output.tail(w.local_rank), os.getcwd())}; "
        f"exiting {code}: {exitcodes.describe(code)}")
    return code


def _watch(workers: list[W.Worker], barrier: ExitBarrier,
           standbys: Standbys | None = None, output: Output | None = None) -> list[W.Worker]:
    """Until every worker ended, or one failed (then the rest are stopped); the failed."""
    while True:
        if standbys is not None and output is not None:
            standbys.tick(lambda i: output.ranks[i].progress > 0)
        states = [w.poll() for w in workers]
        # the worker that serves the store (the first on its host) is gone: the host's
        # launcher answers (a no-op on the other nodes)
        rank0 = [code for w, code in zip(workers, states, strict=True) if w.local_rank == 0]
        if rank0 and rank0[0] is not None:
            barrier.serve(finished=rank0[0] == 0)
        if any(code not in (None, 0) for code in states):
            W.stop(workers, signal.SIGTERM, STOP_GRACE_S)
            return [w for w in workers if w.exitcode]
        if all(code == 0 for code in states):
            return []
        time.sleep(_TICK_S)


def run(plan: LaunchPlan, module: str | None, rest: list[str], *, prefix_lines: bool,
        listener: socket.socket | None = None, environ: Any = None,
        standbys: Standbys | None = None) -> int:
    """Run this node's workers; return the node's exit code.

    ``listener``: node 0's listening master socket (``rendezvous.bind``), which rank
    0's worker serves the store on. ``standbys``: warm workers (``kdist.runtime.standby``),
    which the launcher keeps across runs and closes.
    """
    environ = os.environ if environ is None else environ
    Said.stopped_by = None
    # Named by this launcher's pid: a local runner that had to SIGKILL it removes it.
    work = Path(tempfile.mkdtemp(prefix=f"kdist-launch-{os.getpid()}-"))
    kdist_workload = (module or "").startswith("kdist.workloads.")
    try:
        output = Output(work / "pipes", plan.global_ranks, prefix=prefix_lines,
                        is_progress=_is_json_event if kdist_workload else None).start()
    except BaseException:  # out of fds, or a signal: no pipe is left in $TMPDIR
        shutil.rmtree(work, ignore_errors=True)
        raise
    workers: list[W.Worker] = []
    Said.lost_node = None
    Said.host_lost = False
    Said.grow = ()
    hang = _Stopper(plan, output, workers)
    hang.counts = work / "counts"
    barrier = ExitBarrier(plan, listener)
    watchdog = None
    previous = {sig: signal.signal(sig, _raise) for sig in FORWARDED}
    output_open = True
    try:
        # a hang, node 0 gone, or (an elastic gang of one) the members for a node coming back
        if plan.progress_timeout_s or plan.nnodes > 1 or plan.tracks_members:
            progress = JobProgress(plan, output, started=lambda: bool(workers))
            hang.progress = progress
            progress.on_grow = lambda slots: _grow(plan, workers, slots)
            watchdog = Watchdog(plan.progress_timeout_s, progress.total, hang,
                                on_lost=hang.lost).start()
        W.start(plan, worker_exec.worker_argv(module, rest), environ, work, output.pipe,
                None if listener is None else listener.fileno(), into=workers,
                standbys=standbys)
        if standbys is not None and standbys.announce:
            warm = sum(w.warm for w in workers)
            say(f"{warm} of {len(workers)} worker(s) of node {plan.node_rank} started from "
                f"their standbys (warm), {len(workers) - warm} cold")
        failed = _watch(workers, barrier, standbys, output)
        for w in workers:
            if w.teardown_signal is not None:
                say(f"worker rank {w.rank} (node {plan.node_rank}, local rank {w.local_rank}, "
                    f"pid {w.pid}) was killed by {signal.Signals(w.teardown_signal).name} at "
                    "interpreter exit, after its script ended (a library's teardown, e.g. "
                    "torch's): counted as succeeded, no restart spent")
        if watchdog is not None:
            watchdog.stop()
            Said.lost_node, Said.host_lost = watchdog.lost_node, watchdog.host_lost
            if hang.progress is not None and not watchdog.lost:
                hang.progress.end()  # not lost while it waits in the exit barrier, or restarts
        output.stop()  # every line the workers wrote is out, and their tails complete
        output_open = False
        if failed:
            barrier.report_failure()
            if watchdog is not None and (watchdog.fired or watchdog.lost):
                code = exitcodes.HUNG if watchdog.fired else exitcodes.PEER_LOST
                with hang.lock:
                    say(f"{hang.detail}; exiting {code}: {exitcodes.describe(code)}")
                return code
            return _failed(plan, failed, output)
        why = barrier.wait()
        if barrier.peer_failed:  # exit 0 would count this pod as done in a failed job
            code = exitcodes.PEER_LOST
            say(f"exit barrier: {why}; exiting {code}: {exitcodes.describe(code)}")
            return code
        if why:
            say(f"exit barrier: {why}; exiting 0 (this node's workers succeeded)")
        return 0
    except Signalled as e:
        Said.stopped_by = e.sig
        name = signal.Signals(e.sig).name
        if workers and all(w.exitcode == 0 for w in workers):
            say(f"{name} in the exit barrier; exiting 0 (this node's workers succeeded)")
            return 0
        signal.signal(e.sig, signal.SIG_IGN)  # a second one does not cut the grace short
        if standbys is not None:  # no worker will need them: their memory back now
            standbys.close()
        W.stop(workers, e.sig, STOP_GRACE_S)
        say(f"stopped by {name}; exiting {128 + e.sig}")
        return 128 + e.sig
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if watchdog is not None:
            watchdog.stop()
        barrier.stop()
        if any(w.poll() is None for w in workers if w.proc is not None):
            W.stop(workers, signal.SIGKILL, 0)  # an error of the launcher's own
        left = W.end_leftovers(workers)
        if left:
            say(f"processes {left} of this node's workers would not die on SIGKILL")
        if output_open:
            output.stop()
        shutil.rmtree(work, ignore_errors=True)
