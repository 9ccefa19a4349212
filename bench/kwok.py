"""kwok's fake nodes for the API-side scale benchmark (`bench.scalekube`) and its e2e test.

`fake_nodes(n)` brings n kwok nodes up (tests/cluster/kwok.sh, on the cluster this machine
runs) and takes them down again; `job_text` writes a kdist job whose pods go there (the
nodes' taint tolerated, their label selected) and that kwok ends after `run_for`;
`end_pods` makes pods exit with a code (kwok's kdist-pod-exit stage reads the annotation);
`measure` runs one client command and reports what it cost: wall time, CPU seconds, peak
memory (the child's own rusage), and the API requests and long-running connections the
counting proxy (`bench.apiproxy`) saw of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import REPO, BenchError, Skip, clean_env, peak_rss_kb, tail

KWOK_SH = REPO / "tests" / "cluster" / "kwok.sh"
OWNER_FILE = Path("/run/kdist-cluster.owner")
EXIT = "kwok.kdist.dev/exit"  # kwok.sh's stage: Running -> Succeeded/Failed with this code
RUN_FOR = "kwok.kdist.dev/run-for"  # kwok.sh's stage: Running -> Succeeded after this long


def available() -> None:
    """Skip unless this machine runs the harness's cluster and kwok can be started on it."""
    if os.geteuid() != 0:
        raise Skip("kwok.sh runs as root (it starts kwok beside the cluster's components)")
    if not OWNER_FILE.is_file():
        raise Skip("no single-node test cluster runs here (/run/kdist-cluster.owner): kwok "
                   "attaches to that harness's API server")
    binary = Path(os.environ.get("KDIST_CACHE", Path.home() / ".cache" / "kdist")) / "bin"
    version = next((line.split("=", 1)[1].strip() for line in
                    (REPO / "tests/cluster/versions.env").read_text().splitlines()
                    if line.startswith("KWOK_VERSION=")), "")
    if not (binary / f"kwok-{version}").is_file():
        raise Skip(f"kwok {version} is not built: bash tests/cluster/build.sh kwok")


def kwok_sh(*args: str, timeout: float = 900) -> str:
    p = subprocess.run(["bash", str(KWOK_SH), *args], capture_output=True, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        raise BenchError(f"kwok.sh {' '.join(args)} exited {p.returncode}:\n{tail(p.stderr)}")
    return p.stderr


@contextmanager
def fake_nodes(n: int) -> Iterator[None]:
    """n kwok nodes, Ready, for the duration; removed (and kwok stopped) after."""
    available()
    kwok_sh("up", str(n))
    try:
        yield
    finally:
        kwok_sh("down")


def job_text(name: str, ns: str, *, nodes: int, run_for: str = "", backend: str = "indexed-job",
             gang: str = "auto", max_restarts: int = 0) -> str:
    """A kdist job whose pods land on kwok's nodes (and nowhere else); kwok ends each pod
    `run_for` after it runs ("": only when a test says so, `end_pods`)."""
    labels = f"{{{RUN_FOR}: {run_for}}}" if run_for else "{}"
    return (
        "apiVersion: kdist/v1alpha1\nkind: TrainingJob\n"
        f"metadata: {{name: {name}, namespace: {ns}, labels: {labels}}}\n"
        f"spec:\n  backend: {backend}\n  image: kdist-train:dev-cpu\n  nodes: {nodes}\n"
        "  workload: {module: kdist.workloads.ddp, args: [--max-steps, '20']}\n"
        f"  distributed: {{backend: gloo, gang: {gang}, restartMode: recreate, "
        f"maxRestarts: {max_restarts}}}\n"
        # 4 pods fit a fake node (4 CPUs): two N-pod gangs side by side fit N nodes
        "  resources: {cpu: '1', memory: 1Gi}\n"
        "  scheduling:\n    nodeSelector: {type: kwok}\n"
        "    tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]\n"
        "  ttlSecondsAfterFinished: 900\n")


def pods(api: Any, ns: str, selector: str) -> list[Any]:
    from kubernetes import client

    return client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=selector,
                                                      _request_timeout=60).items


def wait_running(api: Any, ns: str, selector: str, n: int, timeout: float = 600) -> float:
    """Seconds until `n` pods of `selector` run (kwok's pod-ready stage)."""
    started = time.monotonic()
    while True:
        running = [p for p in pods(api, ns, selector) if p.status.phase == "Running"]
        if len(running) >= n:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise BenchError(f"{len(running)} of {n} pods ({selector}) Running after {timeout} s")
        time.sleep(2)


def end_pods(api: Any, ns: str, names: Sequence[str], code: int) -> None:
    """Annotate each pod: kwok ends it with exit code `code` (16 patches at a time; a pod
    gone meanwhile is skipped)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    body = {"metadata": {"annotations": {EXIT: str(code)}}}

    def patch(name: str) -> None:
        try:
            core.patch_namespaced_pod(name, ns, body, _request_timeout=60)
        except client.ApiException as e:
            if e.status != 404:  # gone already (a failed job's other pods are deleted)
                raise

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(patch, names))


@dataclass
class Cost:
    """What one client command cost."""

    code: int
    wall_s: float
    cpu_s: float
    rss_mb: float
    stats: dict[str, Any] = field(default_factory=dict)  # the proxy's: requests, peaks
    out: str = ""
    err: str = ""

    @property
    def requests(self) -> int:
        return int(self.stats.get("requests", 0))

    def brief(self) -> str:
        return (f"{self.wall_s:.2f} s, {self.cpu_s:.2f} CPU s, {self.rss_mb:.0f} MB, "
                f"{self.requests} requests, {self.stats.get('peak_long', 0)} long-running "
                f"at most, {json.dumps(self.stats.get('by_kind', {}))}")


def measure(cmd: Sequence[str], proxy: Any = None, *, timeout: float = 900,
            check: bool = True) -> Cost:
    """Run `cmd` to its end; its own CPU (wait4's rusage), not its siblings', and its own
    peak memory (`peak_rss_kb`: a shell's children sampled every ~0.25 s)."""
    if proxy is not None:
        proxy.reset()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.monotonic()
        p = subprocess.Popen(list(cmd), env=clean_env(), stdout=out, stderr=err, text=True)
        deadline, peak_kb, polls = started + timeout, 0, 0
        shell = cmd[0] == "sh"  # kubectl chained by a shell: its children, every 10th poll
        while True:  # not wait4's ru_maxrss: it counts this (harness) process's memory
            peak_kb = max(peak_kb, peak_rss_kb(p.pid, tree=shell and polls % 10 == 0))
            polls += 1
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                p.kill()
                _, status, usage = os.wait4(p.pid, 0)
                break
            time.sleep(0.02)
        wall = time.monotonic() - started
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        cost = Cost(p.returncode, wall, usage.ru_utime + usage.ru_stime, peak_kb / 1024,
                    proxy.snapshot() if proxy is not None else {}, out.read(), err.read())
    if check and cost.code != 0:
        raise BenchError(f"{' '.join(cmd[:6])} ... exited {cost.code}:\n"
                         f"{tail(cost.err or cost.out)}")
    return cost
