"""At a hang, every rank's Python stacks: which rank is waiting in torch.distributed, which is not.

Every rank of a hung job is silent, so output alone cannot tell the rank that
stopped (a deadlock, a stuck loader, a ``sleep``) from the ranks waiting for it in
a collective; a rank may even print on its way into the hang, after the others'
last line. Their stacks can: the workers' ``sitehook`` registers ``faulthandler``
for ``DUMP_SIGNAL``, the launcher sends it to each local rank that handles it
(``/proc``: a worker that exec'd a shell would die of it), and each prints every
thread's stack into its pipe (the log shows them). A rank whose *main* thread
waits inside ``torch/distributed/`` waits for a peer; one whose main thread is
elsewhere is the one that hung. Its other threads do not count either way: a
DataLoader's queue feeders idle outside torch.distributed in every rank, and a
background thread may sit in a store call while the main thread is stuck.

Frames do not tell everything: DDP starts its all-reduce from C++ inside
``loss.backward()``, so a rank waiting in it shows only the script's
``backward()`` line, as a rank that hung computing would. Each rank's count of
collectives started (``collectives``, kept by the sitehook) does: the ranks that
started fewer than the others never reached the collective the others wait in.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

DUMP_SIGNAL = signal.SIGRTMIN + 5  # sitecustomize.DUMP_SIGNAL_OFFSET
_HEADER = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')
# Also in a dump: a thread's frames cut at faulthandler's depth limit, a thread
# with no Python frame (a C thread holding a thread state).
_OTHER = re.compile(r"^\s+(?:\.\.\.|<[^>]*>)$")
_DIST = "/torch/distributed/"
# Faulthandler writes a dump at once; the launcher's reader may take a moment to
# have all of it: a rank's output that stays the same this long holds the whole dump.
SETTLE_S = 0.3


@dataclass(frozen=True)
class Stacks:
    """What one rank's dump shows."""

    in_collective: bool  # the main thread's innermost frame is in torch.distributed
    where: str  # the main thread's innermost frame outside torch: "hang.py:31 in <module>"


def collectives(path: Path) -> int | None:
    """A rank's count of collectives started, as its sitehook keeps it; None: none yet
    (no process group, or a torch without sequence numbers)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def behind(counts: dict[int, int | None]) -> tuple[list[int], list[int]]:
    """(the ranks that started fewer collectives than the most any started, those that
    started the most): empty when fewer than two ranks counted, or all alike."""
    counted = {r: n for r, n in counts.items() if n is not None}
    if len(counted) < 2 or len(set(counted.values())) == 1:
        return [], []
    most = max(counted.values())
    return ([r for r, n in counted.items() if n < most],
            [r for r, n in counted.items() if n == most])


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


def _in_dump(line: str) -> bool:
    return not line.strip() or bool(_FRAME.match(line) or _OTHER.match(line))


def _started_by_threading(frames: list[tuple[str, str, str]]) -> bool:
    """Whether a thread's outermost frame is ``threading``'s bootstrap (any thread the
    script or a library started; never the main thread)."""
    path, _, func = frames[-1]
    return path.endswith("/threading.py") and func in ("_bootstrap", "_bootstrap_inner")


def parse(tail: str) -> Stacks | None:
    """What the main thread does in the last dump of a rank's output; None when the
    output shows no dump, or not (yet) the main thread's part of it.

    Faulthandler lists the threads newest first: the main thread, the oldest, is the
    last block that ``threading`` did not start.
    """
    lines = tail.splitlines()
    starts = [i for i, line in enumerate(lines) if _HEADER.match(line)]
    if not starts:
        return None
    # The last dump: its thread blocks follow each other, separated by blank lines.
    first = starts[-1]
    while True:
        earlier = [i for i in starts if i < first]
        if not earlier or not all(_in_dump(lines[j]) for j in range(earlier[-1] + 1, first)):
            break
        first = earlier[-1]
    threads: list[list[tuple[str, str, str]]] = []
    for line in lines[first:]:
        if _HEADER.match(line):
            threads.append([])
        elif (m := _FRAME.match(line)) and threads:
            threads[-1].append((m.group(1), m.group(2), m.group(3)))
    main = [t for t in threads if t and not _started_by_threading(t)]
    if not main:
        return None
    frames = main[-1]
    where = next((f"{os.path.basename(path)}:{line_no} in {func}"
                  for path, line_no, func in frames
                  if "/torch/" not in path and not path.endswith("/threading.py")), "")
    return Stacks(_DIST in frames[0][0], where)


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
    _settle(asked, tails, before, clock() + wait_s, clock)
    return [parse(tails(i)) if i in asked and _dumps(tails(i)) > before[i] else None
            for i in range(len(pids))]


def _settle(asked: list[int], tails: Callable[[int], str], before: list[int],
            deadline: float, clock: Callable[[], float]) -> None:
    """Until every asked rank's output shows a new dump and has not changed for
    ``SETTLE_S`` (the whole dump read, not its first threads only), or ``deadline``."""
    seen: dict[int, str] = {}
    changed = clock()
    while asked and clock() < deadline:
        now = {i: tails(i) for i in asked}
        if now != seen:
            seen, changed = now, clock()
        elif all(_dumps(seen[i]) > before[i] for i in asked) and clock() - changed >= SETTLE_S:
            return
        time.sleep(0.05)
