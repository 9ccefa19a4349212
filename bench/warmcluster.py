"""Warm workers on the cluster, side by side in one run: a restart in process and a first start.

Each round submits the same 2-pod DDP job (``kdist submit --no-wait``, restartMode
inPlace, ``maxRestarts: 2``, ``CPU`` per pod) three ways, interleaved:

- ``warm``: ``distributed.warmWorkers``: the first workers and, after a restart in
  process, the new ones run in standbys that imported torch (the kill waits until the
  standbys behind the workers are ready, as a fault minutes into a job finds them);
- ``cold``: ``distributed.warmStart: true``: the first workers come from standbys too (the script is
  kdist's DDP workload, which imports torch: ``kdist.runtime.warmstart``), none is kept,
  and the restart's workers start cold;
- ``coldstart``: the defaults: no standby at all; only its first
  start is measured.

Once rank 0 has logged step 5, a worker of rank 1 is SIGKILLed inside its pod (as
``bench.restart`` does); the figure is the time from the kill to rank 0's first step of
the next attempt (``bench.restart.Job.resumed``). Before the kill, rank 0's pod says where
its first start went: pod created (``creationTimestamp``, 1 s resolution), container
started (``startedAt``, 1 s), the launcher's first line and the first step line (the
container runtime's timestamps). After the restart, rank 1's pod's memory: its working
set as the kubelet counts it (the cgroup's ``memory.current`` less inactive files), with
the standby behind the worker (``warm``) and without (``cold``).

``KDIST_BENCH_CPU`` sets the CPU per pod (default 500m). With ``KDIST_BENCH_RUNTIME=shipped``
the pods run this tree's runtime (``bench.kube.RUNTIME``), on an image built before it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from bench import kube
from bench.cluster import _kdist_cli, _stamp
from bench.harness import (
    BenchError,
    Ctx,
    Measured,
    Spec,
    clean_env,
    interleave,
    median,
    ratios,
    run_cmd,
)
from bench.restart import ARGS, KILL, STRIKE_AT, Job

CPU = os.environ.get("KDIST_BENCH_CPU", "500m")
JOB = (f"2 pods x 1 proc, DDP gloo, cpu {CPU} per pod, restartMode inPlace, maxRestarts 2, "
       f"a worker of rank 1 SIGKILLed at step {STRIKE_AT}")
WARM = f"warmWorkers: true ({JOB})"
COLD = f"warmStart: true: first start from standbys, none kept ({JOB})"
COLDSTART = f"defaults: no standby ({JOB})"
# The pod's working set (what the kubelet evicts and reports by), else its processes' RSS.
MEMORY = ("import os\n"
          "try:\n"
          "    cur = int(open('/sys/fs/cgroup/memory.current').read())\n"
          "    stat = dict(l.split() for l in open('/sys/fs/cgroup/memory.stat'))\n"
          "    print('memory', cur - int(stat.get('inactive_file', 0)))\n"
          "except OSError:\n"
          "    total = 0\n"
          "    for p in filter(str.isdigit, os.listdir('/proc')):\n"
          "        try: lines = open(f'/proc/{p}/status').read().splitlines()\n"
          "        except OSError: continue\n"
          "        rss = [x for x in lines if x.startswith('VmRSS:')]\n"
          "        total += int(rss[0].split()[1]) * 1024 if rss else 0\n"
          "    print('memory', total)\n")

FIGURES = [
    Spec("restart.kill_to_resumed_warm_s", "worker SIGKILL to resumed step, warm workers",
         "s", WARM, "(absolute)", "<= 3", 3.0, higher_is_better=False),
    Spec("restart.kill_to_resumed_cold_s", "worker SIGKILL to resumed step, cold restart", "s",
         COLD, "(absolute)"),
    Spec("restart.kill_to_resumed_warm_vs_cold", "kill to resumed in process: warm / cold", "x",
         WARM, COLD),
    Spec("restart.pod_created_to_first_step_s",
         "pod created to first step (rank 0), first start from standbys", "s",
         f"{COLD} and {WARM}", "(absolute)", "<= 2.5", 2.5, higher_is_better=False),
    Spec("restart.pod_created_to_first_step_coldstart_s",
         "pod created to first step (rank 0), no standby", "s", COLDSTART, "(absolute)"),
    Spec("restart.first_step_warm_vs_coldstart", "pod created to first step: standbys / none",
         "x", f"{COLD} and {WARM}", COLDSTART),
    Spec("restart.created_to_container_started_s",
         "pod created to its container started (rank 0)", "s", "all jobs", "(absolute)"),
    Spec("restart.container_to_launcher_line_s",
         "container started to the launcher's first line (rank 0)", "s", "all jobs",
         "(absolute)"),
    Spec("restart.launcher_line_to_first_step_s",
         "launcher's first line to first step (rank 0), first start from standbys", "s",
         f"{COLD} and {WARM}", "(absolute)"),
    Spec("restart.launcher_line_to_first_step_coldstart_s",
         "launcher's first line to first step (rank 0), no standby", "s", COLDSTART,
         "(absolute)"),
    Spec("restart.pod_memory_warm_mb", "rank 1's pod's working set, a standby behind the worker",
         "MB", WARM, "(absolute)"),
    Spec("restart.pod_memory_cold_mb", "rank 1's pod's working set, no standby", "MB", COLD,
         "(absolute)"),
]


def _job(name: str, ns: str, mode: str) -> str:
    # Room for a worker and a standby (each a Python with torch) in every variant alike.
    text = kube.job_yaml(name, ns, nodes=2, args=ARGS, cpu=CPU, memory="2Gi")
    extra = {"warm": ", warmWorkers: true", "cold": ", warmStart: true"}.get(mode, "")
    fields = f"backend: gloo, maxRestarts: 2, restartMode: inPlace{extra}"
    return text.replace("distributed: {backend: gloo}", f"distributed: {{{fields}}}")


def first_start(job: Job) -> dict[str, float]:
    """Where rank 0's pod's first start went: seconds from its creation to its container's
    start, to the launcher's first line, to the first step line."""
    pod = job.pod(0)
    if pod is None:
        raise BenchError(f"job {job.name}: no pod of rank 0")
    log = run_cmd([*job.base, "logs", pod["metadata"]["name"], "-c", "pytorch",
                   "--timestamps"], timeout=30).out
    lines = [line.partition(" ") for line in log.splitlines() if line.strip()]
    steps = [stamp for stamp, _, text in lines if '"event": "step"' in text]
    if not lines or not steps:
        raise BenchError(f"job {job.name}: no step line in rank 0's log:\n{log[-1500:]}")
    created = _stamp(pod["metadata"]["creationTimestamp"])
    state = next((c["state"] for c in pod["status"].get("containerStatuses", [])
                  if c["name"] == "pytorch"), {})
    started = _stamp(state.get("running", {}).get("startedAt") or
                     pod["metadata"]["creationTimestamp"])
    return {"started": started - created, "line": _stamp(lines[0][0]) - created,
            "step": _stamp(steps[0]) - created}


