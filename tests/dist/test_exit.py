"""A worker that leaves its gloo group alive exits clean, with its own exit code.

Most scripts never call ``destroy_process_group``. Left to the interpreter's
finalization, a gloo thread could still hold a finished collective's tensors and
need the GIL to drop them: ``terminate called without an active exception``,
SIGABRT, and a rank whose work had succeeded counted as a retryable failure
(about 1 run in 20 on a loaded 2-core machine; JobFailed from ``train()``). The
workers' sitehook now destroys such a group from an ``atexit`` handler that
runs after the script's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from disttools import free_port, run_job

import kdist
from kdist.runtime import worker_exec

FNS = Path(__file__).with_name("trainfns")

# One rank, a real gloo group: `destroy_process_group` is wrapped to show when (and
# whether) it is called, and how many threads the process has before and after.
HOOKED = textwrap.dedent("""
    import atexit, os, sys, time
    import torch, torch.distributed as dist

    def threads():
        return len(os.listdir("/proc/self/task"))

    real_destroy = dist.destroy_process_group
    def destroy(*args):
        before = threads()
        real_destroy(*args)
        print(f"destroyed in {os.getpid()}: threads {before} -> {threads()}", flush=True)
    dist.destroy_process_group = destroy

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[2]}",
                            rank=0, world_size=1)
    t = torch.ones(2)
    dist.all_reduce(t)
    atexit.register(lambda: print("script's handler: group alive", dist.is_initialized(),
                                  flush=True))
    print("no line end", end="")
    how = sys.argv[1]
    if how == "fork":
        child = os.fork()
        if child == 0:
            sys.exit(5)  # the child's atexit handlers run: the group is not its own
        print("child exited", os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]), flush=True)
    elif how == "hang":
        import sitecustomize
        sitecustomize.END_GROUP_S = 1
        dist.destroy_process_group = lambda: time.sleep(60)  # a peer that never answers
        print(f"exiting at {time.time()}", flush=True)
        sys.exit(3)
    elif how == "no-thread":  # Python 3.12: an atexit handler cannot start a thread
        import threading
        def refuse(self):
            raise RuntimeError("can't create new thread at interpreter shutdown")
        atexit.register(setattr, threading.Thread, "start", refuse)
    elif how == "raise":
        raise ValueError("boom")
    elif how == "system-exit":
        raise SystemExit(4)
    elif how != "return":
        sys.exit(int(how))
""")


def run_hooked(tmp_path: Path, how: str) -> tuple[subprocess.CompletedProcess[str], float]:
    script = tmp_path / "hooked.py"
    script.write_text(HOOKED)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KDIST_")}
    worker_exec.prepare(env)  # the sitehook on PYTHONPATH, as every worker has it
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-u", str(script), how, str(free_port())], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    return proc, time.monotonic() - started


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("how", "code"), [("return", 0), ("3", 3), ("raise", 1),
                                           ("system-exit", 4)])
def test_a_group_left_alive_is_destroyed_after_the_scripts_own_handlers(tmp_path, how, code):
    proc, _ = run_hooked(tmp_path, how)
    assert proc.returncode == code, proc.stdout
    out = proc.stdout
    # The script's output comes first, byte for byte; its own atexit handler still
    # found the group; then kdist's destroyed it, gloo's threads joined.
    assert out.startswith("no line end"), out
    handler = out.index("script's handler: group alive True\n")
    destroyed = out.index("destroyed in ")
    assert handler < destroyed, out
    before, after = map(int, out[destroyed:].split("threads ")[1].split()[0::2])
    assert after < before, out
    assert ("Traceback" in out) == (how == "raise"), out
    assert "terminate called" not in out and "kdist" not in out, out


@pytest.mark.timeout(120)
def test_a_forked_child_leaves_its_parents_group_alone(tmp_path):
    proc, _ = run_hooked(tmp_path, "fork")
    assert proc.returncode == 0, proc.stdout
    assert "child exited 5\n" in proc.stdout, proc.stdout
    assert proc.stdout.count("destroyed in ") == 1, proc.stdout  # the parent's, only


@pytest.mark.timeout(120)
def test_a_destroy_that_waits_on_a_peer_does_not_hold_the_exit_nor_change_its_code(tmp_path):
    proc, _ = run_hooked(tmp_path, "hang")
    # Timed from the script's sys.exit, not its start: a loaded machine's torch import
    # is no part of what is measured (the hung destroy would hold the exit for 60 s).
    seconds = time.time() - float(proc.stdout.split("exiting at ")[1].split()[0])
    assert proc.returncode == 3, proc.stdout
    assert seconds < 30, f"the exit waited {seconds:.0f}s\n{proc.stdout}"
    assert proc.stdout.endswith(
        "kdist: sitecustomize: destroy_process_group did not return within 1s at exit (a "
        "collective still waits for a peer); exiting without it\n"), proc.stdout


@pytest.mark.timeout(120)
def test_where_no_thread_can_start_at_exit_the_worker_still_exits_clean(tmp_path):
    proc, _ = run_hooked(tmp_path, "no-thread")
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout == "no line endscript's handler: group alive True\n", proc.stdout


# Two ranks that never destroy their group, several times over: every run ends clean.
# (One run in 20 aborted before; a handful of runs keeps the test's time sane, the
# 20 + 20 runs by hand are in the issue.)
RUNS = 5
NEVER_DESTROYS = textwrap.dedent("""
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.ones(4)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} sum {int(t[0])}", flush=True)
""")


@pytest.mark.timeout(60 * RUNS + 60)
def test_scripts_that_never_destroy_their_group_end_clean_every_time(tmp_path):
    script = tmp_path / "never_destroys.py"
    script.write_text(NEVER_DESTROYS)
    for i in range(RUNS):
        run = run_job(["--", "python", str(script)], nodes=2)
        assert run.code == 0, f"run {i + 1} of {RUNS}:\n{run.text}"
        assert "terminate called" not in run.text and "SIGABRT" not in run.text, run.text
        assert sorted(line for line in run.lines if " sum " in line) == [
            "[rank 0] rank 0 sum 2", "[rank 1] rank 1 sum 2"], run.text


@pytest.mark.timeout(60 * RUNS + 60)
def test_train_of_a_function_that_never_destroys_its_group_returns_every_time(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(FNS))
    import remote

    try:
        for i in range(RUNS):
            spec = {"distributed": {"backend": "gloo", "port": free_port(), "maxRestarts": 0}}
            value = kdist.Client().train(remote.world_sum_left_alive, nodes=2, local=True,
                                         spec=spec, name=f"left-alive-{i}")
            assert value == {"rank": 0, "sum": 3.0}, f"run {i + 1} of {RUNS}"
    finally:
        sys.modules.pop("remote", None)
        sys.modules.pop("helper", None)
