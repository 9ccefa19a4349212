"""The workers' output, followed by the launcher: whole lines, in order, progress bars collapsed.

Each local rank writes (stdout and stderr, one stream, so their order holds)
into a pipe of its own that ``worker_exec`` puts in place before the script
starts. The launcher reads every pipe as data arrives and writes whole lines
to its own stdout (the pod's log; ``kdist run --local`` prefixes them with
``[rank N]``), so that:

- lines of different ranks never mix within a line, and a partial line is
  never printed with a stray prefix;
- a progress bar that redraws itself with ``\\r`` (tqdm) becomes one line
  when it finishes, plus its latest state every ``REDRAW_EVERY_S`` while it
  runs, instead of one line per redraw;
- the launcher keeps each rank's last output (to tell a lost peer from a code
  error) and counts its progress (``kdist.runtime.watchdog``);
- nothing grows on disk: a pipe, not a log file, however long the job runs.

A pipe (FIFO) opened read-write by the launcher never reports end-of-file, so
workers may open and close it at will; the launcher stops reading when the
agent is done with the workers.
"""

from __future__ import annotations

import os
import select
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

# How often a progress bar's latest state is printed while it redraws itself.
REDRAW_EVERY_S = 10.0
TAIL_BYTES = 32 * 1024
# A line longer than this is printed in pieces rather than held in memory.
MAX_LINE = 64 * 1024


class _Rank:
    """One local rank's pipe: the unfinished line, its tail, its progress count."""

    def __init__(self, fd: int, prefix: str) -> None:
        self.fd = fd
        self.prefix = prefix
        self.pending = bytearray()
        self.tail = bytearray()
        self.shown = ""  # the redraw of the pending line printed last (no repeats)
        self.redrawn_at = 0.0
        self.progress = 0
        self.active_at: float | None = None  # when it last wrote anything


def last_redraw(line: str) -> str:
    """What a terminal would show of a line redrawn with ``\\r``: its last non-empty part."""
    parts = [p for p in line.split("\r") if p.strip()]
    return parts[-1] if parts else line.replace("\r", "")


class Output:
    """Follows one pipe per local rank in a thread; see the module's docstring."""

    def __init__(self, directory: Path, global_ranks: Sequence[int], *, prefix: bool,
                 out: IO[str] | None = None,
                 is_progress: Callable[[str], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = directory
        self.out = out or sys.stdout
        # None: any output counts as progress; else only lines it accepts.
        self.is_progress = is_progress
        self.clock = clock
        directory.mkdir(parents=True)
        self.ranks: list[_Rank] = []
        for local_rank, rank in enumerate(global_ranks):
            path = self.pipe(local_rank)
            os.mkfifo(path, 0o600)
            # Read-write: never blocks, never sees end-of-file (see the module docstring).
            fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
            self.ranks.append(_Rank(fd, f"[rank {rank}] " if prefix else ""))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="kdist-output", daemon=True)

    def pipe(self, local_rank: int) -> Path:
        """The pipe local rank ``local_rank`` writes into (worker_exec opens it)."""
        return self.directory / str(local_rank)

    def start(self) -> Output:
        self._thread.start()
        return self

    def tail(self, local_rank: int) -> str:
        """The last output of a local rank (up to TAIL_BYTES), for failure messages."""
        return bytes(self.ranks[local_rank].tail).decode("utf-8", errors="replace")

    def progress(self) -> int:
        """How much progress this node's ranks showed so far (a count that only grows)."""
        return sum(r.progress for r in self.ranks)

    def silent_for(self, local_rank: int) -> float | None:
        """Seconds since a local rank last wrote anything; None if it never did."""
        active = self.ranks[local_rank].active_at
        return None if active is None else self.clock() - active

    def stop(self) -> None:
        """Print what is left (read until the pipes stay empty), then close everything."""
        self._stop.set()
        self._thread.join(timeout=10)
        for r in self.ranks:
            if r.pending:
                self._line(r, bytes(r.pending))
                r.pending.clear()
            os.close(r.fd)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _follow(self) -> None:
        poller = select.poll()
        by_fd = {r.fd: r for r in self.ranks}
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        quiet = rounds = 0
        while True:
            ready = poller.poll(100)
            for fd, _ in ready:
                self._read(by_fd[fd])
            self._redraw()
            if self._stop.is_set():
                # The workers are gone: drain what they left (a child of theirs that
                # goes on writing gets 5 s).
                quiet, rounds = (0 if ready else quiet + 1), rounds + 1
                if quiet >= 2 or rounds >= 50:
                    return

    def _read(self, r: _Rank) -> None:
        try:
            data = os.read(r.fd, 65536)
        except BlockingIOError:
            return
        if not data:
            return
        r.active_at = self.clock()
        r.tail += data
        del r.tail[:-TAIL_BYTES]
        if self.is_progress is None:
            r.progress += 1
        r.pending += data
        while True:
            end = r.pending.find(b"\n")
            if end < 0:
                break
            line = bytes(r.pending[:end])
            del r.pending[:end + 1]
            self._line(r, line)
        if len(r.pending) > MAX_LINE:
            self._line(r, bytes(r.pending))
            r.pending.clear()

    def _line(self, r: _Rank, raw: bytes) -> None:
        decoded = raw.decode("utf-8", errors="replace")
        text = last_redraw(decoded)
        redrawn, r.shown = r.shown, ""
        if "\r" in decoded and text == redrawn:
            return  # its final state is what the last redraw showed
        if self.is_progress is not None and self.is_progress(text):
            r.progress += 1
        self._write(r.prefix + text)

    def _redraw(self) -> None:
        """Print the latest state of each rank's unfinished, redrawn line, now and then."""
        now = self.clock()
        for r in self.ranks:
            if b"\r" not in r.pending or now - r.redrawn_at < REDRAW_EVERY_S:
                continue
            latest = last_redraw(bytes(r.pending).decode("utf-8", errors="replace"))
            if latest and latest != r.shown:
                self._write(r.prefix + latest)
                r.shown, r.redrawn_at = latest, now

    def _write(self, text: str) -> None:
        try:
            self.out.write(text + "\n")
            self.out.flush()
        except (OSError, ValueError):
            pass  # a closed stdout must not stop the workers
