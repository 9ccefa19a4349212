"""SIGTERM to `kdist run --local` (a pod's SIGTERM, locally) reaches every worker as SIGTERM."""

from __future__ import annotations

import os
import signal

import pytest
from compattools import KdistRun, write_job

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


def test_sigterm_reaches_workers_as_sigterm_and_the_run_exits_143(tmp_path):
    with KdistRun(write_job(tmp_path, "signals"), tmp_path) as run:
        run.wait_for(r"^\[rank 0\] rank 0 ready$", timeout=90)
        run.wait_for(r"^\[rank 1\] rank 1 ready$", timeout=90)
        os.kill(run.proc.pid, signal.SIGTERM)
        code = run.wait(timeout=60)
    for rank in (0, 1):
        assert run.matching(rf"^\[rank {rank}\] rank {rank} received SIGTERM$"), run.text
        assert not run.matching(rf"rank {rank} received SIGINT"), run.text
    assert code == 143, run.text
