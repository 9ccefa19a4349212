"""Running the kdist CLI against the fake API: in-process (fast) or as a process (bounded).

In-process runs use click's CliRunner on `kdist.cli.main`, the same entry point
as the `kdist` script. A run that might never end (a server that never answers,
a FIFO as kubeconfig) goes through `run_process` instead: a thread cannot be
killed, a process can, and its peak memory can be measured.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from tests.api.fakeapi import FakeApi, Request

# Variables that would send the client elsewhere or change what it reads.
_SCRUB = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "HTTP_PROXY",
          "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy",
          "NO_PROXY", "no_proxy")


@dataclass
class Outcome:
    """What one kdist command did: its exit code, its output, and the requests it sent."""

    args: list[str]
    code: int
    stdout: str
    stderr: str
    requests: list[Request]
    seconds: float
    crash: str | None = None  # the traceback of an exception that escaped the CLI
    max_rss_mb: float | None = None  # peak memory (process runs only)
    timed_out: bool = False  # killed after the runner's own limit (process runs only)
    # Seconds from the first request to the end: a process's time without its start-up.
    after_first_request: float | None = None
    ended_at: float = 0.0  # time.monotonic() at the end, comparable with Request.at

    @property
    def calls(self) -> list[tuple[str, str]]:
        """(method, path) of every request, in order."""
        return [r.call for r in self.requests]

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("error:")]

    def describe(self) -> str:
        """Everything a failing assertion should show."""
        reqs = "\n".join(f"    {r}" for r in self.requests) or "    (none)"
        out = (f"kdist {' '.join(map(repr, self.args))}\n  exit {self.code} in "
               f"{self.seconds:.1f}s{' (killed: took too long)' if self.timed_out else ''}\n"
               f"  stdout: {self.stdout[-2000:]!r}\n  stderr: {self.stderr[-2000:]!r}\n"
               f"  requests:\n{reqs}")
        return out + (f"\n  crash:\n{self.crash}" if self.crash else "")


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str | None]:
    env: dict[str, str | None] = {k: None for k in _SCRUB}
    env.update(extra or {})
    return env


def run_inprocess(api: FakeApi, kubeconfig: Path, args: list[str], *,
                  env: dict[str, str] | None = None, input: str | None = None) -> Outcome:
    """`kdist --kubeconfig KUBECONFIG ARGS...` in this process."""
    from kdist.cli import main

    full = ["--kubeconfig", str(kubeconfig), *args]
    mark = api.mark()
    started = time.monotonic()
    result = CliRunner().invoke(main, full, env=scrubbed_env(env), input=input)
    seconds = time.monotonic() - started
    crash = None
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        crash = "".join(traceback.format_exception(*result.exc_info))  # type: ignore[misc]
    return Outcome(full, result.exit_code, result.stdout, result.stderr, api.since(mark),
                   seconds, crash, ended_at=time.monotonic())


def run_process(api: FakeApi | None, kubeconfig: Path, args: list[str], *, limit: float,
                env: dict[str, str] | None = None,
                limit_after_request: float | None = None,
                max_memory_mb: int | None = None) -> Outcome:
    """`python -m kdist --kubeconfig KUBECONFIG ARGS...` as a child, killed after `limit`s
    (or `limit_after_request`s after its first request reached `api`).

    It imports kdist as this process does (installed, or PYTHONPATH), from the
    kubeconfig's directory. Output goes to files (a pipe nobody reads could block
    the child). Its peak memory is sampled from /proc while it runs (every 20 ms):
    getrusage's ru_maxrss would count the parent's memory the child had before exec.
    `max_memory_mb` caps its address space (RLIMIT_AS): a run that would grow without
    bound fails with MemoryError instead of taking the machine's memory.
    """
    full = ["--kubeconfig", str(kubeconfig), *args]
    child_env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    child_env.update(env or {})
    mark = api.mark() if api else 0

    def first_request() -> float | None:
        sent = api.since(mark) if api else []
        return sent[0].at if sent else None

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "kdist", *full], stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, env=child_env,
                                cwd=kubeconfig.parent, preexec_fn=_address_space(max_memory_mb))
        timed_out, peak_kb = False, 0
        while True:
            peak_kb = max(peak_kb, _peak_rss_kb(proc.pid))
            pid, status, _ = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            now, first = time.monotonic(), first_request()
            if now - started > limit or (limit_after_request is not None and first is not None
                                         and now - first > limit_after_request):
                timed_out = True
                proc.kill()
                _, status, _ = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        ended = time.monotonic()
        proc.returncode = os.waitstatus_to_exitcode(status)  # keeps Popen from waiting again
        out.seek(0)
        err.seek(0)
        stdout, stderr = (f.read().decode("utf-8", "replace") for f in (out, err))
    crash = stderr if "Traceback (most recent call last)" in stderr else None
    first = first_request()
    return Outcome(full, proc.returncode, stdout, stderr, api.since(mark) if api else [],
                   ended - started, crash, max_rss_mb=peak_kb / 1024,
                   timed_out=timed_out,
                   after_first_request=None if first is None else ended - first,
                   ended_at=ended)


def _address_space(megabytes: int | None) -> Callable[[], None] | None:
    if megabytes is None:
        return None

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (megabytes << 20, megabytes << 20))

    return limit


def _peak_rss_kb(pid: int) -> int:
    """VmHWM (peak resident set) of a running process, in KiB; 0 once it has exited."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
