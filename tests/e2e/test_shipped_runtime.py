"""spec.runtime shipped on a real cluster: an image without kdist, unchanged.

The image is `kdist-bare:dev-cpu` (tests/cluster/image.sh: image/Dockerfile's bare
target, torch and numpy, no kdist, no user for the pods' UID 1000 and so no home: the
pods' HOME is kdist's emptyDir, and a cache can be written there); `runtime: auto`
ships kdist's runtime with the job as one ConfigMap owned by it. On it kdist's DDP
workload trains as an Indexed Job, a SIGKILLed rank's gang restarts and resumes from
its checkpoint; a workdir's script runs as a PyTorchJob. A runtime ConfigMap changed
after rendering fails the job at once (exit 2, never retried); so does an image whose
torch kdist does not support, by name. (One backend each: tests/dist runs the shipped
runtime's restarts without a cluster, and CI's time is shared.)
"""

from __future__ import annotations

import base64
import json
import subprocess
import time

import pytest
import yaml
from kubernetes import client

from kdist.rendering import runtime_ship
from kdist.shared import env as E
from kdist.shared import labels as L

from .conftest import REQUEST_TIMEOUT, Kube
from .conftest_cli import (  # noqa: F401 - the fixtures register by being imported
    job_file_fixture,
    kdist_fixture,
    kdist_popen_fixture,
    kubectl,
    leftovers,
)
from .test_restarts import Stream, running_pod, shared_volume  # noqa: F401
from .test_training import wait_job
from .test_workdir import WORKLOAD, assert_ran, write_code

BARE = "kdist-bare:dev-cpu"
OLDTORCH = "kdist-oldtorch:dev-cpu"
MAX_STEPS, CKPT_EVERY = 60, 10
FAULT_AFTER, STRIKE_AT = 20, 25
ARGS = ["--max-steps", str(MAX_STEPS), "--checkpoint-every", str(CKPT_EVERY),
        "--log-every", "5", "--keep-checkpoints", "0", "--batch-size", "16",
        "--dataset-size", "2048", "--step-delay", "0.05"]
pytestmark = pytest.mark.timeout(600)

# In the running pod, with the container's own environment (the bootstrap's path is
# its processes' only): is there a kdist in the image? A user for the pods' UID (the
# image has none, as most PyTorch images: HOME would be /)? Can a cache be written under
# HOME (kdist's emptyDir)? Then SIGKILL the workers (`python -m kdist.workloads.ddp`),
# not the launcher (`python3 -c BOOT ... --module`).
PROBE_AND_KILL = (
    "import importlib.util, os, pwd, signal\n"
    "print('image kdist:', importlib.util.find_spec('kdist'))\n"
    "try: print('uid user:', pwd.getpwuid(os.getuid()).pw_name)\n"
    "except KeyError: print('uid user: none')\n"
    "cache = os.path.join(os.environ['HOME'], '.cache', 'probe')\n"
    "try: os.makedirs(cache, exist_ok=True); open(os.path.join(cache, 'f'), 'w').write('x')\n"
    "except OSError as e: print('home not writable:', os.environ['HOME'], e)\n"
    "else: print('home writable:', os.environ['HOME'])\n"
    "for p in filter(str.isdigit, os.listdir('/proc')):\n"
    "    try: argv = open(f'/proc/{p}/cmdline', 'rb').read().split(b'\\0')\n"
    "    except OSError: continue\n"
    "    if b'-m' in argv and b'kdist.workloads.ddp' in argv:\n"
    "        os.kill(int(p), signal.SIGKILL); print('killed', p)\n"
)


def pod_container(kube: Kube, namespace: str, name: str) -> client.V1Container:
    pods = kube.core.list_namespaced_pod(namespace, label_selector=f"{L.JOB_NAME}={name}",
                                         _request_timeout=REQUEST_TIMEOUT).items
    assert pods, f"no pods of {name}"
    return pods[0].spec.containers[0]


