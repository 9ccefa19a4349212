"""Where a first start's time goes, on this machine (no cluster): launcher to first step.

Each round runs the same job twice, interleaved: 2 launchers (``python -m kdist.launch
--module kdist.workloads.ddp``, 2 nodes x 1 process, gloo, 3 steps), each pinned to a
CPU of its own as a pod of ``cpu: 1``, once cold (``KDIST_WARM_WORKERS=0``: no standby)
and once with the defaults (the first workers come from standbys that import torch
while the launchers meet: ``kdist.runtime.warmstart``). A probe on every process's
``PYTHONPATH`` (``bench/firststart_hook``) stamps node 0's launcher and worker: the
process started, torch's and ``torch._dynamo``'s imports, ``init_process_group`` and
DDP's constructor, with each process's CPU time. The CPU figures are what a pod held to
its CPU limit pays in wall time (at ``cpu: 1`` as many seconds, at 500m twice as many);
the wall figures depend on the machine's load.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import BenchError, Ctx, Measured, Spec, interleave, median, ratios
from bench.launch_local import _free_port, _pin, node_env

ROOT = Path(__file__).resolve().parent.parent
HOOK = Path(__file__).resolve().parent / "firststart_hook"
ARGS = ["--max-steps", "3", "--batch-size", "16", "--log-every", "1",
        "--checkpoint-every", "0", "--dataset-size", "2048"]
JOB = "2 local launchers pinned to a CPU each (pods of cpu: 1), DDP gloo, 3 steps"
WARM, COLD = f"defaults: first start from standbys ({JOB})", f"no standby ({JOB})"
FIGURES = [
    Spec("firststart.start_to_first_step_warm_s", "launchers' start to first step, standbys",
         "s", WARM, "(absolute)"),
    Spec("firststart.start_to_first_step_cold_s", "launchers' start to first step, no standby",
         "s", COLD, "(absolute)"),
    Spec("firststart.warm_vs_cold", "launchers' start to first step: standbys / none", "x",
         WARM, COLD),
    Spec("firststart.launcher_to_worker_process_s",
         "node 0's launcher started to its worker's (or standby's) process started", "s",
         f"{WARM} and {COLD}", "(absolute)"),
    Spec("firststart.launcher_cpu_s", "node 0's launcher's CPU until the first step", "s",
         f"{WARM} and {COLD}", "(absolute)"),
    Spec("firststart.interpreter_cpu_s", "a worker's CPU until its interpreter is up", "s",
         f"{WARM} and {COLD}", "(absolute)"),
    Spec("firststart.torch_import_cpu_s", "a worker's CPU importing torch", "s",
         f"{WARM} and {COLD}", "(absolute)"),
    Spec("firststart.dynamo_import_cpu_s", "a worker's CPU importing torch._dynamo (DDP's)",
         "s", f"{WARM} and {COLD}", "(absolute)"),
    Spec("firststart.worker_cpu_to_ddp_s",
         "a worker's CPU from its start until DDP's constructor returned", "s",
         f"{WARM} and {COLD}", "(absolute)"),
    Spec("firststart.ddp_to_first_step_s", "DDP's constructor returned to the first step line",
         "s", f"{WARM} and {COLD}", "(absolute)"),
]


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(warm: bool) -> dict[str, float]:
    """Node 0's phases of one job (seconds; ``*_cpu``: that process's CPU)."""
    port = _free_port()
    cpus = sorted(os.sched_getaffinity(0))
    argv = [sys.executable, "-m", "kdist.launch", "--module", "kdist.workloads.ddp", "--", *ARGS]
    with tempfile.TemporaryDirectory(prefix="kdist-bench-first-") as tmp:
        envs = []
        for node in range(2):
            stamps = Path(tmp) / f"stamps-{node}"
            stamps.mkdir()
            env = {**node_env(str(ROOT), node, port), "FIRSTSTART_DIR": str(stamps)}
            env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(HOOK)])
            # spec.distributed.warmStart; cold is the default
            env["KDIST_WARM_WORKERS"] = "first" if warm else "0"
            envs.append(env)
        started = time.time()
        procs = [subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, cwd=ROOT,
                                  stdout=subprocess.PIPE if node == 0 else subprocess.DEVNULL,
                                  stderr=subprocess.STDOUT, preexec_fn=_pin(cpus[node % len(cpus)]))
                 for node, env in enumerate(envs)]
        try:
            first, launcher_cpu = _first_step(procs[0])
        finally:
            for proc in procs:
                proc.wait(timeout=120)
        return _phases(Path(tmp) / "stamps-0" / "stamps", procs[0].pid, started, first,
                       launcher_cpu)


def _first_step(proc: subprocess.Popen[bytes]) -> tuple[float, float]:
    assert proc.stdout is not None
    lines = []
    for raw in proc.stdout:
        lines.append(raw.decode(errors="replace"))
        if raw.startswith(b'{"event": "step"'):
            at, cpu = time.time(), _cpu_s(proc.pid)
            for _ in proc.stdout:  # drained to the end
                pass
            return at, cpu
    raise BenchError("node 0 printed no step line:\n" + "".join(lines[-20:]))


def _phases(path: Path, launcher: int, started: float, first: float,
            launcher_cpu: float) -> dict[str, float]:
    seen: dict[tuple[int, str], tuple[float, float]] = {}
    for line in path.read_text().splitlines():
        wall, cpu, pid, what = line.split(" ", 3)
        seen.setdefault((int(pid), what),
                        (float(wall), float(cpu)))
    workers = {pid for pid, what in seen if what == "DDP() returned" and pid != launcher}
    if len(workers) != 1:
        raise BenchError(f"node 0: {len(workers)} workers stamped DDP's constructor")
    pid = workers.pop()

    def at(what: str, p: int = pid) -> tuple[float, float]:
        found = [v for (q, w), v in seen.items() if q == p and w.startswith(what)]
        if not found:
            raise BenchError(f"node 0: no stamp {what!r} of pid {p}")
        return found[0]

    ddp = at("DDP() returned")
    return {
        "first": first - started,
        "to_worker": at("process started")[0] - at("process started", launcher)[0],
        "launcher_cpu": launcher_cpu,
        "interpreter_cpu": at("interpreter up")[1],
        "torch_cpu": at("import torch done")[1] - at("import torch begun")[1],
        "dynamo_cpu": at("import torch._dynamo done")[1] - at("import torch._dynamo begun")[1],
        "to_ddp_cpu": ddp[1],
        "ddp_to_step": first - ddp[0],
    }


def run(ctx: Ctx) -> dict[str, Measured]:
    runs: dict[str, list[dict[str, float]]] = {"cold": [], "warm": []}

    def variant(name: str) -> Any:
        def once() -> float:
            got = one_run(name == "warm")
            runs[name].append(got)
            ctx.say("      " + ", ".join(f"{k} {v:.2f}" for k, v in got.items()))
            return got["first"]
        return once

    v = interleave({"cold": variant("cold"), "warm": variant("warm")}, ctx.rounds, ctx.say)
    every = runs["cold"] + runs["warm"]
    load = f"load {os.getloadavg()[0]:.1f} at the end"

    def m(key: str) -> Measured:
        values = [r[key] for r in every]
        return Measured(median(values), values, f"both variants; {load}")

    r = ratios(v["warm"], v["cold"])
    return {
        "firststart.start_to_first_step_warm_s": Measured(median(v["warm"]), v["warm"], load),
        "firststart.start_to_first_step_cold_s": Measured(median(v["cold"]), v["cold"], load),
        "firststart.warm_vs_cold": Measured(median(r), r, f"{ctx.rounds} interleaved pairs"),
        "firststart.launcher_to_worker_process_s": m("to_worker"),
        "firststart.launcher_cpu_s": m("launcher_cpu"),
        "firststart.interpreter_cpu_s": m("interpreter_cpu"),
        "firststart.torch_import_cpu_s": m("torch_cpu"),
        "firststart.dynamo_import_cpu_s": m("dynamo_cpu"),
        "firststart.worker_cpu_to_ddp_s": m("to_ddp_cpu"),
        "firststart.ddp_to_first_step_s": m("ddp_to_step"),
    }