def one_job(kc: str, ns: str, tmp: Path, name: str, mode: str,
            starts: dict[str, list[dict[str, float]]],
            memory: dict[str, list[float]]) -> float:
    """Submit, read the first start, kill rank 1's worker at step STRIKE_AT: seconds from
    the kill to rank 0's resumed step (0 for ``coldstart``, which is not killed)."""
    path = tmp / f"{name}.yaml"
    path.write_text(_job(name, ns, mode))
    run_cmd([*_kdist_cli(), "--kubeconfig", kc, "-n", ns, "submit", str(path), "--no-wait"],
            env=clean_env(), timeout=120)
    job = Job(kc, ns, name)
    try:
        job.until(f"step {STRIKE_AT} of rank 0", lambda: any(
            s >= STRIKE_AT for _, s in job.steps(0)), timeout=300)
        starts[mode].append(first_start(job))
        if mode == "coldstart":
            return 0.0
        victim, other = job.pod(1), job.pod(0)
        if victim is None or other is None:
            raise BenchError(f"job {name}: no pod of rank 1 or 0")
        on_victim = [*job.base, "exec", victim["metadata"]["name"], "-c", "pytorch", "--",
                     "python", "-c"]
        kill = "warm" if mode == "warm" else "cold"
        if mode == "warm":  # rank 0's standby ready too
            run_cmd([*job.base, "exec", other["metadata"]["name"], "-c", "pytorch", "--",
                     "python", "-c", KILL, kill, "wait"], timeout=360)
        out = run_cmd([*on_victim, KILL, kill], timeout=360).out
        said = re.search(r"^killed ([0-9.]+)$", out, re.M)
        if said is None:
            raise BenchError(f"job {name}: no worker killed: {out!r}")
        killed = float(said.group(1))
        first = job.until("resumed step of rank 0", lambda: job.resumed(0, killed),
                          timeout=300)
        if mode == "warm":  # the standby behind the new worker, ready
            run_cmd([*on_victim, KILL, kill, "wait"], timeout=360)
        out = run_cmd([*on_victim, MEMORY], timeout=60).out
        found = re.search(r"^memory (\d+)$", out, re.M)
        if found is None:
            raise BenchError(f"job {name}: no memory figure: {out!r}")
        memory[mode].append(int(found.group(1)) / 2**20)
        return float(first - killed)
    finally:
        run_cmd([*job.base, "delete", "job", name, "--wait=false"], timeout=60, check=False)


