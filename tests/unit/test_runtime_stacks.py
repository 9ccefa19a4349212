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


# --- the main thread decides (issue 38) --------------------------------------------------
# Sampled from two real gloo ranks with DataLoader workers alive (num_workers=2): rank 1
# stopped in its loop, rank 0 waits for it in all_reduce. Each rank's two queue feeder
# threads idle outside torch.distributed; faulthandler lists them before the main thread.
PY = "/usr/lib/python3.11"
TORCH = f"{PY}/site-packages/torch"
FEEDER = (
    "Thread 0x00007ff9677fe6c0 (most recent call first):\n"
    f'  File "{PY}/threading.py", line 327 in wait\n'
    f'  File "{PY}/multiprocessing/queues.py", line 231 in _feed\n'
    f'  File "{PY}/threading.py", line 982 in run\n'
    f'  File "{PY}/threading.py", line 1045 in _bootstrap_inner\n'
    f'  File "{PY}/threading.py", line 1002 in _bootstrap\n'
    "\n")
RANK0 = (
    "step 4 loss 0.31\n" + FEEDER + FEEDER.replace("7ff9677fe6c0", "7ff971fff6c0") +
    "Current thread 0x00007ffa277beb80 (most recent call first):\n"
    f'  File "{TORCH}/distributed/distributed_c10d.py", line 4181 in all_reduce\n'
    f'  File "{TORCH}/distributed/c10d_logger.py", line 83 in wrapper\n'
    '  File "/app/train.py", line 9 in <module>\n')
RANK1 = (
    FEEDER + FEEDER.replace("7ff9677fe6c0", "7faf6e3ff6c0") +
    "Current thread 0x00007fb023a3fb80 (most recent call first):\n"
    '  File "/app/train.py", line 11 in <module>\n')


def test_a_rank_whose_main_thread_waits_in_a_collective_waits_for_a_peer():
    assert stacks.parse(RANK0) == stacks.Stacks(in_collective=True,
                                                where="train.py:9 in <module>")
    # The rank that hung is named where its main thread stopped, not at a feeder thread.
    assert stacks.parse(RANK1) == stacks.Stacks(in_collective=False,
                                                where="train.py:11 in <module>")


def test_another_thread_in_torch_distributed_does_not_make_a_stuck_rank_wait():
    store_thread = (
        "Thread 0x00007f0000000002 (most recent call first):\n"
        f'  File "{TORCH}/distributed/distributed_c10d.py", line 4900 in barrier\n'
        '  File "/app/heartbeat.py", line 12 in beat\n'
        f'  File "{PY}/threading.py", line 982 in run\n'
        f'  File "{PY}/threading.py", line 1045 in _bootstrap_inner\n'
        f'  File "{PY}/threading.py", line 1002 in _bootstrap\n'
        "\n")
    stuck = (store_thread + "Current thread 0x00007f0000000001 (most recent call first):\n"
             f'  File "{TORCH}/utils/data/dataloader.py", line 1133 in _try_get_data\n'
             '  File "/app/train.py", line 40 in <module>\n')
    assert stacks.parse(stuck) == stacks.Stacks(in_collective=False,
                                                where="train.py:40 in <module>")


def test_a_dump_read_only_up_to_its_feeder_threads_tells_nothing_yet():
    partial = RANK0[:RANK0.index("Current thread")]
    assert stacks.parse(partial) is None  # not "stopped at queues.py:231 in _feed"


def test_cut_frames_and_c_threads_stay_part_of_the_dump():
    c_thread = "Thread 0x00007f0000000003 (most recent call first):\n  <no Python frame>\n\n"
    deep = ("Thread 0x00007f0000000004 (most recent call first):\n"
            f'  File "{PY}/threading.py", line 327 in wait\n  ...\n\n')
    text = RANK1.replace("Current thread", c_thread + deep + "Current thread")
    main_last = stacks.parse(RANK0.replace("Current thread", c_thread + deep + "Current thread"))
    assert main_last == stacks.Stacks(True, "train.py:9 in <module>")
    assert stacks.parse(text) == stacks.Stacks(False, "train.py:11 in <module>")


WAITS_WITH_FEEDERS = """
import sys, threading, time
cv = threading.Condition()
def _feed():
    with cv:
        cv.wait()
for _ in range(2):
    threading.Thread(target=_feed, daemon=True).start()
code = compile("def all_reduce():\\n    while True: time.sleep(1)\\n",
               "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", "exec")
ns = {"time": time}
exec(code, ns)
print("ready", flush=True)
ns["all_reduce"]()
"""


class SlowReader:
    """A rank's output as a busy launcher's reader has it: the dump one line per 50 ms."""

    def __init__(self, log: Path) -> None:
        self.log, self.since = log, 0.0

    def __call__(self, i: int) -> str:
        lines = self.log.read_text().splitlines(keepends=True)
        first = next((n for n, line in enumerate(lines) if "most recent call" in line), None)
        if first is None:
            return "".join(lines)
        self.since = self.since or time.monotonic()
        return "".join(lines[:first + 1 + int((time.monotonic() - self.since) / 0.05)])


def test_the_whole_dump_is_read_before_a_rank_is_judged(tmp_path):
    waiting, log = _start(tmp_path, "waiting", WAITS_WITH_FEEDERS)
    try:
        found = stacks.dump([waiting.pid], SlowReader(log), wait_s=5.0)
        assert found == [stacks.Stacks(in_collective=True, where="waiting.py:14 in <module>")]
    finally:
        waiting.kill()
        waiting.wait()


def test_the_ranks_behind_in_collectives_started_never_reached_the_one_the_others_wait_in(
        tmp_path):
    """DDP's all-reduce starts from C++ inside backward(): frames cannot tell its waiting
    rank from a stuck one, the counts of collectives started can."""
    from kdist.runtime.stacks import behind, collectives

    (tmp_path / "0").write_text("12")
    (tmp_path / "1").write_text("11\n")
    (tmp_path / "2").write_text("not a count")
    counts = {r: collectives(tmp_path / str(r)) for r in range(4)}
    assert counts == {0: 12, 1: 11, 2: None, 3: None}
    assert behind(counts) == ([1], [0])
    assert behind({0: 5, 1: 5, 2: None}) == ([], [])  # alike: the frames decide
    assert behind({0: 5, 1: None}) == ([], [])  # one count compares with nothing
    assert behind({0: 7, 1: 6, 2: 7, 3: 5}) == ([1, 3], [0, 2])
