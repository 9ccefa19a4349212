"""A warm spare takes a frozen node's rank, and the node, thawed, is fenced (issue 54).

Two node ranks and one spare (slot 2), real launchers and gloo workers, restarting in
process as pods restarting in place. Node 1's launcher and workers are stopped with
SIGSTOP (a node frozen or cut off); the survivors find it lost within
``nodeLossSeconds``, the spare claims rank 1, the gang re-forms at generation 1 and
resumes from the newest checkpoint. Then node 1 comes back (SIGCONT): it finds its rank
held by slot 2 and exits 206 (fenced) without touching anything, and the job finishes
with the parameters an uninterrupted run reaches.

``python tests/dist/test_spares.py [RUNS]`` measures "frozen -> first resumed step" with
the spare against the same silence ended by starting the frozen node's process anew (the
replaced pod's path, which a local run cannot make).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from disttools import LAUNCH, TINY, final_state, free_port, node_env, run_job  # noqa: E402
from test_node_loss import freeze, thaw  # noqa: E402
from test_preemption import launcher_of_node  # noqa: E402

NODES, SPARES = 2, 1
LOSS_S = 5
STEPS = 60
ARGS = [*TINY, "--max-steps", str(STEPS), "--log-every", "1", "--checkpoint-every", "5"]
ARGV = ["--module", "kdist.workloads.ddp", "--", *ARGS, "--step-delay", "0.1"]


def node_envs(tmp: Path, spares: int, loss_s: int,
              more: dict[str, str] | None = None) -> list[dict[str, str]]:
    """Each node's environment, as the runner gives it (less its restart variables);
    `more`: variables every node gets besides."""
    from kdist.local import local_env

    extra = dict(KDIST_CHECKPOINT_DIR=str(tmp / "ckpt"), KDIST_TEST_ROOT=str(os.getpid()),
                 KDIST_NODE_LOSS_SECONDS=str(loss_s), KDIST_PG_TIMEOUT="120",
                 KDIST_MAX_RESTARTS="2", KDIST_RDZV_TIMEOUT="180", **(more or {}))
    if spares:
        extra["KDIST_SPARES"] = str(spares)
    port = free_port()
    return [{**local_env(node_env(NODES, 1, i, port, **extra)),
             "KDIST_RESTART_COUNT": "0", "KDIST_RESTART_DIR": str(tmp / f"restarts-{i}")}
            for i in range(NODES + spares)]


def start(tmp: Path, spares: int, loss_s: int = LOSS_S, fail_grace_s: float = 10.0,
          argv: list[str] = ARGV, more: dict[str, str] | None = None,
          ) -> tuple[subprocess.Popen[str], list[dict[str, str]]]:
    """NODES ranks + `spares` spares restarting in process, in a child process that prints
    its ledger as JSON at the end; and the nodes' environments. `argv`: the launcher's;
    `more`: variables every node gets besides."""
    envs = node_envs(tmp, spares, loss_s, more)
    for env in envs:
        Path(env["KDIST_RESTART_DIR"]).mkdir()
    (tmp / "envs.json").write_text(json.dumps(envs))
    script = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        from kdist.local import run_nodes
        from kdist.local.ledger import LocalLedger
        envs = json.loads(Path({str(tmp / "envs.json")!r}).read_text())
        ledger = LocalLedger(max_restarts=2)
        code = run_nodes([*{LAUNCH!r}, *{argv!r}], envs, max_restarts=2, ledger=ledger,
                         restart_dirs=[Path(e["KDIST_RESTART_DIR"]) for e in envs],
                         ranks={NODES} if {spares} else None, fail_grace_s={fail_grace_s})
        print("LEDGER " + json.dumps(ledger.summary(code == 0)), flush=True)
        sys.exit(code)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=envs[0])
    return proc, envs


def is_step(line: str, rank: int) -> bool:
    return line.startswith(f"[rank {rank}] ") and '"event": "step"' in line


def drill(proc: subprocess.Popen[str], *, thaw_after: str,
          on_lost: Callable[[list[int]], None] | None = None,
          node: int = 1) -> tuple[list[str], float | None]:
    """Freeze `node` after a few of node 1's steps; thaw it once a line containing
    `thaw_after` came (`on_lost`: instead, hand its frozen groups to `on_lost` once the
    survivors found it lost, and stop reading at the first resumed step). Returns the
    output read and the seconds from the freeze to the first resumed step."""
    assert proc.stdout is not None
    lines: list[str] = []
    frozen_at = resumed = None
    groups: list[int] = []
    steps = 0
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            if frozen_at is None:
                steps += is_step(line, 1)
                if steps >= 8:  # a checkpoint at step 5 to resume from
                    groups = freeze(launcher_of_node(os.getpid(), node), signal.SIGSTOP)
                    frozen_at = time.monotonic()
                continue
            if resumed is None and '"event": "resume"' in line:
                resumed = time.monotonic() - frozen_at
                if on_lost is not None:
                    return lines, resumed
            if on_lost is not None and groups and "lost (silent for" in line:
                on_lost(groups)
                groups = []
            elif groups and thaw_after in line:
                thaw(groups)
                groups = []
    finally:
        thaw(groups)
    proc.wait(timeout=60)
    return lines, resumed


def ledger_of(lines: list[str]) -> dict:
    (found,) = [json.loads(line[len("LEDGER "):]) for line in lines
                if line.startswith("LEDGER ")]
    return found


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    ckpt = tmp_path_factory.mktemp("uninterrupted")
    run = run_job(["--module", "kdist.workloads.ddp", "--", *ARGS, "--checkpoint-dir",
                   str(ckpt)], nodes=NODES)
    assert run.code == 0, run.text
    return final_state(ckpt)


@pytest.mark.timeout(400)
def test_a_spare_takes_a_frozen_nodes_rank_and_the_node_is_fenced(tmp_path, uninterrupted):
    proc, _ = start(tmp_path, SPARES)
    # Node 1 thaws once the gang trains again on the spare (its first step after the resume).
    lines, resumed = drill(proc, thaw_after='"event": "resume"')
    text = "\n".join(lines)
    assert "[node 2] kdist.launch: spare in slot 2: waiting at" in text, text
    assert "[node 2] kdist.launch: spare in slot 2 takes node rank 1" in text, text
    # the spare waited with its worker's torch imported: its first worker is that standby
    assert "[node 2] kdist.launch: 1 of 1 worker(s) of node 1 started from their standbys " \
        "(warm), 0 cold" in text, text
    assert resumed is not None, text  # the gang resumed without node 1 coming back
    fenced = [line for line in lines if line.startswith("[node 1] kdist.launch: fenced")]
    assert fenced and fenced[-1].endswith("exiting 206"), text
    # fenced before it said a restart in process of its own (the gang made restart 1)
    assert not any(line.startswith("[node 1] kdist.launch: restarting") for line in lines), text
    assert "kdist: node 1 was fenced (a spare holds its rank, or the gang went on without " \
        "it): not a failure" in text, text
    assert proc.returncode == 0, text
    done = [json.loads(line.split("] ", 1)[1]) for line in lines
            if '"event": "done"' in line]
    assert sorted(d["rank"] for d in done) == [0, 1], text
    # the right result: the parameters an uninterrupted run of the same steps reaches
    state = final_state(tmp_path / "ckpt")
    for name, value in uninterrupted["model"].items():
        assert torch.equal(state["model"][name], value), name
    restarts = ledger_of(lines)["restarts"]
    assert len(restarts) == 1 and "node 1 lost (silent for" in restarts[0]["cause"], restarts
    # The local ledger names the spare only when it saw the spare's line before the entry
    # was written; under CI's load it may not have (the spare line itself is asserted above).
    assert restarts[0].get("spare") in (None, "slot 2 took rank 1"), restarts


def measure(runs: int) -> None:
    """Median seconds from node 1 frozen to the gang's first resumed step (nodeLossSeconds
    10): a spare takes rank 1; or, without one, once the survivors found node 1 lost, its
    launcher and workers are killed and its node group is started anew in its place (a
    replaced pod that starts at once: the local bound of today's path)."""
    import tempfile

    took: dict[str, list[float]] = {"spare": [], "no spare, node restarted": []}
    for _ in range(runs):
        for name in took:
            with tempfile.TemporaryDirectory() as tmp:
                spare = name == "spare"
                proc, envs = start(Path(tmp), SPARES if spare else 0, loss_s=10,
                                   fail_grace_s=600)
                again: list[subprocess.Popen[bytes]] = []

                def restart(groups: list[int], env: dict[str, str] = envs[1],
                            again: list[subprocess.Popen[bytes]] = again) -> None:
                    for group in groups:
                        os.killpg(group, signal.SIGKILL)
                    again.append(subprocess.Popen(
                        [sys.executable, "-m", "kdist.launch", *ARGV], env=env,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        start_new_session=True))

                try:
                    _, resumed = drill(proc, thaw_after='"event": "resume"',
                                       on_lost=None if spare else restart)
                finally:
                    for p in again:
                        os.killpg(p.pid, signal.SIGKILL)
                    if proc.poll() is None:
                        os.kill(proc.pid, signal.SIGINT)
                        try:
                            proc.communicate(timeout=60)
                        except subprocess.TimeoutExpired:
                            proc.kill()
                if resumed is not None:
                    took[name].append(resumed)
    for name, seconds in took.items():
        if seconds:
            print(f"{name}: median {statistics.median(seconds):.1f} s of {len(seconds)} "
                  f"({', '.join(f'{t:.1f}' for t in seconds)})", flush=True)


if __name__ == "__main__":
    measure(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
