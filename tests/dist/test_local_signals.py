"""Signals to a local run while its nodes save: a repeated SIGTERM (GNU `timeout` sends two)
waits for the save; a second Ctrl-C cuts it short. Nothing is left in TMPDIR either way.

Stand-ins for launchers (no torch): each keeps a `kdist-launch-<pid>-*` directory in
TMPDIR as kdist's launcher does, passes a signal on to its worker (its own session), waits
for it, removes the directory and exits 128 + the signal; the worker "saves" for SAVE_S.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKER = textwrap.dedent("""
    import os, signal, sys, time
    def save(sig, frame):
        signal.signal(sig, signal.SIG_IGN)
        time.sleep(float(os.environ["SAVE_S"]))
        with open(os.path.join(os.environ["SAVED"], "node-" + os.environ["NODE"]), "w") as f:
            f.write(signal.Signals(sig).name)
        sys.exit(128 + sig)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, save)
    print("ready", os.getpid(), flush=True)
    while True:
        time.sleep(0.05)
""")
LAUNCHER = textwrap.dedent("""
    import os, shutil, signal, subprocess, sys, tempfile
    work = tempfile.mkdtemp(prefix=f"kdist-launch-{os.getpid()}-")
    worker = subprocess.Popen([sys.executable, "-c", WORKER], start_new_session=True)
    def forward(sig, frame):
        signal.signal(sig, signal.SIG_IGN)  # as kdist.runtime.agent: one of each
        worker.send_signal(sig)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, forward)
    code = worker.wait()
    shutil.rmtree(work)
    sys.exit(128 - code if code < 0 else code)
""")
RUNNER = textwrap.dedent("""
    import os, sys
    from kdist.local import run_nodes
    envs = [{**os.environ, "NODE": str(i)} for i in range(2)]
    launcher = "WORKER = " + repr(sys.argv[1]) + "\\n" + sys.argv[2]
    sys.exit(run_nodes([sys.executable, "-c", launcher], envs))
""")


def start(tmp_path: Path, save_s: float) -> tuple[subprocess.Popen[str], list[int]]:
    """The runner of two stand-in nodes, once both workers are ready; their pids."""
    (tmp := tmp_path / "tmp").mkdir()
    (saved := tmp_path / "saved").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "SAVED": str(saved), "SAVE_S": str(save_s),
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                         if p)}
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, WORKER, LAUNCHER], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    pids = []
    for line in proc.stdout:
        if "] ready " in line:
            pids.append(int(line.split()[-1]))
        if len(pids) == 2:
            return proc, pids
    raise AssertionError(f"the nodes never started: exit {proc.wait()}")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(60)
@pytest.mark.parametrize("apart_s", [0.0, 0.5], ids=["together", "apart"])
def test_a_repeated_sigterm_waits_for_the_save(tmp_path, apart_s):
    proc, _ = start(tmp_path, save_s=2.0)
    proc.send_signal(signal.SIGTERM)
    time.sleep(apart_s)
    proc.send_signal(signal.SIGTERM)  # GNU timeout: to kdist, then to its process group
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)  # a supervisor that insists
    out = proc.communicate(timeout=40)[0]
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == ["node-0", "node-1"], out
    assert list((tmp_path / "tmp").iterdir()) == [], out


@pytest.mark.timeout(60)
def test_a_second_ctrl_c_cuts_the_save_short_and_leaves_nothing(tmp_path):
    proc, workers = start(tmp_path, save_s=50.0)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out = proc.communicate(timeout=40)[0]
    assert time.monotonic() - started < 15, out  # not the save's 50 s
    assert proc.returncode == 128 + signal.SIGINT, out
    assert list((tmp_path / "saved").iterdir()) == [], out
    assert list((tmp_path / "tmp").iterdir()) == [], out  # the launchers cleaned up
    assert not any(alive(pid) for pid in workers), out


@pytest.mark.timeout(60)
def test_ctrl_c_takes_the_same_save_as_sigterm(tmp_path):
    """The nodes are stopped as a deleted pod is: their workers get SIGTERM and save."""
    proc, _ = start(tmp_path, save_s=1.0)
    proc.send_signal(signal.SIGINT)
    out = proc.communicate(timeout=40)[0]
    assert proc.returncode == 128 + signal.SIGINT, out
    saved = sorted((tmp_path / "saved").iterdir())
    assert [(p.name, p.read_text()) for p in saved] == [("node-0", "SIGTERM"),
                                                        ("node-1", "SIGTERM")], out
    assert "Ctrl-C again stops them at once" in out
    assert list((tmp_path / "tmp").iterdir()) == [], out
