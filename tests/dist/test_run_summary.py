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
