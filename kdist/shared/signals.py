"""Ctrl-C (and SIGTERM) as KeyboardInterrupt, wherever kdist waits on something.

A parent may start kdist with SIGINT ignored (background jobs of
non-interactive shells, some CI runners); an ignored disposition would also
pass on to every process kdist starts. While kdist watches a job or runs
local nodes, both signals must stop it cleanly instead.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Interrupted(KeyboardInterrupt):
    """A KeyboardInterrupt that remembers the signal that raised it.

    ``kdist run --local`` passes a SIGTERM on to the nodes as SIGTERM (as a pod's
    SIGTERM reaches its workers) and exits 143, not 130. One that stopped a
    submission says what it did: `undone` lists the objects it deleted again,
    `left` the ones it could not (each with why); `undone` is None otherwise.
    """

    def __init__(self, signum: int, *, undone: list[str] | None = None,
                 left: list[str] | None = None) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.undone = undone
        self.left = left or []


class Held:
    """The first signal `held` kept back (None while there is none)."""

    signum: int | None = None


def _raise(signum: int, frame: object) -> None:
    raise Interrupted(signum)


def received(e: BaseException) -> int:
    """The signal behind a KeyboardInterrupt (SIGINT unless it says otherwise)."""
    return getattr(e, "signum", signal.SIGINT)


def _raise_once(signum: int, frame: object) -> None:
    # Ignored from now on in the block, before anything else runs: GNU `timeout` sends its
    # SIGTERM twice, microseconds apart (to kdist, then to its process group).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Interrupted(signum)


@contextmanager
def interruptible(sigterm_once: bool = False) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise ``Interrupted`` (a KeyboardInterrupt
    naming the signal; main thread only). `sigterm_once`: after the first signal, a SIGTERM
    is ignored to the block's end (what the first one started, a save, is not cut short);
    a Ctrl-C still raises."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raising = _raise_once if sigterm_once else _raise
    previous = {sig: signal.signal(sig, raising) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def held() -> Iterator[Held]:
    """Within the block, SIGINT and SIGTERM are held back, not raised: the work in it (a
    create request and its rollback) finishes, and the block may look at `Held.signum` to
    stop early. The first signal held is raised as ``Interrupted`` when the block ends,
    unless the block raised already. A second signal (GNU `timeout` sends two: to kdist
    and to its process group) is one more of the same, not an abandoned rollback.
    A signal its parent left ignored stays ignored. Main thread only.
    """
    pending = Held()
    if threading.current_thread() is not threading.main_thread():
        yield pending
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def hold(signum: int, frame: object) -> None:
        if pending.signum is None and previous.get(signal.Signals(signum)) is not signal.SIG_IGN:
            pending.signum = signum

    for sig in previous:
        signal.signal(sig, hold)
    try:
        yield pending
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    if pending.signum is not None:
        raise Interrupted(pending.signum)