def test_an_image_without_kdist_trains_and_resumes_after_a_sigkill(
        kube, namespace, shared_volume, kdist, kdist_popen, job_file):  # noqa: F811
    name = "bare"
    path = job_file(name, image=BARE, args=ARGS,
                    distributed={"backend": "gloo", "maxRestarts": 1},
                    checkpoint={"path": "/checkpoints", "volume": shared_volume})
    proc = kdist_popen("submit", path, "--follow", "--timeout", "300")
    stream = Stream(proc)
    saved = stream.until(lambda r: r["event"] == "checkpoint" and r["step"] >= FAULT_AFTER,
                         timeout=240)
    assert saved and stream.until(lambda r: r.get("step", 0) >= STRIKE_AT, timeout=60), \
        "\n".join(stream.text)
    container = pod_container(kube, namespace, name)
    runtime = runtime_ship.built()
    assert container.image == BARE
    assert container.command == ["python3", "-c", runtime_ship.BOOT, runtime.sha256]
    probe = subprocess.run(
        ["kubectl", "-n", namespace, "exec", running_pod(kube, namespace, name, 1), "-c",
         container.name, "--", "python3", "-c", PROBE_AND_KILL],
        capture_output=True, text=True, timeout=60)
    assert "image kdist: None" in probe.stdout, probe.stdout + probe.stderr
    assert "uid user: none" in probe.stdout, probe.stdout + probe.stderr  # HOME=/ otherwise
    assert f"home writable: {E.DEFAULT_HOME}\n" in probe.stdout, probe.stdout + probe.stderr
    assert "killed" in probe.stdout, probe.stdout + probe.stderr
    stream.until(lambda r: False, timeout=300)  # to the end of the run
    rc = proc.wait(30)
    log = "\n".join(stream.text) + proc.stderr.read()
    assert rc == 0, log
    assert f"configmap/{name}-runtime-{runtime.sha256[:10]} created" in log, log
    done = {rank: r["step"] for _, rank, r in stream.records if r["event"] == "done"}
    assert done == {0: MAX_STEPS, 1: MAX_STEPS}, log
    resumed = {rank: r["step"] for _, rank, r in stream.records if r["event"] == "resume"}
    assert set(resumed) == {0, 1} and min(resumed.values()) >= FAULT_AFTER, log
    status = json.loads(kdist("status", name, "-o", "json").stdout)
    assert status["phase"] == "Succeeded" and status["ledger"]["restartsUsed"] == 1, status
    assert kdist("delete", name, "--wait").returncode == 0
    assert not kubectl("-n", namespace, "get", "configmaps", "-l", f"{L.JOB_NAME}={name}",
                       "-o", "name").stdout.split()
    assert leftovers(namespace, name) == []


@pytest.mark.parametrize("backend", ["indexed-job", "pytorchjob"])
def test_kdists_ddp_trains_on_an_image_without_kdist(backend, kube, namespace, kdist, job_file):
    """Also in the kind stage (make e2e-kind), where kdist-bare is Debian forky's own
    torch 2.14 on Python 3.14 (no libuv): the runtime zipped here runs there."""
    path = job_file("bare-ddp", backend=backend, image=BARE)
    out = kdist("submit", path, "--timeout", "300")
    assert out.returncode == 0, out.stdout + out.stderr
    sha = runtime_ship.built().sha256
    assert f"configmap/bare-ddp-runtime-{sha[:10]} created" in out.stdout, out.stdout
    container = pod_container(kube, namespace, "bare-ddp")
    assert container.image == BARE and container.command[-1] == sha
    status = json.loads(kdist("status", "bare-ddp", "-o", "json").stdout)
    assert status["phase"] == "Succeeded", status


