"""Helpers for the compat tier: `python -m kdist run --local JOB.yaml` as a user runs it.

Every test writes one of ``jobs/*.yaml`` into its tmp dir (with a free port, absolute
program paths and the test's overrides) and runs the real CLI in a child process whose
working directory is that tmp dir (local checkpoints, snapshots and logs land there).
Output is read line by line as it arrives, with the time each line came, so tests can
act mid-run (kill a worker, send a signal) and check when things happened.
"""

from __future__ import annotations

import copy
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kdist.local.runner import descendants  # the runner's own view of its process tree

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
JOBS = HERE / "jobs"
PROGRAMS = HERE / "programs"
# Job files name their programs relative to the repository root (so they run by hand
# from there); tests run elsewhere and make those paths absolute.
_REPO_RELATIVE = "tests/compat/"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _absolute(item: Any) -> Any:
    if isinstance(item, str) and item.startswith(_REPO_RELATIVE):
        return str(REPO / item)
    return item


def write_job(tmp_path: Path, name: str, **spec: Any) -> Path:
    """``jobs/NAME.yaml`` with a free port and ``spec`` merged in, written under tmp_path."""
    job = yaml.safe_load((JOBS / f"{name}.yaml").read_text())
    job["spec"] = _merge(job["spec"], {"distributed": {"port": free_port()}})
    job["spec"] = _merge(job["spec"], spec)
    workload = job["spec"]["workload"]
    for key in ("command", "args"):
        if key in workload:
            workload[key] = [_absolute(a) for a in workload[key]]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return path


@dataclass(frozen=True)
class Line:
    t: float  # seconds since the run started
    text: str  # without the trailing newline; a "\r" inside is kept


class KdistRun:
    """`python -m kdist run --local JOB` in its own session, its output collected live.

    Use as a context manager: leaving the block kills whatever is left of the run.
    """

    def __init__(self, job: Path, cwd: Path, *, env: dict[str, str] | None = None,
                 argv: list[str] | None = None) -> None:
        self.started = time.monotonic()
        self.lines: list[Line] = []
        self.ended_at: float | None = None
        self._changed = threading.Condition()
        cmd = argv or [sys.executable, "-m", "kdist", "run", "--local", str(job)]
        self.proc = subprocess.Popen(
            cmd, cwd=cwd, env=env if env is not None else dict(os.environ),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = Line(time.monotonic() - self.started,
                        raw.decode("utf-8", errors="replace").rstrip("\n"))
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def __enter__(self) -> KdistRun:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            kill_tree(self.proc.pid)
            self.proc.wait()
        self._reader.join(timeout=5)

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)

    def wait_for(self, pattern: str, timeout: float, start: int = 0) -> Line:
        """The first line from index ``start`` on that matches ``pattern`` (a regex),
        waiting for it up to ``timeout`` s."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = start
        with self._changed:
            while True:
                for line in self.lines[seen:]:
                    if regex.search(line.text):
                        return line
                seen = len(self.lines)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.proc.poll() is not None and
                                      not self._reader.is_alive()):
                    raise AssertionError(
                        f"no line matching {pattern!r} after {timeout}s "
                        f"(exit {self.proc.poll()}):\n{self.text}")
                self._changed.wait(min(remaining, 0.5))

    def wait(self, timeout: float) -> int:
        """The exit code of `kdist run --local`; on timeout, kill it and fail."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(self.proc.pid)
            self.proc.wait()
            self._reader.join(timeout=5)
            raise AssertionError(f"kdist run --local still running after {timeout}s:\n"
                                 f"{self.text}") from None
        self.ended_at = time.monotonic() - self.started
        self._reader.join(timeout=10)
        return code

    def matching(self, pattern: str) -> list[Line]:
        regex = re.compile(pattern)
        return [line for line in self.lines if regex.search(line.text)]


def run_kdist(job: Path, cwd: Path, timeout: float,
              env: dict[str, str] | None = None) -> tuple[int, KdistRun]:
    """Run a job to its end: (exit code, the run with its output)."""
    with KdistRun(job, cwd, env=env) as run:
        return run.wait(timeout), run


def _cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [a.decode(errors="replace").partition("=") for a in f.read().split(b"\0") if a]
    return {k: v for k, _, v in pairs}


def find_worker(root: int, script: str, rank: int, timeout: float = 20.0) -> int:
    """The pid of the worker below ``root`` that runs ``SCRIPT`` as global ``rank``.

    Found the way an operator would: ``SCRIPT`` in its command line and RANK in its
    environment; of several such processes (a launcher or wrapper above the worker may
    match too), the one with no match below it.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        matches = set()
        for pid in descendants(root):
            try:
                if any(a.endswith(script) for a in _cmdline(pid)) and \
                        _environ(pid).get("RANK") == str(rank):
                    matches.add(pid)
            except OSError:
                continue
        leaves = [pid for pid in matches if not matches & set(descendants(pid))]
        if len(leaves) == 1:
            return leaves[0]
        time.sleep(0.1)
    raise AssertionError(f"no single worker running {script} as rank {rank} below pid {root}")


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and everything below it."""
    for child in descendants(pid):
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def rank_lines(run: KdistRun, rank: int) -> list[str]:
    """What global ``rank`` printed, its ``[rank N] `` prefix removed."""
    prefix = f"[rank {rank}] "
    return [line.text[len(prefix):] for line in run.lines if line.text.startswith(prefix)]
