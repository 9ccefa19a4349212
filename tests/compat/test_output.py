"""A script's output reaches the user as it is printed, and progress bars stay readable."""

from __future__ import annotations

import os
import re
import sys

import pytest
from compattools import PROGRAMS, KdistRun, free_port, rank_lines, run_kdist, write_job

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


def assert_ticks_arrive_live(run: KdistRun, ranks: list[int]) -> None:
    """unflushed.py prints a tick a second: live, they arrive ~3 s apart; buffered, together."""
    for rank in ranks:
        ticks = run.matching(rf"rank {rank} tick \d$")
        assert [t.text[-1] for t in ticks] == ["0", "1", "2", "3"], run.text
        spread = ticks[-1].t - ticks[0].t
        assert spread > 2.0, (
            f"rank {rank}'s 4 lines, printed over 3 s, arrived within {spread:.1f}s: "
            f"buffered until exit\n{run.text}")


def test_unflushed_prints_arrive_live_in_a_local_run(tmp_path):
    code, run = run_kdist(write_job(tmp_path, "output"), tmp_path, timeout=90)
    assert code == 0, run.text
    assert_ticks_arrive_live(run, [0, 1])


def test_unflushed_prints_arrive_live_from_a_pods_launcher(tmp_path):
    """The pod's own command, `python -m kdist.launch -- python SCRIPT`, in an image without
    PYTHONUNBUFFERED: torchrun runs python workers with -u, so must kdist."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONUNBUFFERED", "KDIST_LOG_PREFIX")}
    env.update({
        "KDIST_JOB_NAME": "compat-output", "KDIST_NNODES": "1", "KDIST_NPROC_PER_NODE": "1",
        "KDIST_NODE_RANK": "0", "KDIST_MASTER_ADDR": "127.0.0.1",
        "KDIST_MASTER_PORT": str(free_port()), "KDIST_DIST_BACKEND": "gloo",
        "OMP_NUM_THREADS": "1",
    })
    argv = [sys.executable, "-m", "kdist.launch", "--", "python", str(PROGRAMS / "unflushed.py")]
    with KdistRun(tmp_path, tmp_path, env=env, argv=argv) as run:
        code = run.wait(timeout=90)
    assert code == 0, run.text
    assert_ticks_arrive_live(run, [0])


def test_tqdm_progress_bars_are_collapsed(tmp_path):
    """tqdm redraws its bar with "\\r": the user should see a few readable lines per rank,
    each with one prefix, the last one showing the bar's final state."""
    job = write_job(tmp_path, "output",
                    workload={"command": ["python", "tests/compat/programs/progress_bar.py"]})
    code, run = run_kdist(job, tmp_path, timeout=90)
    assert code == 0, run.text
    problems = []
    for line in run.lines:
        if "\r" in line.text or len(re.findall(r"\[rank \d+\] ", line.text)) > 1:
            problems.append(f"mangled line: {line.text!r}")
    for rank in (0, 1):
        lines = rank_lines(run, rank)
        bars = [i for i, text in enumerate(lines) if f"rank {rank} bar:" in text]
        if len(bars) > 5:
            problems.append(f"rank {rank}: {len(bars)} bar lines for one bar of 40 updates")
        if not any("40/40" in lines[i] for i in bars):
            problems.append(f"rank {rank}: the bar's final state (40/40) is not shown")
    assert not problems, "\n".join(problems) + "\n" + run.text


def test_stdout_and_stderr_keep_their_order(tmp_path):
    """A script that prints and logs (stderr) in turn: each rank's lines come in the order
    written, as they do under plain torchrun, which leaves both streams to the terminal."""
    job = write_job(tmp_path, "output",
                    workload={"command": ["python", "tests/compat/programs/interleave.py"]})
    code, run = run_kdist(job, tmp_path, timeout=90)
    assert code == 0, run.text
    for rank in (0, 1):
        got = [line for line in rank_lines(run, rank) if line.startswith(f"rank {rank} line")]
        assert got == [f"rank {rank} line {i}" for i in range(10)], run.text
