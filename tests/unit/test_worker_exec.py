"""What every worker gets before its script starts: kdist.runtime.worker_exec and the sitehook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from kdist.runtime import worker_exec

ROOT = Path(__file__).resolve().parents[2]


def test_restart_variables_and_unbuffered_output():
    env = {"KDIST_RESTART_COUNT": "2", "KDIST_MAX_RESTARTS": "3", "PYTHONPATH": "/app",
           "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
           "KDIST_OUTPUT_PIPES": "/tmp/p", "LOCAL_RANK": "1"}
    pipe = worker_exec.prepare(env)
    assert pipe == "/tmp/p/1"
    assert env["TORCHELASTIC_RESTART_COUNT"] == "2"  # not the agent's own 0
    assert env["TORCHELASTIC_MAX_RESTARTS"] == "3"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["PYTHONPATH"] == os.pathsep.join([worker_exec.SITEHOOK, "/app"])
    assert "KDIST_OUTPUT_PIPES" not in env  # the script's own children do not inherit it


def test_a_script_without_kdist_variables_still_starts():
    env: dict[str, str] = {"PYTHONUNBUFFERED": ""}
    assert worker_exec.prepare(env) is None
    assert env["TORCHELASTIC_RESTART_COUNT"] == "0"
    assert env["PYTHONUNBUFFERED"] == ""  # the image's choice is kept


PROBE = textwrap.dedent("""
    import json, os, sys
    import torch.distributed.distributed_c10d as c10d
    print(json.dumps({"restart": os.environ["TORCHELASTIC_RESTART_COUNT"],
                      "gloo": c10d._get_default_timeout("gloo").total_seconds(),
                      "nccl": c10d._get_default_timeout("nccl").total_seconds()}))
    print("to stderr", file=sys.stderr)
""")


def run_worker(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    pipes = tmp_path / "pipes"
    pipes.mkdir()
    os.mkfifo(pipes / "0")
    fd = os.open(pipes / "0", os.O_RDWR | os.O_NONBLOCK)  # as kdist.runtime.output does
    try:
        base = {k: v for k, v in os.environ.items() if not k.startswith("KDIST_")}
        proc = subprocess.run(
            [sys.executable, "-m", "kdist.runtime.worker_exec", sys.executable, "-c", PROBE],
            env={**base, "PYTHONPATH": str(ROOT), "LOCAL_RANK": "0",
                 "KDIST_OUTPUT_PIPES": str(pipes), "KDIST_RESTART_COUNT": "1", **env},
            capture_output=True, text=True, timeout=120)
        proc.stdout = os.read(fd, 65536).decode()  # what the launcher would read
    finally:
        os.close(fd)
    return proc


def test_the_collective_timeout_is_torchs_default_and_both_streams_share_the_pipe(tmp_path):
    proc = run_worker(tmp_path, KDIST_PG_TIMEOUT="15")
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    assert json.loads(first) == {"restart": "1", "gloo": 15.0, "nccl": 15.0}
    assert second == "to stderr"  # in the order written, in the same pipe
    assert proc.stderr == ""


def test_without_a_timeout_torchs_own_defaults_stay(tmp_path):
    proc = run_worker(tmp_path)
    assert json.loads(proc.stdout.splitlines()[0])["gloo"] == 1800.0, proc.stderr


def test_the_images_own_sitecustomize_still_runs(tmp_path):
    image_site = tmp_path / "image-site"
    image_site.mkdir()
    (image_site / "sitecustomize.py").write_text(
        "import os\nos.environ['TORCHELASTIC_RESTART_COUNT'] += '-image'\n")
    proc = run_worker(tmp_path, KDIST_PG_TIMEOUT="15",
                      PYTHONPATH=os.pathsep.join([str(ROOT), str(image_site)]))
    probe = json.loads(proc.stdout.splitlines()[0])
    assert probe == {"restart": "1-image", "gloo": 15.0, "nccl": 15.0}, proc.stderr


def test_a_command_that_does_not_exist_exits_127(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "kdist.runtime.worker_exec", str(tmp_path / "nope")],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=60)
    assert proc.returncode == 127
    assert "kdist: cannot run" in proc.stderr
