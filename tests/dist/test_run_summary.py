"""`kdist run --local` as a user runs it, piped: it ends with one summary line, and Ctrl-C is
"interrupted", exit 130, never "failed"."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from disttools import TINY, free_port

ROOT = Path(__file__).resolve().parents[2]
JOB = """\
apiVersion: kdist/v1alpha1
kind: TrainingJob
metadata: {{name: summed}}
spec:
  image: kdist-train:test
  nodes: 1
  workload: {{module: kdist.workloads.ddp, args: {args}}}
  distributed: {{backend: gloo, port: {port}}}
  resources: {{cpu: "1", memory: 1Gi}}
"""


def kdist_run(tmp_path: Path, args: list[str]) -> subprocess.Popen[str]:
    path = tmp_path / "job.yaml"
    path.write_text(JOB.format(args=json.dumps([*TINY, *args]), port=free_port()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.Popen([sys.executable, "-m", "kdist", "run", "--local", str(path)],
                            cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


@pytest.mark.timeout(120)
def test_a_piped_run_ends_with_its_summary(tmp_path):
    proc = kdist_run(tmp_path, ["--max-steps", "4", "--log-every", "2"])
    out, err = proc.communicate(timeout=100)
    assert proc.returncode == 0, err
    last = out.splitlines()[-1]
    assert last.startswith("local run summed succeeded in "), out
    assert last.split(": ", 1)[1].startswith("4 steps, final loss "), last


@pytest.mark.timeout(120)
def test_ctrl_c_is_interrupted_not_failed(tmp_path):
    proc = kdist_run(tmp_path, ["--max-steps", "100000", "--log-every", "1",
                                "--step-delay", "0.2"])
    assert proc.stdout is not None
    deadline = time.monotonic() + 90
    for line in proc.stdout:  # the first step line: the nodes are training
        if '"event": "step"' in line or time.monotonic() > deadline:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("local run summed interrupted (Ctrl-C) after "), err
    assert ": at step " in last and "failed" not in err, err


RESTARTED = """\
apiVersion: kdist/v1alpha1
kind: TrainingJob
metadata: {{name: restarted}}
spec:
  image: kdist-train:test
  nodes: 2
  procsPerNode: 1
  workload: {{module: kdist.workloads.ddp, args: {args}}}
  env: {{OMP_NUM_THREADS: "1"}}
  distributed: {{backend: gloo, port: {port}, maxRestarts: 1, restartWorkers: {workers}}}
  resources: {{cpu: "1", memory: 1Gi}}
  checkpoint: {{path: /checkpoints, volume: {{emptyDir: {{}}}}}}
"""


@pytest.mark.timeout(240)
@pytest.mark.parametrize("workers", ["true", "false"], ids=["in-process", "nodes-restarted"])
def test_a_run_whose_worker_was_killed_ends_with_its_ledger(tmp_path, workers):
    """By default the launchers restart their workers in process (as in a pod restarting
    in place); with restartWorkers false the runner restarts every node."""
    path = tmp_path / "job.yaml"
    args = [*TINY, "--max-steps", "10", "--log-every", "1", "--checkpoint-every", "4"]
    path.write_text(RESTARTED.format(args=json.dumps(args), port=free_port(), workers=workers))
    env = {**os.environ, "KDIST_FAULT_KILL_AT": "1:6", "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-m", "kdist", "run", "--local", str(path)],
                          cwd=tmp_path, env=env, text=True, capture_output=True, timeout=220)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    *_, restart, goodput, last = proc.stdout.splitlines()
    # rank 1 SIGKILLed after step 6; both nodes resume from rank 0's memory of step 6 (the
    # pods' /dev/shm kept), or from the checkpoint of step 4
    assert restart.startswith("restart 1 at "), proc.stdout
    if workers == "true":
        assert ": worker rank 1 (node 1, local rank 0, pid " in restart, restart
        assert "was killed by SIGKILL (exit 137: killed by SIGKILL (retryable))" in restart
        assert "(restart 1 of 1, in process)" in proc.stderr + proc.stdout
        assert "restarting every node" not in proc.stderr, proc.stderr
    else:
        assert ": node 1 exited with code 137: killed by SIGKILL (retryable); worker rank 1 " \
            "(node 1, local rank 0" in restart, restart
        assert "restarting every node (restart 1 of 1)" in proc.stderr, proc.stderr
    assert restart.endswith(" step(s) lost") and " back " in restart, restart
    assert goodput.startswith("goodput ") and ": 1 restart(s) of 1 used, " in goodput, goodput
    assert last.startswith("local run restarted succeeded in "), last
