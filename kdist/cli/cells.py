"""A rank's cells as kdist's tables show them (the live table, the plain lines, status):
escaped text, never markup."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kdist.shared.terminal import escape

if TYPE_CHECKING:
    from kdist.api.types import JobState, RankState


def _step_text(r: RankState, max_steps: int | None) -> str:
    if r.step is None:
        return "-"
    return f"{r.step}/{max_steps}" if max_steps else str(r.step)


def _loss_text(r: RankState) -> str:
    return "-" if r.loss is None else f"{r.loss:.4g}"


def _phase_text(r: RankState, state: JobState | None = None) -> str:
    phase = state.rank_phase(r) if state is not None else r.phase
    return f"{phase} ({r.reason})" if r.reason and r.reason not in (phase, "Completed") \
        else phase


def shown(value: object, style: str = "") -> Any:
    """A rich Text of `value`, escaped: never read as markup, emoji codes or control codes."""
    from rich.text import Text

    return Text(escape(value), style=style)


def ranks_shown(state: JobState) -> bool:
    """Whether a "ranks" column says which torch ranks each node holds (procsPerNode > 1)."""
    return (state.procs_per_node or 1) > 1
