"""`kdist run --local`'s last line: how the run ended, how long it took, its steps and loss,
and when it failed, which rank and why (the user's file:line in it, as the launcher said);
before it, when a node restarted, the run's goodput ledger as `kdist status` prints a job's.

The step lines (docs/DESIGN.md, the workloads' JSON events) are read as they
pass, from rank 0: through the live table's observer on a terminal, through a
tee of stdout otherwise (bytes go on as the ranks wrote them). One line at the
end, on a terminal and in a pipe alike: on stdout when the run succeeded (as
`kdist submit` says "job X succeeded"), on stderr when it failed or was
interrupted (Ctrl-C is "interrupted", exit 130, never "failed"). Why it failed is
the launcher's own `kdist.launch: worker rank N ...` line (what a pod's termination
message ends with too, `kdist.kube.watch.objects.last_words`): the most telling one.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import IO, Any

from kdist.cli.progress import duration, ledger_lines
from kdist.cli.say import say
from kdist.shared import jsonread
from kdist.shared.exitcodes import severity

_RANK0 = "[rank 0] "
MAX_LINE = 64 * 1024  # a step line is short; longer lines are not read for steps
# The launcher's line naming a node's failed worker (kdist.runtime.agent._failed), as the
# local runner passes a launcher's own lines on: `[node N] ` and its words, nothing between
# (a worker's line is `[rank N] ...`, whatever it prints: kdist.shared.records).
_FAILED = re.compile(r"\[node \d+\] kdist\.launch: worker rank (\d+) \([^)]*\) (.+); "
                     r"exiting (\d+): ")


class RunSummary:
    """Rank 0's last step and loss as the run's lines pass; `line()` says how it ended."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.started = time.monotonic()
        self.step: int | None = None
        self.loss: float | None = None
        self.done = False
        self.failure: tuple[int, str] | None = None  # (severity, "rank N exited ...: why")
        self.ledger: dict[str, Any] | None = None  # the run's restarts (kdist.shared.ledger)
        self.checkpoints: str | None = None  # where the job's local checkpoints are, as shown
        self.resumed: str | None = None  # the earlier run's checkpoint rank 0 resumed from

    def kept(self, ledger: dict[str, Any]) -> None:
        """The run's goodput ledger (`run_local(on_ledger=)`): said before the last line."""
        self.ledger = ledger

    def checkpoints_in(self, path: Path) -> None:
        """Where the run keeps checkpoints (`run_local(on_checkpoints=)`), as the user
        would type it: relative to the current directory when under it."""
        rel = os.path.relpath(path)
        self.checkpoints = str(path) if rel.startswith("..") else rel

    def feed(self, line: str) -> None:
        if line.startswith("[node "):
            self._failed(line)
        if not line.startswith(_RANK0) or '{"event"' not in line:
            return
        try:
            record = jsonread.loads(line[len(_RANK0):], limit=MAX_LINE)
        except ValueError:
            return
        if not isinstance(record, dict) or record.get("event") not in ("step", "done", "resume"):
            return
        if record["event"] == "resume":
            # Before any step of this run: an earlier run's checkpoint (a restart's comes later).
            if self.step is None and self.resumed is None:
                name, at = record.get("checkpoint"), record.get("step")
                self.resumed = name if isinstance(name, str) and name.isprintable() and \
                    len(name) <= 64 else f"step {at}" if isinstance(at, int) else "a checkpoint"
            return
        step, loss = record.get("step"), record.get("loss")
        if isinstance(step, int) and not isinstance(step, bool):
            self.step = step
        if isinstance(loss, (int, float)) and not isinstance(loss, bool):
            self.loss = float(loss)
        self.done = self.done or record["event"] == "done"

    def _failed(self, line: str) -> None:
        m = _FAILED.match(line)
        if m is None:
            return
        rank, how, code = m.groups()
        told = (severity(int(code)), f"rank {rank} {how}")
        if self.failure is None or told[0] < self.failure[0]:  # the first, unless outranked
            self.failure = told

    def line(self, code: int, interrupted: int | None) -> str:
        took = duration(time.monotonic() - self.started)
        if interrupted is not None:
            how = "Ctrl-C" if interrupted == signal.SIGINT else signal.Signals(interrupted).name
            head = f"local run {self.name} interrupted ({how}) after {took}"
        elif code == 0:
            head = f"local run {self.name} succeeded in {took}"
        else:
            head = f"local run {self.name} failed (exit code {code}) after {took}"
        why = f": {self.failure[1]}" if code != 0 and interrupted is None and self.failure \
            else ""
        resumed = "" if self.resumed is None else f"resumed from {self.resumed} (" + \
            (f"{self.checkpoints}; " if self.checkpoints else "") + "--fresh starts over)"
        if self.step is None:
            return head + why + (f"; {resumed}" if why and resumed else f": {resumed}"
                                 if resumed else "")
        steps = f"{self.step} steps" if code == 0 and self.done else f"at step {self.step}"
        loss = "" if self.loss is None else \
            f", {'final' if code == 0 else 'last'} loss {self.loss:.4g}"
        return f"{head}{why}{'; ' if why else ': '}{steps}{loss}" + \
            (f"; {resumed}" if resumed else "")

    def say(self, code: int, interrupted: int | None) -> None:
        for line in ledger_lines(self.ledger):  # as `kdist status` prints a job's
            say(line, err=code != 0)
        say(self.line(code, interrupted), err=code != 0)


def exit_status(code: int, interrupted: int | None) -> int:
    """`kdist run --local`'s exit code: 0 the job succeeded, 1 it failed (whatever code
    its nodes exited with: the summary line says it), 128 + N stopped by signal N (130
    Ctrl-C, 143 SIGTERM). kdist's own codes (2 bad input, refused before anything ran) are
    never a worker's."""
    if interrupted is not None:
        return 128 + interrupted
    return 0 if code == 0 else 1


class _Bytes:
    """The binary side of `Tee`: passes bytes on, feeds whole lines to the summary."""

    def __init__(self, out: IO[bytes], summary: RunSummary) -> None:
        self.out, self.summary = out, summary
        self.pending = bytearray()

    def write(self, data: bytes) -> int:
        self.out.write(data)
        self.pending += data
        *lines, rest = bytes(self.pending).split(b"\n")
        self.pending = bytearray(rest if len(rest) <= MAX_LINE else b"")
        for raw in lines:
            self.summary.feed(raw.decode("utf-8", errors="replace"))
        return len(data)

    def flush(self) -> None:
        self.out.flush()


class Tee:
    """stdout for `run_local(stdout=)`: everything passes, step lines are read on the way."""

    def __init__(self, summary: RunSummary, out: IO[str] | None = None) -> None:
        self.out = out or sys.stdout
        binary = getattr(self.out, "buffer", None)
        self.buffer = None if binary is None else _Bytes(binary, summary)
        self.summary = summary
        self._text = ""

    def write(self, text: str) -> int:
        self.out.write(text)
        *lines, self._text = (self._text + text).split("\n")
        self._text = self._text[-MAX_LINE:]
        for line in lines:
            self.summary.feed(line)
        return len(text)

    def flush(self) -> None:
        self.out.flush()


class Sniffing:
    """An observer (the live table) whose lines are read for the summary on their way."""

    def __init__(self, inner: Any, summary: RunSummary) -> None:
        self.inner, self.summary = inner, summary

    def message(self, line: str) -> None:
        self.summary.feed(line)
        self.inner.message(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
