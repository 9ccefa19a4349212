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


@contextmanager
def interruptible() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise KeyboardInterrupt (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.default_int_handler)
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
