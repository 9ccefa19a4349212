"""A rank's exception names the user's own file and line at the end of the run (#39):
`kdist run --local` of a 2-node job whose script divides by zero on rank 1 ends with
`... rank 1 exited with code 1: ZeroDivisionError: division by zero (train.py:LINE)`,
the innermost frame in the user's code, not torch's, not kdist's, not the stdlib's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from disttools import free_port

ROOT = Path(__file__).resolve().parents[2]
# Rank 1 fails two calls deep in the user's code, through the standard library (the
# innermost frame is functools', not the user's: the user's is the one named).
TRAIN = textwrap.dedent("""\
    import functools, os
    import helper

    def step(x):
        return functools.reduce(lambda a, b: a / b, [x, helper.divisor()])

    if int(os.environ["RANK"]) == 1:
        step(1.0)
    print("rank", os.environ["RANK"], "done", flush=True)
""")
HELPER = "def divisor():\n    return 0\n"
JOB = """\
apiVersion: kdist/v1alpha1
kind: TrainingJob
metadata: {{name: fails}}
spec:
  image: kdist-train:test
  nodes: 2
  workdir: src
  workload: {{command: [python, train.py]}}
  distributed: {{backend: gloo, port: {port}}}
  resources: {{cpu: "1", memory: 1Gi}}
"""


@pytest.mark.timeout(120)
def test_the_last_line_names_the_failing_ranks_exception_and_the_users_line(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(TRAIN)
    (tmp_path / "src" / "helper.py").write_text(HELPER)
    (tmp_path / "job.yaml").write_text(JOB.format(port=free_port()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-m", "kdist", "run", "--local", "job.yaml"],
                          cwd=tmp_path, env=env, text=True, capture_output=True, timeout=100)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("local run fails failed (exit code 1) after "), proc.stderr
    # The lambda on line 5 is where the user's code divided (reduce is the stdlib's).
    assert last.endswith(": rank 1 exited with code 1: ZeroDivisionError: float division by "
                         "zero (train.py:5)"), last
