"""Two nodes: pods of one job spread over both, and the loss of a whole node.

Needs a cluster of at least two schedulable nodes (`make e2e-kind` makes one;
elsewhere these tests skip). The drills also need:

- a node that can be crashed: a kind node, i.e. a Docker container this
  machine reaches (``KDIST_KIND_DOCKER_HOST``, else ``DOCKER_HOST``) named
  like the Node, that does not run the control plane;
- storage every node reaches: ``KDIST_E2E_SHARED_DIR``, a host directory
  mounted at the same path on every node (kind: an extraMount of each node).

A drill runs kdist's DDP workload on two pods, rank 0 on a node that
survives and rank 1 on the node it crashes (``docker kill``: kubelet,
containers and network gone at once) right after a checkpoint. Rank 0 then
loses its peer (collective timeout) and the gang must restart, resume every
rank from the newest checkpoint and finish, in one of two outages:

- ``node-returns``: the node comes back once the control plane has marked it
  NotReady (a reboot); its kubelet reports rank 1's pod as failed;
- ``node-declared-lost``: it never comes back; once it is NotReady the
  cluster's operator applies the ``node.kubernetes.io/out-of-service`` taint
  (Kubernetes' procedure for a node that shut down without warning), so the
  stuck pod is deleted and the gang restarts on the surviving node. The node
  is restarted after the test, so later tests get both nodes again.

The figures (fault to the first resumed step, steps lost, when the node went
NotReady) are printed and appended to $KDIST_E2E_REPORT when set.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from kdist.kube.watch.objects import pod_rank
from kdist.rendering import render
from kdist.shared import labels as L
from kdist.spec import validate_job

from .conftest import REQUEST_TIMEOUT, Kube
from .conftest_cli import job_spec, kdist_popen_fixture  # noqa: F401
from .test_restarts import (
    ARGS,
    CKPT_EVERY,
    FAULT_AFTER,
    MAX_STEPS,
    STRIKE_AT,
    Stream,
    figures,
    hostpath_pv,
)
from .test_training import create, rank_records, wait_job

pytestmark = pytest.mark.exclusive  # a lost node takes other tests' pods with it

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
HOSTNAME = "kubernetes.io/hostname"
GATE = "kdist.dev/e2e-placement"
# Rank 0 notices the lost peer within this (its collective times out); the
# replacement of rank 1 may take minutes, so the rendezvous waits longer.
COLLECTIVE_TIMEOUT, RDZV_TIMEOUT = 30, 600
RUN_TIMEOUT = 900
NODE_TIMEOUT = 240  # a node to go NotReady after a crash, or Ready after a start


# --- the cluster's nodes ------------------------------------------------------------------------


def _ready(node: client.V1Node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def _schedulable(node: client.V1Node) -> bool:
    taints = [t for t in node.spec.taints or [] if t.effect in ("NoSchedule", "NoExecute")]
    return _ready(node) and not node.spec.unschedulable and not taints


def schedulable_nodes(kube: Kube) -> list[client.V1Node]:
    """Ready, schedulable nodes; skips the test when there are fewer than two."""
    nodes = [n for n in kube.core.list_node(_request_timeout=REQUEST_TIMEOUT).items
             if _schedulable(n)]
    if len(nodes) < 2:
        pytest.skip(f"needs at least 2 schedulable nodes, the cluster has {len(nodes)} "
                    "(make e2e-kind brings up a 2-node kind cluster)")
    return nodes


def node_ready(kube: Kube, name: str) -> bool:
    try:
        return _ready(kube.core.read_node(name, _request_timeout=REQUEST_TIMEOUT))
    except client.ApiException as e:
        if e.status == 404:
            return False
        raise


def node_schedulable(kube: Kube, name: str) -> bool:
    return _schedulable(kube.core.read_node(name, _request_timeout=REQUEST_TIMEOUT))


def wait_node(kube: Kube, name: str, want: Callable[[Kube, str], bool],
              timeout: float = NODE_TIMEOUT) -> float:
    """Seconds until `want(kube, name)` holds for node `name` (polled each second)."""
    started = time.monotonic()
    while not want(kube, name):
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"node {name}: {want.__name__} not true after {timeout}s")
        time.sleep(1)
    return time.monotonic() - started


def node_not_ready(kube: Kube, name: str) -> bool:
    return not node_ready(kube, name)


@dataclass(frozen=True)
class KindNode:
    """A kind node: a Docker container named like its Node, crashed and started with docker."""

    name: str
    docker_host: str | None

    def docker(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ)
        if self.docker_host:
            env["DOCKER_HOST"] = self.docker_host
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120,
                              env=env)

    def running(self) -> bool:
        out = self.docker("inspect", "-f", "{{.State.Running}}", self.name)
        return out.returncode == 0 and out.stdout.strip() == "true"

    def crash(self) -> None:
        out = self.docker("kill", self.name)
        assert out.returncode == 0, f"docker kill {self.name}: {out.stderr}"

    def start(self) -> None:
        out = self.docker("start", self.name)
        assert out.returncode == 0, f"docker start {self.name}: {out.stderr}"


def set_taint(kube: Kube, node: str, present: bool) -> None:
    """Add or remove the out-of-service taint on `node`."""
    current = kube.core.read_node(node, _request_timeout=REQUEST_TIMEOUT).spec.taints or []
    taints = [kube.api.sanitize_for_serialization(t) for t in current if t.key != OUT_OF_SERVICE]
    if present:
        taints.append({"key": OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"})
    kube.core.patch_node(node, {"spec": {"taints": taints}}, _request_timeout=REQUEST_TIMEOUT)


@pytest.fixture
def victim(kube: Kube) -> Iterator[KindNode]:
    """A schedulable kind node without the control plane, whole again after the test."""
    nodes = schedulable_nodes(kube)
    docker_host = os.environ.get("KDIST_KIND_DOCKER_HOST") or os.environ.get("DOCKER_HOST")
    if shutil.which("docker") is None:
        pytest.skip("crashing a node needs the docker CLI (kind nodes are containers)")
    workers = [n for n in nodes if CONTROL_PLANE not in (n.metadata.labels or {})
               and (n.spec.provider_id or "").startswith("kind://")]
    if not workers:
        pytest.skip("needs a schedulable kind worker node to crash (not the control plane)")
    node = KindNode(workers[0].metadata.name, docker_host)
    if not node.running():
        pytest.skip(f"node {node.name} is not a Docker container reachable here "
                    "(set KDIST_KIND_DOCKER_HOST to the kind cluster's Docker socket)")
    yield node
    # Whatever happened, leave the node as it was: running, Ready, without the
    # taints of its outage (the node controller lifts "unreachable" a little
    # after Ready; the next test must find both nodes schedulable).
    if not node.running():
        node.start()
    wait_node(kube, node.name, node_ready)
    set_taint(kube, node.name, present=False)
    wait_node(kube, node.name, node_schedulable)


@pytest.fixture
def node_shared_volume(kube: Kube, namespace: str) -> Iterator[dict[str, Any]]:
    """A PVC bound to a hostPath PV on the directory every node mounts from this host."""
    shared = os.environ.get("KDIST_E2E_SHARED_DIR")
    if not shared or not Path(shared).is_dir():
        pytest.skip("needs KDIST_E2E_SHARED_DIR: a host directory mounted at the same path "
                    "on every node (make e2e-kind sets it)")
    host_dir = Path(shared) / namespace
    host_dir.mkdir()
    pv_name = hostpath_pv(kube, namespace, str(host_dir), "ReadWriteMany")
    kube.core.create_namespaced_persistent_volume_claim(
        namespace,
        client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name="ckpt"),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteMany"], storage_class_name="", volume_name=pv_name,
                resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
            ),
        ),
        _request_timeout=REQUEST_TIMEOUT,
    )
    yield {"persistentVolumeClaim": {"claimName": "ckpt"}}
    kube.core.delete_persistent_volume(pv_name, _request_timeout=REQUEST_TIMEOUT)
    shutil.rmtree(host_dir, ignore_errors=True)


# --- placement ----------------------------------------------------------------------------------


def pod_templates(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A rendered object's pod templates: {"all": ...} for a Job, by replica type (a
    PyTorchJob) or replicated Job (a JobSet) otherwise."""
    if obj["kind"] == "Job":
        return {"all": obj["spec"]["template"]}
    if obj["kind"] == "JobSet":
        return {j["name"]: j["template"]["spec"]["template"]
                for j in obj["spec"]["replicatedJobs"]}
    if obj["kind"] == "PyTorchJob":
        return {kind.lower(): spec["template"]
                for kind, spec in obj["spec"]["pytorchReplicaSpecs"].items()}
    return {}


