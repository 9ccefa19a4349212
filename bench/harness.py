"""What every benchmark shares: the figure records, running a command and
reading its JSON lines, interleaved repetitions and medians.

A benchmark module declares its figures (`Spec`: name, unit, the two things
compared, the goal) and a `run(ctx)` that returns what it measured
(`Measured`) per figure name, or raises `Skip` with the reason.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
PYTHON = sys.executable
# Variables a parent job or shell may leak into a child that would rewire its ranks.
_LEAKY = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
          "MASTER_PORT", "NODE_RANK", "JOB_COMPLETION_INDEX")
_LEAKY_PREFIXES = ("KDIST_", "PET_", "TORCHELASTIC_")


class Skip(Exception):
    """The benchmark (or one figure) cannot run on this machine; the message says why."""


class BenchError(Exception):
    """A command under measurement failed; the message carries its output's tail."""


@dataclass(frozen=True)
class Spec:
    """A figure as declared: what it is and what it is compared with."""

    name: str
    title: str  # short, for the README table
    unit: str
    a: str  # what is measured (the kdist side)
    b: str  # what it is compared with
    goal: str = ""  # e.g. ">= 1.00"
    target: float | None = None
    higher_is_better: bool = True

    def met(self, value: float | None) -> bool | None:
        if value is None or self.target is None:
            return None
        return value >= self.target if self.higher_is_better else value <= self.target


@dataclass
class Measured:
    """What a run found for one figure (value None with `skipped` when it could not)."""

    value: float | None
    samples: list[float] = field(default_factory=list)
    note: str = ""
    skipped: str = ""


@dataclass
class Ctx:
    """How much to do, and where to say what is happening."""

    quick: bool = False
    rounds: int = 3
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)


def record(spec: Spec, m: Measured, *, machine: dict[str, Any]) -> dict[str, Any]:
    """The results.json entry of one figure."""
    value = None if m.value is None else round(m.value, 4)
    return {
        "title": spec.title,
        "value": value,
        "unit": spec.unit,
        "a": spec.a,
        "b": spec.b,
        "goal": spec.goal,
        "met": spec.met(m.value),
        "samples": [round(s, 4) for s in m.samples],
        "note": m.note,
        "skipped": m.skipped,
        **machine,
    }


# ---- processes -------------------------------------------------------------------------


def clean_env(threads: int = 1, **extra: str) -> dict[str, str]:
    """This environment without rank wiring, with `threads` intra-op threads per process."""
    env = {k: v for k, v in os.environ.items()
           if k not in _LEAKY and not k.startswith(_LEAKY_PREFIXES)}
    env.update({
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
    })
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Run:
    records: list[dict[str, Any]]
    wall: float
    output: str  # stdout, where the JSON lines are
    err: str = ""  # stderr: for messages only


@dataclass(frozen=True)
class Done:
    """A finished command. `out` is its stdout alone, the only stream a benchmark parses:
    a warning or a traceback on stderr (`err`) must never land in YAML, JSON or a line
    being matched. `err` is kept for messages."""

    rc: int
    out: str
    err: str
    wall: float


def failure(cmd: Sequence[str], why: str, out: str, err: str) -> BenchError:
    """A BenchError naming `cmd` and what went wrong, with the last lines of each stream."""
    parts = [f"{shlex.join(cmd)} {why}"]
    for name, text in (("stderr", err), ("stdout", out)):
        if text and text.strip():
            parts.append(f"--- its {name}, last lines:\n{tail(text)}")
    return BenchError("\n".join(parts))


def parse_records(text: str) -> list[dict[str, Any]]:
    """kdist's JSON log lines (docs/DESIGN.md, "JSON log lines") in `text`; the rest is ignored.

    Tolerates a prefix (``[rank N] ``) and two records glued on one line (two
    processes writing one pipe without a newline between them).
    """
    decoder = json.JSONDecoder()
    out = []
    for line in text.splitlines():
        pos = line.find("{")
        while pos >= 0:
            try:
                rec, end = decoder.raw_decode(line, pos)
            except ValueError:
                pos = line.find("{", pos + 1)
                continue
            if isinstance(rec, dict) and "event" in rec:
                out.append(rec)
            pos = line.find("{", end)
    return out


