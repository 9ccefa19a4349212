"""The live table and progress lines: a row is a pod; "rank" only where a pod runs one."""

from __future__ import annotations

import io

from rich.console import Console

from kdist.cli.progress import PlainDisplay, progress_table
from kdist.kube.watch.state import JobState


def state(ppn: int | None) -> JobState:
    s = JobState("demo", namespace="ns", nodes=2)
    s.procs_per_node = ppn
    for node in (0, 1):
        r = s.rank(node)
        r.pod, r.phase = f"demo-{node}-x", "Running"
    return s


def drawn(s: JobState) -> list[list[str]]:
    console = Console(file=io.StringIO(), width=200)
    console.print(progress_table(s, title="t"))
    return [line.split() for line in console.file.getvalue().splitlines()[1:]]


def test_the_live_table_names_nodes_and_their_ranks():
    header, *rows = drawn(state(2))
    assert header[:3] == ["node", "ranks", "pod"]
    assert [row[:2] for row in rows] == [["0", "0-1"], ["1", "2-3"]]
    assert drawn(state(1))[0][:2] == ["rank", "pod"]
    assert drawn(state(None))[0][:2] == ["node", "pod"]  # procsPerNode auto


def test_progress_lines_and_log_prefixes_say_node():
    out = io.StringIO()
    display = PlainDisplay(out=out, echo_logs=True)
    display.start(state(2))
    display.update(state(2))
    display.log(1, "hello")
    lines = out.getvalue().splitlines()
    assert any(" node 1 (ranks 2-3) pod demo-1-x Running" in line for line in lines), lines
    assert lines[-1] == "[node 1] hello"
