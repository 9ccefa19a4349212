"""An elastic job's shrink and grow, on this machine (no cluster), from the survivors' memory
against from a checkpoint.

Each round runs the same job twice, interleaved: 3 launchers (``python -m kdist.launch
--module kdist.workloads.ddp``, 3 nodes x 1 process, gloo, the tiny MLP at 0.1 s a step, a
checkpoint every 5 steps), ``minNodes`` 2, no spare, ``nodeLossSeconds`` 10, restarting in
process as pods restarting in place, each node with a memory directory of its own (its pod's
/dev/shm); once with DDP's memory copy (the default) and once with ``--no-memory-copy``.
Node 2's launcher and workers are frozen (SIGSTOP) after rank 0's step 8; the figures are
the seconds from the freeze to the first step of the gang re-formed at 2 nodes and the steps
lost (the newest step rank 0 logged less the step it resumed from). Then node 2 is thawed (it
is fenced, exit 206) and a new launcher for its slot starts, as its replacement pod would:
from its start to the first step at 3 nodes, and the steps lost (none either way: the gang
stops and saves at a step boundary). The step lines are node 0's (its pipe, read as a pod's
log).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from bench.harness import BenchError, Ctx, Measured, Spec, interleave, median, ratios
from bench.launch_local import _free_port

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--dataset-size", "2048", "--features", "16", "--classes", "4", "--hidden", "32",
        "--layers", "3"]
ARGS = [*TINY, "--max-steps", "100000", "--log-every", "1", "--checkpoint-every", "5",
        "--step-delay", "0.1"]
FREEZE_AFTER = 8
LOSS_S = 10
DEADLINE_S = 240  # a drill stuck this long is a failure, not a figure
JOB = ("3 local launchers, minNodes 2, DDP gloo, tiny MLP at 0.1 s/step, restarting in "
       f"process, nodeLossSeconds {LOSS_S}, a checkpoint every 5 steps; node 2 frozen")
MEMORY, CHECKPOINT = f"from memory ({JOB})", f"--no-memory-copy ({JOB})"
FIGURES = [
    Spec("elastic.shrink_s", "node frozen to first step at 2 of 3 nodes, from memory, local",
         "s", MEMORY, "(absolute)"),
    Spec("elastic.shrink_steps_lost", "steps lost by the shrink, from memory", "steps",
         MEMORY, "(absolute)", "0", 0.0, higher_is_better=False),
    Spec("elastic.checkpoint_restart_s", "node frozen to first step at 2 of 3 nodes, from a "
         "checkpoint, local", "s", CHECKPOINT, "(absolute)"),
    Spec("elastic.checkpoint_restart_steps_lost", "steps lost by the shrink, from a "
         "checkpoint every 5", "steps", CHECKPOINT, "(absolute)"),
    Spec("elastic.shrink_vs_checkpoint", "frozen to resumed: from memory / from a checkpoint",
         "x", MEMORY, CHECKPOINT),
    Spec("elastic.grow_s", "replacement started to first step at 3 nodes, local", "s",
         MEMORY, "(absolute)"),
    Spec("elastic.grow_steps_lost", "steps lost by the grow", "steps", MEMORY, "(absolute)",
         "0", 0.0, higher_is_better=False),
    Spec("elastic.checkpoint_grow_s", "replacement started to first step at 3 nodes, "
         "--no-memory-copy, local", "s", CHECKPOINT, "(absolute)"),
]


def node_env(tmp: Path, node: int, port: int, name: str) -> dict[str, str]:
    """Node `node`'s env as its pod's (restart and memory directories of its own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KDIST_", "TORCHELASTIC_"))}
    restart, memory = tmp / f"restarts-{name}", tmp / f"memory-{name}"
    restart.mkdir()
    memory.mkdir()
    env.update({
        "KDIST_JOB_NAME": "bench-elastic", "KDIST_NNODES": "3", "KDIST_NPROC_PER_NODE": "1",
        "KDIST_NODE_RANK": str(node), "KDIST_MASTER_ADDR": "127.0.0.1",
        "KDIST_MASTER_PORT": str(port), "KDIST_DIST_BACKEND": "gloo",
        "KDIST_MAX_RESTARTS": "2", "KDIST_RDZV_TIMEOUT": "180", "KDIST_PG_TIMEOUT": "120",
        "KDIST_MIN_NODES": "2", "KDIST_NODE_LOSS_SECONDS": str(LOSS_S),
        "KDIST_CHECKPOINT_DIR": str(tmp / "ckpt"), "KDIST_RESTART_COUNT": "0",
        "KDIST_RESTART_DIR": str(restart), "KDIST_MEMORY_DIR": str(memory),
        "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
    })
    return env


def _signal_node(launcher: int, sig: int) -> None:
    """`sig` to a node: its launcher's process group and each worker's (own sessions)."""
    from kdist.shared.processes import descendants

    groups = set()
    for pid in [launcher, *descendants(launcher)]:
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            continue
    for group in groups:
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            pass


def one_run(memory: bool) -> dict[str, float]:
    """One drill: shrink seconds and steps lost, grow seconds and steps lost."""
    argv = [sys.executable, "-m", "kdist.launch", "--module", "kdist.workloads.ddp", "--",
            *ARGS, *([] if memory else ["--no-memory-copy"])]
    with tempfile.TemporaryDirectory(prefix="kdist-bench-elastic-") as tmp:
        port = _free_port()
        procs = []
        try:
            for node in range(3):
                procs.append(subprocess.Popen(
                    argv, env=node_env(Path(tmp), node, port, str(node)), cwd=ROOT,
                    stdin=subprocess.DEVNULL, start_new_session=True, text=True,
                    stdout=subprocess.PIPE if node == 0 else subprocess.DEVNULL,
                    stderr=subprocess.STDOUT))
            return _follow(procs, lambda: procs.append(subprocess.Popen(
                argv, env=node_env(Path(tmp), 2, port, "new"), cwd=ROOT,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True)))
        finally:
            for proc in procs:
                _signal_node(proc.pid, signal.SIGCONT)
                _signal_node(proc.pid, signal.SIGKILL)
                proc.wait()


def _follow(procs: list[subprocess.Popen], start_newcomer: Callable[[], None]
            ) -> dict[str, float]:
    out: IO[str] | None = procs[0].stdout
    assert out is not None
    began = time.monotonic()
    frozen = grown = resumed_at = None
    newest = 0
    got: dict[str, float] = {}
    tail: list[str] = []
    for line in out:
        now = time.monotonic()
        tail = [*tail[-40:], line]
        if now - began > DEADLINE_S:
            break
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if event["event"] == "resume":
            resumed_at = event["step"]
            lost = newest - resumed_at
            got["grow_lost" if grown else "shrink_lost"] = lost
            continue
        if event["event"] != "step":
            continue
        if frozen is None and event["step"] >= FREEZE_AFTER:
            _signal_node(procs[2].pid, signal.SIGSTOP)
            frozen = time.monotonic()
        elif frozen is not None and "shrink_s" not in got and event["world_size"] == 2 \
                and resumed_at is not None:
            got["shrink_s"] = now - frozen
            _signal_node(procs[2].pid, signal.SIGCONT)  # it comes back, and is fenced
            try:
                procs[2].wait(timeout=60)
            except subprocess.TimeoutExpired:
                raise BenchError("the thawed node 2 was not fenced within 60 s") from None
            start_newcomer()
            grown = time.monotonic()
        elif grown is not None and event["world_size"] == 3:
            got["grow_s"] = now - grown
            return got
        newest = max(newest, event["step"])
    raise BenchError("the drill did not shrink and grow back:\n" + "".join(tail))


def run(ctx: Ctx) -> dict[str, Measured]:
    runs: dict[str, list[dict[str, float]]] = {"memory": [], "checkpoint": []}

    def variant(name: str):
        def once() -> float:
            got = one_run(name == "memory")
            runs[name].append(got)
            ctx.say(f"      shrink {got['shrink_s']:.1f}s ({got['shrink_lost']:.0f} steps "
                    f"lost), grow {got['grow_s']:.1f}s ({got['grow_lost']:.0f} lost)")
            return got["shrink_s"]
        return once

    v = interleave({"memory": variant("memory"), "checkpoint": variant("checkpoint")},
                   ctx.rounds, ctx.say)
    load = f"load {os.getloadavg()[0]:.1f} at the end"

    def of(name: str, key: str) -> list[float]:
        return [r[key] for r in runs[name]]

    def measured(name: str, key: str, note: str = load) -> Measured:
        return Measured(median(of(name, key)), of(name, key), note)

    r = ratios(v["memory"], v["checkpoint"])
    return {
        "elastic.shrink_s": measured("memory", "shrink_s"),
        "elastic.shrink_steps_lost": measured("memory", "shrink_lost"),
        "elastic.checkpoint_restart_s": measured("checkpoint", "shrink_s"),
        "elastic.checkpoint_restart_steps_lost": measured("checkpoint", "shrink_lost"),
        "elastic.shrink_vs_checkpoint": Measured(median(r), r, f"{ctx.rounds} interleaved pairs"),
        "elastic.grow_s": measured("memory", "grow_s"),
        "elastic.grow_steps_lost": measured("memory", "grow_lost"),
        "elastic.checkpoint_grow_s": measured("checkpoint", "grow_s"),
    }
