"""A lost node on the 2-node kind cluster: a warm spare takes its rank vs a replacement pod.

Issue 54's figures, side by side in one run: each round runs the same DDP job (2 ranks,
gloo, 500m per pod, ``nodeLossSeconds: 10``, restarting in place with warm workers (the
survivors' new workers come from standbys, as the spare's do), a checkpoint every 20
steps on storage both nodes mount) two ways, rank 0 on the node that survives and rank 1
on the kind worker, which is paused (``docker pause``: its kubelet, containers and network
frozen at once) once step 50 is logged:

- **spare**: ``spares: 1``, the spare on the surviving node: the gang finds node 1 lost
  (its heartbeat silent for 10 s), the spare takes rank 1 and the gang resumes;
- **spare-cold**: the same spare with ``warmWorkers`` off (the defaults): the spare's
  workers still start from the standbys it kept while it waited, the survivors' cold;
- **nospare**: no spare: the survivors wait at the rendezvous for a replacement pod. A pod
  on an unreachable node is replaced only once the node is tainted out of service (or
  comes back), so, as a cluster's operator does and ``test_node_loss.py``'s
  ``node-declared-lost`` drill does, the node gets ``node.kubernetes.io/out-of-service``
  as soon as it is NotReady (~40-50 s); its pod is deleted and the replacement joins.

The figure is the time from the pause to the first step line after the first ``resume``
line (``kdist logs --follow``'s arrival times, this machine's clock). The job is deleted
once measured (the rest of its run measures nothing), the node unpaused and untainted,
and the next drill waits until it is Ready and schedulable again.

It needs the kind cluster (``make kind-up``): ``$KDIST_BENCH_KIND_KUBECONFIG``, else
``.cluster-kind/kubeconfig``; the node's Docker (``$KDIST_KIND_DOCKER_HOST``, else
``.cluster-kind/run/docker.sock``); the shared directory (``$KDIST_E2E_SHARED_DIR``, else
``.cluster-kind/shared``). Without them it skips and says which is missing. A drill takes
2-4 minutes: ``$KDIST_BENCH_NODELOSS_ROUNDS`` (default: the run's rounds) bounds them.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import kube as benchkube
from bench.harness import REPO, BenchError, Ctx, Measured, Skip, Spec, clean_env, median, ratios

KIND = REPO / ".cluster-kind"
LOSS_S = 10
STEPS_ARGS = ["--max-steps", "100000", "--checkpoint-every", "20", "--log-every", "5",
              "--keep-checkpoints", "0", "--batch-size", "16", "--dataset-size", "2048",
              "--step-delay", "0.05"]
FAULT_AFTER, STRIKE_AT = 40, 50
JOB = ("DDP, gloo, 2 pods of 500m, restartMode inPlace, warmWorkers, nodeLossSeconds 10, "
       "the kind worker of rank 1 paused at step 50")
RESUME_TIMEOUT = 600

FIGURES = [
    Spec("nodeloss.spare_s", "node paused -> first resumed step, a warm spare takes the rank",
         "s", f"spares: 1 ({JOB})", "", goal="<= 20 s", target=20.0, higher_is_better=False),
    Spec("nodeloss.nospare_s", "node paused -> first resumed step, no spare (replacement pod)",
         "s", f"no spare, the out-of-service taint once NotReady ({JOB})", "",
         higher_is_better=False),
    Spec("nodeloss.spare_vs_nospare", "node loss: spare vs replacement pod (time ratio)", "x",
         "nodeloss.spare_s", "nodeloss.nospare_s", goal="<= 0.33", target=0.33,
         higher_is_better=False),
    Spec("nodeloss.spare_cold_s", "node paused -> first resumed step, a spare, survivors cold",
         "s", f"spares: 1, warmWorkers false (the defaults: only the spare's workers start "
         f"from standbys) ({JOB.replace('warmWorkers, ', '')})", "", higher_is_better=False),
]


def _path(variable: str, default: Path) -> Path:
    return Path(os.environ.get(variable) or default)


def _connect() -> tuple[Any, Any]:
    """The kind cluster's client (tests.e2e's Kube) and its worker node to pause; Skip
    naming what is missing."""
    kc = _path("KDIST_BENCH_KIND_KUBECONFIG", KIND / "kubeconfig")
    if not kc.is_file():
        raise Skip(f"no kind cluster: {kc} does not exist (make kind-up, or set "
                   "KDIST_BENCH_KIND_KUBECONFIG)")
    os.environ["KDIST_BENCH_KUBECONFIG"] = str(kc)  # bench.kube's connect reads it
    api = benchkube.connect()
    if shutil.which("docker") is None:
        raise Skip("the docker CLI is not on PATH (kind's nodes are paused with it)")
    from tests.e2e.conftest import Kube
    from tests.e2e.test_node_loss import CONTROL_PLANE, KindNode, _schedulable

    k = Kube(api)
    nodes = [n for n in k.core.list_node(_request_timeout=15).items if _schedulable(n)]
    workers = [n.metadata.name for n in nodes if CONTROL_PLANE not in (n.metadata.labels or {})
               and (n.spec.provider_id or "").startswith("kind://")]
    if len(nodes) < 2 or not workers:
        raise Skip(f"needs the 2-node kind cluster ({kc} has {len(nodes)} schedulable "
                   f"node(s), {len(workers)} kind worker(s)): make kind-up")
    host = os.environ.get("KDIST_KIND_DOCKER_HOST") or f"unix://{KIND / 'run' / 'docker.sock'}"
    victim = KindNode(workers[0], host)
    if not victim.running():
        raise Skip(f"node {victim.name} is not a container of the Docker at {host} "
                   "(set KDIST_KIND_DOCKER_HOST)")
    survivor = next(n.metadata.name for n in nodes if n.metadata.name != victim.name)
    return k, (victim, survivor)


@contextmanager
def _shared_claim(k: Any, ns: str) -> Iterator[dict[str, Any]]:
    """The checkpoint volume: a claim on a hostPath PV of the directory both nodes mount."""
    from kubernetes import client

    from tests.e2e.test_restarts import hostpath_pv

    shared = _path("KDIST_E2E_SHARED_DIR", KIND / "shared")
    if not shared.is_dir():
        raise Skip(f"no shared directory {shared} (both kind nodes mount it; make kind-up)")
    host_dir = shared / ns
    host_dir.mkdir()
    pv = hostpath_pv(k, ns, str(host_dir), "ReadWriteMany")
    k.core.create_namespaced_persistent_volume_claim(ns, client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name="ckpt"),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteMany"], storage_class_name="", volume_name=pv,
            resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}))),
        _request_timeout=15)
    try:
        yield {"persistentVolumeClaim": {"claimName": "ckpt"}}
    finally:
        k.core.delete_persistent_volume(pv, _request_timeout=15)
        shutil.rmtree(host_dir, ignore_errors=True)


def _job(name: str, ns: str, volume: dict[str, Any], spares: int, warm: bool = True) -> Any:
    from kdist.spec import validate_job

    # warm workers on both sides: the survivors' new workers come from standbys (the spare's
    # from the standby it kept while it waited); only the spare differs between the two
    distributed = {"backend": "gloo", "maxRestarts": 2, "restartMode": "inPlace",
                   "warmWorkers": warm, "nodeLossSeconds": LOSS_S, "collectiveTimeoutSeconds": 300,
                   "rendezvousTimeoutSeconds": 600, **({"spares": spares} if spares else {})}
    return validate_job({"apiVersion": "kdist/v1alpha1", "kind": "TrainingJob",
                         "metadata": {"name": name, "namespace": ns}, "spec": {
                             "image": benchkube.IMAGE, "nodes": 2, "procsPerNode": 1,
                             # a directory of its own on the shared volume: a job must
                             # not resume from the previous drill's checkpoints
                             "workload": {"module": "kdist.workloads.ddp", "args": [
                                 *STEPS_ARGS, "--checkpoint-dir", f"/checkpoints/{name}"]},
                             "distributed": distributed,
                             "checkpoint": {"path": "/checkpoints", "volume": volume},
                             # a standby beside each worker: ~0.7 GB more
                             "resources": {"cpu": "500m", "memory": "2Gi"}}})


def _drill(k: Any, ns: str, name: str, volume: dict[str, Any], nodes: tuple[Any, str],
           spare: bool, say: Any, warm: bool = True) -> float:
    """One drill: seconds from the pause to the first resumed step."""
    import subprocess

    from kdist.rendering import render
    from tests.e2e.test_node_loss import (
        Placer,
        node_not_ready,
        node_ready,
        node_schedulable,
        set_taint,
        spread,
        wait_node,
    )
    from tests.e2e.test_restarts import Stream, figures
    from tests.e2e.test_training import create

    victim, survivor = nodes
    first = {0: survivor, 1: victim.name, **({2: survivor} if spare else {})}
    placer = Placer(k, ns, name, first=first)
    proc = None
    paused = tainted = False
    try:
        create(k, ns, spread(render(_job(name, ns, volume, 1 if spare else 0, warm)), name,
                             required=False, gate=True))
        proc = subprocess.Popen([sys.executable, "-m", "kdist", "--kubeconfig",
                                 os.environ["KDIST_BENCH_KUBECONFIG"], "-n", ns, "logs", name,
                                 "--follow"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, bufsize=1, cwd=REPO, env=clean_env())
        stream = Stream(proc)
        if not (stream.until(lambda r: r["event"] == "checkpoint" and r["step"] >= FAULT_AFTER,
                             timeout=300)
                and stream.until(lambda r: r.get("step", 0) >= STRIKE_AT, timeout=60)):
            raise BenchError(f"{name}: no step {STRIKE_AT} after a checkpoint:\n"
                             + "\n".join(stream.text[-15:]))
        fault = time.monotonic()
        _docker(victim, "pause")
        paused = True
        if not spare:  # the operator's procedure for a node that is gone
            waited = wait_node(k, victim.name, node_not_ready)
            say(f"    {name}: node {victim.name} NotReady after {waited:.0f} s: tainted "
                "out of service")
            set_taint(k, victim.name, present=True)
            tainted = True
        if not (stream.until(lambda r: r["event"] == "resume", timeout=RESUME_TIMEOUT)
                and stream.until(lambda r: r["event"] == "step", timeout=120)):
            raise BenchError(f"{name}: the gang did not resume:\n" + "\n".join(stream.text[-15:]))
        took = figures(stream.records, fault)
        say(f"    {name}: resumed at {took['resumed_at']}, {took['steps_lost']} step(s) lost")
        return float(took["seconds_fault_to_resumed_step"])
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        subprocess.run(["kubectl", "--kubeconfig", os.environ["KDIST_BENCH_KUBECONFIG"], "-n",
                        ns, "delete", "job", name, "--wait=false"], capture_output=True,
                       timeout=60)
        if paused:
            _docker(victim, "unpause")
        if tainted:
            wait_node(k, victim.name, node_ready)
            set_taint(k, victim.name, present=False)
        wait_node(k, victim.name, node_ready)
        wait_node(k, victim.name, node_schedulable)
        placer.stop()


def _docker(node: Any, verb: str) -> None:
    out = node.docker(verb, node.name)
    if out.returncode != 0:
        raise BenchError(f"docker {verb} {node.name}: {out.stderr.strip()}")


def run(ctx: Ctx) -> dict[str, Measured]:
    k, nodes = _connect()
    rounds = int(os.environ.get("KDIST_BENCH_NODELOSS_ROUNDS") or ctx.rounds)
    took: dict[str, list[float]] = {"spare": [], "nospare": [], "spare-cold": []}
    with benchkube.namespace(k.api, "kdist-bench-nodeloss") as ns, \
            _shared_claim(k, ns) as volume:
        ctx.say(f"    namespace {ns}, {rounds} round(s), node {nodes[0].name} paused")
        for r in range(rounds):
            for way in took:
                name = f"nl-{way}-{r}"
                took[way].append(_drill(k, ns, name, volume, nodes, way != "nospare",
                                        ctx.say, warm=way != "spare-cold"))
                ctx.say(f"    round {r + 1}/{rounds} {way}: {took[way][-1]:.1f} s")
    ratio = ratios(took["spare"], took["nospare"])
    n = f"{rounds} interleaved round(s) on the 2-node kind cluster"
    return {
        "nodeloss.spare_s": Measured(median(took["spare"]), took["spare"], n),
        "nodeloss.nospare_s": Measured(median(took["nospare"]), took["nospare"], n),
        "nodeloss.spare_vs_nospare": Measured(median(ratio), ratio, n),
        "nodeloss.spare_cold_s": Measured(median(took["spare-cold"]), took["spare-cold"], n),
    }
