"""Nothing a worker prints is kdist's word, and no line a worker prints stops kdist reading
its output (docs/security.md, "Which log lines kdist trusts")."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from disttools import free_port

from kdist.local import run_local
from kdist.shared.ledger import in_process_line
from kdist.spec import load_job

JOB = """\
apiVersion: kdist/v1alpha1
kind: TrainingJob
metadata: {{name: local-lines}}
spec:
  image: kdist-train:test
  nodes: 2
  procsPerNode: 1
  workload: {{command: [python, {script}]}}
  distributed: {{backend: gloo, port: {port}, maxRestarts: 3}}
  resources: {{cpu: "1", memory: 1Gi}}
"""
RESTART = "kdist.launch: " + in_process_line(777, 3, "worker rank 1 (node 1) was killed", 137)
FAILED = "kdist.launch: worker rank 1 (node 1, local rank 0, pid 7) exited with code 1; " \
         "exiting 1: forged"
# Rank 1 prints a line no JSON reader can parse, then every way it has of passing for its
# launcher (with a prefix, after a character some readers split lines at, as a whole line),
# then its steps; a pipe that stopped being read would hang it at its next write.
SCRIPT = """\
import json, os, sys
rank = int(os.environ["RANK"])
if rank == 1:
    print('{"event": ' + "[" * 100000, flush=True)
    for line in FORGED:
        print(line, flush=True)
for n in range(1, 4):
    print(json.dumps({"event": "step", "step": n, "rank": rank, "loss": 1.0 / n}), flush=True)
    if rank == 1:
        print("x" * 70000, flush=True)  # the pipe fills up well before these end
print(json.dumps({"event": "done", "step": 3, "rank": rank}), flush=True)
"""


@pytest.mark.timeout(120)
def test_a_local_run_reads_past_any_line_and_counts_no_restart_a_worker_forges(tmp_path,
                                                                               monkeypatch):
    monkeypatch.chdir(tmp_path)
    forged = [RESTART, FAILED, "INFO " + RESTART, "[node 1] " + RESTART, "x\x0b" + RESTART,
              "x\r" + RESTART, "x\u2028" + RESTART, "[node 0] " + FAILED]
    script = tmp_path / "lines.py"
    script.write_text(f"FORGED = {forged!r}\n" + SCRIPT)
    job = tmp_path / "job.yaml"
    job.write_text(JOB.format(script=json.dumps(str(script)), port=free_port()))
    out, ledgers = io.StringIO(), []
    code = run_local(load_job(job), stdout=out, on_ledger=ledgers.append)
    lines = out.getvalue().splitlines()
    assert code == 0, "\n".join(line[:200] for line in lines)
    assert ledgers == [] or ledgers[0]["restartsUsed"] == 0, ledgers
    done = [json.loads(line.partition("] ")[2]) for line in lines if '"done"' in line]
    assert sorted(d["rank"] for d in done) == [0, 1]
    # What rank 1 printed came out as its own, none as a launcher's.
    assert f"[rank 1] {RESTART}" in lines and f"[rank 1] {FAILED}" in lines
    assert not any(line.startswith("[node ") and "777" in line for line in lines)


def test_the_local_summary_names_no_failure_a_worker_forges(tmp_path, monkeypatch):
    from kdist.cli.running import RunSummary

    s = RunSummary("demo")
    for line in (f"[rank 1] {FAILED}", f"[rank 1] [node 0] {FAILED}"):
        s.feed(line)
    assert s.failure is None


def test_the_pump_reads_on_past_a_line_its_ledger_cannot_read():
    """The local runner's reader of a node's output (``_pump``): one line whose reading
    raises must not end the reading (the node would block on a full pipe)."""
    import threading

    from kdist.local.runner import _pump

    class Picky:
        def __init__(self) -> None:
            self.seen: list[str] = []

        def line(self, node: int, text: str) -> None:
            self.seen.append(text)
            if text.startswith("boom"):
                raise RecursionError("maximum recursion depth exceeded")

    proc = subprocess.Popen([sys.executable, "-c", "for i in range(3000): print(f'boom {i}' "
                             "if i % 2 else f'line {i}', flush=True)"], stdout=subprocess.PIPE)
    picky, out = Picky(), io.StringIO()
    _pump(proc, 0, out, threading.Lock(), picky)
    assert proc.wait(timeout=30) == 0
    assert len(picky.seen) == 3000 and len(out.getvalue().splitlines()) == 3000


SEAL_CHILD = """\
import os, sys
try:
    fd = os.open(f"/proc/{os.getppid()}/fd/1", os.O_WRONLY)
except OSError as e:
    print("refused", e.errno, file=sys.stderr)
else:
    os.write(fd, b"kdist.launch: forged\\n")
    print("wrote", file=sys.stderr)
"""
SEAL_PARENT = """\
import subprocess, sys
from kdist.runtime.output import seal
if sys.argv[1] == "sealed":
    seal()
r = subprocess.run([sys.executable, "-c", sys.argv[2]], stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, text=True)
print(r.stderr.strip(), file=sys.stderr)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux only")
def test_a_worker_cannot_write_into_its_sealed_launchers_stream():
    """A worker (the launcher's child, the same user) could open the launcher's stdout
    through /proc/PID/fd and write a line its pipes never saw; not once the launcher is
    sealed (kdist.runtime.output.seal, which ``kdist.launch`` does first thing)."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root}
    def as_a_pods_user() -> None:  # root with CAP_SYS_PTRACE opens anything: drop it
        import ctypes

        if os.geteuid() == 0 and ctypes.CDLL(None).prctl(24, 19, 0, 0, 0) != 0:
            os._exit(99)  # PR_CAPBSET_DROP CAP_SYS_PTRACE refused (no CAP_SETPCAP)

    got = {}
    for mode in ("open", "sealed"):
        r = subprocess.run([sys.executable, "-c", SEAL_PARENT, mode, SEAL_CHILD],
                           capture_output=True, text=True, env=env, cwd="/",
                           timeout=60, preexec_fn=as_a_pods_user)
        if r.returncode == 99:
            pytest.skip("root here, and CAP_SYS_PTRACE cannot be dropped")
        got[mode] = r.stderr.strip()
    assert got["open"].startswith("wrote"), got  # the way in, unsealed
    assert got["sealed"].startswith("refused 13"), got  # EACCES


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux only")
def test_kdists_launcher_is_sealed_from_its_workers():
    """The launcher itself (``python -m kdist.launch``): its worker tries the way in."""
    from disttools import node_env

    from kdist.local import local_env

    def as_a_pods_user() -> None:  # root with CAP_SYS_PTRACE opens anything: drop it
        import ctypes

        if os.geteuid() == 0 and ctypes.CDLL(None).prctl(24, 19, 0, 0, 0) != 0:
            os._exit(99)

    env = local_env(node_env(1, 1, 0, free_port()))
    r = subprocess.run([sys.executable, "-m", "kdist.launch", "--", sys.executable, "-c",
                        SEAL_CHILD.replace("/fd/1", "/fd/2")], env=env, capture_output=True,
                       text=True, timeout=120, preexec_fn=as_a_pods_user)
    if r.returncode == 99:
        pytest.skip("root here, and CAP_SYS_PTRACE cannot be dropped")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[rank 0] refused 13" in r.stdout.splitlines(), r.stdout + r.stderr
    assert "forged" not in r.stdout + r.stderr
