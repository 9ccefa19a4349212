"""Zero-loss preemption with real launchers: a SIGTERM to one node stops every rank at one step.

A pod that is evicted or drained gets SIGTERM; here that is node 1's launcher. Every rank
must stop after the same step, the workload must save that step, and the gang restart
must resume from it: 0 steps lost.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from disttools import free_port

HERE = os.path.dirname(__file__)


def launcher_of_node(root: int, node: int, timeout_s: float = 60.0) -> int:
    """The pid of node `node`'s `kdist.launch` below `root` (found as an operator would).

    The launcher is undumpable (docs/security.md), so a user other than root may not read
    its environ: it is then found as the nearest `kdist.launch` above one of its workers,
    whose environ carries the same node rank."""
    import time

    def read(pid: str, what: str) -> list[bytes]:
        with open(f"/proc/{pid}/{what}", "rb") as f:
            return f.read().split(b"\0")

    def parent(pid: str) -> str:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[1].decode()

    marks = {f"KDIST_NODE_RANK={node}".encode(), f"KDIST_TEST_ROOT={root}".encode()}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if not marks <= set(read(pid, "environ")):
                    continue
                while pid not in ("0", "1"):
                    if b"kdist.launch" in read(pid, "cmdline"):
                        return int(pid)
                    pid = parent(pid)
            except (OSError, IndexError):
                continue
        time.sleep(0.1)
    raise AssertionError(f"no launcher of node {node}")


def start(argv: list[str], restarts: int, ckpt: str) -> subprocess.Popen[str]:
    """`run_nodes` of 2 nodes in a child process (as `kdist run --local` runs them)."""
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {HERE!r})
        from disttools import LAUNCH, node_env
        from kdist.local import local_env, run_nodes
        extra = dict(KDIST_CHECKPOINT_DIR={ckpt!r}, KDIST_TEST_ROOT=str(os.getpid()))
        envs = [local_env(node_env(2, 1, i, {free_port()}, **extra)) for i in range(2)]
        sys.exit(run_nodes([*LAUNCH, *{argv!r}], envs, max_restarts={restarts}))
    """)
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def events(lines: list[str], kind: str) -> list[dict]:
    found = []
    for line in lines:
        body = line.split("] ", 1)[-1]
        if body.startswith('{"event": '):
            event = json.loads(body)
            if event["event"] == kind:
                found.append(event)
    return found


def sigterm_node_1_after_first_step(proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if '"event": "step"' in line:
            os.kill(launcher_of_node(proc.pid, 1), signal.SIGTERM)
            break
    lines += proc.communicate(timeout=240)[0].splitlines()
    return lines


@pytest.mark.timeout(300)
def test_an_evicted_node_loses_no_step(tmp_path):
    """Checkpoints only every 1000 steps: without preemption a restart would start over."""
    from disttools import TINY

    argv = ["--module", "kdist.workloads.ddp", "--", *TINY, "--max-steps", "80",
            "--log-every", "5", "--checkpoint-every", "1000", "--batch-size", "16",
            "--step-delay", "0.05"]
    proc = start(argv, restarts=1, ckpt=str(tmp_path))
    lines = sigterm_node_1_after_first_step(proc)
    text = "\n".join(lines)
    assert proc.returncode == 0, text
    stopped = events(lines, "preempted")
    assert sorted(e["rank"] for e in stopped) == [0, 1], text
    step = stopped[0]["step"]
    assert all(e["step"] == step for e in stopped), stopped  # every rank, the same step
    assert 5 <= step < 80
    resumed = events(lines, "resume")
    assert sorted(e["rank"] for e in resumed) == [0, 1], text
    assert all(e["step"] == step for e in resumed), (step, resumed)  # 0 steps lost
    assert "restarting every node (restart 1 of 1)" in text
    assert "exited with code 143" in text  # node 0's rank stopped as if SIGTERMed too
    assert [e["step"] for e in events(lines, "done")] == [80, 80]


USER_SCRIPT = textwrap.dedent("""
    import sys, time
    import torch, torch.distributed as dist
    import kdist
    dist.init_process_group("gloo")
    for step in range(1, 100000):
        t = torch.ones(1)
        dist.all_reduce(t)
        if step == 3:
            print("step 3", flush=True)
        time.sleep(0.02)
        if kdist.preemption_requested():
            print(f"rank {dist.get_rank()} stops after step {step}", flush=True)
            sys.exit(kdist.PREEMPTED)
""")


@pytest.mark.timeout(240)
def test_a_plain_torch_script_stops_every_rank_at_one_step_with_the_helper(tmp_path):
    proc = start(["--", "python", "-c", USER_SCRIPT], restarts=0, ckpt=str(tmp_path))
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.endswith("step 3\n"):
            os.kill(launcher_of_node(proc.pid, 1), signal.SIGTERM)
            break
    lines += proc.communicate(timeout=180)[0].splitlines()
    text = "\n".join(lines)
    assert proc.returncode == 143, text
    stops = sorted(line.split("] ", 1)[1] for line in lines if " stops after step " in line)
    assert len(stops) == 2, text
    assert stops[0].rsplit(" ", 1)[1] == stops[1].rsplit(" ", 1)[1], stops  # the same step


VOTE = textwrap.dedent("""
    import os, signal
    import torch.distributed as dist
    from kdist.runtime.preemption import StopVote
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    vote = StopVote()
    answers = [vote.poll(), vote.poll()]
    os.kill(os.getpid(), signal.SIGTERM)  # a request now, no longer the end of the process
    answers += [vote.poll(), vote.poll()]
    vote.close()
    print(answers, flush=True)
    dist.destroy_process_group()  # gloo's threads outliving the interpreter abort it (-6)
""")


@pytest.mark.timeout(60)
def test_the_step_loops_vote_is_read_one_step_after_it_started():
    out = subprocess.run([sys.executable, "-c", VOTE], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    # The vote of the step the SIGTERM came in is read after the next step: no wait on it.
    assert out.stdout.strip() == "[False, False, False, True]"
