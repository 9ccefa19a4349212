"""How fast a gang comes back from a killed worker, restarting in place vs recreating.

Each round submits the same DDP job (``kdist submit --no-wait``, ``maxRestarts: 2``)
four ways, interleaved: 2 pods restarting in place (their launchers restart the
workers in process), 2 pods whose containers restart in place
(``restartWorkers: false``), 2 pods recreated (``distributed.restartMode``), and 4
pods in place. The containers-in-place job is killed twice: the second restart less
the first is what the kubelet's crash-loop backoff costs (restarts in process meet
none). Once rank 0 has logged step 5, a worker of rank 1 is SIGKILLed inside its pod
(``kubectl exec``; the killer prints the wall-clock time of the kill). The figure is
the time from that kill to the first step line of rank 0's next attempt (its log's
container-runtime timestamps, the same clock: the test cluster runs on this machine).
The next attempt's first line is the first step line after rank 0's launcher said it
restarts its workers in process, or of a container started after the kill (no checkpoint
volume, but the DDP workload resumes from a survivor's memory: not at step 1).
"""

from __future__ import annotations

import json
import re
import time
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
from kdist.spec.quantity import parse_quantity

ARGS = ["--max-steps", "100000", "--batch-size", "16", "--log-every", "1",
        "--checkpoint-every", "0", "--dataset-size", "2048", "--step-delay", "0.05"]
CPU = "500m"
JOB = f"DDP, gloo, cpu {CPU} per pod, maxRestarts 2, a worker of rank 1 SIGKILLed at step 5"
IN_PLACE = f"restartMode inPlace, 2 pods ({JOB})"
RECREATE = f"restartMode recreate, 2 pods ({JOB})"
IN_PLACE_4 = f"restartMode inPlace, 4 pods ({JOB})"
CONTAINER = f"restartMode inPlace, restartWorkers false, 2 pods ({JOB})"
STRIKE_AT = 5
#: A launcher's line as it restarts its workers in process (kdist.shared.ledger).
RESTARTING = "kdist.launch: restarting this node's workers"
# SIGKILL the workers (not the launcher, never a standby: a worker's stdout is its pipe to
# the launcher, cold or warm alike); say when, on the node's (this machine's) clock. With
# `warm`, first wait until the standby behind the worker is ready (a fault minutes into a
# job finds it so); `warm wait` only waits (bench.warmcluster).
KILL = ("import os, signal, sys, time\n"
        "pids = lambda: [int(p) for p in os.listdir('/proc') if p.isdigit()]\n"
        "def comm(p):\n"
        "    try: return open(f'/proc/{p}/comm').read().strip()\n"
        "    except OSError: return ''\n"
        "deadline = time.time() + 300\n"
        "while sys.argv[1] == 'warm' and time.time() < deadline and \\\n"
        "        not any(comm(p) == 'kdist-standby' for p in pids()):\n"
        "    time.sleep(0.1)\n"
        "if sys.argv[2:] == ['wait']: sys.exit(0)\n"
        "for p in pids():\n"
        "    try: out = os.readlink(f'/proc/{p}/fd/1')\n"
        "    except OSError: continue\n"
        "    if '/pipes/' in out and comm(p) != 'kdist-standby':\n"
        "        os.kill(p, signal.SIGKILL); print('killed', time.time())\n")
FIGURES = [
    Spec("restart.kill_to_resumed_s", "worker SIGKILL to first resumed step, in place", "s",
         IN_PLACE, "(absolute)", "<= 10", 10.0, higher_is_better=False),
    Spec("restart.recreate_kill_to_resumed_s", "worker SIGKILL to first resumed step, recreated",
         "s", RECREATE, "(absolute)"),
    Spec("restart.inplace_vs_recreate", "kill to resumed: in place / recreated", "x",
         IN_PLACE, RECREATE, "<= 0.4", 0.4, higher_is_better=False),
    Spec("restart.container_kill_to_resumed_s",
         "worker SIGKILL to first resumed step, containers restarted in place", "s",
         CONTAINER, "(absolute)"),
    Spec("restart.inprocess_vs_container", "kill to resumed: in process / containers in place",
         "x", IN_PLACE, CONTAINER),
    Spec("restart.crashloop_backoff_s",
         "kubelet crash-loop backoff: 2nd container restart in place less the 1st", "s",
         CONTAINER, "(absolute)"),
    Spec("restart.kill_to_resumed_4_vs_2", "kill to resumed in place: 4 pods / 2 pods", "x",
         IN_PLACE_4, IN_PLACE, "<= 1.2", 1.2, higher_is_better=False),
]


