"""A script run by a standby (warm) sees what it sees cold: argv, ``__main__``,
``sys.path``, the environment, cwd, signal dispositions, its process group, and ends with
the same exit code and traceback; for ``python script.py``, ``python -m module`` and
``python -c code`` alike; and what ``ps``, ``pgrep -f`` and ``/proc/PID/environ`` show of
it. With a warm first start only (``KDIST_WARM_WORKERS=first``, spec.distributed.warmStart),
a script that imports torch starts warm, one that does not cold (``kdist.runtime.warmstart``). Each run: the real launcher, one node, one
worker."""

from __future__ import annotations

import json
import os
import re
import signal
import textwrap
from pathlib import Path

import pytest
from disttools import run_job

ROOT = Path(__file__).resolve().parents[2]  # this checkout's kdist, before an installed one

PROBE = textwrap.dedent("""
    import sys
    preloaded = "torch" in sys.modules  # the one difference: torch imported before line 1
    # (torch)
    import json, os, signal, stat
    import __main__
    names = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGPIPE", "SIGUSR1", "SIGCHLD")
    skip = ("MASTER_PORT", "KDIST_MASTER_PORT", "KDIST_WARM_WORKERS")
    view = {
        "argv": sys.argv, "orig_argv": sys.orig_argv[1:], "path0": sys.path[0],
        "path": sys.path[1:4], "cwd": os.getcwd(),
        "main": {k: re.sub(" at 0x[0-9a-f]+", "", repr(v))
                 if k != "__builtins__" else type(v).__name__
                 for k, v in vars(__main__).items() if k.startswith("__")},
        "modules_main": sys.modules["__main__"] is __main__,
        "env": {k: re.sub(r"kdist-launch-[0-9]+-[^/]+|kdist-memory-[^/]+", "WORK", v)
                for k, v in os.environ.items() if k not in skip},
        "signals": {n: str(signal.getsignal(getattr(signal, n))) for n in names},
        "session": os.getsid(0) == os.getpid(), "group": os.getpgid(0) == os.getpid(),
        "stdout_fifo": stat.S_ISFIFO(os.fstat(1).st_mode),
        "same_out": os.fstat(1).st_ino == os.fstat(2).st_ino,
        "unbuffered": sys.stdout.write_through, "comm": open("/proc/self/comm").read().strip(),
        # what ps, pgrep -f and a look at /proc/PID/environ find (the zeros a warm worker's
        # blocks end with left out: no program reads them as an argument or a variable)
        "proc_cmdline": [a.decode() for a in open("/proc/self/cmdline", "rb").read().split(b"\\0")
                         if a],
        "proc_environ": {k: re.sub(r"kdist-launch-[0-9]+-[^/]+|kdist-memory-[^/]+", "WORK", v)
                         for k, _, v in (a.decode().partition("=") for a in
                                         open("/proc/self/environ", "rb").read().split(b"\\0")
                                         if a) if k not in skip},
    }
    print("PRELOADED", preloaded, flush=True)
    print("VIEW " + json.dumps(view, sort_keys=True), flush=True)
    end = os.environ.get("END", "ok")
    if end == "exit3":
        sys.exit(3)
    if end == "raise":
        def inner():
            raise ValueError("boom")
        inner()
""").replace("import json, os", "import json, os, re", 1)
assert "# (torch)" in PROBE


def _views(tmp_path: Path, argv: list[str], warm: str, **extra: str) -> tuple[int, dict, list]:
    """warm: KDIST_WARM_WORKERS ("" unset: the launcher decides the first start). The
    launcher starts with SIGINT, SIGQUIT and SIGHUP ignored, as under nohup or as a
    shell's background job: a cold worker still gets them as exec leaves them."""
    ignored = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)
    before = {sig: signal.signal(sig, signal.SIG_IGN) for sig in ignored}
    try:
        run = run_job(argv, cwd=tmp_path,
                      PYTHONPATH=os.pathsep.join((str(tmp_path), str(ROOT))),
                      **({"KDIST_WARM_WORKERS": warm} if warm else {}), **extra)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    said = [line for line in run.lines if "started from their standbys" in line]
    assert said == (["[node 0] kdist.launch: 1 of 1 worker(s) of node 0 started from their "
                     "standbys (warm), 0 cold"] if warm == "1" else []), run.text
    views = [json.loads(line.split("VIEW ", 1)[1]) for line in run.lines if "VIEW " in line]
    assert len(views) == 1, run.text
    views[0]["preloaded"] = "[rank 0] PRELOADED True" in run.lines
    trace = [re.sub(r"pid \\d+", "pid N", line) for line in run.lines
             if line.startswith("[rank 0] ") and "VIEW " not in line and "PRELOADED" not in line]
    return run.code, views[0], trace


def _same(warm: dict, cold: dict) -> None:
    assert warm.pop("preloaded") and not cold.pop("preloaded")
    for key in cold:
        assert warm[key] == cold[key], f"{key}:\n warm {warm[key]}\n cold {cold[key]}"
    assert warm == cold


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "probe.py").write_text(PROBE)
    return tmp_path / "sub" / "probe.py"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["script", "module", "code"])
def test_a_warm_worker_sees_what_a_cold_one_sees(tmp_path, probe, how):
    argv = {"script": ["--", "python", "sub/probe.py", "a", "-m", "b"],
            "module": ["--module", "sub.probe", "--", "a", "-m", "b"],
            "code": ["--", "python", "-c", PROBE, "a", "-m", "b"]}[how]
    cold = _views(tmp_path, argv, warm="0")
    warm = _views(tmp_path, argv, warm="1")
    assert warm[0] == cold[0] == 0
    _same(warm[1], cold[1])


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("end", "code"), [("exit3", 3), ("raise", 1)])
def test_a_warm_worker_ends_as_a_cold_one(tmp_path, probe, end, code):
    argv = ["--", "python", "sub/probe.py"]
    cold = _views(tmp_path, argv, warm="0", END=end)
    warm = _views(tmp_path, argv, warm="1", END=end)
    assert warm[0] == cold[0] == code
    assert warm[2] == cold[2]  # the traceback, line for line: no standby frame in it
    if end == "raise":
        assert cold[2][-1] == "[rank 0] ValueError: boom", cold[2]
        assert not [line for line in warm[2] if "_kdist_standby" in line or "runpy" in line]


@pytest.mark.timeout(300)
def test_unasked_a_script_that_imports_torch_starts_warm_and_sees_what_it_sees_cold(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "probe.py").write_text(PROBE.replace("# (torch)", "import torch"))
    argv = ["--", "python", "sub/probe.py", "a"]
    cold = _views(tmp_path, argv, warm="0")
    first = _views(tmp_path, argv, warm="first")
    assert first[0] == cold[0] == 0
    _same(first[1], cold[1])


@pytest.mark.timeout(300)
def test_unasked_a_script_without_torch_starts_cold(tmp_path, probe):
    code, view, _ = _views(tmp_path, ["--", "python", "sub/probe.py"], warm="first")
    assert code == 0 and not view["preloaded"]
