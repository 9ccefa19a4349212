"""Warm workers: which commands a standby runs, what it refuses, and the launcher's side of
the handover (``kdist.runtime.standby``), against a stand-in standby on a socket pair."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from kdist.runtime import standby as S
from kdist.runtime.plan import resolve_env
from kdist.runtime.sitehook import _kdist_standby as entry

PY = sys.executable


@pytest.mark.parametrize(("argv", "expected"), [
    ([PY, "-u", "-m", "kdist.workloads.ddp", "--x"], ("module", "kdist.workloads.ddp", ["--x"])),
    ([PY, "-u", "-c", "print(1)", "a"], ("code", "print(1)", ["a"])),
    ([PY, "-u", "train.py", "-m", "b"], ("path", "train.py", ["-m", "b"])),
    ([PY, "-u", "-X", "importtime", "train.py"], None),  # other options: a cold start
    ([PY, "train.py"], None),  # not as kdist starts python workers
    (["/usr/bin/env", "-u", "train.py"], None),  # another program
    (["bash", "run.sh"], None),
    ([PY, "-u", "-m"], None),
])
def test_the_commands_a_standby_runs(argv, expected):
    assert entry.command(argv, PY) == expected
    assert (S.cold_because(argv) == "") is (expected is not None)


def _order(env: dict[str, str], argv: list[str] | None = None) -> dict:
    return {"argv": argv or [PY, "-u", "t.py"], "env": env, "cwd": "/", "pipe": "/dev/null"}


def test_a_standby_refuses_a_worker_whose_start_would_differ(tmp_path):
    started = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tmp_path)}
    path = ["", str(tmp_path), "/usr/lib/python3"]
    same = {**started, "RANK": "3", "PYTHONPATH": "/elsewhere"}  # PYTHONPATH is redone
    assert entry.refuse(_order(same), started, path) == ""
    assert entry.refuse(_order({**same, "OMP_NUM_THREADS": "2"}), started, path) == \
        "OMP_NUM_THREADS differs from the standby's"
    assert entry.refuse(_order({**same, "PYTHONHASHSEED": "0"}), started, path) == \
        "PYTHONHASHSEED differs from the standby's"
    assert "not a Python command" in entry.refuse(_order(same, ["bash", "x"]), started, path)
    assert entry.refuse(_order(same), started, ["", "/moved"]) == \
        "sys.path does not start as PYTHONPATH said"


class _Proc:
    """A stand-in for the standby's process: alive until told otherwise."""

    def __init__(self, code: int | None = None) -> None:
        self.pid, self.returncode = 1 << 30, code  # no such pid: kill() finds nothing

    def poll(self) -> int | None:
        return self.returncode

    def wait(self) -> int:
        return self.returncode or 0


def _standbys(tmp_path: Path, monkeypatch, says: bytes | None, code: int | None = None):
    """Standbys with one stand-in standby that answers ``says`` to its order."""
    monkeypatch.setattr(S, "ACK_S", 0.5)
    plan = resolve_env({"KDIST_JOB_NAME": "j", "KDIST_NNODES": "1", "KDIST_NPROC_PER_NODE": "1",
                        "KDIST_NODE_RANK": "0", "KDIST_MASTER_ADDR": "127.0.0.1"})
    said: list[str] = []
    sbs = S.Standbys(plan, {}, tmp_path / "sb", None, refill=True, say=said.append)
    mine, theirs = socket.socketpair()
    sbs.waiting[0] = S.Standby(0, _Proc(code), mine,  # type: ignore[arg-type]
                               started=time.monotonic())
    got: list[bytes] = []

    def standby() -> None:
        try:
            theirs.sendall(b"ready\n")
            got.append(theirs.recv(1 << 16))
            if says is not None:
                theirs.sendall(says)
        except OSError:  # the launcher's side closed it
            pass

    helper = threading.Thread(target=standby, daemon=True)
    helper.start()
    return sbs, said, got, helper, theirs


def test_a_standby_that_answers_ok_is_the_worker(tmp_path, monkeypatch):
    sbs, said, got, helper, theirs = _standbys(tmp_path, monkeypatch, b"ok\n")
    proc = sbs.take(0, [PY, "-u", "t.py"], {"RANK": "0"}, "/pipe")
    helper.join(5)
    assert proc is not None and not said
    order = got[0].decode()
    assert order.endswith("\n") and '"RANK": "0"' in order and '"pipe": "/pipe"' in order
    assert f'"cwd": "{os.getcwd()}"' in order
    assert 0 in sbs.handed and not sbs.waiting  # a new one follows it
    theirs.close()


