"""A node's launcher SIGKILLed, twice, in a local run whose launchers restart their workers
in process: the other node's launcher restarts its workers (their peer is gone), then the
runner restarts every node. Each fault is one restart of the ledger, in time order (was
"4 restart(s) of 2 used")."""

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
metadata: {{name: lost}}
spec:
  image: kdist-train:test
  nodes: 2
  procsPerNode: 1
  workload: {{module: kdist.workloads.ddp, args: {args}}}
  env: {{OMP_NUM_THREADS: "1"}}
  distributed: {{backend: gloo, port: {port}, maxRestarts: 2}}
  resources: {{cpu: "1", memory: 1Gi}}
  checkpoint: {{path: /checkpoints, volume: {{emptyDir: {{}}}}}}
"""


@pytest.mark.timeout(300)
def test_each_lost_node_is_one_restart_in_time_order(tmp_path):
    path = tmp_path / "job.yaml"
    args = [*TINY, "--max-steps", "60", "--log-every", "1", "--checkpoint-every", "5",
            "--step-delay", "0.1"]
    path.write_text(JOB.format(args=json.dumps(args), port=free_port()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen([sys.executable, "-m", "kdist", "run", "--local", str(path)],
                            cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    lines, kills, steps = [], 0, 0
    deadline = time.monotonic() + 240
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        steps += '"event": "step"' in line and line.startswith("[rank 1] ")
        if kills < 2 and steps >= 3 and time.monotonic() < deadline:
            os.kill(node_1_launcher(proc.pid), signal.SIGKILL)
            kills, steps = kills + 1, 0
    proc.wait(timeout=60)
    text = "\n".join(lines)
    assert kills == 2 and proc.returncode == 0, text
    restarts = [line for line in lines if line.startswith("restart ")]
    assert [r.split()[1] for r in restarts] == ["1", "2"], text
    times = [r.split()[3].rstrip(":") for r in restarts]
    assert times == sorted(times), restarts
    assert all(": node 1 exited with code 137" in r for r in restarts), restarts
    assert ": 2 restart(s) of 2 used, " in text, text


def node_1_launcher(root: int) -> int:
    """Node 1's `kdist.launch` below `root` (the CLI's runner)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if b"kdist.launch" in cmd and b"KDIST_NODE_RANK=1" in environ and ppid == root:
            return int(pid)
    raise AssertionError("no launcher of node 1")
