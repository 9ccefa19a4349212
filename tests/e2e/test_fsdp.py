"""FSDP2 on the real cluster: a 2-pod job trains with its parameters, gradients and
optimizer state sharded over both pods, checkpointing through DCP to a volume both
pods mount. Mid-run, right after a checkpoint, rank 1's training process is
SIGKILLed inside its pod: the gang restarts, every rank resumes from the same,
newest checkpoint, and the job finishes all its steps. The same checkpoint then
loads at another world size: resubmitted on one pod with more steps, the job
resumes where the 2-pod one ended and finishes.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from .conftest import Kube, kdist_container
from .conftest_cli import job_file_fixture, kdist_fixture, kdist_popen_fixture  # noqa: F401
from .test_restarts import Stream, figures, report, running_pod, shared_volume  # noqa: F401

MAX_STEPS, CKPT_EVERY, LOG_EVERY = 60, 10, 5
FAULT_AFTER, STRIKE_AT = 20, 25  # killed mid-interval, after the checkpoint of step 20
MODEL = ["--hidden", "32", "--layers", "2", "--heads", "2", "--seq-len", "16",
         "--batch-size", "4", "--dataset-size", "512", "--log-every", str(LOG_EVERY),
         "--checkpoint-every", str(CKPT_EVERY), "--keep-checkpoints", "0",
         "--step-delay", "0.1"]
MOUNT = "/checkpoints"
RUN_TIMEOUT = 360
pytestmark = pytest.mark.timeout(900)

KILL_FSDP = (
    "import os, signal\n"
    "for p in filter(str.isdigit, os.listdir('/proc')):\n"
    "    if int(p) == os.getpid(): continue\n"
    "    try: argv = open(f'/proc/{p}/cmdline', 'rb').read().split(b'\\0')\n"
    "    except OSError: continue\n"
    "    if b'kdist.workloads.fsdp' in argv and b'kdist.launch' not in argv:\n"
    "        os.kill(int(p), signal.SIGKILL); print('killed', p)\n"
)


def fsdp(max_steps: int) -> dict:
    return {"module": "kdist.workloads.fsdp", "args": ["--max-steps", str(max_steps), *MODEL]}


def kill_fsdp_worker(namespace: str, pod: str) -> None:
    out = subprocess.run(["kubectl", "-n", namespace, "exec", pod, "-c",
                          kdist_container(namespace, pod), "--", "python", "-c", KILL_FSDP],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "killed" in out.stdout, out.stdout + out.stderr


def follow(kdist_popen, path) -> tuple[Stream, subprocess.Popen[str]]:
    proc = kdist_popen("submit", path, "--follow", "--replace", "--timeout", str(RUN_TIMEOUT))
    return Stream(proc), proc


def finish(stream: Stream, proc: subprocess.Popen[str]) -> str:
    stream.until(lambda r: False, timeout=RUN_TIMEOUT)
    rc = proc.wait(30)
    log = "\n".join(stream.text) + proc.stderr.read()
    assert rc == 0, log
    return log


def test_a_killed_fsdp_rank_restarts_resumes_and_the_checkpoint_reshards(
        kube: Kube, namespace, shared_volume, kdist, kdist_popen, job_file):  # noqa: F811
    name = "fsdp"
    spec = {"distributed": {"backend": "gloo", "maxRestarts": 2},
            "checkpoint": {"path": MOUNT, "volume": shared_volume},
            "resources": {"cpu": "500m", "memory": "1Gi"}}
    path = job_file(name, workload=fsdp(MAX_STEPS), **spec)

    stream, proc = follow(kdist_popen, path)
    saved = stream.until(lambda r: r["event"] == "checkpoint" and r["step"] >= FAULT_AFTER,
                         timeout=240)
    assert saved and stream.until(lambda r: r.get("step", 0) >= STRIKE_AT, timeout=90), \
        "\n".join(stream.text)
    fault_time = time.monotonic()
    kill_fsdp_worker(namespace, running_pod(kube, namespace, name, 1))
    log = finish(stream, proc)

    done = {rank: r["step"] for _, rank, r in stream.records if r["event"] == "done"}
    assert done == {0: MAX_STEPS, 1: MAX_STEPS}, log
    cost = figures(stream.records, fault_time)
    assert set(cost["resumed_at"]) == {0, 1}, log
    assert len(set(cost["resumed_at"].values())) == 1, log
    assert min(cost["resumed_at"].values()) >= FAULT_AFTER, log
    assert 0 <= cost["steps_lost"] <= CKPT_EVERY, cost
    assert all(r["world_size"] == 2 for _, _, r in stream.records if r["event"] == "step")
    assert "lost a peer" in log, log
    report({"backend": "indexed-job", "workload": "fsdp", "fault": "sigkill-process",
            "checkpoint_every": CKPT_EVERY, **cost})

    # The 2-rank checkpoint, loaded by one rank: resharded, the step count goes on.
    more = MAX_STEPS + 2 * LOG_EVERY
    path = job_file(name, nodes=1, workload=fsdp(more), **spec)
    stream, proc = follow(kdist_popen, path)
    log = finish(stream, proc)
    resumes = [r for _, _, r in stream.records if r["event"] == "resume"]
    assert [(r["step"], r["world_size"]) for r in resumes] == [(MAX_STEPS, 1)], log
    steps = [r["step"] for _, _, r in stream.records if r["event"] == "step"]
    assert steps and steps[0] > MAX_STEPS and steps[-1] == more, log
    status = json.loads(kdist("status", name, "-o", "json").stdout)
    assert status["phase"] == "Succeeded", status
