"""A `kdist submit` watch survives the API server going away under it: the
kube-apiserver process is killed mid-run and restarted by the harness; the
watch reconnects, resumes, and still ends with the job's true exit code."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .conftest_cli import job_file_fixture, kdist_fixture, kdist_popen_fixture  # noqa: F401
from .test_cli_cluster import _wait_for_line

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.exclusive  # every other test's watches would see the restart too


def _apiserver_pid_file() -> Path:
    state = Path(os.environ.get("KUBECONFIG", "")).resolve().parent
    pid_file = state / "run" / "kube-apiserver.pid"
    if not pid_file.is_file():
        pytest.skip("needs the tests/cluster harness (it restarts the API server)")
    return pid_file


@pytest.mark.parametrize(("fail_code", "want_rc"), [(None, 0), ("3", 1)])
def test_watch_survives_an_apiserver_restart(fail_code, want_rc, kdist_popen, job_file):
    pid_file = _apiserver_pid_file()
    paced = {"PACE": "0.5"}
    if fail_code:
        paced |= {"FAIL_RANK": "1", "FAIL_AT": "24", "FAIL_CODE": fail_code}
    path = job_file("survivor", args=["--max-steps", "30"], paced=paced)
    proc = kdist_popen("submit", path, "--timeout", "240")
    _wait_for_line(proc, "step ")  # watching, and the job is training
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    time.sleep(2)  # let the watch see its connection drop
    up = subprocess.run(["bash", "tests/cluster/up.sh"], cwd=REPO, capture_output=True,
                        text=True, timeout=180)
    assert up.returncode == 0, up.stdout + up.stderr
    rc = proc.wait(240)
    out, err = proc.stdout.read(), proc.stderr.read()
    assert rc == want_rc, out + err
    if want_rc == 0:
        assert "Succeeded" in out or "succeeded" in out, out
    else:
        assert "rank 1" in err and "exited with code 3" in err, err
