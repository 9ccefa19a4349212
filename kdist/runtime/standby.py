"""Warm workers (``spec.distributed.warmWorkers``, and every first start that
``kdist.runtime.warmstart`` allows): a standby process per local rank.

A worker's first second and more goes to importing torch. The launcher starts one
standby per local rank (``sitehook/_kdist_standby.py``): a Python
that has imported torch, with kdist's sitehook in place, and waits on a socket. When
the launcher starts a rank's worker it hands that rank's order (argv, environment, cwd,
output pipe) to the standby, which becomes the worker; a cold start (a new process)
is what every other case gets:

- at the pod's first start the standbys import torch while the launcher meets the
  other nodes (the rendezvous): the first workers come from them;
- with warm workers asked, a new standby is started behind each one handed over, where
  the launcher restarts its workers itself, once that rank's worker made progress (or
  ``REFILL_AFTER_S`` after it started): its import would otherwise compete with the new
  worker's first step for the pod's CPU;
- the standby is started with room in its command line and environment for the
  worker's, which it writes over its own as it becomes the worker
  (``_kdist_standby.retitle``): ``ps`` and ``/proc/PID/environ`` show a cold worker's;
- a standby that died, or that has not answered ``ACK_S`` after its order (once it
  said it was ready), is killed and its rank starts cold; one that refuses the order
  (``_kdist_standby.refuse``) too;
- the launcher kills the standbys left when it ends or is stopped by a signal; a
  standby also dies with its launcher (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kdist.runtime import worker_exec
from kdist.runtime import workers as W
from kdist.runtime.plan import LaunchPlan
from kdist.runtime.sitehook import _kdist_standby as entry
from kdist.shared import env as E

#: How long a standby may take to import torch: a cold worker would take as long.
READY_S = 120.0
#: Once ready, how long it may take to answer its order (milliseconds when well).
ACK_S = 5.0
#: After a handover, when the new standby behind it starts at the latest (see the
#: module's doc).
REFILL_AFTER_S = 10.0
#: What the worker's environment may hold beyond what the standby's was sized for (the
#: rank's variables are counted; paths of the launcher's directories may grow).
ENV_MARGIN = 4096


def asked(environ: Mapping[str, str]) -> bool:
    """Whether this pod asks for warm workers (``KDIST_WARM_WORKERS=1``)."""
    return environ.get(E.WARM_WORKERS, "").strip() == "1"


def first_asked(environ: Mapping[str, str]) -> bool:
    """Whether this pod asks for its first workers from standbys only
    (``KDIST_WARM_WORKERS=first``, spec.distributed.warmStart: ``kdist.runtime.warmstart``
    decides which scripts may); unset or ``0``: every worker starts cold."""
    return environ.get(E.WARM_WORKERS, "").strip() == "first"


def cold_because(argv: Sequence[str]) -> str:
    """Why standbys cannot run this command's workers ("" when they can)."""
    if entry.command(list(argv)) is None:
        return f"{os.path.basename(argv[0])!r} with these options is not a Python command " \
               "a standby can run"
    return ""


@dataclass
class Standby:
    local_rank: int
    proc: subprocess.Popen[bytes]
    sock: socket.socket
    started: float
    ready: bool = False
    buf: bytearray = field(default_factory=bytearray)

    def line(self, deadline: float) -> str:
        """Its next line ("" when it closed, or at the deadline)."""
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return ""
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(4096)
            except (TimeoutError, OSError):
                return ""
            if not chunk:
                return ""
            self.buf += chunk
        text, _, rest = bytes(self.buf).partition(b"\n")
        self.buf = bytearray(rest)
        return text.decode(errors="replace")

    def kill(self) -> None:
        self.sock.close()
        for send in (os.killpg, os.kill):
            try:
                send(self.proc.pid, signal.SIGKILL)
                break
            except OSError:
                continue
        self.proc.wait()


