"""Stopping a local run's nodes (``kdist.local``): a signal to each launcher's process
group, SIGKILL for what outlives its grace, and nothing of theirs left in TMPDIR.

A signal to the runner is passed on to the nodes, whose workers save (kdist's workloads
take a checkpoint at one step). A repeated SIGTERM must not cut that short: GNU
`timeout` sends two (to kdist, then to its process group), and so do some supervisors.
A second Ctrl-C may: the user insists.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from kdist.shared.processes import descendants

# After a second Ctrl-C killed the workers, how long their launchers get to clean up.
KILLED_CLEANUP_S = 5.0


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    for pid in descendants(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _signal_group(proc, signal.SIGKILL)


def _stop(procs: list[subprocess.Popen[bytes]], sig: signal.Signals, grace_s: float) -> None:
    """Signal every still-running launcher, then SIGKILL whatever outlives ``grace_s``."""
    for proc in procs:
        if proc.poll() is None:
            _signal_group(proc, sig)
    for proc in procs:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _kill_tree(proc)
            proc.wait()


def _stop_saving(procs: list[subprocess.Popen[bytes]], envs: Sequence[Mapping[str, str]],
                 sig: signal.Signals, grace_s: float) -> None:
    """`_stop` for a signal to the runner, whose save a repeated SIGTERM does not cut short
    (GNU `timeout` sends two: to kdist and to its process group; so do some supervisors).
    A Ctrl-C during it does (the user insists): the workers are killed, and their
    launchers, left alive to see it, remove what they keep in TMPDIR and exit."""
    try:  # (`interruptible(sigterm_once=True)` ignores SIGTERM from the first signal on)
        _stop(procs, sig, grace_s)
    except KeyboardInterrupt:
        _kill_workers(procs, envs)


def _kill_workers(procs: list[subprocess.Popen[bytes]],
                  envs: Sequence[Mapping[str, str]]) -> None:
    """SIGKILL what each launcher started, then give the launchers a moment to clean up
    and exit (their workers' end is what they wait for); SIGKILL any that do not."""
    main = threading.current_thread() is threading.main_thread()
    # Ctrl-C once more does no more than this does (no SIGKILL of a launcher mid-cleanup).
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        for proc in procs:
            if proc.poll() is None:
                for pid in descendants(proc.pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        deadline = time.monotonic() + KILLED_CLEANUP_S  # for all of them together
        for proc, env in zip(procs, envs, strict=False):  # fewer procs: a start failed
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_tree(proc)
                proc.wait()
                _remove_launch_dirs(proc.pid, env)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _remove_launch_dirs(pid: int, env: Mapping[str, str]) -> None:
    """What a SIGKILLed launcher left in its TMPDIR (``kdist.runtime.agent``'s
    ``kdist-launch-<pid>-*``, named by its pid so that no other run's is touched)."""
    root = Path(env.get("TMPDIR") or tempfile.gettempdir())
    for path in root.glob(f"kdist-launch-{pid}-*"):
        shutil.rmtree(path, ignore_errors=True)
