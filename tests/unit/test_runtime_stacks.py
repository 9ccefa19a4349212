"""kdist.runtime.stacks: a hung rank's stacks, asked for through the workers' sitehook."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from kdist.runtime import stacks, worker_exec

WAITS_IN_DIST = """
import sys, time, types
# A frame whose file is under torch/distributed/, as all_reduce's is.
code = compile("def all_reduce():\\n    while True: time.sleep(1)\\n",
               "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", "exec")
ns = {"time": time}
exec(code, ns)
print("ready", flush=True)
ns["all_reduce"]()
"""

SLEEPS = """
import time
print("ready", flush=True)
def stuck_loader():
    time.sleep(3600)
stuck_loader()
"""


def _start(tmp_path: Path, name: str, source: str) -> tuple[subprocess.Popen, Path]:
    script, log = tmp_path / f"{name}.py", tmp_path / f"{name}.log"
    script.write_text(source)
    env = dict(os.environ)
    worker_exec.prepare(env)  # the sitehook on PYTHONPATH, as every worker has it
    proc = subprocess.Popen([sys.executable, str(script)], env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while b"ready" not in log.read_bytes():
        assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
        time.sleep(0.05)
    return proc, log


def test_a_rank_waiting_in_torch_distributed_is_told_from_one_that_hung(tmp_path):
    waiting, wlog = _start(tmp_path, "waiting", WAITS_IN_DIST)
    hung, hlog = _start(tmp_path, "hung", SLEEPS)
    try:
        assert stacks.handles(hung.pid)
        logs = [wlog, hlog]
        found = stacks.dump([waiting.pid, hung.pid], lambda i: logs[i].read_text())
        assert found[0] is not None and found[0].in_collective
        assert found[1] is not None and not found[1].in_collective
        assert found[1].where == "hung.py:5 in stuck_loader"
        assert waiting.poll() is None and hung.poll() is None  # asked, not killed
    finally:
        for p in (waiting, hung):
            p.kill()
            p.wait()


def test_a_process_that_does_not_handle_the_signal_is_not_sent_it(tmp_path):
    proc = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.2)
        assert not stacks.handles(proc.pid)
        assert stacks.dump([proc.pid], lambda i: "", wait_s=0.2) == [None]
        assert proc.poll() is None  # a shell or another program would have died of it
    finally:
        proc.kill()
        proc.wait()


def test_parse_reads_the_last_dump_only():
    first = ('Current thread 0x00007f00 (most recent call first):\n'
             '  File "/x/torch/distributed/distributed_c10d.py", line 9 in all_reduce\n')
    second = ('Thread 0x00007f01 (most recent call first):\n'
              '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n\n'
              'Current thread 0x00007f00 (most recent call first):\n'
              '  File "/app/train.py", line 40 in <module>\n')
    got = stacks.parse(first + "step 9\n" + second)
    assert got == stacks.Stacks(in_collective=False, where="train.py:40 in <module>")
    assert stacks.parse("no dump here\n") is None
