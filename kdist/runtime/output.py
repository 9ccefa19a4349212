"""The workers' output, followed by the launcher: whole lines, in order, progress bars collapsed.

Each local rank writes (stdout and stderr, one stream, so their order holds)
into a pipe of its own that ``worker_exec`` puts in place before the script
starts. The launcher reads every pipe as data arrives and writes whole lines
to its own stdout (the pod's log; ``kdist run --local`` prefixes them with
``[rank N]``), so that:

- lines of different ranks never mix within a line, and a partial line is
  never printed with a stray prefix; a line is printed whole however long it
  is (past ``MAX_LINE`` it is passed on as it comes, not held in memory, while
  the other ranks' lines wait in their pipes), byte for byte as written
  (invalid UTF-8 included, as torchrun passes it on);
- a progress bar that redraws itself with ``\\r`` (tqdm: a line that starts
  with ``\\r``, or is redrawn more than once) becomes one line when it
  finishes, plus its latest state every ``REDRAW_EVERY_S`` while it runs,
  instead of one line per redraw; any other ``\\r`` within a line is passed on;
- the launcher keeps each rank's last output (to tell a lost peer from a code
  error) and counts its progress (``kdist.runtime.watchdog``);
- nothing grows on disk: a pipe, not a log file, however long the job runs;
- no worker line reads as the launcher's own (``kdist.shared.records.launcher_said``):
  the launcher writes every line of its container's stream, a worker line that
  would start with the launcher's words gets its ``[rank N] `` before them, and
  the launcher's own lines (``agent.say``) go out between whole lines
  (``break_lines``), never inside a worker's long line, whose rest would start one;
  ``seal`` keeps the launcher's output out of its workers' reach (``/proc/PID/fd``).

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
# A line longer than this is passed on as it comes rather than held in memory.
MAX_LINE = 64 * 1024
# A rank that stops writing for this long in the middle of such a line gets a line
# end, so that the other ranks' lines (waiting meanwhile) are not held up by it.
STREAM_STALL_S = 1.0
# How the launcher's own lines start (kdist.shared.records.LAUNCHER, less its space).
LAUNCHER_WORDS = b"kdist.launch"
# Held while anything goes out to the container's stream (a worker's output, the launcher's
# own lines), so that the launcher's lines never land inside a worker's.
EMITTING = threading.RLock()
_LIVE: set[Output] = set()  # the Outputs following pipes now (one per run of the agent)


def break_lines() -> None:
    """End a worker's long line being passed on (the launcher is about to say a line of
    its own): its rest comes as a new line, read as any other (``Output._lead``)."""
    with EMITTING:
        for output in list(_LIVE):
            if output._streaming is not None:
                output._emit(b"\n")
                output._streaming = None


def seal() -> None:
    """Make this process (the launcher) undumpable: its workers, the same user, can then
    no longer open its stdout and stderr through ``/proc/PID/fd`` (nor read its memory or
    environment) and write lines there that its own pipes never saw. Its workers are
    dumpable again (execve resets it). Linux only; elsewhere nothing is done."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):
        pass


class _Rank:
    """One local rank's pipe: the unfinished line, its tail, its progress count."""

    def __init__(self, fd: int, prefix: str, rank: int) -> None:
        self.fd = fd
        self.prefix = prefix
        self.quote = prefix or f"[rank {rank}] "  # before a line that mimics the launcher's
        self.pending = bytearray()
        self.tail = bytearray()
        self.shown = b""  # the redraw of the pending line printed last (no repeats)
        self.redrawn_at = 0.0
        self.progress = 0
        self.active_at: float | None = None  # when it last wrote anything


def last_redraw(line: str) -> str:
    """What a terminal would show of a line redrawn with ``\\r``: its last non-empty part."""
    parts = [p for p in line.split("\r") if p.strip()]
    return parts[-1] if parts else line.replace("\r", "")


def is_redraw(raw: bytes) -> bool:
    """A line drawn again and again from its start (a progress bar), not text with a ``\\r``."""
    body = raw.rstrip(b"\r")
    return body.startswith(b"\r") or body.count(b"\r") >= 2


def shown(raw: bytes) -> bytes:
    """What is printed of a finished line: a redraw's final state, else the line as
    written (less the ``\\r`` of a CRLF line end)."""
    if is_redraw(raw):
        parts = [p for p in raw.split(b"\r") if p.strip()]
        return parts[-1] if parts else raw.replace(b"\r", b"")
    return raw[:-1] if raw.endswith(b"\r") else raw