def spread(objects: list[dict[str, Any]], name: str, *, required: bool,
           gate: bool = False) -> list[dict[str, Any]]:
    """Patch the rendered pod templates: the job's pods on different nodes.

    `required` makes it a hard rule (pods stay Pending rather than share a
    node); otherwise a preference, so that after a node loss the whole gang may
    restart on the node that is left. `gate` holds every pod at a scheduling
    gate for a Placer. The spec has no such fields yet: this is what a user
    would add to the manifests themselves.
    """
    term = {"labelSelector": {"matchLabels": {L.JOB_NAME: name}}, "topologyKey": HOSTNAME}
    anti = ({"requiredDuringSchedulingIgnoredDuringExecution": [term]} if required else
            {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}]})
    for obj in objects:
        for template in pod_templates(obj).values():
            template["spec"]["affinity"] = {"podAntiAffinity": anti}
            if gate:
                template["spec"]["schedulingGates"] = [{"name": GATE}]
    return objects


class Placer:
    """Releases a job's gated pods: each rank's first pod pinned to a given node,
    every later pod (a restart) left to the scheduler.

    The drill must crash the node of rank 1 while rank 0 lives on; a spreading
    preference alone does not say which rank lands where (the pods of one
    template are alike). Pinning only the first pods leaves the restart's
    placement where it belongs: with the scheduler.
    """

    def __init__(self, kube: Kube, namespace: str, name: str, first: dict[int, str]) -> None:
        self.kube, self.namespace, self.name, self.first = kube, namespace, name, first
        self.placed: set[int] = set()
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for event in watch.Watch().stream(
                        self.kube.core.list_namespaced_pod, self.namespace,
                        label_selector=L.selector_string(self.name), timeout_seconds=5,
                        _request_timeout=30):
                    if event["type"] != "DELETED":
                        self._release(event["object"])
        except Exception as e:  # noqa: BLE001 - reported by stop()
            self.errors.append(e)

    def _release(self, pod: client.V1Pod) -> None:
        if not any(g.name == GATE for g in pod.spec.scheduling_gates or []):
            return
        rank = pod_rank(self.kube.api.sanitize_for_serialization(pod))
        ops: list[dict[str, Any]] = []
        if rank in self.first and rank not in self.placed:
            # Allowed on a gated pod: scheduling constraints may be added, not relaxed.
            ops.append({"op": "add", "path": "/spec/affinity/nodeAffinity", "value": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": HOSTNAME, "operator": "In",
                                           "values": [self.first[rank]]}]}]}}})
            self.placed.add(rank)
        ops.append({"op": "remove", "path": "/spec/schedulingGates"})
        self.kube.core.patch_namespaced_pod(pod.metadata.name, self.namespace, ops,
                                            _request_timeout=REQUEST_TIMEOUT)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self.errors, self.errors


