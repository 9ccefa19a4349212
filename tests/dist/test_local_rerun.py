"""`kdist run --local` as a user runs it, with kdist's launchers and DDP workload: a rerun of a
finished job says it resumed from the earlier run's checkpoint, `--fresh` starts over; GNU
`timeout`'s two SIGTERMs wait for the zero-loss save and leave nothing in TMPDIR."""

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
metadata: {{name: again}}
spec:
  image: kdist-train:test
  nodes: 2
  procsPerNode: 1
  workload: {{module: kdist.workloads.ddp, args: {args}}}
  env: {{OMP_NUM_THREADS: "1"}}
  distributed: {{backend: gloo, port: {port}}}
  resources: {{cpu: "1", memory: 1Gi}}
  checkpoint: {{path: /checkpoints, volume: {{emptyDir: {{}}}}}}
"""


def kdist_run(tmp_path: Path, args: list[str], *flags: str) -> subprocess.Popen[str]:
    path = tmp_path / "job.yaml"
    path.write_text(JOB.format(args=json.dumps([*TINY, *args]), port=free_port()))
    (tmp := tmp_path / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.Popen([sys.executable, "-m", "kdist", "run", "--local", *flags,
                             str(path)], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.timeout(240)
def test_a_rerun_says_it_resumed_and_fresh_starts_over(tmp_path):
    args = ["--max-steps", "8", "--log-every", "4", "--checkpoint-every", "4"]
    out, err = kdist_run(tmp_path, args).communicate(timeout=100)
    assert "resumed" not in out.splitlines()[-1], out + err
    proc = kdist_run(tmp_path, args)
    out, err = proc.communicate(timeout=100)
    assert proc.returncode == 0, err
    assert "has an earlier run's checkpoints (latest step-8)" in err, err
    assert out.splitlines()[-1].endswith(
        "; resumed from step-8 (.kdist/again/checkpoints; --fresh starts over)"), out
    proc = kdist_run(tmp_path, args, "--fresh")
    out, err = proc.communicate(timeout=100)
    assert proc.returncode == 0, err
    assert "--fresh: removed the earlier checkpoints" in err, err
    last = out.splitlines()[-1]
    assert "resumed" not in last and ": 8 steps, final loss " in last, out


@pytest.mark.timeout(240)
def test_gnu_timeouts_two_sigterms_wait_for_the_save_and_leave_nothing(tmp_path):
    proc = kdist_run(tmp_path, ["--max-steps", "100000", "--log-every", "1",
                                "--checkpoint-every", "100000", "--step-delay", "0.1"])
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if '"event": "step"' in line or time.monotonic() > deadline:
            break
    proc.send_signal(signal.SIGTERM)  # GNU timeout: to kdist...
    proc.send_signal(signal.SIGTERM)  # ...and to its process group
    out, err = proc.communicate(timeout=100)
    assert proc.returncode == 143, err
    assert sum('"event": "preempted"' in line for line in out.splitlines()) == 2, out + err
    saved = tmp_path / ".kdist" / "again" / "checkpoints" / "latest"
    assert saved.read_text().startswith("step-"), err  # the zero-loss save
    assert list((tmp_path / "tmp").glob("kdist-launch-*")) == [], err