class Output:
    """Follows one pipe per local rank in a thread; see the module's docstring."""

    def __init__(self, directory: Path, global_ranks: Sequence[int], *, prefix: bool,
                 out: IO[str] | None = None,
                 is_progress: Callable[[str], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = directory
        self.out = out or sys.stdout
        # Bytes go out as written where the stream has a binary side (stdout does).
        self._binary: IO[bytes] | None = getattr(self.out, "buffer", None)
        self._streaming: _Rank | None = None  # the rank whose long line is being passed on
        # None: any output counts as progress; else only lines it accepts.
        self.is_progress = is_progress
        self.clock = clock
        directory.mkdir(parents=True)
        self.ranks: list[_Rank] = []
        try:
            for local_rank, rank in enumerate(global_ranks):
                path = self.pipe(local_rank)
                os.mkfifo(path, 0o600)
                # Read-write: never blocks, never sees end-of-file (see the module docstring).
                fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
                self.ranks.append(_Rank(fd, f"[rank {rank}] " if prefix else "", rank))
        except BaseException:  # out of fds: close what is open, leave no pipe behind
            for r in self.ranks:
                os.close(r.fd)
            shutil.rmtree(directory, ignore_errors=True)
            raise
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="kdist-output", daemon=True)

    def pipe(self, local_rank: int) -> Path:
        """The pipe local rank ``local_rank`` writes into (worker_exec opens it)."""
        return self.directory / str(local_rank)

    def start(self) -> Output:
        with EMITTING:
            _LIVE.add(self)
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
        with EMITTING:
            _LIVE.discard(self)
            if self._streaming is not None:
                self._emit(b"\n")
                self._streaming = None
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
            streaming = self._streaming
            if streaming is not None:  # a long line is passed on: only its rank is read
                alone = select.poll()
                alone.register(streaming.fd, select.POLLIN)
                ready = alone.poll(100)
                if ready:
                    self._take(streaming)
                elif self.clock() - (streaming.active_at or 0.0) >= STREAM_STALL_S:
                    with EMITTING:
                        if self._streaming is streaming:  # not ended by the launcher's line
                            self._emit(b"\n")  # it went quiet mid-line: let the others through
                            self._streaming = None
            else:
                ready = poller.poll(100)
                for fd, _ in ready:
                    self._take(by_fd[fd])
                    if self._streaming is not None:
                        break
            with EMITTING:
                self._redraw()
            if self._stop.is_set():
                # The workers are gone: drain what they left (a child of theirs that
                # goes on writing gets 5 s).
                quiet, rounds = (0 if ready else quiet + 1), rounds + 1
                if quiet >= 2 or rounds >= 50:
                    return

    def _take(self, r: _Rank) -> None:
        """Read what `r` wrote and pass it on; nothing a worker writes stops the reading
        (a rank blocked on a full pipe would hang the node)."""
        with EMITTING:
            try:
                self._read(r)
            except Exception:  # noqa: BLE001 (what was read is dropped, never the pipe)
                r.pending.clear()

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
        if self._streaming is r:
            end = data.find(b"\n")
            if end < 0:
                self._emit(data)
                return
            self._emit(data[:end + 1])
            self._streaming = None
            data = data[end + 1:]
        r.pending += data
        while True:
            end = r.pending.find(b"\n")
            if end < 0:
                break
            line = bytes(r.pending[:end])
            del r.pending[:end + 1]
            self._line(r, line)
        if len(r.pending) > MAX_LINE:
            self._long(r)

    def _long(self, r: _Rank) -> None:
        """An unfinished line past MAX_LINE: a redraw keeps only its latest state; any
        other line is passed on from here as it comes (``_streaming``)."""
        if is_redraw(bytes(r.pending)):
            last = r.pending.rfind(b"\r", 0, len(r.pending.rstrip(b"\r")))
            del r.pending[:last]
            if len(r.pending) <= MAX_LINE:
                return
        self._emit(self._lead(r, r.pending) + bytes(r.pending))
        r.pending.clear()
        self._streaming = r

    def _line(self, r: _Rank, raw: bytes) -> None:
        text = shown(raw)
        redrawn, r.shown = r.shown, b""
        if is_redraw(raw) and text == redrawn:
            return  # its final state is what the last redraw showed
        if self.is_progress is not None and \
                self.is_progress(text.decode("utf-8", errors="replace")):
            r.progress += 1
        self._emit(self._lead(r, text) + text + b"\n")

    @staticmethod
    def _lead(r: _Rank, text: bytes | bytearray) -> bytes:
        """What goes before a worker's line: its prefix, if lines get one; else nothing,
        unless the line starts as the launcher's own do (then its rank, so that it
        does not read as one: kdist.shared.records.launcher_said)."""
        return (r.quote if text.startswith(LAUNCHER_WORDS) else r.prefix).encode()

    def _redraw(self) -> None:
        """Print the latest state of each rank's unfinished, redrawn line, now and then."""
        now = self.clock()
        for r in self.ranks:
            if r is self._streaming or now - r.redrawn_at < REDRAW_EVERY_S or \
                    not is_redraw(bytes(r.pending)):
                continue
            latest = shown(bytes(r.pending))
            if latest and latest != r.shown:
                self._emit(self._lead(r, latest) + latest + b"\n")
                r.shown, r.redrawn_at = latest, now

    def _emit(self, data: bytes) -> None:
        try:
            if self._binary is not None:
                self.out.flush()  # what was written as text goes first
                self._binary.write(data)
                self._binary.flush()
            else:
                self.out.write(data.decode("utf-8", errors="replace"))
                self.out.flush()
        except (OSError, ValueError):
            pass  # a closed stdout must not stop the workers
