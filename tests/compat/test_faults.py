"""Fault drills on the unchanged torchrun-style script: a SIGKILLed worker restarts the gang."""

from __future__ import annotations

import os
import re
import signal

import pytest
import torch
from compattools import KdistRun, find_worker, rank_lines, write_job

from kdist.shared import exitcodes

pytestmark = [pytest.mark.compat, pytest.mark.timeout(150)]

SCRIPT = "ddp_torchrun.py"
# 8 epochs of 32 steps, ~1 s each: long enough to kill rank 1 mid-training.
ARGS = ["8", "1", "--batch_size", "32", "--snapshot_path", "snapshot.pt", "--step_delay", "0.03"]


def test_sigkilled_worker_restarts_the_gang_and_resumes_from_the_snapshot(tmp_path):
    """2 nodes x 1 process, maxRestarts 2: SIGKILL rank 1 (node 1) after the snapshot of
    epoch 1. The survivor's gloo error must not read as a code error: every node restarts,
    the script resumes from its own snapshot and finishes; kdist blames the killed rank."""
    job = write_job(tmp_path, "ddp-torchrun", workload={"args": ARGS},
                    distributed={"maxRestarts": 2})
    with KdistRun(job, tmp_path) as run:
        run.wait_for(r"^\[rank 0\] Epoch 1 \| Training snapshot saved", timeout=90)
        pid = find_worker(run.proc.pid, SCRIPT, rank=1)
        os.kill(pid, signal.SIGKILL)
        code = run.wait(timeout=120)
    assert code == 0, run.text
    assert re.search(rf"worker rank 1 \(node 1, local rank 0, pid {pid}\) was killed by SIGKILL"
                     r"[^;]*; exiting 137", run.text), run.text
    assert re.search(r"restarting this node's workers \(restart 1 of 2, in process\): "
                     rf"worker rank 1 \(node 1, local rank 0, pid {pid}\) was killed by SIGKILL",
                     run.text), run.text
    for rank in (0, 1):
        resumed = [line for line in rank_lines(run, rank) if line.startswith("Resuming")]
        assert len(resumed) == 1, run.text
        assert int(resumed[0].rsplit(" ", 1)[1]) >= 2, resumed  # at least epochs 0-1 kept
        assert f"[CPU{rank}] Epoch 7 | Batchsize: 32 | Steps: 32" in rank_lines(run, rank)
    assert torch.load(tmp_path / "snapshot.pt", weights_only=True)["EPOCHS_RUN"] == 8


@pytest.mark.parametrize(("killed", "rounds"), [(1, 3), (0, 1)])
def test_blame_names_the_sigkilled_rank_not_the_one_the_agent_stopped(tmp_path, killed, rounds):
    """1 node x 2 processes: when one worker is SIGKILLed, torch's agent SIGTERMs the other,
    usually within the same second; kdist must report the killed one (137), every time.
    The race is lost only some of the time, so rank 1 is killed in each of 3 attempts."""
    job = write_job(tmp_path, "ddp-torchrun", nodes=1, procsPerNode=2,
                    workload={"args": ["50", *ARGS[1:]]},
                    distributed={"maxRestarts": rounds - 1})
    pids = []
    with KdistRun(job, tmp_path) as run:
        for _ in range(rounds):
            start = len(run.lines)
            run.wait_for(rf"^\[rank {killed}\] \[CPU{killed}\] Epoch \d+ ", timeout=90,
                         start=start)
            pids.append(find_worker(run.proc.pid, SCRIPT, rank=killed))
            os.kill(pids[-1], signal.SIGKILL)
            run.wait_for(r"kdist\.launch: worker rank \d+ ", timeout=60, start=start)
        code = run.wait(timeout=60)
    blamed = [line.text for line in run.matching(r"kdist\.launch: worker rank \d+ ")]
    assert len(blamed) == rounds, run.text
    for pid, text in zip(pids, blamed, strict=True):
        assert re.search(rf"worker rank {killed} \(node 0, local rank {killed}, pid {pid}\) "
                         r"was killed by SIGKILL[^;]*; exiting 137", text), "\n".join(blamed)
    # restarts in process, then none left: the launcher ends the job naming the kill
    # kdist run's own code for a failed job (1); the nodes' code is in its last line
    assert code == 1, run.text
    spent = exitcodes.RESTARTS_SPENT if rounds > 1 else 137
    assert run.matching(rf"^local run .* failed \(exit code {spent}\) after "), run.text
    if rounds > 1:
        assert run.matching(rf"no restart left \({rounds - 1} of maxRestarts={rounds - 1} "
                            r"used\).*killed by SIGKILL"), run.text
