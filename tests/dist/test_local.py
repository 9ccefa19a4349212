"""kdist.local.run_local on real TrainingJobs: the `kdist run --local` path."""

from __future__ import annotations

import io
import json
import re
import socket
from pathlib import Path

import pytest
from disttools import TINY, free_port

from kdist.local import run_local
from kdist.spec import load_job

JOB = """\
apiVersion: kdist/v1alpha1
kind: TrainingJob
metadata: {{name: local-ddp}}
spec:
  image: kdist-train:test
  nodes: 2
  procsPerNode: 1
  workload:
    module: kdist.workloads.ddp
    args: {args}
  distributed: {{backend: gloo, port: {port}}}
  resources: {{cpu: "1", memory: 1Gi}}
  checkpoint: {{path: {ckpt}, volume: {{emptyDir: {{}}}}}}
"""
ARGS = [*TINY, "--max-steps", "40", "--log-every", "10", "--batch-size", "32", "--lr", "0.2",
        "--checkpoint-every", "20"]


def write_job(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(JOB.format(args=json.dumps(ARGS), port=port, ckpt=tmp_path / "ckpt"))
    return path


@pytest.mark.timeout(90)
def test_two_node_ddp_job_runs_locally(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # local runs keep checkpoints under ./.kdist/<name>/
    out = io.StringIO()
    code = run_local(load_job(write_job(tmp_path, free_port())), stdout=out)
    lines = out.getvalue().splitlines()
    assert code == 0, "\n".join(lines)
    assert all(re.match(r"\[(rank|node) \d\] ", line) for line in lines), lines
    steps = {0: [], 1: []}
    for line in lines:
        prefix, _, body = line.partition("] ")
        if body.startswith("{"):
            event = json.loads(body)
            assert prefix == f"[rank {event['rank']}"
            if event["event"] == "step":
                steps[event["rank"]].append(event["loss"])
    for rank, losses in steps.items():
        assert len(losses) == 4, rank
        assert losses[-1] < losses[0] * 0.8, (rank, losses)  # it learns
    ckpt = tmp_path / ".kdist" / "local-ddp" / "checkpoints"
    assert (ckpt / "latest").read_text().strip() == "step-40"


@pytest.mark.timeout(90)
def test_a_busy_port_is_replaced_by_a_free_one(tmp_path, monkeypatch, capsys):
    """Two local runs on one machine (two notebooks) must not meet at one rendezvous."""
    monkeypatch.chdir(tmp_path)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        job = load_job(write_job(tmp_path, port))
        job = job.model_copy(update={"spec": job.spec.model_copy(update={
            "nodes": 1, "checkpoint": None, "workload": job.spec.workload.model_copy(update={
                "args": [*TINY, "--max-steps", "4", "--log-every", "2"]})})})
        out = io.StringIO()
        assert run_local(job, stdout=out) == 0, out.getvalue()
    said = [line for line in capsys.readouterr().err.splitlines() if "in use" in line]
    assert len(said) == 1 and said[0].startswith(
        f"kdist: port {port} (spec.distributed.port) is in use here; this local run uses "
        "port "), said
    other = said[0].rsplit(" ", 1)[1]
    assert other != str(port) and f"master 127.0.0.1:{other}" in out.getvalue()


PORT_JOB = """\
apiVersion: kdist/v1alpha1
kind: TrainingJob
metadata: {{name: local-port}}
spec:
  image: kdist-train:test
  nodes: 1
  procsPerNode: 1
  workload:
    command: [python, -c, {code}, "--port=$(KDIST_MASTER_PORT)"]
  env: {{MY_PORT: "port $(KDIST_MASTER_PORT)"}}
  distributed: {{backend: gloo, port: {port}}}
  resources: {{cpu: "1", memory: 1Gi}}
"""
PORT_CODE = ("import json, os, sys; print('SEEN ' + json.dumps([sys.argv[1:], "
             "os.environ['MY_PORT'], os.environ['MASTER_PORT']]), flush=True)")


@pytest.mark.timeout(60)
def test_a_replaced_port_is_the_one_kdist_master_port_expands_to(tmp_path, monkeypatch,
                                                                   capsys):
    """$(KDIST_MASTER_PORT) in args and spec.env is the port the run uses, not the busy one."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "job.yaml"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        path.write_text(PORT_JOB.format(code=json.dumps(PORT_CODE), port=port))
        out = io.StringIO()
        assert run_local(load_job(path), stdout=out) == 0, out.getvalue()
    [said] = [line for line in capsys.readouterr().err.splitlines() if "in use" in line]
    used = said.rsplit(" ", 1)[1]
    [seen] = [json.loads(line.partition("SEEN ")[2]) for line in out.getvalue().splitlines()
              if "SEEN [" in line]
    assert used != str(port) and seen == [[f"--port={used}"], f"port {used}", used], seen


PROBE = Path(__file__).resolve().parents[1] / "compat" / "programs" / "env_probe.py"
PROBE_JOB = """\
apiVersion: kdist/v1alpha1
kind: TrainingJob
metadata: {{name: local-env}}
spec:
  image: kdist-train:test
  nodes: 1
  procsPerNode: 1
  workload: {{command: [python, {probe}]}}
  distributed: {{backend: gloo, port: {port}}}
  resources: {{cpu: "1", memory: 1Gi}}
"""


@pytest.mark.timeout(60)
def test_a_local_rank_gets_the_contract_not_the_shells_kdist_variables(tmp_path, monkeypatch):
    """A pod never sees the user's shell: a stale KDIST_* (or RANK, TORCHELASTIC_*) there
    must not reach a local run's ranks either; the user's own variables still do."""
    monkeypatch.chdir(tmp_path)
    stale = {"KDIST_PROGRESS_TIMEOUT": "1", "KDIST_CHECKPOINT_DIR": str(tmp_path / "stale"),
             "KDIST_GPUS": "8", "TORCHELASTIC_RUN_ID": "stale", "PET_NNODES": "9"}
    for name, value in {**stale, "MY_OWN_SETTING": "kept", "KDIST_FAULT_KILL_AT": "0:99"}.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "job.yaml"
    path.write_text(PROBE_JOB.format(probe=json.dumps(str(PROBE)), port=free_port()))
    out = io.StringIO()
    assert run_local(load_job(path), stdout=out) == 0, out.getvalue()
    [seen] = [json.loads(line.partition("ENV ")[2])["env"] for line in
              out.getvalue().splitlines() if "ENV {" in line]
    assert {k: seen[k] for k in stale if k in seen} == {"TORCHELASTIC_RUN_ID": "local-env"}
    assert seen["MY_OWN_SETTING"] == "kept" and seen["KDIST_JOB_NAME"] == "local-env"
    assert seen["KDIST_FAULT_KILL_AT"] == "0:99"  # the fault drills' hook, on purpose


IN_PROCESS_NODE = """\
import json, os, sys, time
node = int(os.environ["NODE"])
def step(n, event="step"):
    print(f"[rank {{node}}] " + json.dumps({{"event": event, "step": n}}), flush=True)
for n in range(1, 7):
    step(n)
time.sleep(0.3 * (node + 1))  # node 1 says it later: the same restart
sys.stderr.write({said!r} + "\\n")
sys.stderr.flush()
time.sleep(1.0)
step(4, "resume")
for n in range(5, 9):
    step(n)
"""


@pytest.mark.timeout(60)
def test_the_runner_counts_a_restart_in_process_its_launchers_say_once():
    """Stand-ins for launchers that restart their workers in process (no exit): every
    node says it, the ledger has one restart, back at the resume line."""
    import os
    import sys

    from kdist.local import run_nodes
    from kdist.local.ledger import LocalLedger
    from kdist.shared.ledger import in_process_line

    said = "kdist.launch: " + in_process_line(1, 2, "worker rank 1 (node 1, local rank 0, "
                                              "pid 7) was killed by SIGKILL", 137)
    ledger, out = LocalLedger(max_restarts=2), io.StringIO()
    envs = [{**os.environ, "NODE": str(i)} for i in range(2)]
    code = run_nodes([sys.executable, "-c", IN_PROCESS_NODE.format(said=said)], envs,
                     stdout=out, max_restarts=2, ledger=ledger)
    assert code == 0, out.getvalue()
    assert f"[node 1] {said}" in out.getvalue().splitlines()
    got = ledger.summary(succeeded=True)
    assert got is not None and got["restartsUsed"] == 1, (got, out.getvalue())
    (r,) = got["restarts"]
    assert r["cause"] == ("worker rank 1 (node 1, local rank 0, pid 7) was killed by SIGKILL "
                          "(exit 137: killed by SIGKILL (retryable))")
    assert (r["exitCode"], r["lastStep"], r["resumedStep"], r["stepsLost"]) == (137, 6, 4, 2)
    assert 0.5 < r["secondsLost"] < 10, r
