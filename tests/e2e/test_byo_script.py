"""Your own script, unchanged, on the real cluster: fault drills on both backends.

The scripts are tests/compat's, shipped with the job (spec.workdir), not baked into
the image, and never changed for kdist:

- the torchrun-style DDP script (after pytorch/examples' ddp-tutorial-series) writes
  its snapshot to `$(KDIST_CHECKPOINT_DIR)/snapshot.pt`, a path only the kubelet's
  expansion of `$(VAR)` in args makes real; one of its workers is SIGKILLed inside
  rank 1's pod: the survivor's gloo error must read as a lost peer, the gang restart,
  every rank resume from the script's own snapshot and finish, and the launcher
  blame the killed rank;
- a plain-torch loop whose rank 1 stops answering (alive, silent) once: with
  `progressTimeoutSeconds` the hang is seen within that time and a few seconds, and
  the gang restarts and finishes; `status` names the hang.

Each drill's figures are printed (and appended to $KDIST_E2E_REPORT when set).
"""

from __future__ import annotations

import json
import queue
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from .conftest import kdist_container
from .conftest_cli import REPO, job_file_fixture, kdist_fixture, kdist_popen_fixture  # noqa: F401
from .test_restarts import report, running_pod, shared_volume  # noqa: F401

# Two 1-CPU pods per job: the whole single node, so no other test runs beside them.
pytestmark = [pytest.mark.timeout(900), pytest.mark.exclusive]
BACKENDS = ["indexed-job", "pytorchjob"]
PROGRAMS = REPO / "tests" / "compat" / "programs"
MOUNT = "/checkpoints"
RUN_TIMEOUT = 420
EPOCHS = 20  # of 32 steps, ~2 s each: the kill lands mid-run, whatever the log's delay

# SIGKILL the script's worker process in a pod (not kdist's launcher, nor this one).
KILL_SCRIPT = (
    "import os, signal, sys\n"
    "for p in filter(str.isdigit, os.listdir('/proc')):\n"
    "    if int(p) == os.getpid(): continue\n"
    "    try: argv = open(f'/proc/{p}/cmdline', 'rb').read().split(b'\\0')\n"
    "    except OSError: continue\n"
    "    if any(a.endswith(sys.argv[1].encode()) for a in argv) and \\\n"
    "            b'kdist.launch' not in argv:\n"
    "        os.kill(int(p), signal.SIGKILL); print('killed', p)\n"
)


@pytest.fixture
def code(tmp_path: Path) -> Path:
    """The workdir shipped with the job: the compat programs, byte for byte."""
    root = tmp_path / "code"
    root.mkdir()
    for name in ("ddp_torchrun.py", "hang.py"):
        shutil.copy(PROGRAMS / name, root / name)
    return root