def pods_by_rank(kube: Kube, namespace: str, name: str) -> dict[int, client.V1Pod]:
    """The job's running pods by node rank (found by label, never by name)."""
    pods = kube.core.list_namespaced_pod(namespace, label_selector=L.selector_string(name),
                                         _request_timeout=REQUEST_TIMEOUT).items
    return {pod_rank(kube.api.sanitize_for_serialization(p)): p for p in pods
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp}


def report(entry: dict[str, Any]) -> None:
    print("node-loss figures:", json.dumps(entry))
    path = os.environ.get("KDIST_E2E_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")


# --- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["indexed-job", "pytorchjob"])
def test_pods_on_two_nodes_rendezvous_across_them(kube: Kube, namespace: str, backend: str):
    nodes = {n.metadata.name for n in schedulable_nodes(kube)}
    name = f"spread-{backend.split('-')[0]}"
    job = validate_job(job_spec(name, backend=backend))
    create(kube, namespace, spread(render(job), name, required=True))
    assert wait_job(kube, namespace, name, backend) == "succeeded"
    pods = kube.core.list_namespaced_pod(namespace, label_selector=L.selector_string(name)).items
    placed = {pod_rank(kube.api.sanitize_for_serialization(p)): p.spec.node_name for p in pods}
    assert sorted(placed) == [0, 1], placed
    assert placed[0] != placed[1] and set(placed.values()) <= nodes, placed
    records = rank_records(kube, namespace, name)
    assert sorted(records) == [0, 1], records
    # One process group of two ranks, each on its own node, trained to the end.
    assert all(r[-1]["event"] == "done" and r[-1]["world_size"] == 2 for r in records.values())


