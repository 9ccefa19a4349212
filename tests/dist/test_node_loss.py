"""A frozen node, noticed by the gang itself (issue 54): real launchers and gloo workers.

A node's launcher and workers stopped with SIGSTOP (a node frozen, powered off or cut off:
it fails nothing, so its peers would wait in their next collective until the collective
timeout). The survivors' launchers must find it silent within ``nodeLossSeconds``, stop
their workers at once, name the node in their line and in the ledger; once the node comes
back (SIGCONT), the gang meets again in process and finishes. Node 0 (the store's host)
too.

``python tests/dist/test_node_loss.py [RUNS]`` measures "frozen -> survivors stopped"
against the collective-timeout path (docs/restarts.md).
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
from pathlib import Path

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from disttools import TINY, free_port  # noqa: E402
from test_preemption import launcher_of_node  # noqa: E402

NODES = 3
LOSS_S = 5
MARGIN_S = 15  # a loaded 2-core machine: ticks late, a slow kill
STEPS = 90


def start(tmp: Path, loss_s: int, pg_timeout_s: int) -> subprocess.Popen[str]:
    """A job of NODES nodes whose launchers restart their workers in process (as pods
    restarting in place), in a child process; it prints its ledger as JSON at the end."""
    dirs = [tmp / f"restarts-{n}" for n in range(NODES)]
    for d in dirs:
        d.mkdir()
    argv = ["--module", "kdist.workloads.ddp", "--", *TINY, "--max-steps", str(STEPS),
            "--log-every", "1", "--checkpoint-every", "10", "--step-delay", "0.1"]
    script = textwrap.dedent(f"""
        import json, os, sys
        from pathlib import Path
        sys.path.insert(0, {HERE!r})
        from disttools import LAUNCH, node_env
        from kdist.local import local_env, run_nodes
        from kdist.local.ledger import LocalLedger
        extra = dict(KDIST_CHECKPOINT_DIR={str(tmp)!r}, KDIST_TEST_ROOT=str(os.getpid()),
                     KDIST_NODE_LOSS_SECONDS="{loss_s}", KDIST_PG_TIMEOUT="{pg_timeout_s}",
                     KDIST_MAX_RESTARTS="2")
        envs = [local_env(node_env({NODES}, 1, i, {free_port()}, **extra))
                for i in range({NODES})]
        ledger = LocalLedger(max_restarts=2)
        code = run_nodes([*LAUNCH, *{argv!r}], envs, max_restarts=2, ledger=ledger,
                         restart_dirs=[Path(d) for d in {[str(d) for d in dirs]!r}])
        print("LEDGER " + json.dumps(ledger.summary(code == 0)), flush=True)
        sys.exit(code)
    """)
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def freeze(launcher: int, sig: int) -> list[int]:
    """`sig` (SIGSTOP, SIGCONT) to a whole node: its launcher's process group and each of
    its workers' (they run in sessions of their own); the groups signalled."""
    from kdist.shared.processes import descendants

    groups = []
    for pid in [launcher, *descendants(launcher)]:
        try:
            group = os.getpgid(pid)
        except ProcessLookupError:
            continue
        if group not in groups:
            try:
                os.killpg(group, sig)
            except ProcessLookupError:  # a descendant exiting meanwhile
                continue
            groups.append(group)
    return groups


def thaw(groups: list[int]) -> None:
    """SIGCONT to the groups `freeze` stopped; one gone meanwhile is skipped (its verdict
    is the drill's, not a ProcessLookupError's)."""
    for group in groups:
        try:
            os.killpg(group, signal.SIGCONT)
        except ProcessLookupError:
            pass


def freeze_and_watch(proc: subprocess.Popen[str], node: int,
                     stopped: tuple[str, ...]) -> tuple[list[str], dict[int, float]]:
    """Freeze `node` (its launcher and workers) after a few steps
    of it; {survivor: seconds from the freeze to its launcher's first line in `stopped`};
    then thaw it, and the whole output once the run ended."""
    assert proc.stdout is not None
    lines: list[str] = []
    frozen_at, groups = None, []
    seen: dict[int, float] = {}
    survivors = {n for n in range(NODES) if n != node}
    steps = 0
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            if frozen_at is None:
                steps += line.startswith(f"[rank {node}] ") and '"event": "step"' in line
                if steps >= 3:
                    groups = freeze(launcher_of_node(proc.pid, node), signal.SIGSTOP)
                    frozen_at = time.monotonic()
                continue
            for n in survivors - set(seen):
                if line.startswith(f"[node {n}] kdist.launch: ") and \
                        any(s in line for s in stopped):
                    seen[n] = time.monotonic() - frozen_at
            if seen.keys() == survivors:
                break
    finally:
        thaw(groups)  # the node comes back
    rest, _ = proc.communicate(timeout=240)
    return lines + rest.splitlines(), seen


def ledger_of(lines: list[str]) -> dict:
    (found,) = [json.loads(line[len("LEDGER "):]) for line in lines
                if line.startswith("LEDGER ")]
    return found


@pytest.mark.timeout(300)
@pytest.mark.parametrize("node", [2, 0], ids=["node-2", "node-0-store-host"])
def test_a_frozen_node_is_lost_in_seconds_and_named(tmp_path, node):
    proc = start(tmp_path, LOSS_S, pg_timeout_s=120)
    words = f"node {node} lost (silent for"
    lines, seen = freeze_and_watch(proc, node, (words,))
    text = "\n".join(lines)
    assert len(seen) == NODES - 1, text  # every survivor's launcher named the node ...
    assert max(seen.values()) <= LOSS_S + MARGIN_S, (seen, text)  # ... within seconds,
    # not the collective timeout (120 s)
    assert proc.returncode == 0, text  # the node came back: the gang met again, finished
    restarts = ledger_of(lines)["restarts"]
    assert restarts and words in restarts[0]["cause"], restarts
    done = [line for line in lines if '"event": "done"' in line]
    assert len(done) == NODES, text


def measure(runs: int) -> None:
    """Median seconds from the freeze to the survivors' workers stopped: by the heartbeat
    (nodeLossSeconds 10) and by the collective timeout alone (30 s; heartbeat off)."""
    import tempfile

    ways = {"heartbeat (nodeLossSeconds=10)": (10, 30, ("lost (silent for",)),
            "collective timeout (30 s), no heartbeat": (3600, 30, (
                "restarting this node's workers", "; exiting "))}
    for name, (loss, pg, stopped) in ways.items():
        took = []
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as tmp:
                proc = start(Path(tmp), loss, pg)
                _, seen = freeze_and_watch(proc, 2, stopped)
                took.append(max(seen.values()))
        print(f"{name}: median {statistics.median(took):.1f} s of {runs} "
              f"({', '.join(f'{t:.1f}' for t in took)})", flush=True)


if __name__ == "__main__":
    measure(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
