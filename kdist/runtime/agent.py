"""One node's workers under torch's elastic agent, and the exit code that tells what happened.

The agent starts ``procsPerNode`` workers (each through
``kdist.runtime.worker_exec``) with a static rendezvous (``kdist.launch``'s
docstring says why) and never restarts them in place: restarts belong to the
job. What kdist adds around it:

- every worker's output goes through the launcher (``kdist.runtime.output``);
- a worker that exits 1-127 after its output shows a lost peer (gloo, NCCL or
  the store losing the other end) ends the node with ``exitcodes.PEER_LOST``,
  for any script: it is another rank's failure, worth a gang restart;
- the failure named is the most telling one, not the SIGTERM the agent sent
  the survivors (``failures.pick_failure``);
- ``progressTimeoutSeconds`` (``kdist.runtime.watchdog``): a silent job ends
  with ``exitcodes.HUNG``; a node whose node 0 is gone ends with ``PEER_LOST``;
- a SIGTERM (a deleted, evicted or drained pod) reaches every worker as
  SIGTERM (the agent forwards what it receives), and they get ``STOP_GRACE_S``
  to finish (kdist's workloads save a checkpoint) before SIGKILL.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

from kdist.runtime import failures as F
from kdist.runtime import worker_exec
from kdist.runtime.output import Output
from kdist.runtime.plan import LaunchPlan
from kdist.runtime.watchdog import JobProgress, Watchdog
from kdist.shared import env as E
from kdist.shared import exitcodes

# How long workers get between SIGTERM and SIGKILL: within the pods' default
# terminationGracePeriodSeconds (60), leaving the launcher time to report.
STOP_GRACE_S = 45


def say(message: str) -> None:
    print(f"kdist.launch: {message}", file=sys.stderr, flush=True)


def _supported(config_cls: type, kwargs: dict) -> dict:
    """`kwargs` minus shutdown_timeout where torch's LaunchConfig lacks it (torch <= 2.9)."""
    fields = {f.name for f in dataclasses.fields(config_cls)}
    return {k: v for k, v in kwargs.items() if k in fields or k != "shutdown_timeout"}


def _is_json_event(line: str) -> bool:
    return line.startswith('{"event": ')


def _children() -> list[int]:
    """This process's children: the workers (torch starts each in a session of its own)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return found


class _Stopper:
    """What the watchdog found (a hang, or node 0 gone), and stopping the node's workers."""

    def __init__(self, plan: LaunchPlan, output: Output) -> None:
        self.plan, self.output = plan, output
        self.detail = ""
        self.lock = threading.Lock()

    def lost(self, reason: str) -> None:
        with self.lock:
            self.detail = f"node {self.plan.node_rank} lost node 0: {reason}"
        say(f"{self.detail}; stopping this node's workers")
        self._stop_workers()

    def __call__(self, silent_s: float) -> None:
        ranks = self.plan.global_ranks
        quiet = {ranks[i]: self.output.silent_for(i) for i in range(len(ranks))}
        # The rank named is this node's longest silent one (every rank of a hung job
        # is silent; which one caused it, no output can tell).
        rank = max(quiet, key=lambda r: (quiet[r] is None, quiet[r] or 0.0))
        silence = ", ".join(
            f"rank {r} {'never printed' if s is None else f'silent {s:.0f}s'}"
            for r, s in quiet.items())
        with self.lock:
            self.detail = (
                f"rank {rank} (node {self.plan.node_rank}) hung: no rank of the job made "
                f"progress for {silent_s:.0f}s (progressTimeoutSeconds="
                f"{self.plan.progress_timeout_s}; this node: {silence})")
        say(f"{self.detail}; stopping this node's workers")
        self._stop_workers()

    def _stop_workers(self) -> None:
        for pid in _children():  # SIGKILL: a hung worker would not act on SIGTERM
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def _failed(plan: LaunchPlan, failures: dict, output: Output) -> int:
    """The node's exit code from its failed workers (torch's ProcessFailure by global rank)."""
    seen = {}
    for rank, f in failures.items():
        code = f.exitcode
        if exitcodes.of_returncode(code) in exitcodes.CODE_ERRORS and \
                F.output_says_peer_lost(output.tail(f.local_rank)):
            code = exitcodes.PEER_LOST
        seen[rank] = (code, f.timestamp)
    rank = F.pick_failure(seen)
    failure = failures[rank]
    code = exitcodes.of_returncode(seen[rank][0])
    say(f"worker rank {rank} (node {plan.node_rank}, local rank {failure.local_rank}, "
        f"pid {failure.pid}) {F.describe_exit(failure.exitcode)}"
        f"{F.cause(failure.message, output.tail(failure.local_rank))}; "
        f"exiting {code}: {exitcodes.describe(code)}")
    return code


