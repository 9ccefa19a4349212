"""Processes by their parent or process group, read from ``/proc`` (Linux; standard library).

kdist starts each worker in a session (and process group) of its own; what the
worker forks (DataLoader workers, a server it started) stays in that group after
the worker itself died, and is stopped and waited for through it
(``kdist.runtime.workers``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator


def _stats() -> Iterator[tuple[int, str, int, int]]:
    """(pid, state, ppid, pgrp) of every process this one can see."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after ")".
                state, ppid, pgrp = f.read().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError, ValueError):
            continue
        yield int(entry), state, int(ppid), int(pgrp)


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (workers run in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for child, _, ppid, _ in _stats():
        children.setdefault(ppid, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def in_groups(pgids: Iterable[int]) -> list[int]:
    """The processes, not yet exited, of these process groups (zombies hold nothing)."""
    wanted = set(pgids)
    return [pid for pid, state, _, pgrp in _stats() if pgrp in wanted and state not in "ZX"]


def wait_groups(pgids: Iterable[int], timeout_s: float = 5.0) -> list[int]:
    """Wait (bounded) until these process groups have no process left that has not
    exited; what is still there after ``timeout_s`` (a process stuck in the kernel)."""
    pgids = list(pgids)
    deadline = time.monotonic() + timeout_s
    while True:
        left = in_groups(pgids) if pgids else []
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)
