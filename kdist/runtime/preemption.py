"""Zero-loss preemption: on SIGTERM, every rank stops at the same step, saves, and exits 143.

A pod that is evicted, drained, preempted or deleted gets SIGTERM, and
``terminationGracePeriodSeconds`` before SIGKILL; the launcher passes the
SIGTERM on to its workers. A rank that only dies loses every step since the
last checkpoint. With this module the rank notes the request instead, and
all ranks agree (one all-reduce of a flag) that one of them was asked to
stop; they save at one step and exit ``PREEMPTED`` (143, retryable): the
gang restarts and resumes from exactly that step. The ranks on pods that
were not signalled stop too, since the gang restarts as a whole anyway.

kdist's workloads vote with ``StopVote``: after step N each rank starts the
all-reduce without waiting for it, and reads it after step N+1, by when it
has long arrived; so the agreement costs the step no wait (no barrier per
step), and every rank stops after the same step, at most two steps after
the SIGTERM. A script can do the same, or call the plain helper::

    import sys, kdist

    for step in range(start, steps):
        train_one_step()
        if kdist.preemption_requested():   # every rank calls it, once per step
            save_checkpoint(step)          # the same step on every rank
            sys.exit(kdist.PREEMPTED)

Standard library and torch only (it runs in the workers).
"""

from __future__ import annotations

import signal
import threading
from typing import Any

#: The exit code of a rank that stopped because of a preemption: 128 + SIGTERM, as if
#: the signal had ended it (retryable: the gang restarts and resumes).
PREEMPTED = 128 + signal.SIGTERM

_requested = threading.Event()
_installed = False


class Preempted(Exception):
    """Raised by kdist's step loop once every rank agreed to stop at ``step``."""

    def __init__(self, step: int) -> None:
        super().__init__(f"preempted at step {step}")
        self.step = step


def install() -> bool:
    """From now on SIGTERM asks to stop instead of ending the process (idempotent).

    A handler the script had for SIGTERM still runs after kdist's. Only the
    main thread can do this; returns whether SIGTERM is handled.
    """
    global _installed
    if _installed:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: Any) -> None:
        _requested.set()
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, handler)
    _installed = True
    return True


def requested_here() -> bool:
    """Whether this process got SIGTERM (since ``install``); no communication."""
    return _requested.is_set()


def _flag_device(group: Any) -> Any:
    import torch
    import torch.distributed as dist

    backend = str(dist.get_backend(group)).lower()
    # A CPU tensor where the group can carry one (gloo, or NCCL with a gloo side):
    # reading a GPU flag would wait for the step's queued GPU work every step.
    if "nccl" in backend and "gloo" not in backend and "cpu" not in backend:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def preemption_requested(group: Any = None) -> bool:
    """Whether any rank was asked to stop (SIGTERM): the same answer on every rank.

    Collective once ``torch.distributed`` is initialised: every rank of
    ``group`` (default: all) must call it at the same point, e.g. once per
    step; without a process group it is this process's own answer. The first
    call makes SIGTERM a request (``install``); before it, SIGTERM ends the
    process as usual.
    """
    install()
    import torch
    import torch.distributed as dist

    here = requested_here()
    if not (dist.is_available() and dist.is_initialized()):
        return here
    flag = torch.tensor([1 if here else 0], dtype=torch.int32, device=_flag_device(group))
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    agreed = bool(flag.item())
    if agreed:
        _requested.set()  # this rank stops too, whoever was signalled
    return agreed


class StopVote:
    """``preemption_requested`` a step late, at no wait: call ``poll()`` once per step.

    ``poll()`` after step N reads the vote started after step N-1 (done while step
    N ran) and starts this step's; True (on every rank after the same step) once
    any rank was asked to stop. Collective like ``preemption_requested``; call
    ``close()`` after the last step, so no vote is left in flight.
    """

    def __init__(self, group: Any = None) -> None:
        self.group = group
        self._pending: tuple[Any, Any, Any] | None = None  # (work, flag, CUDA event or None)

    def poll(self) -> bool:
        install()
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return requested_here()
        if self._read():
            _requested.set()  # this rank stops too, whoever was signalled
            return True
        device = _flag_device(self.group)
        flag = torch.tensor([1 if requested_here() else 0], dtype=torch.int32, device=device)
        work = dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
        event = None
        if device.type == "cuda":
            # Read through a pinned copy and an event recorded now, so reading it next
            # step waits for this step's queue only, not for the next step's kernels.
            work.wait()  # on the GPU: the copy below queues after the all-reduce
            host = torch.empty(1, dtype=torch.int32, pin_memory=True)
            host.copy_(flag, non_blocking=True)
            flag = host
            event = torch.cuda.Event()
            event.record()
        self._pending = (work, flag, event)
        return False

    def _read(self) -> bool:
        if self._pending is None:
            return False
        work, flag, event = self._pending
        self._pending = None
        if event is not None:
            event.synchronize()
        else:
            work.wait()
        return bool(flag.item())

    def close(self) -> None:
        """Finish the vote in flight (its answer no longer matters)."""
        self._read()