def test_a_standby_that_never_answers_means_a_cold_start(tmp_path, monkeypatch):
    sbs, said, _, helper, theirs = _standbys(tmp_path, monkeypatch, None)
    assert sbs.take(0, [PY, "-u", "t.py"], {}, "/pipe") is None
    assert said == ["the standby of worker rank 0 (local rank 0, pid 1073741824) did not "
                    "answer within 0.5s after its order; starting the worker cold"]
    theirs.close()


def test_a_standby_that_refuses_or_died_means_a_cold_start(tmp_path, monkeypatch):
    sbs, said, _, helper, theirs = _standbys(tmp_path, monkeypatch, b"cold OMP differs\n")
    assert sbs.take(0, [PY, "-u", "t.py"], {}, "/pipe") is None
    assert "could not run it: OMP differs; starting the worker cold" in said[0]
    theirs.close()
    sbs, said, _, helper, theirs = _standbys(tmp_path, monkeypatch, None, code=-9)
    (tmp_path / "sb" / "0.early").write_text("Traceback ...\nMemoryError\n")
    assert sbs.take(0, [PY, "-u", "t.py"], {}, "/pipe") is None
    assert "had died (killed by SIGKILL): MemoryError; starting the worker cold" in said[0]
    theirs.close()


def test_new_standbys_follow_once_the_worker_made_progress_or_at_the_latest(tmp_path,
                                                                           monkeypatch):
    sbs, _, _, _, theirs = _standbys(tmp_path, monkeypatch, b"ok\n")
    started: list[int] = []
    monkeypatch.setattr(sbs, "start", started.append)
    sbs.handed = {0: 100.0, 1: 100.0}
    sbs.tick(lambda i: False, now=101.0)
    assert started == []  # the new workers' first steps come first
    sbs.tick(lambda i: i == 1, now=101.0)
    assert started == [1]
    sbs.tick(lambda i: False, now=100.0 + S.REFILL_AFTER_S)
    assert started == [1, 0]
    sbs.refill, sbs.handed = False, {0: 0.0}
    sbs.tick(lambda i: True, now=1e9)
    assert started == [1, 0]  # no restart in process to come: none
    theirs.close()


def test_a_standby_starts_with_room_for_its_workers_command_line_and_environment(
        tmp_path, monkeypatch):
    """Its command line is as long as the worker's, its environment has room for the rank's
    variables (``_kdist_standby.retitle``), and an unasked one imports torch alone."""
    plan = resolve_env({"KDIST_JOB_NAME": "j", "KDIST_NNODES": "1", "KDIST_NPROC_PER_NODE": "1",
                        "KDIST_NODE_RANK": "0", "KDIST_MASTER_ADDR": "127.0.0.1"})
    started: list[tuple[list[str], dict[str, str]]] = []

    class Popen:
        def __init__(self, argv, env, **kwargs):
            started.append((argv, env))
            self.pid, self.returncode = 1 << 30, None  # no such pid: kill() finds nothing

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(S.subprocess, "Popen", Popen)
    worker = [PY, "-u", "-m", "kdist.workloads.ddp", "--max-steps", "100", "--batch-size", "16",
              "--dataset-size", "2048"]
    for preload in ((), ("torch",)):
        S.Standbys(plan, {"HOME": "/h"}, tmp_path / "sb", None, refill=False, argv=worker,
                   preload=preload, say=print).start_all().close()
    (argv, env), (_, unasked) = started
    assert argv[:len(entry.ARGV) + 1] == [PY, *entry.ARGV]
    assert len(b"\0".join(map(os.fsencode, argv))) == len(b"\0".join(map(os.fsencode, worker)))
    worker_env = S.W.worker_env(plan, 0, {"HOME": "/h"}, "/tmp/kdist-launch-1-x/errors/0.json")
    grows = sum(len(k) + len(v) + 2 for k, v in worker_env.items()) - \
        sum(len(k) + len(v) + 2 for k, v in env.items() if k != entry.ROOM)
    assert len(env[entry.ROOM]) >= grows + S.ENV_MARGIN // 2
    assert entry.PRELOAD_ENV not in env and unasked[entry.PRELOAD_ENV] == "torch"
