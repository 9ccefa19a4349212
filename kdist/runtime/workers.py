"""One node's worker processes: their environment (torchrun's), starting and stopping them.

The variables are those torch's ``LocalElasticAgent._start_workers`` gives each
worker under a static rendezvous (torch/distributed/elastic/agent/server/
local_elastic_agent.py; ``tests/compat/test_env_parity.py`` compares them with
torchrun's): ranks and sizes from the plan (global rank = node rank x procs per
node + local rank), the master, the run id (the job's name), the restart count and
budget of the *job* (kdist's restarts are whole-job restarts, ``worker_exec.prepare``),
``TORCHELASTIC_USE_AGENT_STORE=True`` (rank 0's worker hosts that store on the
master port, ``sitehook``), ``TORCHELASTIC_ERROR_FILE`` (where ``@record`` writes a
worker's error) and ``TORCHELASTIC_SIGNALS_TO_HANDLE``.

Each worker starts in a session of its own (as torch starts them), its stdout and
stderr into its pipe (``kdist.runtime.output``).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdist.runtime import worker_exec
from kdist.runtime.plan import LaunchPlan
from kdist.shared import env as E
from kdist.shared import jsonread, processes

ROLE = "trainer"
SIGNALS_TO_HANDLE = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"  # torch's LaunchConfig default
#: the host's first worker (rank 0's until the store moves): the fd of the listening
#: master socket it serves the store on.
STORE_FD = "KDIST_STORE_FD"
#: Beside a worker's error file, the sitehook's note that its script ended (and how).
ENDED_SUFFIX = ".ended"
#: A worker these end after that note died in teardown (torch's C++ at exit), not in its
#: work: an abort, a segfault.
TEARDOWN_SIGNALS = (signal.SIGABRT, signal.SIGSEGV)
#: The most of a worker's error file read (torch's @record writes a message and a traceback).
MAX_ERROR_FILE = 1 << 20


def worker_env(plan: LaunchPlan, local_rank: int, environ: Mapping[str, str],
               error_file: str) -> dict[str, str]:
    """The environment of local rank ``local_rank`` (``environ`` is the launcher's)."""
    rank = plan.global_ranks[local_rank]
    env = dict(environ)
    env.update({
        "RANK": str(rank),
        "GROUP_RANK": str(plan.node_rank),
        "ROLE_RANK": str(rank),
        "ROLE_NAME": ROLE,
        "LOCAL_WORLD_SIZE": str(plan.nproc_per_node),
        "WORLD_SIZE": str(plan.world_size),
        "GROUP_WORLD_SIZE": str(plan.nnodes),
        "ROLE_WORLD_SIZE": str(plan.world_size),
        "MASTER_ADDR": plan.master_addr,
        "MASTER_PORT": str(plan.master_port),
        "TORCHELASTIC_RUN_ID": plan.job_name,
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        "LOCAL_RANK": str(local_rank),
        "TORCHELASTIC_ERROR_FILE": error_file,
        "TORCHELASTIC_SIGNALS_TO_HANDLE": SIGNALS_TO_HANDLE,
    })
    env.pop(STORE_FD, None)
    worker_exec.prepare(env)  # TORCHELASTIC_RESTART_COUNT/MAX_RESTARTS, sitehook, unbuffered
    return env


@dataclass
class Worker:
    local_rank: int
    rank: int
    error_file: Path
    proc: subprocess.Popen[bytes] | None = None
    exitcode: int | None = None  # as torch gives it: negative = killed by that signal
    ended_at: float = 0.0
    stopped: bool = False  # the launcher signalled it before it ended
    pid: int = field(default=0)
    left_group: bool = False  # it ended with processes left in its group (SIGKILLed)
    # The signal that ended it after its script had ended well (`ended_well`), counted as 0
    teardown_signal: int | None = None
    warm: bool = False  # it runs in the standby it was handed to (kdist.runtime.standby)

    def poll(self) -> int | None:
        if self.exitcode is None and self.proc is not None:
            code = self.proc.poll()
            if code is not None:
                if -code in TEARDOWN_SIGNALS and not self.stopped and self.ended_well():
                    self.teardown_signal, code = -code, 0
                self.exitcode, self.ended_at = code, time.time()
                self._end_group()
        return self.exitcode

    def ended_well(self) -> bool:
        """Whether the sitehook's last atexit handler ran in this worker and saw no failure
        (``sitecustomize.note_end_at_exit``): its script's work was done."""
        try:
            said = Path(str(self.error_file) + ENDED_SUFFIX).read_text().split()
        except (OSError, UnicodeDecodeError):
            return False
        return said == [str(self.pid), "ok"]

    def _end_group(self) -> None:
        """SIGKILL what is left of the worker's process group, the moment it ended.

        What it forked (DataLoader workers) stays in its group, holding its files
        and sockets (the master port). Now, not later: a group with a process left
        keeps its id from being reused, but an empty one frees it (pids wrap), and a
        later signal could reach another program's group.
        """
        try:
            os.killpg(self.pid, signal.SIGKILL)
            self.left_group = True
        except OSError:  # empty: nothing of it is left
            pass

    def error_message(self) -> object:
        """The ``message`` of the error file ``@record`` wrote, if it did."""
        try:
            # The worker wrote it: read within bounds, as any worker's text.
            error = jsonread.loads(self.error_file.read_text(), limit=MAX_ERROR_FILE)
            return error.get("message")
        except (OSError, ValueError, AttributeError):
            return None


def start(plan: LaunchPlan, argv: Sequence[str], environ: Mapping[str, str], work: Path,
          pipe: Any, store_fd: int | None, *, into: list[Worker],
          standbys: Any = None) -> list[Worker]:
    """Start this node's workers into ``into`` (each as it starts: a signal may come
    between two); ``pipe(local_rank)`` is the path of each one's pipe. ``standbys``
    (``kdist.runtime.standby.Standbys``): a rank whose standby takes its order runs in
    it, the others start cold."""
    errors, counts = work / "errors", work / "counts"
    errors.mkdir(parents=True, exist_ok=True)
    counts.mkdir(exist_ok=True)
    workers = into
    for local_rank, rank in enumerate(plan.global_ranks):
        w = Worker(local_rank, rank, errors / f"{local_rank}.json")
        workers.append(w)
        env = worker_env(plan, local_rank, environ, str(w.error_file))
        env[E.COLLECTIVE_COUNTS] = str(counts / str(local_rank))  # stacks.collectives
        fds: tuple[int, ...] = ()
        if store_fd is not None and local_rank == 0:  # only the host has it
            env[STORE_FD], fds = str(store_fd), (store_fd,)
        warm = None if standbys is None else \
            standbys.take(local_rank, argv, env, str(pipe(local_rank)))
        if warm is not None:
            w.proc, w.pid, w.warm = warm, warm.pid, True
            continue
        out = os.open(pipe(local_rank), os.O_WRONLY)
        try:
            w.proc = subprocess.Popen(list(argv), env=env, stdout=out, stderr=out,
                                      start_new_session=True, pass_fds=fds)
            w.pid = w.proc.pid
        except OSError as e:  # as a shell says it: 127 not found, 126 not runnable
            os.write(out, f"kdist: cannot run {argv[0]!r}: {e.strerror}\n".encode())
            w.exitcode = 127 if e.errno == errno.ENOENT else 126
            w.ended_at = time.time()
        finally:
            os.close(out)
    return workers


def signal_all(workers: Sequence[Worker], sig: int) -> None:
    """Send ``sig`` to every running worker's session (the worker and what it started)."""
    for w in workers:
        if w.proc is None or w.poll() is not None:
            continue
        w.stopped = True
        for send in (os.killpg, os.kill):
            try:
                send(w.pid, sig)
                break
            except OSError:
                continue


def stop(workers: Sequence[Worker], sig: int, grace_s: float) -> None:
    """``sig`` to every running worker, then SIGKILL to what outlives ``grace_s``."""
    signal_all(workers, sig)
    deadline = time.monotonic() + grace_s
    while any(w.poll() is None for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    signal_all(workers, signal.SIGKILL)
    for w in workers:
        if w.proc is not None:
            w.proc.wait()
            w.poll()


def end_leftovers(workers: Sequence[Worker]) -> list[int]:
    """Once every worker has ended: wait until what was left of their groups (SIGKILLed
    as each ended) is gone, so that nothing of the job outlives the launcher and a
    restart finds the master port free; the pids still there after the bound."""
    return processes.wait_groups([w.pid for w in workers if w.left_group])
