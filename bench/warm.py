"""Warm workers against cold ones, on this machine (no cluster): first step and a restart.

Each round runs the same job twice, interleaved: 2 launchers (``python -m kdist.launch
--module kdist.workloads.ddp``, 2 nodes x 1 process, gloo), each node pinned to a CPU
of its own as a pod of ``cpu: 1``, restarting in place (``KDIST_RESTART_DIR``, the
launchers restart their workers in process), once cold and once with
``KDIST_WARM_WORKERS=1``. The clock: from the launchers' start to node 0's first
``step`` line; then, once rank 0 has logged step ``STRIKE_AT``, rank 1's worker is
SIGKILLed (the worker only: the process under node 1's launcher whose output is a
worker pipe, never a standby; warm: once the standbys behind the workers are ready)
and the figure is the time from the kill to rank 0's first
step of the next attempt (step 1 again: no checkpoint). Memory: each standby's RSS
(``/proc/PID/status``, after the restart, the new standby ready) beside its worker's;
idle CPU: a standby's CPU seconds over ``IDLE_S`` while it waits.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import BenchError, Ctx, Measured, Spec, interleave, median, ratios
from bench.launch_local import _descendants, _free_port, _pin, node_env

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--max-steps", "100000", "--batch-size", "16", "--log-every", "1",
        "--checkpoint-every", "0", "--dataset-size", "2048", "--step-delay", "0.05"]
STRIKE_AT = 5
IDLE_S = 5.0
JOB = ("2 local launchers pinned to a CPU each (pods of cpu: 1), DDP gloo, restarting in "
       "process; rank 1's worker SIGKILLed at step 5")
WARM, COLD = f"warm workers ({JOB})", f"cold workers ({JOB})"
FIGURES = [
    Spec("warm.kill_to_resumed_warm_s", "worker SIGKILL to resumed step, warm, local", "s",
         WARM, "(absolute)", "<= 3", 3.0, higher_is_better=False),
    Spec("warm.kill_to_resumed_cold_s", "worker SIGKILL to resumed step, cold, local", "s",
         COLD, "(absolute)"),
    Spec("warm.warm_vs_cold", "kill to resumed: warm / cold, local", "x", WARM, COLD),
    Spec("warm.start_to_first_step_warm_s", "launchers' start to first step, warm, local", "s",
         WARM, "(absolute)"),
    Spec("warm.start_to_first_step_cold_s", "launchers' start to first step, cold, local", "s",
         COLD, "(absolute)"),
    Spec("warm.standby_rss_mb", "memory of one standby (RSS)", "MB", WARM, "(absolute)"),
    Spec("warm.worker_rss_mb", "memory of one DDP worker beside it (RSS)", "MB", WARM,
         "(absolute)"),
    Spec("warm.standby_idle_cpu_pct", "CPU of a waiting standby", "%", WARM, "(absolute)"),
]


def _proc(pid: int, name: str) -> str:
    with open(f"/proc/{pid}/{name}") as f:
        return f.read()


def _rss_mb(pid: int) -> float:
    line = next(x for x in _proc(pid, "status").splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def _cpu_s(pid: int) -> float:
    fields = _proc(pid, "stat").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _standbys(launcher: int) -> list[int]:
    return [p for p in _descendants(launcher) if _safe(p, "comm") == "kdist-standby"]


def _worker(launcher: int) -> int | None:
    """The worker under ``launcher``: its stdout is a worker pipe (cold or warm alike)."""
    for pid in _descendants(launcher):
        try:
            if "/pipes/" in os.readlink(f"/proc/{pid}/fd/1"):
                return pid
        except OSError:
            continue
    return None


def _safe(pid: int, name: str) -> str:
    try:
        return _proc(pid, name).strip()
    except OSError:
        return ""


def one_run(warm: bool, memory: dict[str, list[float]]) -> tuple[float, float]:
    """(launchers' start -> first step, kill -> resumed step) of one job."""
    port = _free_port()
    cpus = sorted(os.sched_getaffinity(0))
    argv = [sys.executable, "-m", "kdist.launch", "--module", "kdist.workloads.ddp", "--", *ARGS]
    with tempfile.TemporaryDirectory(prefix="kdist-bench-warm-") as tmp:
        envs = []
        for node in range(2):
            (Path(tmp) / str(node)).mkdir()
            envs.append({**node_env(str(ROOT), node, port), "KDIST_MAX_RESTARTS": "1",
                         "KDIST_RESTART_DIR": str(Path(tmp) / str(node)),
                         "KDIST_WARM_WORKERS": "1" if warm else "0"})
        started = time.monotonic()
        # Node 0's output as a pod's log has it (both streams); node 1's is not read.
        procs = [subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, cwd=ROOT,
                                  stdout=subprocess.PIPE if node == 0 else subprocess.DEVNULL,
                                  stderr=subprocess.STDOUT, start_new_session=True,
                                  preexec_fn=_pin(cpus[node % len(cpus)]))
                 for node, env in enumerate(envs)]
        try:
            return _follow(procs, started, warm, memory)
        finally:
            for proc in procs:
                for pid in [proc.pid, *_descendants(proc.pid)]:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                proc.wait()


