"""The live table of many jobs (`kdist list --watch`, `kdist wait`): one row per job.

On a terminal a rich Live table, redrawn at most once a second; otherwise one
plain line per job each time its row changes (so a log file reads as history).
Every cell is escaped (`kdist.shared.terminal`) and a rich Text, never markup.
"""

from __future__ import annotations

import sys
import time
from typing import IO, TYPE_CHECKING, Any

from kdist.cli.progress import duration, shown
from kdist.shared.terminal import escape

if TYPE_CHECKING:
    from kdist.api.types import JobState

# NODES: pods running of the job's nodes (a pod is a node; it may run several ranks).
COLUMNS = ["NAMESPACE", "NAME", "PHASE", "NODES", "STEP", "LOSS", "SAMPLES/S", "ETA"]


def row(state: JobState) -> list[str]:
    """A job's cells: phase, nodes running/total, step/max, loss, throughput, time left;
    escaped (the namespace, name and phase are the cluster's)."""
    ranks = sorted(state.ranks.values(), key=lambda r: r.rank)
    running = sum(1 for r in ranks if r.phase == "Running")
    r0 = state.ranks.get(0)
    step = "-" if r0 is None or r0.step is None else \
        f"{r0.step}/{state.max_steps}" if state.max_steps else str(r0.step)
    loss = "-" if r0 is None or r0.loss is None else f"{r0.loss:.4g}"
    rate = "-" if r0 is None or not r0.samples_per_s else f"{r0.samples_per_s:,.0f}"
    eta = state.eta_s()
    cells = [state.namespace, state.name, state.phase, f"{running}/{state.nodes or len(ranks)}",
             step, loss, rate, "-" if eta is None else duration(eta)]
    return [escape(cell) for cell in cells]


class JobsTable:
    """Shows rows of many jobs, live on a terminal, as changed lines otherwise."""

    def __init__(self, out: IO[str] | None = None, namespaces: bool = True) -> None:
        out = self.out = out or sys.stdout
        self.namespaces = namespaces
        self.live: Any = None
        self._last: dict[tuple[str, str], list[str]] = {}
        self._drawn = 0.0
        if out.isatty():
            from rich.console import Console
            from rich.live import Live

            self.live = Live(console=Console(file=out), auto_refresh=False, transient=False)
            self.live.start()

    def _cells(self, state: JobState) -> list[str]:
        cells = row(state)
        return cells if self.namespaces else cells[1:]

    def update(self, states: list[JobState]) -> None:
        if self.live is not None:
            if time.monotonic() - self._drawn >= 1.0:
                self._drawn = time.monotonic()
                self.live.update(self._table(states), refresh=True)
            return
        for state in states:
            cells = self._cells(state)
            key = (state.namespace, state.name)
            if self._last.get(key) != cells:
                self._last[key] = cells
                print("  ".join(cells), file=self.out, flush=True)

    def _table(self, states: list[JobState]) -> Any:
        from rich.table import Table

        table = Table(box=None, pad_edge=False)
        for col in COLUMNS if self.namespaces else COLUMNS[1:]:
            table.add_column(col, no_wrap=True)
        for state in states:
            table.add_row(*(shown(cell) for cell in self._cells(state)))
        if not states:
            table.add_row(*(["no kdist jobs"] + [""] * (len(table.columns) - 1)))
        return table

    def stop(self, states: list[JobState] | None = None) -> None:
        if self.live is not None:
            if states is not None:
                self.live.update(self._table(states), refresh=True)
            self.live.stop()
