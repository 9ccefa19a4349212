"""Warm workers (``KDIST_WARM_WORKERS=1``, spec.distributed.warmWorkers): each node's
workers come from standbys that imported torch while the launchers met, and after a
restart in process from the standbys started behind them; a standby that died or hangs
means a cold start of its rank, and the job goes on.

Real launchers and gloo workers on this machine, as `kdist run --local` runs them, each
node with a directory of its own standing in for its pod's emptyDir (restarts in place).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from disttools import free_port, node_env, run_envs

# At restart 0, rank 1 waits for the standby started behind it (its node's other
# `kdist-standby`, ready), does FAULT to it, then SIGKILLs itself at step 3.
SCRIPT = textwrap.dedent("""
    import os, signal, time
    import torch, torch.distributed as dist
    from kdist.workloads.common import init_distributed

    def standby():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for p in filter(str.isdigit, os.listdir("/proc")):
                try:
                    stat = open(f"/proc/{p}/stat").read()
                    comm = open(f"/proc/{p}/comm").read().strip()
                except OSError:
                    continue
                if comm == "kdist-standby" and \\
                        int(stat.rsplit(")", 1)[1].split()[1]) == os.getppid():
                    return int(p)
            time.sleep(0.1)
        raise SystemExit("no standby behind this worker")

    d = init_distributed()
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    print("restart", restart, "rank", d.rank, "pid", os.getpid(), flush=True)
    t = torch.ones(4)
    for step in range(8):
        if d.rank == 1 and step == 3 and restart == 0:
            pid = standby()
            fault = os.environ["FAULT"]
            if fault == "died":
                os.kill(pid, signal.SIGKILL)
                while True:  # dead: a zombie until its launcher reaps it, or gone
                    try:
                        if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
                            break
                    except OSError:
                        break
                    time.sleep(0.05)
            elif fault == "hung":
                os.kill(pid, signal.SIGSTOP)
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(t)
        time.sleep(0.01)
    print("done", restart, flush=True)