def _follow(procs: list[subprocess.Popen[bytes]], started: float, warm: bool,
            memory: dict[str, list[float]]) -> tuple[float, float]:
    first = killed = None
    lines: list[str] = []
    assert procs[0].stdout is not None
    for raw in procs[0].stdout:
        now = time.monotonic()
        text = raw.decode(errors="replace")
        lines.append(text)
        if not text.startswith('{"event": "step"'):
            continue
        step = int(json.loads(text)["step"])
        if first is None:
            first = now - started
        # Warm: once the standbys behind the workers are ready (a fault minutes into a
        # job finds them so), on both nodes.
        if killed is None and step >= STRIKE_AT and \
                (not warm or all(_standbys(p.pid) for p in procs)):
            victim = _worker(procs[1].pid)
            if victim is None:
                raise BenchError("no worker under node 1's launcher")
            os.kill(victim, signal.SIGKILL)
            killed = time.monotonic()
        elif killed is not None and step == 1:
            took = now - killed
            if warm:
                _measure(procs[1].pid, memory)
            return first, took
    raise BenchError("node 0 ended before it resumed:\n" + "".join(lines[-30:]))


def _measure(launcher: int, memory: dict[str, list[float]]) -> None:
    """A standby's RSS and idle CPU, beside the worker's RSS (the new standby, once ready)."""
    deadline = time.monotonic() + 60
    while not _standbys(launcher) and time.monotonic() < deadline:
        time.sleep(0.2)
    standbys, worker = _standbys(launcher), _worker(launcher)
    if not standbys or worker is None:
        raise BenchError("no standby behind node 1's new worker within 60s")
    before = _cpu_s(standbys[0])
    time.sleep(IDLE_S)
    memory["idle"].append(100 * (_cpu_s(standbys[0]) - before) / IDLE_S)
    memory["standby"].append(_rss_mb(standbys[0]))
    memory["worker"].append(_rss_mb(worker))


def run(ctx: Ctx) -> dict[str, Measured]:
    memory: dict[str, list[float]] = {"standby": [], "worker": [], "idle": []}
    runs: dict[str, list[tuple[float, float]]] = {"cold": [], "warm": []}

    def variant(name: str) -> Any:
        def once() -> float:
            result = one_run(name == "warm", memory)
            runs[name].append(result)
            ctx.say(f"      start->first step {result[0]:.2f}s")
            return result[1]
        return once

    v = interleave({"cold": variant("cold"), "warm": variant("warm")}, ctx.rounds, ctx.say)
    r = ratios(v["warm"], v["cold"])
    firsts = {name: [t[0] for t in got] for name, got in runs.items()}
    load = f"load {os.getloadavg()[0]:.1f} at the end"
    return {
        "warm.kill_to_resumed_warm_s": Measured(median(v["warm"]), v["warm"], load),
        "warm.kill_to_resumed_cold_s": Measured(median(v["cold"]), v["cold"], load),
        "warm.warm_vs_cold": Measured(median(r), r, f"{ctx.rounds} interleaved pairs"),
        "warm.start_to_first_step_warm_s": Measured(median(firsts["warm"]), firsts["warm"]),
        "warm.start_to_first_step_cold_s": Measured(median(firsts["cold"]), firsts["cold"]),
        "warm.standby_rss_mb": Measured(median(memory["standby"]), memory["standby"]),
        "warm.worker_rss_mb": Measured(median(memory["worker"]), memory["worker"]),
        "warm.standby_idle_cpu_pct": Measured(median(memory["idle"]), memory["idle"],
                                              f"over {IDLE_S:g}s"),
    }
