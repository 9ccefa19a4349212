"""Showing a job: live progress while it runs, and the `status`/`list` tables.

On a terminal, progress is a rich Live table (per pod: pod, phase,
restarts, step with a bar toward --max-steps, loss; elapsed in the title),
with warnings and log lines printed above it. When stdout is not a
terminal, it is plain lines, one each time a rank's state changes.
`rich` is imported only here, inside functions.

What the cluster says (names, phases, reasons, messages) is shown, never
obeyed: every table cell and line is a `rich.text.Text` of escaped words
(`kdist.shared.terminal`), never a markup string, so `[bold]` or `[link=...]` in
a reason is text and an ESC in a node name is ``^[``. Pod log lines keep their
colours on a terminal and nothing else (`kdist.shared.terminal.log_for`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from kdist.api.types import parse_time
from kdist.cli.cells import _loss_text, _phase_text, _step_text, ranks_shown, shown
from kdist.cli.livetable import progress_table
from kdist.shared.terminal import escape, escape_log, log_for

if TYPE_CHECKING:
    from kdist.api.types import JobState

SPARK = "▁▂▃▄▅▆▇█"
STEP_EVERY = 5.0  # seconds between plain progress lines that only report a new step
BIG_JOB = 64  # ranks: past this, the plain display looks at them UPDATE_HZ times a second
UPDATE_HZ = 4.0


def sparkline(values: list[float], width: int = 24) -> str:
    """The last `width` values as block characters, low to high."""
    values = values[-width:]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    span = hi - lo
    return "".join(SPARK[int((v - lo) / span * (len(SPARK) - 1)) if span else 0] for v in values)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def job_elapsed(state: JobState, now: float | None = None) -> float | None:
    """Seconds from the job's creation to its end (or to now while it runs)."""
    start = parse_time(state.created)
    if start is None:
        return None
    end = parse_time(state.finished) if state.finished else None
    return (end or now or time.time()) - start


def _is_tty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class PlainDisplay:
    """One line per change of a pod's state; log lines as `[rank N] ...` (`[node N]` when
    a pod runs several ranks: its log holds all of them, without a rank's own prefix)."""

    def __init__(self, out: IO[str] | None = None, err: IO[str] | None = None,
                 echo_logs: bool = False) -> None:
        # The streams of the moment, not of import time: a program (or a test) may
        # have replaced sys.stdout since.
        self.out, self.err = out or sys.stdout, err or sys.stderr
        self.echo_logs = echo_logs
        self.started = time.monotonic()
        self._last: dict[int, tuple[Any, int | None, float]] = {}
        self.unit = "rank"  # as JobState's default (procsPerNode 1) until the job says
        self._pending: JobState | None = None  # a big job's state not looked at yet
        self._passed = 0.0  # when update() last looked at every rank

    def _print(self, line: str, err: bool = False) -> None:
        """A line of kdist's own (escaped: it holds the cluster's names and words)."""
        stream = self.err if err else self.out
        print(escape(line), file=stream, flush=True)

    def _print_log(self, prefix: str, line: str) -> None:
        """A log line after kdist's own `prefix` (`kdist.shared.terminal.log_for`)."""
        print(escape(prefix) + log_for(self.out, line), file=self.out, flush=True)

    def start(self, state: JobState) -> None:
        self.unit = state.unit
        self._print(f"watching {state.kind or 'job'} {state.namespace}/{state.name} "
                    f"(Ctrl-C stops watching; the job keeps running)")

    def update(self, state: JobState) -> None:
        self.unit = state.unit
        now = time.monotonic()
        if len(state.ranks) > BIG_JOB:
            # Each event looks at every rank: at 1,000 ranks a pass costs ~0.7 ms and a
            # gang's thousands of events would cost seconds. A big job's changes are
            # printed as seen at most UPDATE_HZ times a second (tick and stop catch up).
            self._pending = state
            if now - self._passed < 1 / UPDATE_HZ:
                return
            self._passed, self._pending = now, None
        elapsed = duration(now - self.started)
        for r in sorted(state.ranks.values(), key=lambda r: r.rank):
            key = (r.pod, _phase_text(r), r.restarts)
            last_key, last_step, last_time = self._last.get(r.rank, (None, None, 0.0))
            if not r.pod or (key, r.step) == (last_key, last_step):
                continue
            # A new step alone is printed at most every STEP_EVERY seconds (and the last one).
            if key == last_key and now - last_time < STEP_EVERY and r.step != state.max_steps:
                continue
            self._last[r.rank] = (key, r.step, now)
            held = f" (ranks {state.ranks_of(r.rank)})" if ranks_shown(state) else ""
            line = f"[{elapsed:>6}] {state.unit} {r.rank}{held} pod {r.pod} {_phase_text(r)}"
            if r.restarts:
                line += f" restarts {r.restarts}"
            if r.step is not None:
                line += f" step {_step_text(r, state.max_steps)} loss {_loss_text(r)}"
                if r.rank == 0:
                    line += pace(state)
            self._print(line)

    def tick(self, state: JobState) -> None:
        self._catch_up()

    def _catch_up(self) -> None:
        if self._pending is not None:
            self._passed = 0.0
            self.update(self._pending)

    def warning(self, text: str) -> None:
        self._print(f"warning: {text}", err=True)

    def log(self, rank: int | None, line: str) -> None:
        if self.echo_logs:
            self._print_log(f"[{self.unit} {'?' if rank is None else rank}] ", line)

    def message(self, line: str) -> None:
        """A line of a local run's output, its `[rank N] ` prefix and all (LocalView)."""
        self._print_log("", line)

    def stop(self) -> None:
        self._catch_up()


