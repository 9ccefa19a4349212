"""What shipping kdist's runtime with the job costs a pod's start (spec.runtime).

Interleaved per round, in one fresh namespace, the same 2-node DDP job on two images
built from one Dockerfile (tests/cluster/image.sh):

- shipped: ``kdist-bare:dev-cpu``, torch without kdist; ``runtime: auto`` ships the
  runtime as a ConfigMap: the pod mounts it, the bootstrap hashes the zip, and
  Python imports the launcher and the workload from it (sources, no ``.pyc``);
- baked-in: ``kdist-train:dev-cpu``, the same layers plus kdist installed.

Each job runs ``kdist submit --wait``; then rank 0's pod says how long it took from
its creation (1 s resolution) and from the container's first log line (the
runtime's ns timestamps) to its first training step (``--log-every 1``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from tempfile import TemporaryDirectory

from bench import kube
from bench.cluster import ARGS, _kdist_cli, _start_times
from bench.harness import (
    BenchError,
    Ctx,
    Measured,
    Spec,
    clean_env,
    interleave,
    median,
    ratios,
    run_lines,
)

BARE = "kdist-bare:dev-cpu"
JOB = "2 nodes x 1 proc, gloo, cpu 1 per pod, 20 DDP steps"
SHIPPED = f"image {BARE} (no kdist), runtime shipped in a ConfigMap ({JOB})"
BAKED = f"image {kube.IMAGE} (kdist installed), runtime from the image ({JOB})"

FIGURES = [
    Spec("runtime.start_shipped_vs_baked", "pod created to first step: shipped / baked-in runtime",
         "x", SHIPPED, BAKED, "<= 1.1", 1.1, higher_is_better=False),
    Spec("runtime.first_line_shipped_vs_baked",
         "container's first line to first step: shipped / baked-in runtime", "x", SHIPPED, BAKED,
         "<= 1.1", 1.1, higher_is_better=False),
    Spec("runtime.start_shipped_s", "pod created to first step, shipped runtime", "s", SHIPPED,
         "(absolute)"),
    Spec("runtime.start_baked_s", "pod created to first step, baked-in runtime", "s", BAKED,
         "(absolute)"),
]


def run(ctx: Ctx) -> dict[str, Measured]:
    api = kube.connect()
    kc = str(kube.kubeconfig())
    counter = {"shipped": 0, "baked": 0}
    created: dict[str, list[float]] = {"shipped": [], "baked": []}
    first_line: dict[str, list[float]] = {"shipped": [], "baked": []}
    with TemporaryDirectory() as tmp, kube.namespace(api, "kdist-bench-runtime") as ns:
        ctx.say(f"    namespace {ns}")

        def job(variant: str, image: str) -> float:
            counter[variant] += 1
            name = f"rt-{variant}-{counter[variant]}"
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(kube.job_yaml(name, ns, nodes=2, args=ARGS, image=image))
            lines, _ = run_lines([*_kdist_cli(), "--kubeconfig", kc, "-n", ns, "submit",
                                  str(path), "--wait", "--timeout", "400"],
                                 env=clean_env(), timeout=450)
            if variant == "shipped" and not any("-runtime-" in text for _, text in lines):
                raise BenchError(f"{name}: no runtime ConfigMap was created for {image}")
            line, pod = _start_times(kc, ns, name)
            first_line[variant].append(line)
            created[variant].append(pod)
            return pod

        try:
            interleave({"shipped": lambda: job("shipped", BARE),
                        "baked": lambda: job("baked", kube.IMAGE)}, ctx.rounds, ctx.say)
        except subprocess.TimeoutExpired as e:
            raise BenchError(f"timed out: {e}") from None
    start = ratios(created["shipped"], created["baked"])
    line = ratios(first_line["shipped"], first_line["baked"])
    pairs = f"{ctx.rounds} interleaved pairs"
    return {
        "runtime.start_shipped_vs_baked": Measured(
            median(start), start, pairs + "; creationTimestamp has 1 s resolution"),
        "runtime.first_line_shipped_vs_baked": Measured(median(line), line, pairs),
        "runtime.start_shipped_s": Measured(median(created["shipped"]), created["shipped"]),
        "runtime.start_baked_s": Measured(median(created["baked"]), created["baked"]),
    }
