"""A script run by a standby (warm) sees what it sees cold: argv, ``__main__``,
``sys.path``, the environment, cwd, signal dispositions, its process group, and ends with
the same exit code and traceback; for ``python script.py``, ``python -m module`` and
``python -c code`` alike. Each run: the real launcher, one node, one worker."""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest
from disttools import run_job

ROOT = Path(__file__).resolve().parents[2]  # this checkout's kdist, before an installed one

PROBE = textwrap.dedent("""
    import json, os, signal, stat, sys
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
    }
    print("VIEW " + json.dumps(view, sort_keys=True), flush=True)
    end = os.environ.get("END", "ok")
    if end == "exit3":
        sys.exit(3)
    if end == "raise":
        def inner():
            raise ValueError("boom")
        inner()
""").replace("import json, os", "import json, os, re", 1)


def _views(tmp_path: Path, argv: list[str], warm: bool, **extra: str) -> tuple[int, dict, list]:
    run = run_job(argv, cwd=tmp_path, KDIST_WARM_WORKERS="1" if warm else "0",
                  PYTHONPATH=os.pathsep.join((str(tmp_path), str(ROOT))), **extra)
    said = [line for line in run.lines if "started from their standbys" in line]
    assert said == ([f"[node 0] kdist.launch: {int(warm)} of 1 worker(s) of node 0 started "
                     f"from their standbys (warm), {1 - int(warm)} cold"] if warm else []), run.text
    views = [json.loads(line.split("VIEW ", 1)[1]) for line in run.lines if "VIEW " in line]
    assert len(views) == 1, run.text
    trace = [re.sub(r"pid \\d+", "pid N", line) for line in run.lines
             if line.startswith("[rank 0] ") and "VIEW " not in line]
    return run.code, views[0], trace


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
    cold = _views(tmp_path, argv, warm=False)
    warm = _views(tmp_path, argv, warm=True)
    assert warm[0] == cold[0] == 0
    for key in cold[1]:
        assert warm[1][key] == cold[1][key], f"{key}:\n warm {warm[1][key]}\n cold {cold[1][key]}"
    assert warm[1] == cold[1]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("end", "code"), [("exit3", 3), ("raise", 1)])
def test_a_warm_worker_ends_as_a_cold_one(tmp_path, probe, end, code):
    argv = ["--", "python", "sub/probe.py"]
    cold = _views(tmp_path, argv, warm=False, END=end)
    warm = _views(tmp_path, argv, warm=True, END=end)
    assert warm[0] == cold[0] == code
    assert warm[2] == cold[2]  # the traceback, line for line: no standby frame in it
    if end == "raise":
        assert cold[2][-1] == "[rank 0] ValueError: boom", cold[2]
        assert not [line for line in warm[2] if "_kdist_standby" in line or "runpy" in line]