class Standbys:
    """This node's standbys, one per local rank, across the restarts in process."""

    def __init__(self, plan: LaunchPlan, environ: Mapping[str, str], directory: Path,
                 listener_fd: int | None, *, refill: bool, announce: bool = True,
                 argv: Sequence[str] = (), preload: Sequence[str] = (),
                 say: Callable[[str], None]) -> None:
        self.plan, self.environ, self.directory = plan, environ, directory
        self.preload = list(preload)  # what each imports ahead (() = _kdist_standby.PRELOAD)
        self.argv = list(argv)  # the workers' command: the standby's has room for it
        self.listener_fd, self.refill, self.say = listener_fd, refill, say
        # Whether the launcher says how many workers came warm (warm workers were asked;
        # an unasked first start says only why a rank started cold).
        self.announce = announce
        self.waiting: dict[int, Standby] = {}
        self.handed: dict[int, float] = {}  # local rank -> when its standby was handed over
        directory.mkdir(parents=True, exist_ok=True)

    def start_all(self) -> Standbys:
        for local_rank in range(self.plan.nproc_per_node):
            self.start(local_rank)
        return self

    def start(self, local_rank: int) -> None:
        # The workers' environment less the rank's own variables (the order brings them):
        # what the interpreter and torch read as they start is the same.
        env = dict(self.environ)
        env.pop(W.STORE_FD, None)
        worker_exec.prepare(env)
        early = self.directory / f"{local_rank}.early"
        env[entry.EARLY] = str(early)
        env[entry.ROOM] = "-" * self._env_room(local_rank, env)
        if self.preload:
            env[entry.PRELOAD_ENV] = ",".join(self.preload)
        mine, theirs = socket.socketpair()
        env[entry.FD] = str(theirs.fileno())
        fds = [theirs.fileno()]
        if self.listener_fd is not None and local_rank == 0:
            fds.append(self.listener_fd)  # rank 0's worker serves the store on it
        out = os.open(early, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            argv = [sys.executable, *entry.ARGV, entry.argv_room(self.argv)]
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=out,
                                    start_new_session=True, pass_fds=fds)
        except OSError as e:
            mine.close()
            self.say(f"cannot start the standby of local rank {local_rank}: {e}")
            return
        finally:
            os.close(out)
            theirs.close()
        self.waiting[local_rank] = Standby(local_rank, proc, mine, time.monotonic())

    def _env_room(self, local_rank: int, env: Mapping[str, str]) -> int:
        """How much larger than ``env`` the rank's worker's environment may be."""
        def size(e: Mapping[str, str]) -> int:
            return sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 for k, v in e.items())
        worker = W.worker_env(self.plan, local_rank, self.environ, str(self.directory))
        return max(0, size(worker) - size(env)) + ENV_MARGIN

    def take(self, local_rank: int, argv: Sequence[str], env: Mapping[str, str],
             pipe: str) -> subprocess.Popen[bytes] | None:
        """The standby of ``local_rank``, now that rank's worker; None: start it cold."""
        sb = self.waiting.pop(local_rank, None)
        if sb is None:
            return None
        order = json.dumps({"argv": list(argv), "env": dict(env), "cwd": os.getcwd(),
                            "pipe": pipe}) + "\n"
        try:
            why = self._hand(sb, order.encode())
        except BaseException:  # a signal while it waits: no standby is left behind
            sb.kill()
            raise
        if not why:
            self.handed[local_rank] = time.monotonic()
            return sb.proc
        sb.kill()
        rank = self.plan.global_ranks[local_rank]
        self.say(f"the standby of worker rank {rank} (local rank {local_rank}, pid "
                 f"{sb.proc.pid}) {why}; starting the worker cold")
        self.handed[local_rank] = time.monotonic()  # a new one behind it, as after a handover
        return None

    def _hand(self, sb: Standby, order: bytes) -> str:
        """Hand ``order`` over; "" when it is the worker now, else what went wrong."""
        if sb.proc.poll() is not None:
            return f"had died ({_exited(sb.proc.returncode)}){self._early(sb)}"
        try:
            sb.sock.sendall(order)
        except OSError as e:
            return f"could not be handed its order ({e.strerror or e})"
        while True:
            if sb.ready:
                deadline, waited = time.monotonic() + ACK_S, f"{ACK_S:g}s after its order"
            else:
                deadline, waited = sb.started + READY_S, f"{READY_S:g}s of importing torch"
            said = sb.line(deadline)
            if said == "ready":
                sb.ready = True
                continue
            if said == "ok":
                sb.sock.close()
                return ""
            if said.startswith("cold "):
                return f"could not run it: {said[5:]}"
            if sb.proc.poll() is not None:
                return f"had died ({_exited(sb.proc.returncode)}){self._early(sb)}"
            return f"did not answer within {waited}"

    def _early(self, sb: Standby) -> str:
        try:
            said = (self.directory / f"{sb.local_rank}.early").read_text(errors="replace")
        except OSError:
            return ""
        last = [line for line in said.splitlines() if line.strip()][-1:]
        return f": {last[0][:300]}" if last else ""

    def tick(self, progressed: Callable[[int], bool], now: float | None = None) -> None:
        """Start the standbys due behind those handed over: once the rank's worker made
        progress (its first step is behind it), or ``REFILL_AFTER_S`` after it started."""
        if not self.refill or not self.handed:
            return
        now = time.monotonic() if now is None else now
        for local_rank, at in list(self.handed.items()):
            if progressed(local_rank) or now - at >= REFILL_AFTER_S:
                del self.handed[local_rank]
                self.start(local_rank)

    def close(self) -> None:
        """Kill every standby still waiting (none is a worker)."""
        self.handed.clear()
        while self.waiting:
            _, sb = self.waiting.popitem()
            sb.kill()
        shutil.rmtree(self.directory, ignore_errors=True)


def _exited(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"
