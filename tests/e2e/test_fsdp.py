"""A 2-pod FSDP2 job on the real cluster survives a killed worker: it trains, rank 1's
training process is SIGKILLed right after a checkpoint, the gang restarts, every rank
resumes from the newest DCP checkpoint (each rank's shards on the volume both pods
mount) and the job finishes all its steps, losing at most one checkpoint interval.
In the style of test_restarts.py, whose volume, stream and figures it reuses.
"""

from __future__ import annotations

import json
import subprocess
import time

from .conftest import Kube
from .conftest_cli import job_file_fixture, kdist_fixture, kdist_popen_fixture  # noqa: F401
from .test_restarts import Stream, figures, report, running_pod, shared_volume  # noqa: F401

MAX_STEPS, CKPT_EVERY, LOG_EVERY = 120, 20, 5
FAULT_AFTER, STRIKE_AT = 40, 50
ARGS = ["--max-steps", str(MAX_STEPS), "--checkpoint-every", str(CKPT_EVERY),
        "--log-every", str(LOG_EVERY), "--keep-checkpoints", "0", "--batch-size", "8",
        "--dataset-size", "2048", "--hidden", "32", "--heads", "4", "--layers", "2",
        "--seq-len", "16", "--vocab", "32", "--step-delay", "0.05"]
MOUNT = "/checkpoints"
RUN_TIMEOUT = 360

# SIGKILL the training workers (python -u -m kdist.workloads.fsdp), not the launcher.
KILL_WORKERS = (
    "import os, signal\n"
    "for p in filter(str.isdigit, os.listdir('/proc')):\n"
    "    if int(p) == os.getpid(): continue\n"
    "    try: argv = open(f'/proc/{p}/cmdline', 'rb').read().split(b'\\0')\n"
    "    except OSError: continue\n"
    "    if b'kdist.workloads.fsdp' in argv and b'kdist.launch' not in argv:\n"
    "        os.kill(int(p), signal.SIGKILL); print('killed', p)\n"
)


def kill_training_process(namespace: str, pod: str) -> None:
    out = subprocess.run(
        ["kubectl", "-n", namespace, "exec", pod, "-c", "pytorch", "--",
         "python", "-c", KILL_WORKERS],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0 and "killed" in out.stdout, out.stdout + out.stderr


def test_a_killed_fsdp_worker_restarts_the_gang_which_resumes_and_finishes(
        kube: Kube, namespace, shared_volume, kdist, kdist_popen, job_file):  # noqa: F811
    name = "fsdp-survive"
    path = job_file(name, workload={"module": "kdist.workloads.fsdp", "args": ARGS},
                    distributed={"backend": "gloo", "maxRestarts": 2},
                    checkpoint={"path": MOUNT, "volume": shared_volume})
    proc = kdist_popen("submit", path, "--follow", "--timeout", str(RUN_TIMEOUT))
    stream = Stream(proc)
    saved = stream.until(lambda r: r["event"] == "checkpoint" and r["step"] >= FAULT_AFTER,
                         timeout=240)
    assert saved and stream.until(lambda r: r.get("step", 0) >= STRIKE_AT, timeout=60), \
        "\n".join(stream.text)
    fault_time = time.monotonic()
    kill_training_process(namespace, running_pod(kube, namespace, name, 1))
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
    # The checkpoint is DCP's: a shard file per rank, written by both pods.
    resumes = [r for _, _, r in stream.records if r["event"] == "resume"]
    assert all(r["saved_world_size"] == 2 for r in resumes), resumes
    status = json.loads(kdist("status", name, "-o", "json").stdout)
    assert status["phase"] == "Succeeded", status
    assert all(r["restarts"] >= 1 for r in status["ranks"]), status["ranks"]
    assert "rank 0" in log and "lost a peer" in log, log
    report({"backend": "indexed-job", "workload": "fsdp", "fault": "sigkill-process",
            "checkpoint_every": CKPT_EVERY, **cost})
