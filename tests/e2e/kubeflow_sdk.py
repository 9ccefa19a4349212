"""The Kubeflow SDK (PyPI `kubeflow`, KUBEFLOW_SDK in the Makefile) asked about the cluster,
for the TrainJob interop tests (issue 57).

The SDK pins `kubernetes<36`, which kdist's own does not allow, so it lives in a venv of
its own (the Makefile's `e2e` target makes it: SDK_VENV, passed as KDIST_SDK_VENV). Each
question is one small script run there by subprocess, with the kubeconfig and namespace
of the test, answering one JSON document on its last line of stdout. The tests skip (not
fail) only where that venv is absent: a run outside `make e2e`.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

VENV = os.environ.get("KDIST_SDK_VENV", "")
TIMEOUT = 600  # seconds: the longest question waits for a job to finish

# Shared by every script: the client for the test's namespace, and a TrainJob as JSON.
PRELUDE = '''
import json, os, sys
from kubeflow.common.types import KubernetesBackendConfig
from kubeflow.trainer import TrainerClient
ARGS = json.loads(sys.argv[1])
client = TrainerClient(KubernetesBackendConfig(
    namespace=os.environ["SDK_NAMESPACE"], config_file=os.environ["KUBECONFIG"]))

def job(j):
    return {"name": j.name, "status": j.status, "num_nodes": j.num_nodes,
            "runtime": j.runtime.name,
            "steps": sorted(({"name": s.name, "status": s.status, "pod": s.pod_name}
                             for s in j.steps), key=lambda s: s["name"])}

def answer(value):
    print(json.dumps(value))
'''

SCRIPTS = {
    "list_jobs": "answer([job(j) for j in client.list_jobs()])",
    "get_job": "answer(job(client.get_job(ARGS['name'])))",
    "get_job_logs": "answer(list(client.get_job_logs(ARGS['name'])))",
    "wait_for_job_status": (
        "answer(job(client.wait_for_job_status(ARGS['name'], set(ARGS['status']), "
        "timeout=ARGS['timeout'])))"),
    # CustomTrainerContainer: the runtime's command in the given image, num_nodes pods.
    "train": (
        "from kubeflow.trainer import CustomTrainerContainer\n"
        "answer(client.train(runtime=client.get_runtime(ARGS['runtime']), "
        "trainer=CustomTrainerContainer(image=ARGS['image'], num_nodes=ARGS['nodes'])))"),
}


def python() -> Path:
    """The SDK venv's interpreter; skips the test where there is none (outside make e2e)."""
    exe = Path(VENV) / "bin" / "python"
    if not VENV or not exe.exists():
        pytest.skip("the Kubeflow SDK's venv is absent (KDIST_SDK_VENV: `make e2e` makes it)")
    return exe


def ask(question: str, namespace: str, **args: Any) -> Any:
    """The SDK's answer to `question` (SCRIPTS) in `namespace`, as JSON; fails the test
    with the SDK's own words when it raises."""
    exe = python()
    proc = subprocess.run(
        [str(exe), "-c", PRELUDE + SCRIPTS[question], json.dumps(args)],
        capture_output=True, text=True, timeout=TIMEOUT,
        env={**os.environ, "SDK_NAMESPACE": namespace})
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        pytest.fail(f"the Kubeflow SDK's {question}({args}) failed (exit {proc.returncode}):\n"
                    f"{proc.stderr[-3000:]}", pytrace=False)
    return json.loads(lines[-1])


# -- a ClusterTrainingRuntime of the stock shape --------------------------------------------

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                  "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                        "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def stock_runtime(name: str, image: str, command: list[str]) -> dict[str, Any]:
    """Kubeflow Trainer v2.3.0's torch-distributed (manifests/base/runtimes), named `name`:
    the framework label, mlPolicy torch, one replicated Job `node` labelled as the trainer
    step, its container `node` running `command` in `image`. Only what Pod Security
    "restricted" (the test namespaces') asks is added: the security contexts."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {
            "replicatedJobs": [{"name": "node", "template": {
                "metadata": {"labels": {ANCESTOR: "trainer"}},
                "spec": {"template": {"spec": {
                    "securityContext": RESTRICTED_POD,
                    "containers": [{"name": "node", "image": image,
                                    "imagePullPolicy": "IfNotPresent", "command": command,
                                    "securityContext": RESTRICTED_CONTAINER}]}}}}}]}}}}
