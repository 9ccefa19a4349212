"""The watch's displays at 1,000 ranks (issue 53): each event looked at every rank (the
plain lines: ~0.7 ms a pass, thousands of events), and the live table laid out every rank
4 times a second (1.3 s a layout). Now the plain display looks at a big job at most 4
times a second and catches up at the end; the live table holds what the terminal shows."""

from __future__ import annotations

import io
import re

from rich.console import Console

from kdist.cli import progress
from kdist.cli.livetable import progress_table
from kdist.kube.watch.state import JobState

RANKS = 1000


def _state(phase: str = "Pending") -> JobState:
    state = JobState(name="big", namespace="default")
    state.nodes = RANKS
    for rank in range(RANKS):
        r = state.rank(rank)
        r.pod, r.phase = f"big-{rank}-abcde", phase
    return state


def test_plain_lines_of_a_big_job_look_at_its_ranks_a_bounded_number_of_times(monkeypatch):
    looked = []
    real = progress._phase_text
    monkeypatch.setattr(progress, "_phase_text", lambda r, s=None: looked.append(1) or real(r, s))
    state, out = _state(), io.StringIO()
    display = progress.PlainDisplay(out=out, err=io.StringIO())
    for rank in range(RANKS):  # one event per pod, as a gang starts
        state.ranks[rank].phase = "Running"
        display.update(state)
    display.stop()
    assert len(looked) < 100 * RANKS, len(looked)  # every event: RANKS * RANKS
    running = [line for line in out.getvalue().splitlines() if line.endswith(" Running")]
    assert {re.search(r" rank (\d+) pod ", line)[1] for line in running} == {
        str(r) for r in range(RANKS)}


def test_a_small_job_still_gets_a_line_per_event():
    state = JobState(name="small", namespace="default")
    state.nodes = 2
    for rank in range(2):
        r = state.rank(rank)
        r.pod, r.phase = f"small-{rank}-abcde", "Pending"
    out = io.StringIO()
    display = progress.PlainDisplay(out=out, err=io.StringIO())
    display.update(state)
    state.ranks[1].phase = "Running"
    display.update(state)  # at once, no catching up needed
    assert out.getvalue().splitlines()[-1].endswith("rank 1 pod small-1-abcde Running")


def test_the_live_table_holds_the_telling_ranks_and_counts_the_rest():
    state = _state("Running")
    state.ranks[500].phase, state.ranks[500].exit_code = "Failed", 1
    console = Console(file=io.StringIO(), width=120)
    console.print(progress_table(state, "t", max_rows=10))
    text = console.file.getvalue()
    rows = [line for line in text.splitlines() if "-abcde" in line]
    assert len(rows) == 9 and "big-500-abcde" in text, text
    assert "991 more ranks: 991 Running" in text, text