def _job(name: str, ns: str, nodes: int, mode: str) -> str:
    # Room for a worker and a standby (each a Python with torch) in every variant alike.
    text = kube.job_yaml(name, ns, nodes=nodes, args=ARGS, cpu=CPU, memory="2Gi")
    extra = ""
    if mode == "container":  # in place, but the launchers leave the restart to the kubelet
        mode, extra = "inPlace", ", restartWorkers: false"
    fields = f"backend: gloo, maxRestarts: 2, restartMode: {mode}{extra}"
    return text.replace("distributed: {backend: gloo}", f"distributed: {{{fields}}}")


class Job:
    """One submitted job, read through kubectl."""

    def __init__(self, kc: str, ns: str, name: str) -> None:
        self.base = ["kubectl", "--kubeconfig", kc, "-n", ns]
        self.name = name

    def pod(self, rank: int) -> dict[str, Any] | None:
        sel = f"kdist.dev/job-name={self.name},batch.kubernetes.io/job-completion-index={rank}"
        out = run_cmd([*self.base, "get", "pods", "-l", sel, "-o", "json"], timeout=30).out
        pods = [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]
        return max(pods, key=lambda p: p["metadata"]["creationTimestamp"], default=None)

    def steps(self, rank: int) -> list[tuple[float, int]]:
        """(runtime timestamp, step) of the step lines of rank `rank`'s current container."""
        pod = self.pod(rank)
        if pod is None:
            return []
        done = run_cmd([*self.base, "logs", pod["metadata"]["name"], "-c", "pytorch",
                        "--timestamps"], timeout=30, check=False)
        out = []
        for line in done.out.splitlines() if done.rc == 0 else []:
            stamp, _, text = line.partition(" ")
            if '"event": "step"' in text:
                try:
                    out.append((_stamp(stamp), int(json.loads(text)["step"])))
                except (ValueError, KeyError):
                    continue
        return out

    def resumed(self, rank: int, killed: float) -> float | None:
        """The runtime timestamp of rank ``rank``'s first step line of the attempt after a
        kill at ``killed`` (epoch seconds): the first after its launcher's line that it
        restarts its workers in process, or in a container that started after the kill.
        Not "step 1 again": the DDP workload resumes from a survivor's memory."""
        pod = self.pod(rank)
        if pod is None:
            return None
        done = run_cmd([*self.base, "logs", pod["metadata"]["name"], "-c", "pytorch",
                        "--timestamps"], timeout=30, check=False)
        lines = [(_stamp(stamp), text) for stamp, _, text in
                 (line.partition(" ") for line in done.out.splitlines() if line.strip())] \
            if done.rc == 0 else []
        after = lines[0][0] > killed if lines else False  # a new container's log
        for at, text in lines:
            if at > killed and text.startswith(RESTARTING):
                after = True
            elif after and '"event": "step"' in text:
                return at
        return None

    def until(self, what: str, found: Any, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = found()
            if value:
                return value
            time.sleep(0.25)
        raise BenchError(f"job {self.name}: no {what} within {timeout:.0f}s")


def _kill_to_resumed(kc: str, ns: str, tmp: Path, name: str, nodes: int, mode: str,
                     kills: int = 1) -> list[float]:
    """Seconds from each of ``kills`` SIGKILLs (each once the gang is at step STRIKE_AT
    again) to rank 0's first step after it."""
    path = tmp / f"{name}.yaml"
    path.write_text(_job(name, ns, nodes, mode))
    run_cmd([*_kdist_cli(), "--kubeconfig", kc, "-n", ns, "submit", str(path), "--no-wait"],
            env=clean_env(), timeout=120)
    job = Job(kc, ns, name)
    took: list[float] = []
    killed = 0.0
    try:
        for _ in range(kills):
            job.until(f"step {STRIKE_AT} of rank 0", lambda k=killed: any(
                s >= STRIKE_AT and t > k for t, s in job.steps(0)), timeout=300)
            victim, other = job.pod(1), job.pod(0)
            if victim is None or other is None:
                raise BenchError(f"job {name}: no pod of rank 1 or 0")
            if mode == "warm":  # rank 0's standby ready too
                run_cmd([*job.base, "exec", other["metadata"]["name"], "-c", "pytorch", "--",
                         "python", "-c", KILL, mode, "wait"], timeout=360)
            out = run_cmd([*job.base, "exec", victim["metadata"]["name"], "-c", "pytorch",
                           "--", "python", "-c", KILL, mode], timeout=360).out
            said = re.search(r"^killed ([0-9.]+)$", out, re.M)
            if said is None:
                raise BenchError(f"job {name}: no worker killed: {out!r}")
            killed = float(said.group(1))
            first = job.until("resumed step of rank 0", lambda k=killed: job.resumed(0, k),
                              timeout=300)
            took.append(float(first - killed))
        return took
    finally:
        run_cmd([*job.base, "delete", "job", name, "--wait=false"], timeout=60, check=False)


def run(ctx: Ctx) -> dict[str, Measured]:
    api = kube.connect()
    kc = str(kube.kubeconfig())
    out = run_cmd(["kubectl", "--kubeconfig", kc, "get", "nodes", "-o", "json"], timeout=30).out
    cpus = sum(float(parse_quantity(n["status"]["allocatable"]["cpu"]))
               for n in json.loads(out)["items"])
    room_for_4 = cpus >= 4 * float(parse_quantity(CPU)) + 0.2
    counter = [0]
    with TemporaryDirectory() as tmp, kube.namespace(api, "kdist-bench-restart") as ns:
        ctx.say(f"    namespace {ns}")

        backoff: list[float] = []  # containers: the second kill's time less the first's


        def variant(nodes: int, mode: str) -> Any:
            kills = 2 if mode == "container" else 1

            def once() -> float:
                counter[0] += 1
                took = _kill_to_resumed(kc, ns, Path(tmp), f"rs-{counter[0]}", nodes, mode,
                                        kills)
                if kills == 2:
                    backoff.append(took[1] - took[0])
                return took[0]
            return once

        variants = {"inPlace": variant(2, "inPlace"), "container": variant(2, "container"),
                    "recreate": variant(2, "recreate")}
        if room_for_4:
            variants["inPlace4"] = variant(4, "inPlace")
        v = interleave(variants, ctx.rounds, ctx.say)
    r = ratios(v["inPlace"], v["recreate"])
    c = ratios(v["inPlace"], v["container"])
    if room_for_4:
        q = ratios(v["inPlace4"], v["inPlace"])
        four = Measured(median(q), q, f"{ctx.rounds} interleaved rounds")
    else:
        four = Measured(None, skipped=f"the cluster has {cpus:g} allocatable CPUs: no room "
                                      f"for 4 pods of {CPU}")
    return {
        "restart.kill_to_resumed_s": Measured(median(v["inPlace"]), v["inPlace"]),
        "restart.recreate_kill_to_resumed_s": Measured(median(v["recreate"]), v["recreate"]),
        "restart.inplace_vs_recreate": Measured(median(r), r, f"{ctx.rounds} interleaved pairs"),
        "restart.container_kill_to_resumed_s": Measured(median(v["container"]), v["container"]),
        "restart.inprocess_vs_container": Measured(median(c), c,
                                                   f"{ctx.rounds} interleaved pairs"),
        "restart.crashloop_backoff_s": Measured(median(backoff), backoff,
                                                "the same job's second kill less its first"),
        "restart.kill_to_resumed_4_vs_2": four,
    }
