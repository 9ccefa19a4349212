"""Restarts in process: launchers whose pods restart in place (``KDIST_RESTART_DIR``)
restart their own workers across the gang, with no launcher (container) restarted.

Each test runs real launchers and gloo workers on this machine, as `kdist run --local`
does, each node with a directory of its own standing in for its pod's emptyDir.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from disttools import free_port, node_env, run_envs

# Rank 1 is SIGKILLed at step 3 of the restarts listed in KILL_ON; rank 0 then loses its
# peer in the next all_reduce. Every worker says which restart it is.
SCRIPT = textwrap.dedent("""
    import os, signal, time
    import torch, torch.distributed as dist
    from kdist.workloads.common import init_distributed
    d = init_distributed()
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    print("restart", restart, "rank", d.rank, "of", os.environ["KDIST_RESTART_COUNT"], flush=True)
    kill = [int(r) for r in os.environ["KILL_ON"].split(",") if r]
    t = torch.ones(4)
    for step in range(8):
        if d.rank == 1 and step == 3 and restart in kill:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(t)
        time.sleep(0.01)
    print("done", restart, flush=True)
""")


def _run(tmp_path: Path, kill_on: str, max_restarts: int = 2, **extra: str):
    port = free_port()
    envs = []
    for node in range(2):
        directory = tmp_path / f"pod-{node}"
        directory.mkdir()
        envs.append(node_env(2, 1, node, port, KDIST_RESTART_DIR=str(directory),
                             KDIST_MAX_RESTARTS=str(max_restarts), KILL_ON=kill_on, **extra))
    return run_envs(["--", "python", "-c", SCRIPT], envs)


def _launcher_lines(run, marker: str) -> list[str]:
    return [line for line in run.lines if "kdist.launch: " in line and marker in line]


@pytest.mark.timeout(150)
def test_a_killed_worker_is_restarted_by_every_launcher_without_a_new_launcher(tmp_path):
    run = _run(tmp_path, kill_on="0")
    assert run.code == 0, run.text
    said = _launcher_lines(run, "restarting this node's workers (restart 1 of 2, in process)")
    assert len(said) == 2, run.text  # node 0 (lost its peer) and node 1 (its worker killed)
    assert any("[node 1]" in line and "exit 137" in line for line in said), run.text
    assert any("[node 0]" in line and "exit 203" in line for line in said), run.text
    # One launcher per node for the whole run: the runner never restarted a node.
    assert len(_launcher_lines(run, "restart 0 of 2 allowed")) == 2, run.text
    assert not _launcher_lines(run, "restart 1 of 2 allowed"), run.text
    # The second start of the workers is told restart 1, on both env names.
    assert sum("restart 1 rank" in line and line.endswith("of 1") for line in run.lines) == 2
    assert sum(line.endswith("done 1") for line in run.lines) == 2, run.text
    # A later container restart in place would count on from restart 1.
    assert [(tmp_path / f"pod-{n}" / "starts").read_text() for n in range(2)] == ["2", "2"]


@pytest.mark.timeout(200)
def test_past_max_restarts_the_job_fails_with_the_kill_not_a_counter(tmp_path):
    run = _run(tmp_path, kill_on="0,1,2")
    assert run.code == 205, run.text  # RESTARTS_SPENT: the podFailurePolicy fails the job
    assert len(_launcher_lines(run, "(restart 2 of 2, in process)")) == 2, run.text
    spent = _launcher_lines(run, "no restart left (2 of maxRestarts=2 used)")
    assert spent, run.text
    assert any("SIGKILL" in line or "exit 137" in line for line in spent), run.text


@pytest.mark.timeout(150)
def test_restart_workers_0_leaves_the_restart_to_the_container(tmp_path):
    run = _run(tmp_path, kill_on="0", KDIST_RESTART_WORKERS="0")
    assert run.code == 0, run.text
    assert not _launcher_lines(run, "in process"), run.text
    # The runner started new launchers (as the kubelet restarts the containers).
    assert len(_launcher_lines(run, "job t: node")) == 4, run.text