class Output:
    """`kdist submit -f`'s stdout and stderr, line by line with arrival times."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[tuple[float, str]] = []
        self._new: queue.Queue[None] = queue.Queue()
        for stream in (proc.stdout, proc.stderr):
            threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append((time.monotonic(), line.rstrip("\n")))
            self._new.put(None)
        self._new.put(None)

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def timed(self, since: float) -> str:
        """The lines with their arrival times relative to `since` (printed: pytest -s)."""
        return "\n".join(f"{t - since:7.1f}s {line}" for t, line in self.lines)

    def wait_for(self, pattern: str, timeout: float) -> float:
        """When the first line matching `pattern` arrived (waiting up to `timeout` s)."""
        regex, deadline = re.compile(pattern), time.monotonic() + timeout
        while True:
            for t, line in list(self.lines):
                if regex.search(line):
                    return t
            left = deadline - time.monotonic()
            if left <= 0 or (self.proc.poll() is not None and self._new.empty()):
                raise AssertionError(f"no line matching {pattern!r}:\n{self.text}")
            try:
                self._new.get(timeout=min(left, 1.0))
            except queue.Empty:
                pass


def kill_worker(namespace: str, pod: str, script: str) -> None:
    out = subprocess.run(
        ["kubectl", "-n", namespace, "exec", pod, "-c", kdist_container(namespace, pod), "--",
         "python", "-c", KILL_SCRIPT, script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "killed" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sigkilled_worker_of_an_unchanged_torchrun_script_restarts_and_resumes(
        backend, kube, namespace, shared_volume, kdist, kdist_popen, job_file, code):  # noqa: F811
    name = "byo-ddp"
    args = [str(EPOCHS), "1", "--batch_size", "32", "--snapshot_path",
            "$(KDIST_CHECKPOINT_DIR)/snapshot.pt", "--step_delay", "0.05"]
    path = job_file(name, backend=backend, workdir=str(code),
                    workload={"command": ["python", "ddp_torchrun.py"], "args": args},
                    resources={"cpu": "1", "memory": "1Gi"},
                    distributed={"backend": "gloo", "maxRestarts": 2},
                    checkpoint={"path": MOUNT, "volume": shared_volume})
    out = Output(kdist_popen("submit", path, "--follow", "--timeout", str(RUN_TIMEOUT)))
    # $(KDIST_CHECKPOINT_DIR) was expanded in the pod, by the kubelet.
    out.wait_for(rf"\[rank 0\] Epoch 1 \| Training snapshot saved at {MOUNT}/snapshot.pt$",
                 timeout=300)
    fault = time.monotonic()
    kill_worker(namespace, running_pod(kube, namespace, name, 1), "ddp_torchrun.py")
    resumed = out.wait_for(r"\[rank \d\] Resuming training from snapshot at Epoch", 300)
    assert out.proc.wait(RUN_TIMEOUT) == 0, out.text
    log = out.text
    # The killed rank is blamed; its peer's gloo error is a lost peer (a restart), not a
    # code error that would have failed the job.
    assert re.search(r"worker rank 1 \(node 1, local rank 0, pid \d+\) was killed by SIGKILL"
                     r"[^;]*; exiting 137", log), log
    # (Restarting in process, node 0 may instead hear of the restart from node 1 first,
    # in node 1's words: the killed rank.)
    assert re.search(r"worker rank 0 \(node 0, [^)]*\) exited with code 1: \S+: .*; "
                     r"exiting 203: lost a peer", log) or re.search(
        r"node 0: the gang is restarting \(restart 1\): [^\n]*\brank 1\b[^\n]*; "
        r"exiting 203: lost a peer", log), log
    for rank in (0, 1):
        epochs = re.findall(rf"\[rank {rank}\] Resuming training from snapshot at Epoch (\d+)",
                            log)
        assert epochs and int(epochs[0]) >= 2, log
        assert f"[rank {rank}] [CPU{rank}] Epoch {EPOCHS - 1} | Batchsize: 32 | Steps: 32" \
            in log, log
    status = json.loads(kdist("status", name, "-o", "json").stdout)
    assert status["phase"] == "Succeeded", status
    if status["restartMode"] == "inPlace":
        # The pods stayed; the kubelet keeps no exit of a restart in place: the ledger the
        # watch kept on the job names the kill.
        (entry,) = status["ledger"]["restarts"]
        assert entry["cause"].startswith("rank 1 (pod ") and entry["exitCode"] == 137, entry
    elif backend == "indexed-job":  # the training operator deletes the pods it replaces
        blamed = status["firstFailure"]
        assert (blamed["rank"], blamed["exit_code"]) == (1, 137), status["failures"]
        assert "worker rank 1 " in blamed["said"], blamed
    print(out.timed(fault))
    report({"drill": "byo-sigkill", "backend": backend,
            "seconds_fault_to_resumed": round(resumed - fault, 1)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hung_peer_is_detected_within_the_progress_timeout_and_restarts_the_gang(
        backend, namespace, shared_volume, kdist, kdist_popen, job_file, code):  # noqa: F811
    name = "byo-hang"
    limit = 10
    args = ["--steps", "20", "--hang-at", "5", "--marker", "$(KDIST_CHECKPOINT_DIR)/hang.marker"]
    path = job_file(name, backend=backend, workdir=str(code),
                    workload={"command": ["python", "hang.py"], "args": args},
                    resources={"cpu": "1", "memory": "1Gi"},
                    distributed={"backend": "gloo", "maxRestarts": 1,
                                 "progressTimeoutSeconds": limit,
                                 "collectiveTimeoutSeconds": 300},
                    checkpoint={"path": MOUNT, "volume": shared_volume})
    out = Output(kdist_popen("submit", path, "--follow", "--timeout", str(RUN_TIMEOUT)))
    hung = out.wait_for(r"\[rank 1\] rank 1 hangs at step 5$", timeout=300)
    seen = out.wait_for(r"kdist\.launch: rank \d \(node \d\) hung: no rank of the job made "
                        rf"progress for \d+s \(progressTimeoutSeconds={limit}", timeout=120)
    assert out.proc.wait(RUN_TIMEOUT) == 0, out.text
    # Detected within the limit and a few seconds (plus the log stream's own delay).
    assert seen - hung <= limit + 15, (seen - hung, out.text)
    for rank in (0, 1):
        assert f"[rank {rank}] rank {rank} step 19 world 2" in out.text, out.text
    if backend == "indexed-job":  # in place here: the launchers restarted their workers
        assert re.search(r"restarting this node's workers \(restart 1 of 1, in process\): "
                         r"rank 1 \(node 1\) hung", out.text), out.text
        status = kdist("status", name)
        assert status.returncode == 0, status.stderr
        # the ledger's restart line names the hang
        assert re.search(r"restart 1 at [\d:]+: rank \d \(pod [^)]*\): rank 1 \(node 1\) "
                         r"hung: .*\(exit 204: hung", status.stdout, re.S), status.stdout
    else:  # the watch said which rank hung when its pod ended (exit 204, "hung")
        assert re.search(r"rank \d \(pod [^)]*\): container pytorch exited with code 204 "
                         r".*hung", out.text), out.text
    report({"drill": "byo-hang", "backend": backend, "limit_s": limit,
            "seconds_hang_to_detected": round(seen - hung, 1)})
