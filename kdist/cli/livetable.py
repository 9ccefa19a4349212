"""The live per-rank table of `kdist submit`/`wait` on a terminal (`progress.LiveDisplay`).

A terminal shows a few dozen rows; rich lays out every row it is given (a 1,000-row table
took 1.3 s here, redrawn 4 times a second: a core, all the watch long). So the table
holds at most `max_rows` ranks, the ones that say most (failed, restarted, waiting for a
reason) first, then the lowest, in rank order, and its caption counts the rest by phase.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from kdist.cli.cells import _loss_text, _phase_text, _step_text, ranks_shown, shown

if TYPE_CHECKING:
    from kdist.api.types import JobState, RankState


def _telling(r: RankState) -> bool:
    return bool(r.phase == "Failed" or r.restarts or r.reason or r.exit_code)


def chosen(state: JobState, max_rows: int | None) -> tuple[list[RankState], Counter[str]]:
    """The ranks shown (in rank order) and, by phase, how many are not."""
    ranks = sorted(state.ranks.values(), key=lambda r: r.rank)
    if max_rows is None or len(ranks) <= max_rows:
        return ranks, Counter()
    keep = max(1, max_rows - 1)  # the last row counts the others
    picked = sorted(ranks, key=lambda r: (not _telling(r), r.rank))[:keep]
    ids = {r.rank for r in picked}
    return sorted(picked, key=lambda r: r.rank), Counter(
        state.rank_phase(r) for r in ranks if r.rank not in ids)


def progress_table(state: JobState, title: str, max_rows: int | None = None) -> Any:
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    rows, rest = chosen(state, max_rows)
    caption = None
    if rest:
        counts = ", ".join(f"{n} {phase}" for phase, n in sorted(rest.items()))
        caption = shown(f"... {sum(rest.values())} more {state.unit}s: {counts} (kdist status "
                        "lists every one)")
    table = Table(title=shown(title), title_justify="left", caption=caption,
                  caption_justify="left", box=None, pad_edge=False)
    held = ranks_shown(state)
    for col in (state.unit, *(["ranks"] if held else []), "pod", "phase", "restarts", "step",
                "", "loss"):
        table.add_column(col, no_wrap=True)
    for r in rows:
        bar: Any = ""
        if state.max_steps and r.step is not None:
            bar = ProgressBar(total=state.max_steps, completed=min(r.step, state.max_steps),
                              width=20)
        table.add_row(shown(r.rank), *([shown(state.ranks_of(r.rank))] if held else []),
                      shown(r.pod or "-"), shown(_phase_text(r, state)),
                      shown(r.restarts), shown(_step_text(r, state.max_steps)), bar,
                      shown(_loss_text(r)))
    return table
