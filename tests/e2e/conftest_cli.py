"""Fixtures for the CLI's e2e tests (imported by test_cli_cluster.py).

Fixture functions are named `*_fixture` (the fixture name is given) so that a
test module can import them without its parameters shadowing the import.

`kdist` runs the real command line in a subprocess (stdout is a pipe, so the
plain-line progress is what is seen), against $KUBECONFIG and the test's
namespace from conftest.py. `job_file` writes a job.yaml. Job images:
kdist-train:dev-cpu, as tests/cluster/image.sh loads it.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdist import backends
from kdist.spec.quantity import parse_quantity

REPO = Path(__file__).resolve().parents[2]
IMAGE = "kdist-train:dev-cpu"
KDIST_TIMEOUT = 240  # no single kdist call in these tests may take longer

# A workload with a known pace and outcome: prints the documented JSON step
# lines every PACE seconds; rank FAIL_RANK (if any) exits with FAIL_CODE at
# step FAIL_AT. Used where the real ddp workload's speed would make a test flaky.
PACED = textwrap.dedent("""\
    import json, os, sys, time
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    steps, pace = int(sys.argv[sys.argv.index("--max-steps") + 1]), float(os.environ["PACE"])
    fail_rank, fail_at = int(os.environ.get("FAIL_RANK", -1)), int(os.environ.get("FAIL_AT", 1))
    for step in range(1, steps + 1):
        time.sleep(pace)
        if rank == fail_rank and step == fail_at:
            print(f"rank {rank}: failing on purpose", flush=True)
            sys.exit(int(os.environ["FAIL_CODE"]))
        print(json.dumps({"event": "step", "step": step, "loss": 1.0 / step, "rank": rank,
                          "world_size": world}), flush=True)
    print(json.dumps({"event": "done", "step": steps, "rank": rank, "world_size": world}),
          flush=True)
""")


def job_spec(
    name: str,
    *,
    backend: str = "indexed-job",
    nodes: int = 2,
    args: list[str] | None = None,
    paced: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A job.yaml as a dict: the ddp workload, or the PACED script when `paced` is given."""
    if paced is not None:
        workload = {"command": ["python", "-c", PACED], "args": args or ["--max-steps", "10"]}
        env = {"PACE": "0.5", **paced}
    else:
        workload = {
            "module": "kdist.workloads.ddp",
            "args": args
            or [
                "--max-steps",
                "6",
                "--batch-size",
                "16",
                "--log-every",
                "2",
                "--dataset-size",
                "2048",
            ],
        }
        env = {}
    body = {
        "backend": backend,
        "image": IMAGE,
        "nodes": nodes,
        "procsPerNode": 1,
        "workload": workload,
        "distributed": {"backend": "gloo"},
        "resources": {"cpu": "500m", "memory": "1Gi"},
        "env": env,
    }
    body.update(spec)
    return {
        "apiVersion": "kdist/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": body,
    }


def check_fits_beside_others(request: pytest.FixtureRequest, spec: dict[str, Any]) -> None:
    """`make e2e` runs several tests at once (E2E_WORKERS): a job that asks for more than
    its share of the cluster's CPU could leave two gangs half-scheduled, each waiting for
    the other. Such a test must be marked `exclusive` (run alone); this says so at once."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2 or request.node.get_closest_marker("exclusive"):
        return
    body = spec["spec"]
    if (body.get("scheduling") or {}).get("queue"):
        return  # Kueue starts its pods only within ClusterQueue kdist-e2e's 1 CPU
    asked = parse_quantity(str(body["resources"].get("cpu", "1"))) * body["nodes"]
    nodes = request.getfixturevalue("kube").core.list_node(_request_timeout=30).items
    share = sum(parse_quantity(n.status.allocatable["cpu"]) for n in nodes) / workers
    if asked > share:
        pytest.fail(f"job {spec['metadata']['name']} asks {asked:g} CPU, more than a test's "
                    f"share ({share:g}) while {workers} run at once: mark the test "
                    "@pytest.mark.exclusive", pytrace=False)


@pytest.fixture(name="job_file")
def job_file_fixture(tmp_path: Path, request: pytest.FixtureRequest) -> Callable[..., Path]:
    """Write a job.yaml (see job_spec) and return its path."""

    def write(name: str, **kwargs: Any) -> Path:
        spec = job_spec(name, **kwargs)
        check_fits_beside_others(request, spec)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    return write


@pytest.fixture(name="kdist")
def kdist_fixture(namespace: str) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run `kdist -n NAMESPACE ARGS...` to its end; returns the finished process."""

    def run(
        *args: str | Path, timeout: float = KDIST_TIMEOUT, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "kdist", "-n", namespace, *map(str, args)]
        started = time.monotonic()
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
            env={**os.environ, **(env or {})},
        )
        print(
            f"$ kdist -n {namespace} {' '.join(map(str, args))}  -> {proc.returncode} "
            f"in {time.monotonic() - started:.1f}s\n{proc.stdout}{proc.stderr}"
        )
        return proc

    return run


@pytest.fixture(name="kdist_popen")
def kdist_popen_fixture(namespace: str) -> Callable[..., subprocess.Popen[str]]:
    """Start `kdist -n NAMESPACE ARGS...` in the background (stdout piped, line-buffered)."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str | Path) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-m", "kdist", "-n", namespace, *map(str, args)]
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1, cwd=REPO
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def kubectl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["kubectl", *args], input=stdin, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc


@functools.cache
def training_resources() -> str:
    """Every training kind's resource this cluster serves, and what each is built from (a
    TrainJob's TrainingRuntime), as `kubectl get` names them (an operated kind the cluster
    lacks would fail the whole `get`)."""
    served = set(kubectl("api-resources", "-o", "name").stdout.split())
    names = [f"{k.plural}.{k.group}" for b in backends.BACKENDS for k in (b.kind, *b.created_first)]
    return ",".join(n for n in names if n in served)


def leftovers(namespace: str, name: str) -> list[str]:
    """Every object of job `name` still in `namespace` (by label and by name)."""
    kinds = f"{training_resources()},pods,services,endpointslices"
    by_label = kubectl(
        "-n", namespace, "get", kinds, "-l", f"kdist.dev/job-name={name}", "-o", "name"
    ).stdout.split()
    by_owner = kubectl(
        "-n",
        namespace,
        "get",
        "pods,services",
        "-l",
        f"training.kubeflow.org/job-name={name}",
        "-o",
        "name",
    ).stdout.split()
    return sorted(set(by_label + by_owner))
