"""The test cluster as the cluster benchmarks see it: reachable or a Skip, a fresh
namespace per run (Pod Security "restricted", as the e2e tests use), deleted after."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.harness import REPO, Skip

IMAGE = "kdist-train:dev-cpu"
REQUEST_TIMEOUT = 15


def kubeconfig() -> Path:
    """$KDIST_BENCH_KUBECONFIG, else the test cluster's (.cluster/kubeconfig)."""
    return Path(os.environ.get("KDIST_BENCH_KUBECONFIG") or REPO / ".cluster" / "kubeconfig")


def connect() -> Any:
    """An API client of the test cluster; Skip when there is none or it does not answer."""
    path = kubeconfig()
    if not path.is_file():
        raise Skip(f"no cluster: {path} does not exist (make cluster-up)")
    if shutil.which("kubectl") is None:
        raise Skip("kubectl is not on PATH (the comparison runs it)")
    from kubernetes import client, config

    try:
        api = config.new_client_from_config(config_file=str(path))
        client.VersionApi(api).get_code(_request_timeout=5)
    except Exception as e:  # noqa: BLE001 - any failure here means: no cluster to measure
        raise Skip(f"no cluster: {path} does not answer ({str(e).splitlines()[0][:120]})") \
            from None
    return api


@contextmanager
def namespace(api: Any, prefix: str) -> Iterator[str]:
    """A fresh namespace for one benchmark run; deleted (not waited for) afterwards."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    name = f"{prefix}-{secrets.token_hex(3)}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=name, labels={"pod-security.kubernetes.io/enforce": "restricted",
                           "kdist.dev/bench": "true"})), _request_timeout=REQUEST_TIMEOUT)
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name, _request_timeout=REQUEST_TIMEOUT)
        except Exception:  # noqa: BLE001 - best effort; the name is unique per run
            pass


#: ``KDIST_BENCH_RUNTIME=shipped``: every job ships this tree's runtime (spec.runtime), for
#: a cluster whose image was built before it.
RUNTIME = os.environ.get("KDIST_BENCH_RUNTIME", "")


def job_yaml(name: str, ns: str, *, nodes: int, args: list[str], cpu: str = "1",
             memory: str = "1Gi", image: str = IMAGE) -> str:
    """A kdist job file for the DDP workload on the test image (or `image`)."""
    import json

    runtime = f"  runtime: {RUNTIME}\n" if RUNTIME else ""
    return (
        "apiVersion: kdist/v1alpha1\nkind: TrainingJob\n"
        f"metadata: {{name: {name}, namespace: {ns}}}\n"
        f"spec:\n  image: {image}\n{runtime}  nodes: {nodes}\n  procsPerNode: 1\n"
        f"  workload: {{module: kdist.workloads.ddp, args: {json.dumps(args)}}}\n"
        "  distributed: {backend: gloo}\n"
        f"  resources: {{cpu: \"{cpu}\", memory: {memory}}}\n"
        "  ttlSecondsAfterFinished: 900\n"
    )


def rendered(text: str) -> list[dict[str, Any]]:
    """What `kdist render` makes of a job file's text (the same code path)."""
    from kdist.rendering import render
    from kdist.spec import parse_job

    return render(parse_job(text))