""")
ROOT = Path(__file__).resolve().parents[2]
WARM = "1 of 1 worker(s) of node {node} started from their standbys (warm), 0 cold"
COLD = "0 of 1 worker(s) of node {node} started from their standbys (warm), 1 cold"


def _run(tmp_path: Path, fault: str):
    port = free_port()
    envs = []
    for node in range(2):
        directory = tmp_path / f"pod-{node}"
        directory.mkdir()
        envs.append(node_env(2, 1, node, port, KDIST_RESTART_DIR=str(directory),
                             KDIST_MAX_RESTARTS="1", KDIST_WARM_WORKERS="1", FAULT=fault))
    return run_envs(["--", "python", "-c", SCRIPT], envs)


def _said(run, node: int, text: str) -> int:
    return sum(line == f"[node {node}] kdist.launch: {text}" for line in run.lines)


def _restarted_once(run) -> None:
    assert run.code == 0, run.text
    assert sum("(restart 1 of 1, in process)" in line for line in run.lines) == 2, run.text
    assert sum(line.endswith("done 1") for line in run.lines) == 2, run.text
    for node in (0, 1):  # the first start: every node's worker from its standby
        assert _said(run, node, WARM.format(node=node)) >= 1, run.text


@pytest.mark.timeout(240)
def test_a_restart_in_process_runs_the_new_workers_in_standbys(tmp_path):
    run = _run(tmp_path, "none")
    _restarted_once(run)
    for node in (0, 1):  # both starts warm on both nodes
        assert _said(run, node, WARM.format(node=node)) == 2, run.text
    assert not [line for line in run.lines if "the standby of" in line], run.text


@pytest.mark.timeout(240)
def test_a_standby_that_died_means_a_cold_start_of_its_rank(tmp_path):
    run = _run(tmp_path, "died")
    _restarted_once(run)
    assert _said(run, 1, COLD.format(node=1)) == 1, run.text
    assert _said(run, 0, WARM.format(node=0)) == 2, run.text  # node 0's standby was fine
    died = [line for line in run.lines if "the standby of worker rank 1" in line]
    assert len(died) == 1 and "had died (killed by SIGKILL)" in died[0], run.text
    assert died[0].endswith("starting the worker cold"), run.text


@pytest.mark.timeout(240)
def test_a_standby_that_hangs_is_killed_and_its_rank_starts_cold(tmp_path):
    run = _run(tmp_path, "hung")
    _restarted_once(run)
    assert _said(run, 1, COLD.format(node=1)) == 1, run.text
    hung = [line for line in run.lines if "the standby of worker rank 1" in line]
    assert len(hung) == 1 and "did not answer within 5s after its order" in hung[0], run.text


def _standbys_of(job: str) -> list[int]:
    """Every process named kdist-standby that a launcher of job ``job`` started."""
    found = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = Path(f"/proc/{p}/comm").read_text().strip()
            environ = Path(f"/proc/{p}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if comm == "kdist-standby" and f"KDIST_JOB_NAME={job}".encode() in environ:
            found.append(int(p))
    return found


@pytest.mark.timeout(240)
def test_a_sigterm_stops_the_warm_worker_and_leaves_no_standby(tmp_path):
    """SIGTERM to a warm node's launcher (a deleted pod): the worker gets it and exits as
    it chooses, the launcher exits 143, and the standby waiting behind the worker is gone."""
    job = f"warm-term-{os.getpid()}"
    script = ("import signal, sys, time\n"
              "signal.signal(signal.SIGTERM, lambda s, f: sys.exit(7))\n"
              "print('up', flush=True)\n"
              "while True: time.sleep(0.05)\n")
    env = {**os.environ, **node_env(1, 1, 0, free_port(), KDIST_JOB_NAME=job,
                                     KDIST_WARM_WORKERS="1", KDIST_MAX_RESTARTS="1",
                                     KDIST_RESTART_DIR=str(tmp_path))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen([sys.executable, "-m", "kdist.launch", "--", "python", "-c",
                             script], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # the worker is up, and its standby's successor is ready
        lines.append(line)
        if line.strip() == "up":
            break
    deadline = time.monotonic() + 150
    while not _standbys_of(job) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _standbys_of(job), "".join(lines)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    text = "".join(lines) + out
    assert proc.returncode == 143, text
    assert "exited with code 7" in text or "stopped by SIGTERM; exiting 143" in text, text
    assert _standbys_of(job) == [], text


# warmStart only (KDIST_WARM_WORKERS=first): a script that imports torch first starts warm (torch in sys.modules at its first
# line), keeps no standby behind it, and its restart in process starts cold.
UNASKED = textwrap.dedent("""
    import sys
    preloaded = "torch" in sys.modules
    import os, signal, time
    import torch, torch.distributed as dist
    from kdist.workloads.common import init_distributed

    def standbys():
        found = 0
        for p in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = open(f"/proc/{p}/stat").read()
                comm = open(f"/proc/{p}/comm").read().strip()
            except OSError:
                continue
            found += comm == "kdist-standby" and \\
                int(stat.rsplit(")", 1)[1].split()[1]) == os.getppid()
        return found

    d = init_distributed()
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    t = torch.ones(4)
    for step in range(6):
        if step == 2:
            print("restart", restart, "preloaded", preloaded, "standbys", standbys(), flush=True)
        if d.rank == 1 and step == 3 and restart == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(t)
        time.sleep(0.01)
    print("done", restart, flush=True)
""")


@pytest.mark.timeout(240)
def test_unasked_the_first_start_is_warm_and_keeps_no_standby(tmp_path):
    port = free_port()
    envs = []
    for node in range(2):
        directory = tmp_path / f"pod-{node}"
        directory.mkdir()
        envs.append(node_env(2, 1, node, port, KDIST_RESTART_DIR=str(directory),
                             KDIST_MAX_RESTARTS="1", KDIST_WARM_WORKERS="first"))
    run = run_envs(["--", "python", "-c", UNASKED], envs)
    assert run.code == 0, run.text
    assert sum(line.endswith("done 1") for line in run.lines) == 2, run.text
    said = sorted(line.split("] ", 1)[1] for line in run.lines if "preloaded" in line)
    assert said == ["restart 0 preloaded True standbys 0"] * 2 + \
        ["restart 1 preloaded False standbys 0"] * 2, run.text
    assert not [line for line in run.lines if "standby" in line and "kdist.launch" in line]
