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
    SIGTERM reaches its workers) and exits 143, not 130.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum: int, frame: object) -> None:
    raise Interrupted(signum)


def received(e: BaseException) -> int:
    """The signal behind a KeyboardInterrupt (SIGINT unless it says otherwise)."""
    return getattr(e, "signum", signal.SIGINT)


@contextmanager
def interruptible() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise ``Interrupted`` (a KeyboardInterrupt
    naming the signal; main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