@pytest.mark.parametrize("outage", ["node-returns", "node-declared-lost"])
@pytest.mark.parametrize("backend", ["indexed-job", "pytorchjob"])
def test_losing_the_node_of_rank_1_restarts_the_gang_which_resumes_and_finishes(
        backend, outage, kube, namespace, victim, node_shared_volume, kdist_popen):
    name = "nodeloss"
    job = validate_job(job_spec(
        name, backend=backend, args=ARGS,
        distributed={"backend": "gloo", "maxRestarts": 2,
                     "collectiveTimeoutSeconds": COLLECTIVE_TIMEOUT,
                     "rendezvousTimeoutSeconds": RDZV_TIMEOUT},
        checkpoint={"path": "/checkpoints", "volume": node_shared_volume},
        # Small enough that both ranks fit on the surviving node.
        resources={"cpu": "500m", "memory": "1Gi"}))
    survivor = next(n.metadata.name for n in schedulable_nodes(kube)
                    if n.metadata.name != victim.name)
    placer = Placer(kube, namespace, name, first={0: survivor, 1: victim.name})
    try:
        create(kube, namespace, spread(render(job), name, required=False, gate=True))
        drill(kube, namespace, name, backend, outage, victim, kdist_popen)
    finally:
        placer.stop()


def drill(kube: Kube, namespace: str, name: str, backend: str, outage: str, victim: KindNode,
          kdist_popen: Any) -> None:
    proc = kdist_popen("logs", name, "--follow")
    stream = Stream(proc)
    saved = stream.until(lambda r: r["event"] == "checkpoint" and r["step"] >= FAULT_AFTER,
                         timeout=300)
    assert saved and stream.until(lambda r: r.get("step", 0) >= STRIKE_AT, timeout=60), \
        "\n".join(stream.text)
    placed = {rank: pod.spec.node_name for rank, pod in pods_by_rank(kube, namespace, name).items()}
    assert placed.get(1) == victim.name and placed.get(0) not in (None, victim.name), placed

    fault_time = time.monotonic()
    victim.crash()
    notready_s = wait_node(kube, victim.name, node_not_ready)
    if outage == "node-returns":
        victim.start()
    else:
        set_taint(kube, victim.name, present=True)
    stream.until(lambda r: False, timeout=RUN_TIMEOUT)  # to the end of the run
    rc = proc.wait(30)
    log = "\n".join(stream.text) + proc.stderr.read()
    assert rc == 0, log

    done = {rank: r["step"] for _, rank, r in stream.records if r["event"] == "done"}
    assert done == {0: MAX_STEPS, 1: MAX_STEPS}, log
    cost = figures(stream.records, fault_time)
    assert set(cost["resumed_at"]) == {0, 1}, log
    assert len(set(cost["resumed_at"].values())) == 1, log
    assert min(cost["resumed_at"].values()) >= FAULT_AFTER, log
    assert cost["last_step_before_fault"] >= STRIKE_AT, cost
    assert 0 <= cost["steps_lost"] <= CKPT_EVERY, cost
    assert wait_job(kube, namespace, name, backend) == "succeeded"
    if outage == "node-declared-lost":  # the whole gang finished on what was left
        finished = kube.core.list_namespaced_pod(
            namespace, label_selector=L.selector_string(name)).items
        last = {pod_rank(kube.api.sanitize_for_serialization(p)): p.spec.node_name
                for p in finished if p.status.phase == "Succeeded"}
        assert last and victim.name not in last.values(), last
    report({"backend": backend, "outage": outage, "checkpoint_every": CKPT_EVERY,
            "collective_timeout_s": COLLECTIVE_TIMEOUT,
            "seconds_fault_to_node_notready": round(notready_s, 1), **cost})