def run_cmd(cmd: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 300,
            cwd: Path = REPO, check: bool = True) -> Done:
    """Run `cmd` in its own session, its stdout and stderr apart (`Done`).

    On timeout the whole session is killed (launchers' workers included) and
    BenchError raised; a non-zero exit raises BenchError when `check`.
    """
    started = time.perf_counter()
    proc = subprocess.Popen(list(cmd), env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(proc)
        out, err = proc.communicate()
        raise failure(cmd, f"ran past {timeout:.0f}s", out, err) from None
    except BaseException:  # Ctrl-C: its own session does not get the SIGINT
        kill_session(proc)
        raise
    wall = time.perf_counter() - started
    if check and proc.returncode != 0:
        raise failure(cmd, f"exited {proc.returncode}", out, err)
    return Done(proc.returncode, out, err, wall)


def run_lines(cmd: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 300,
              cwd: Path = REPO) -> tuple[list[tuple[float, str]], float]:
    """Run `cmd`, stamping each line of its stdout with the seconds since the start.

    ([(seconds, line)], wall seconds); stderr is read beside it (so a chatty
    stderr cannot block the command) and shown only in the BenchError raised
    on a non-zero exit or timeout.
    """
    started = time.perf_counter()
    proc = subprocess.Popen(list(cmd), env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    timer = threading.Timer(timeout, kill_session, args=(proc,))
    timer.start()
    err: list[str] = []

    def drain() -> None:
        assert proc.stderr is not None
        err.append(proc.stderr.read())

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.perf_counter() - started, line.rstrip("\n")))
        proc.wait()
    except BaseException:
        kill_session(proc)
        raise
    finally:
        timer.cancel()
        reader.join(timeout=5)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        why = f"ran past {timeout:.0f}s" if wall >= timeout else f"exited {proc.returncode}"
        raise failure(cmd, why, "\n".join(text for _, text in lines), "".join(err))
    return lines, wall


def peak_rss_kb(pid: int, tree: bool = True) -> int:
    """The largest peak resident memory so far (VmHWM) of process `pid` and, with `tree`,
    its descendants (`sh -c` running kubectl: a scan of /proc, ~30 ms here), 0 once they
    have ended. Polled while a child runs: wait4's ru_maxrss also counts the memory the
    child had before its exec, a copy of the parent's (a benchmark holding 1,000 pods'
    objects: ~300 MB)."""
    peak = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1])
    except (OSError, ValueError):
        return 0
    for child in _children(pid) if tree else []:
        peak = max(peak, peak_rss_kb(child))
    return peak


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (/proc/PID/stat's 4th field; this kernel has no
    /proc/PID/task/TID/children)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def kill_session(proc: subprocess.Popen[Any]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_json(cmd: Sequence[str], *, env: dict[str, str] | None = None,
             timeout: float = 300) -> Run:
    """Run `cmd` to the end and return its JSON log records (from its stdout)."""
    done = run_cmd(cmd, env=env, timeout=timeout)
    return Run(parse_records(done.out), done.wall, done.out, done.err)


def tail(text: str, lines: int = 15) -> str:
    return "\n".join((text or "").splitlines()[-lines:])


# ---- reading and summarising ------------------------------------------------------------


def steady_rate(run: Run, field_name: str = "samples_per_s", *, rank: int = 0,
                skip: int = 1, best: bool = True) -> float:
    """Throughput of `rank` from its step lines after `skip` warm-up intervals.

    `best`: the fastest interval, the one least disturbed by whatever else
    shares the machine (interference only ever slows a run down, as with
    timeit's minimum); else the rate over all of them (intervals hold the
    same number of steps, so that is the harmonic mean).
    """
    rates = [r[field_name] for r in run.records
             if r.get("event") == "step" and r.get("rank", 0) == rank and field_name in r]
    steady = rates[skip:]
    if not steady or min(steady) <= 0:
        raise BenchError(f"no steady {field_name} lines (got {rates}):\n{tail(run.output)}"
                         + (f"\n--- its stderr, last lines:\n{tail(run.err)}" if run.err else ""))
    return max(steady) if best else statistics.harmonic_mean(steady)


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Per-round a/b: interleaved pairs share the machine's conditions."""
    return [x / y for x, y in zip(a, b, strict=True)]


def interleave(variants: dict[str, Callable[[], float]], rounds: int,
               say: Callable[[str], None]) -> dict[str, list[float]]:
    """Run each variant once per round, in order (A B A B ...); their values per variant."""
    values: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(rounds):
        for name, fn in variants.items():
            value = fn()
            values[name].append(value)
            say(f"    round {r + 1}/{rounds} {name}: {value:,.4g}")
    return values


def machine_info() -> dict[str, Any]:
    """Cores this process may use and the 1-minute load average (2 cores are shared here)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return {"cores": cores, "load1": round(os.getloadavg()[0], 2)}