def test_a_workdir_script_runs_on_an_image_without_kdist(kube, namespace, kdist, job_file,
                                                          tmp_path):
    write_code(tmp_path / "code", "v1")
    path = job_file("bare-code", backend="pytorchjob", image=BARE, workload=WORKLOAD,
                    workdir="code")
    out = kdist("submit", path, "--timeout", "300")
    assert out.returncode == 0, out.stdout + out.stderr
    # A PyTorchJob may be over (its worker stopped) before rank 1's line is read.
    assert_ran(kdist("logs", "bare-code").stdout, "v1", {0})
    assert pod_container(kube, namespace, "bare-code").command[:2] == ["python3", "-c"]


def test_a_changed_runtime_configmap_fails_the_job_at_once(kube, namespace, kdist, job_file):
    """`kubectl apply` of `kdist render`, its runtime ConfigMap changed on the way: every
    pod refuses it (exit 2, a code error: the job fails, nothing is retried)."""
    path = job_file("tampered", image=BARE, distributed={"backend": "gloo", "maxRestarts": 3})
    rendered = kdist("render", path)
    assert rendered.returncode == 0, rendered.stderr
    docs = list(yaml.safe_load_all(rendered.stdout))
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    data = bytearray(base64.b64decode(cm["binaryData"][E.RUNTIME_ZIP]))
    data[-30] ^= 0xFF  # inside the zip's central directory
    cm["binaryData"][E.RUNTIME_ZIP] = base64.b64encode(bytes(data)).decode()
    kubectl("-n", namespace, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    started = time.monotonic()
    assert wait_job(kube, namespace, "tampered", "indexed-job") == "failed"
    took = time.monotonic() - started
    logs = kubectl("-n", namespace, "logs", "-l", f"{L.JOB_NAME}=tampered", "--tail", "5",
                   "--prefix").stdout
    sha = runtime_ship.built().sha256
    assert f"this pod was made for {sha[:12]}: refused" in logs, logs
    pods = kube.core.list_namespaced_pod(namespace, label_selector=f"{L.JOB_NAME}=tampered",
                                         _request_timeout=REQUEST_TIMEOUT).items
    # Every pod that ran to its end refused the runtime (exit 2). The Job fails on the first
    # refusal, so a pod still starting then is deleted by the Job controller (it may be gone,
    # or terminating with another code): count what is there, not that both are.
    ended = {p.metadata.name: s.state.terminated.exit_code for p in pods
             for s in p.status.container_statuses or () if s.state.terminated}
    assert 2 in ended.values(), ended
    assert all(code == 2 for name, code in ended.items()
               if not _deleted(pods, name)), ended
    indexes = [p.metadata.annotations[L.COMPLETION_INDEX] for p in pods]
    assert len(indexes) == len(set(indexes)) <= 2, indexes  # no retry: one pod per index
    print(f"tampered runtime: job failed {took:.1f}s after apply")
    # The ConfigMap nothing owns (kubectl apply) goes with `kdist delete`.
    assert kdist("delete", "tampered", "--wait").returncode == 0
    assert leftovers(namespace, "tampered") == []
    assert not kubectl("-n", namespace, "get", "configmaps", "-o", "name").stdout.count(
        "tampered-runtime")


def _deleted(pods: list, name: str) -> bool:
    """Whether pod `name` was being deleted (the Job controller stops a failed Job's pods)."""
    return any(p.metadata.name == name and p.metadata.deletion_timestamp for p in pods)


def test_an_image_with_an_unsupported_torch_fails_fast_by_name(kube, namespace, kdist, job_file):
    backend = "indexed-job"
    path = job_file("oldtorch", backend=backend, image=OLDTORCH,
                    distributed={"backend": "gloo", "maxRestarts": 3})
    started = time.monotonic()
    out = kdist("submit", path, "--timeout", "240")
    took = time.monotonic() - started
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert "torch 2.3 in this image; kdist's runtime needs 2.8-2.15" in text, text
    assert "stand-in" not in text  # no worker ever imported it
    assert wait_job(kube, namespace, "oldtorch", backend) == "failed"
    print(f"unsupported torch ({backend}): kdist submit ended {took:.1f}s after it began")
