"""At a hang, every rank's Python stacks: which rank is waiting in torch.distributed, which is not.

Every rank of a hung job is silent, so output alone cannot tell the rank that
stopped (a deadlock, a stuck loader, a ``sleep``) from the ranks waiting for it in
a collective; a rank may even print on its way into the hang, after the others'
last line. Their stacks can: the workers' ``sitehook`` registers ``faulthandler``
for ``DUMP_SIGNAL``, the launcher sends it to each local rank that handles it
(``/proc``: a worker that exec'd a shell would die of it), and each prints every
thread's stack into its pipe (the log shows them). A rank with no thread inside
``torch/distributed/`` is the one that hung; the others wait on it.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

DUMP_SIGNAL = signal.SIGRTMIN + 5  # sitecustomize.DUMP_SIGNAL_OFFSET
_HEADER = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')
_DIST = "/torch/distributed/"


@dataclass(frozen=True)
class Stacks:
    """What one rank's dump shows."""

    in_collective: bool  # some thread's innermost frame is in torch.distributed
    where: str  # the innermost frame of its first thread outside torch: "hang.py:31 in <module>"


def handles(pid: int, sig: int = DUMP_SIGNAL) -> bool:
    """Whether process ``pid`` catches ``sig`` (its ``SigCgt`` mask in /proc)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _dumps(tail: str) -> int:
    return sum(1 for line in tail.splitlines() if _HEADER.match(line))


def parse(tail: str) -> Stacks | None:
    """The last dump in a rank's output, or None when it shows none."""
    lines = tail.splitlines()
    starts = [i for i, line in enumerate(lines) if _HEADER.match(line)]
    if not starts:
        return None
    # The last dump: its thread blocks follow each other, separated by blank lines.
    first = starts[-1]
    while True:
        earlier = [i for i in starts if i < first]
        if not earlier or any(lines[j].strip() and not _FRAME.match(lines[j])
                              for j in range(earlier[-1] + 1, first)):
            break
        first = earlier[-1]
    threads: list[list[tuple[str, str, str]]] = []
    for line in lines[first:]:
        if _HEADER.match(line):
            threads.append([])
        elif (m := _FRAME.match(line)) and threads:
            threads[-1].append((m.group(1), m.group(2), m.group(3)))
    threads = [t for t in threads if t]
    if not threads:
        return None
    in_dist = any(_DIST in t[0][0] for t in threads)
    where = ""
    for t in threads:
        for path, line_no, func in t:
            if "/torch/" not in path and "/threading.py" not in path:
                where = f"{os.path.basename(path)}:{line_no} in {func}"
                break
        if where:
            break
    return Stacks(in_dist, where)


def dump(pids: Sequence[int], tails: Callable[[int], str], wait_s: float = 2.0,
         clock: Callable[[], float] = time.monotonic) -> list[Stacks | None]:
    """Ask each process (``pids[i]``, whose output is ``tails(i)``) for its stacks; what
    each showed within ``wait_s`` (None: it does not handle the signal, or said nothing)."""
    before = [_dumps(tails(i)) for i in range(len(pids))]
    asked = []
    for i, pid in enumerate(pids):
        if pid and handles(pid):
            try:
                os.kill(pid, DUMP_SIGNAL)
                asked.append(i)
            except OSError:
                pass
    deadline = clock() + wait_s
    while asked and clock() < deadline and \
            any(_dumps(tails(i)) <= before[i] for i in asked):
        time.sleep(0.05)
    time.sleep(0.2)  # the rest of the last thread's frames
    return [parse(tails(i)) if i in asked and _dumps(tails(i)) > before[i] else None
            for i in range(len(pids))]