def _m(values: list[float], note: str = "") -> Measured:
    return Measured(median(values), values, note) if values else Measured(None)


def run(ctx: Ctx) -> dict[str, Measured]:
    api = kube.connect()
    kc = str(kube.kubeconfig())
    starts: dict[str, list[dict[str, float]]] = {"warm": [], "cold": [], "coldstart": []}
    memory: dict[str, list[float]] = {"warm": [], "cold": []}
    counter = [0]
    with TemporaryDirectory() as tmp, kube.namespace(api, "kdist-bench-warm") as ns:
        ctx.say(f"    namespace {ns}, cpu {CPU} per pod, runtime {kube.RUNTIME or 'auto'}")

        def variant(mode: str) -> Any:
            def once() -> float:
                counter[0] += 1
                took = one_job(kc, ns, Path(tmp), f"wc-{mode}-{counter[0]}", mode, starts,
                               memory)
                ctx.say("      first start: " + json.dumps(
                    {k: round(v, 2) for k, v in starts[mode][-1].items()}))
                return took
            return once

        v = interleave({m: variant(m) for m in ("cold", "warm", "coldstart")}, ctx.rounds,
                       ctx.say)
    warm_first = [s for m in ("cold", "warm") for s in starts[m]]
    ratio = ratios([median([a["step"], b["step"]]) for a, b in
                    zip(starts["cold"], starts["warm"], strict=True)],
                   [s["step"] for s in starts["coldstart"]])
    every = [s for got in starts.values() for s in got]
    pairs = f"{ctx.rounds} interleaved rounds"
    res = "creationTimestamp and startedAt have 1 s resolution"
    return {
        "restart.kill_to_resumed_warm_s": _m(v["warm"]),
        "restart.kill_to_resumed_cold_s": _m(v["cold"]),
        "restart.kill_to_resumed_warm_vs_cold": _m(ratios(v["warm"], v["cold"]), pairs),
        "restart.pod_created_to_first_step_s": _m([s["step"] for s in warm_first], res),
        "restart.pod_created_to_first_step_coldstart_s": _m(
            [s["step"] for s in starts["coldstart"]], res),
        "restart.first_step_warm_vs_coldstart": _m(ratio, pairs),
        "restart.created_to_container_started_s": _m([s["started"] for s in every], res),
        "restart.container_to_launcher_line_s": _m(
            [s["line"] - s["started"] for s in every], res),
        "restart.launcher_line_to_first_step_s": _m(
            [s["step"] - s["line"] for s in warm_first]),
        "restart.launcher_line_to_first_step_coldstart_s": _m(
            [s["step"] - s["line"] for s in starts["coldstart"]]),
        "restart.pod_memory_warm_mb": _m(memory["warm"], "after the restart, the standby "
                                                         "behind the new worker ready"),
        "restart.pod_memory_cold_mb": _m(memory["cold"], "after the restart"),
    }