def run(plan: LaunchPlan, module: str | None, rest: list[str], *, prefix_lines: bool) -> int:
    """Run this node's workers under torch's elastic agent; return the node's exit code."""
    # torch's C++ log lines in the launcher are the store's connection errors (with a
    # stack trace each) once a peer's launcher is gone; the launcher says it in one
    # line. The workers, started later, get the environment as it was.
    quiet = "TORCH_CPP_LOG_LEVEL" not in os.environ
    if quiet:
        os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
    try:
        from torch.distributed.elastic.multiprocessing import (
            DefaultLogsSpecs,
            SignalException,
            Std,
        )
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.launcher.api import LaunchConfig, elastic_launch
    finally:
        if quiet:
            del os.environ["TORCH_CPP_LOG_LEVEL"]

    work = Path(tempfile.mkdtemp(prefix="kdist-launch-"))
    kdist_workload = (module or "").startswith("kdist.workloads.")
    output = Output(work / "pipes", plan.global_ranks, prefix=prefix_lines,
                    is_progress=_is_json_event if kdist_workload else None).start()
    os.environ[E.OUTPUT_PIPES] = str(output.directory)
    hang = _Stopper(plan, output)
    watchdog = None
    if plan.progress_timeout_s or plan.nnodes > 1:  # a hang, or node 0 gone
        progress = JobProgress(plan, output, started=lambda: bool(_children()))
        watchdog = Watchdog(plan.progress_timeout_s, progress.total, hang,
                            on_lost=hang.lost).start()
    config = LaunchConfig(**_supported(LaunchConfig, dict(
        min_nodes=plan.nnodes,
        max_nodes=plan.nnodes,
        nproc_per_node=plan.nproc_per_node,
        run_id=plan.job_name,
        role="trainer",
        rdzv_backend="static",
        rdzv_endpoint=f"{plan.master_addr}:{plan.master_port}",
        rdzv_configs={"rank": plan.node_rank, "timeout": plan.rdzv_timeout_s},
        max_restarts=0,  # restarts belong to the job: see kdist.launch's docstring
        # The workers write into output's pipes (worker_exec), not torch's log files.
        logs_specs=DefaultLogsSpecs(log_dir=str(work / "torch"), redirects=Std.NONE,
                                    tee=Std.NONE),
        shutdown_timeout=STOP_GRACE_S,
    )))
    entrypoint, args = worker_exec.command(module, rest)
    try:
        elastic_launch(config, entrypoint)(*args)
        return 0
    except ChildFailedError as e:
        if watchdog is not None and (watchdog.fired or watchdog.lost):
            code = exitcodes.HUNG if watchdog.fired else exitcodes.PEER_LOST
            with hang.lock:
                say(f"{hang.detail}; exiting {code}: {exitcodes.describe(code)}")
            return code
        return _failed(plan, e.failures, output)
    except SignalException as e:
        say(f"stopped by {signal.Signals(e.sigval).name}; exiting {128 + int(e.sigval)}")
        return 128 + int(e.sigval)
    except Exception as e:  # rendezvous and store errors: one line, no traceback
        say(
            f"rendezvous of {plan.nnodes} node(s) at {plan.master_addr}:{plan.master_port} "
            f"failed (KDIST_RDZV_TIMEOUT={plan.rdzv_timeout_s}s): {' '.join(str(e).split())}"
        )
        return 1
    finally:
        if watchdog is not None:
            watchdog.stop()
        output.stop()
        shutil.rmtree(work, ignore_errors=True)