class LogDisplay(PlainDisplay):
    """`kdist logs -f`: log lines on stdout, warnings on stderr, no progress lines."""

    def __init__(self, on_start: Callable[[JobState], None] | None = None) -> None:
        super().__init__(echo_logs=True)
        self.on_start = on_start

    def start(self, state: JobState) -> None:
        """`on_start(state)` first: the job is known, no log read yet (it may refuse)."""
        if self.on_start is not None:
            self.on_start(state)
        self.unit = state.unit

    def update(self, state: JobState) -> None:
        self.unit = state.unit


class LiveDisplay(PlainDisplay):
    """A rich Live table, redrawn in place; warnings and logs scroll above it.

    Redrawn only from the caller's thread (no auto-refresh thread reading the
    state while it changes), at most REDRAW_HZ times a second.
    """

    REDRAW_HZ = 4.0

    def __init__(self, echo_logs: bool = False) -> None:
        super().__init__(echo_logs=echo_logs)
        self._state: JobState | None = None
        self._drawn = 0.0
        # Made on first use: `kdist submit` makes its display before it sends anything,
        # and rich's import (~20 ms) need not come before the `created` lines.
        self._live: Any = None

    @property
    def live(self) -> Any:
        if self._live is None:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(console=Console(), auto_refresh=False, transient=False)
        return self._live

    def start(self, state: JobState) -> None:
        self._state = state
        self.live.start()
        self._redraw(force=True)

    def update(self, state: JobState) -> None:
        self._state = state
        self._redraw()

    def tick(self, state: JobState) -> None:
        self._state = state
        self._redraw()

    def _redraw(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._state is None or (not force and now - self._drawn < 1 / self.REDRAW_HZ):
            return
        self._drawn = now
        elapsed = duration(now - self.started)
        s = self._state
        title = (f"{s.kind or 'job'} {s.namespace}/{s.name}: {s.phase}, {elapsed}{pace(s)}"
                 f"{restarts_text(s, ', ')}")
        # As many rows as the terminal shows: rich lays a 1,000-row table out in ~1.3 s.
        rows = max(8, self.live.console.size.height - 4)
        self.live.update(progress_table(s, title=title, max_rows=rows), refresh=True)

    def _print(self, line: str, err: bool = False) -> None:
        self.live.console.print(shown(line, style="yellow" if err else ""), soft_wrap=True)

    def _print_log(self, prefix: str, line: str) -> None:
        from rich.text import Text

        # Colours become rich styles; what escape_log left is text (no other sequence).
        self.live.console.print(shown(prefix) + Text.from_ansi(escape_log(line)),
                                soft_wrap=True)

    def stop(self) -> None:
        if self._live is not None and self._live.is_started:
            self._redraw(force=True)
            self._live.stop()


def make_display(echo_logs: bool = False) -> PlainDisplay:
    """Live progress on a terminal, plain lines otherwise."""
    return LiveDisplay(echo_logs) if _is_tty(sys.stdout) else PlainDisplay(echo_logs=echo_logs)


def make_local_display(raw: bool) -> LiveDisplay | None:
    """`kdist run --local`: the live table on a terminal, else none (the prefixed lines)."""
    return None if raw or not _is_tty(sys.stdout) else LiveDisplay()


# ---- tables ---------------------------------------------------------------------------------


def pace(state: JobState) -> str:
    """", 5,120 samples/s, ETA 3m05s" from rank 0's last step line (empty when unknown)."""
    r0 = state.ranks.get(0)
    out = ""
    if r0 is not None and r0.samples_per_s and not state.outcome:
        out += f", {r0.samples_per_s:,.0f} samples/s"
    eta = state.eta_s()
    if eta is not None:
        out += f", ETA {duration(eta)}"
    return out


def restarts_text(state: JobState, sep: str) -> str:
    """"restart 1 of 2" (whole-job restarts so far, of spec.distributed.maxRestarts) once there
    was one, or restarts are allowed; else ""."""
    done = max((r.restarts for r in state.ranks.values()), default=0)
    if not done and not state.max_restarts:
        return ""
    limit = f" of {state.max_restarts}" if state.max_restarts is not None else ""
    how = " (in place)" if state.restart_mode == "inPlace" else ""
    return f"{sep}restart {done}{limit}{how}"


def print_status(state: JobState) -> None:
    """`kdist status`: the job's line, then a table per rank with a loss sparkline."""
    from rich.console import Console

    console = Console(width=None if _is_tty(sys.stdout) else 200, highlight=False)
    head = (f"{state.kind} {state.namespace}/{state.name}: {state.phase}  "
            f"nodes {state.nodes or '-'}  elapsed {duration(job_elapsed(state))}")
    head += pace(state)
    if state.code:  # which version of the shipped workdir ran (sha256, as git shows hashes)
        head += f"  code {state.code[:12]}"
    if state.runtime:  # kdist's runtime came with the job, not from the image
        head += f"  runtime shipped {state.runtime[:12]}"
    head += restarts_text(state, "  ")
    if state.reason and state.outcome:
        head += f"  ({state.reason}{': ' + state.message if state.message else ''})"
    console.print(shown(head))
    if state.queue_status and not state.outcome:
        words = {"queued": "queued in", "never-fits": "can never be admitted in",
                 "admitted": "admitted from"}[state.queue_status]
        console.print(shown(f"{words} LocalQueue {state.queue_name}: {state.queue_message}"))
    if state.gang_holds():  # a native gang (distributed.gang): why its pods wait
        console.print(shown(f"job {state.name} {state.gang_words()}"))
    if state.gang_status == "unreadable":
        console.print(shown(f"PodGroup {state.gang} could not be read: {state.gang_message}"))
    if state.outcome == "Failed" and state.first_failure() is not None:
        console.print(shown(state.failure_line()))
    elif (bad := state.first_failure()) is not None:  # e.g. which rank hung, what was killed
        said = f": {bad.said}" if bad.said else ""
        console.print(shown(f"restarted after {state.unit} {bad.rank} (pod {bad.pod}) exited "
                            f"with code {bad.exit_code}{said}"))
    from kdist.cli.columns import columns

    held = ranks_shown(state)
    # HOST: the Kubernetes node the pod runs on ("node" is kdist's word for a pod).
    headers = (state.unit.upper(), *(["RANKS"] if held else []), "POD", "PHASE", "RESTARTS",
               "STEP", "LOSS", "LOSS HISTORY", "HOST")
    rows = [(r.rank, *([state.ranks_of(r.rank)] if held else []), r.pod or "-",
             _phase_text(r, state), r.restarts, _step_text(r, state.max_steps), _loss_text(r),
             sparkline(r.losses), r.node or "-")
            for r in sorted(state.ranks.values(), key=lambda r: r.rank)]
    console.file.write("".join(line + "\n" for line in columns(headers, rows)))
    spares = [f"spare in slot {slot}: {what}" for slot, what in sorted(state.spares.items())]
    if state.size is not None and state.size != state.nodes:  # an elastic gang shrank
        spares.insert(0, f"training on {state.size} of {state.nodes} nodes (spec.minNodes: "
                         "the gang shrank after a node was lost)")
    elif state.size is not None:  # it shrank, then grew back
        spares.insert(0, f"training on all {state.nodes} nodes again (spec.minNodes: the gang "
                         "grew back at a step boundary)")
    for line in [*spares, *ledger_lines(state.ledger), *(f"note: {n}" for n in state.notes)]:
        console.print(shown(line))


def ledger_lines(ledger: dict[str, Any] | None) -> list[str]:
    """The goodput ledger (kdist.shared.ledger) as `status` prints it: one line per restart,
    then the totals; none when no watch saw a restart."""
    if not ledger or not ledger.get("restarts"):
        return []
    lines = []
    for i, r in enumerate(ledger["restarts"], 1):
        whence = f" (from the {r['resumedFrom']})" if r.get("resumedFrom") else ""
        back = (f"back {r['secondsLost']}s later{whence}, {r['stepsLost']} step(s) lost"
                if r.get("resumedAt") else "back: no step line said when"
                if ledger.get("succeeded") else "not resumed")
        at = str(r.get("faultAt") or "?")[11:19]
        spare = f"; spare in {r['spare']}" if r.get("spare") else ""
        spare += f"; {r['shrank']}" if r.get("shrank") else ""
        spare += f"; {r['grew']}" if r.get("grew") else ""
        lines.append(f"restart {i} at {at}: {r.get('cause')}{spare}; {back}")
    allowed = ledger.get("restartsAllowed")
    goodput = ledger.get("goodput")
    # A total the annotation held wrongly is None (kdist.shared.ledgerread): unsaid.
    used, seconds, steps = (_or_dash(ledger.get(k)) for k in ("restartsUsed", "secondsLost",
                                                              "stepsLost"))
    lines.append(f"goodput {'-' if goodput is None else f'{goodput:.1%}'}: "
                 f"{used} restart(s){'' if allowed is None else f' of {allowed}'} used, "
                 f"{seconds}s and {steps} step(s) lost")
    return lines


def _or_dash(value: object) -> object:
    return "-" if value is None else value


def print_jobs(rows: list[Any], all_namespaces: bool, selector: str = "", *,
               wide: bool = False) -> None:
    """`kdist list`: one row per job of any backend; `wide` adds the job's kind and
    creation time, and shows the namespace always."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if _is_tty(sys.stdout) else 200, highlight=False)
    if not rows:
        console.print(shown("no kdist jobs found" + (f" matching -l {selector!r}" if selector
                                                      else "")))
        return
    namespaces = all_namespaces or wide
    table = Table(box=None, pad_edge=False)
    cols = (["NAMESPACE"] if namespaces else []) + ["NAME", "BACKEND", "NODES", "PHASE", "AGE"]
    for col in cols + (["KIND", "CREATED"] if wide else []):
        table.add_column(col, no_wrap=True)
    for row in rows:
        cells = [row.namespace] if namespaces else []
        cells += [row.name, row.backend, row.nodes or "-", row.phase, duration(row.age_s)]
        if wide:
            cells += [row.kind or "-", row.created or "-"]
        table.add_row(*(shown(cell) for cell in cells))
    console.print(table)
