"""Time to result on the real cluster: a small 2-node DDP job, submitted two ways.

Interleaved per round, each job in the same fresh namespace under its own name:

- kdist: ``kdist -n NS submit job.yaml --wait`` (validate, render, create, watch to
  the end, drain the logs), process start to exit;
- kubectl: ``kubectl apply -f`` the same objects (``kdist render``'s output,
  made before the clock starts) then ``kubectl wait --for=condition=complete``;
- warm: the kdist way, with ``distributed.warmWorkers`` (a standby kept behind each
  worker). The first workers run in standbys that imported torch while the launchers met
  in the warm variant; the other starts cold (the default; ``warmStart: true`` starts the
  first workers from standbys: ``bench.warmcluster``'s ``cold``).

After each job, rank 0's pod says how long training took to start: its log
lines carry the container runtime's timestamps (ns), from the launcher's first
line (the container's process has started) to the first ``step`` line
(``--log-every 1``: the first optimizer step is done); the pod's creation
time (1 s resolution) gives the same from the pod's creation.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from bench import kube
from bench.cli import compile_kdist
from bench.harness import (
    PYTHON,
    BenchError,
    Ctx,
    Measured,
    Spec,
    clean_env,
    interleave,
    median,
    ratios,
    run_cmd,
    run_lines,
    tail,
)

ARGS = ["--max-steps", "20", "--batch-size", "64", "--log-every", "1", "--checkpoint-every", "0",
        "--dataset-size", "4096"]
JOB = "2 nodes x 1 proc, gloo, cpu 1 per pod, image kdist-train:dev-cpu, 20 DDP steps"
KDIST = f"kdist -n NS submit job.yaml --wait ({JOB})"
KUBECTL = "kubectl apply -f <kdist render job.yaml> && kubectl wait --for=condition=complete job"

FIGURES = [
    Spec("cluster.submit_wait_vs_kubectl", "time to result: kdist submit --wait / kubectl", "x",
         KDIST, KUBECTL, "<= 1.05", 1.05, higher_is_better=False),
    Spec("cluster.submit_wait_s", "time to result, kdist submit --wait", "s", KDIST,
         "(absolute)"),
    Spec("cluster.kubectl_apply_wait_s", "time to result, kubectl apply + wait", "s", KUBECTL,
         "(absolute)"),
    Spec("cluster.submit_to_created_s", "kdist submit: process start to `created` line", "s",
         "kdist submit's own output, stamped as it arrives (imports, validation, render, "
         "kubeconfig, POSTs)", "kubectl apply, whole run (cluster.kubectl_apply_s)"),
    Spec("cluster.kubectl_apply_s", "kubectl apply, whole run", "s",
         "kubectl apply -f <rendered>", "(absolute)"),
    Spec("cluster.start_to_first_step_s", "container start to first training step (rank 0)",
         "s", "rank 0 pod log: launcher's first line -> first step line (runtime timestamps)",
         "(absolute; all runs of both variants)"),
    Spec("cluster.pod_created_to_first_step_s", "pod created to first training step (rank 0)",
         "s", "rank 0 pod: metadata.creationTimestamp -> first step line", "(absolute)"),
    Spec("cluster.pod_created_to_first_step_warm_s",
         "pod created to first training step (rank 0), warm workers", "s",
         f"{KDIST}, distributed.warmWorkers: true", "(absolute)", "<= 2.5", 2.5,
         higher_is_better=False),
    Spec("cluster.start_to_first_step_warm_s",
         "container start to first training step (rank 0), warm workers", "s",
         f"{KDIST}, distributed.warmWorkers: true", "(absolute)"),
]


def _stamp(text: str) -> float:
    """RFC 3339 (nanoseconds trimmed to microseconds) -> epoch seconds."""
    text = text.rstrip("Z")
    head, _, frac = text.partition(".")
    return datetime.fromisoformat(f"{head}.{(frac or '0')[:6].ljust(6, '0')}+00:00").timestamp()


def _kdist_cli() -> list[str]:
    script = Path(PYTHON).parent / "kdist"
    return [str(script)] if script.is_file() else [PYTHON, "-m", "kdist"]


def _start_times(kc: str, ns: str, name: str) -> tuple[float, float]:
    """(launcher start -> first step, pod created -> first step) of rank 0, in seconds."""
    sel = f"kdist.dev/job-name={name},batch.kubernetes.io/job-completion-index=0"
    out = run_cmd(["kubectl", "--kubeconfig", kc, "-n", ns, "get", "pods", "-l", sel,
                   "-o", "json"], timeout=30).out
    pods: list[dict[str, Any]] = json.loads(out)["items"]
    if not pods:
        raise BenchError(f"no rank-0 pod of job {name} in {ns}")
    pod = pods[0]
    log = run_cmd(["kubectl", "--kubeconfig", kc, "-n", ns, "logs", pod["metadata"]["name"],
                   "-c", "pytorch", "--timestamps"], timeout=30).out
    lines = [line.partition(" ") for line in log.splitlines() if line.strip()]
    steps = [stamp for stamp, _, text in lines if '"event": "step"' in text]
    if not lines or not steps:
        raise BenchError(f"job {name}: no step line in rank 0's log:\n{log[-1500:]}")
    first_step = _stamp(steps[0])
    created = _stamp(pod["metadata"]["creationTimestamp"])
    return first_step - _stamp(lines[0][0]), first_step - created


def run(ctx: Ctx) -> dict[str, Measured]:
    api = kube.connect()
    kc = str(kube.kubeconfig())
    compile_kdist()  # cluster.submit_to_created_s: kdist's start-up as installed, with .pyc
    starts: list[float] = []
    created: list[float] = []
    to_created: list[float] = []
    applies: list[float] = []
    warm_starts: list[float] = []
    warm_created: list[float] = []
    counter = {"kdist": 0, "kubectl": 0, "warm": 0}
    with TemporaryDirectory() as tmp, kube.namespace(api, "kdist-bench-ttr") as ns:
        ctx.say(f"    namespace {ns}")

        def job_file(variant: str) -> tuple[str, Path]:
            counter[variant] += 1
            name = f"ttr-{variant}-{counter[variant]}"
            path = Path(tmp) / f"{name}.yaml"
            text = kube.job_yaml(name, ns, nodes=2, args=ARGS)
            if variant == "warm":
                text = text.replace("distributed: {backend: gloo}",
                                    "distributed: {backend: gloo, warmWorkers: true}")
            path.write_text(text)
            return name, path

        def after(name: str) -> None:
            s, c = _start_times(kc, ns, name)
            (warm_starts if name.startswith("ttr-warm") else starts).append(s)
            (warm_created if name.startswith("ttr-warm") else created).append(c)

        def kdist_run(variant: str = "kdist") -> float:
            name, path = job_file(variant)
            lines, wall = run_lines([*_kdist_cli(), "--kubeconfig", kc, "-n", ns, "submit",
                                     str(path), "--wait", "--timeout", "400"],
                                    env=clean_env(), timeout=450)
            created = [t for t, text in lines if " created" in text]
            if not created:
                out = "\n".join(text for _, text in lines)
                raise BenchError(f"kdist submit printed no `created` line on stdout:\n{tail(out)}")
            to_created.append(created[0])
            after(name)
            return wall

        def kubectl_run() -> float:
            name, path = job_file("kubectl")
            manifests = Path(tmp) / f"{name}.rendered.yaml"
            # stdout only: validate's warnings (stderr) are not YAML for kubectl.
            manifests.write_text(run_cmd([*_kdist_cli(), "render", str(path)],
                                         env=clean_env()).out)
            base = ["kubectl", "--kubeconfig", kc, "-n", ns]
            t_apply = run_cmd([*base, "apply", "-f", str(manifests)], timeout=60).wall
            applies.append(t_apply)
            t_wait = run_cmd([*base, "wait", "--for=condition=complete", f"job/{name}",
                              "--timeout=400s"], timeout=450).wall
            after(name)
            return t_apply + t_wait

        try:
            v = interleave({"kdist": kdist_run, "kubectl": kubectl_run,
                            "warm": lambda: kdist_run("warm")}, ctx.rounds, ctx.say)
        except subprocess.TimeoutExpired as e:
            raise BenchError(f"timed out: {e}") from None
    r = ratios(v["kdist"], v["kubectl"])
    return {
        "cluster.submit_wait_vs_kubectl": Measured(median(r), r, f"{ctx.rounds} interleaved pairs"),
        "cluster.submit_wait_s": Measured(median(v["kdist"]), v["kdist"]),
        "cluster.kubectl_apply_wait_s": Measured(median(v["kubectl"]), v["kubectl"]),
        "cluster.submit_to_created_s": Measured(median(to_created), to_created),
        "cluster.kubectl_apply_s": Measured(median(applies), applies),
        "cluster.start_to_first_step_s": Measured(median(starts), starts),
        "cluster.pod_created_to_first_step_s": Measured(median(created), created,
                                                        "creationTimestamp has 1 s resolution"),
        "cluster.pod_created_to_first_step_warm_s": Measured(
            median(warm_created), warm_created, "creationTimestamp has 1 s resolution"),
        "cluster.start_to_first_step_warm_s": Measured(median(warm_starts), warm_starts),
    }
