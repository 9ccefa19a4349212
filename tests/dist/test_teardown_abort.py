"""A worker that aborts at interpreter exit, after its script ended (torch's C++ teardown,
seen once in 9 runs of a script that destroys its own group): said in one line, counted
as succeeded, no restart spent. An abort after a failed script stays that failure's.

The stand-in for torch's teardown: an object of `__main__` whose `__del__` aborts, which
runs when the interpreter clears its modules, after every atexit handler.
"""

from __future__ import annotations

import textwrap

import pytest
from disttools import run_job

SCRIPT = textwrap.dedent("""
    import os, sys
    class Teardown:
        def __del__(self):
            os.abort()
    keep = Teardown()
    print("rank", os.environ["RANK"], "trained", flush=True)
    {end}
""")


@pytest.mark.timeout(120)
def test_an_abort_after_the_script_ended_is_said_and_counted_as_succeeded():
    run = run_job(["--", "python", "-c", SCRIPT.format(end="")], procs=2,
                  KDIST_MAX_RESTARTS="1")
    assert run.code == 0, run.text
    said = [line for line in run.lines if "at interpreter exit, after its script ended" in line]
    assert len(said) == 2, run.text
    assert "was killed by SIGABRT" in said[0] and "no restart spent" in said[0], said
    assert sum(line.endswith(" trained") for line in run.lines) == 2, run.text  # once each


@pytest.mark.timeout(120)
@pytest.mark.parametrize("end", ["sys.exit(3)", "raise ValueError('boom')"])
def test_an_abort_after_a_failed_script_is_still_a_failure(end):
    run = run_job(["--", "python", "-c", SCRIPT.format(end=end)], procs=1)
    assert run.code == 134, run.text
    assert "after its script ended" not in run.text, run.text
