"""Ctrl-C and SIGTERM while `kdist submit` creates: the rollback finishes, and the line says
what exists (issue 22).

kdist runs as a child process; the fake API's hooks signal it at exact points of the
request sequence (inside the request, before the answer is sent). GNU `timeout` delivers
its signal twice (to kdist and to its process group): two signals at once are the rule.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.api import objects
from tests.api.fakeapi import FakeApi
from tests.api.runner import Outcome

pytestmark = pytest.mark.timeout(120)

LIMIT = 60.0


def signal_kdist(sig: int, times: int = 1) -> None:
    """Send `sig` to this test's kdist child process (the one child running `-m kdist`)."""
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
        except OSError:
            continue
        if ppid == me and b"kdist" in cmdline:
            for _ in range(times):
                os.kill(int(entry), sig)
            return
    raise AssertionError("no kdist child process to signal")


def with_workdir(tmp_path: Path) -> Path:
    """A job with code: a Job, its Service, then a ConfigMap of the code (three creates)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    spec = objects.job_yaml(tmp_path / "job.yaml")
    spec.write_text(spec.read_text() + "  workdir: code\n")
    return spec


def interrupted(out: Outcome) -> str:
    assert not out.timed_out, f"kdist was still running; killed:\n{out.describe()}"
    assert out.crash is None and "Traceback" not in out.stderr, out.describe()
    assert out.code == 130, out.describe()
    lines = [line for line in out.stderr.splitlines() if line.startswith("interrupted:")]
    assert len(lines) == 1, out.describe()
    return lines[0]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_job_is_created_rolls_it_back(api: FakeApi, kdist_proc, spec, sig):
    api.after_create["jobs"] = lambda job: signal_kdist(sig, times=2)
    out = kdist_proc("submit", "--no-wait", str(spec), limit=LIMIT)
    line = interrupted(out)
    assert "keeps running" not in line, out.describe()
    assert "job demo was not created: deleted again job.batch/demo" in line, out.describe()
    assert api.store.alive("jobs") == [] and api.store.alive("services") == [], out.describe()


def test_a_second_signal_during_the_rollback_does_not_abandon_it(api: FakeApi, kdist_proc,
                                                                 tmp_path):
    """The first SIGTERM while the code's ConfigMap is created, the second while the
    rollback deletes the Service: the Job's delete must still be sent."""
    spec = with_workdir(tmp_path)
    api.after_create["configmaps"] = lambda cm: signal_kdist(signal.SIGTERM)
    api.on_delete["services"] = lambda: signal_kdist(signal.SIGTERM)
    out = kdist_proc("submit", "--no-wait", str(spec), limit=LIMIT)
    line = interrupted(out)
    assert "keeps running" not in line, out.describe()
    assert "job.batch/demo" in line and "service/demo" in line, out.describe()
    assert ("DELETE", "/apis/batch/v1/namespaces/default/jobs/demo") in out.calls, \
        out.describe()
    assert api.store.alive("jobs") == [] and api.store.alive("services") == [] and \
        api.store.alive("configmaps") == [], out.describe()


def test_a_signal_before_anything_was_sent_says_nothing_was_created(api: FakeApi, kdist_proc,
                                                                    spec):
    """--replace asks discovery first; Ctrl-C while that GET hangs: nothing was created."""
    api.hang(method="GET")
    mark = api.mark()

    def when_asked() -> None:
        deadline = time.monotonic() + LIMIT
        while not api.since(mark) and time.monotonic() < deadline:
            time.sleep(0.05)
        signal_kdist(signal.SIGINT)

    threading.Thread(target=when_asked, daemon=True).start()
    out = kdist_proc("submit", "--replace", "--no-wait", str(spec), limit=LIMIT)
    line = interrupted(out)
    assert "keeps running" not in line, out.describe()
    assert "job demo was not created (nothing of it was sent)" in line, out.describe()
    assert not any(r.method in ("POST", "DELETE") for r in out.requests), out.describe()


def test_a_signal_once_the_job_exists_says_it_keeps_running(api: FakeApi, kdist_proc, spec):
    api.on_watch["jobs"] = lambda: signal_kdist(signal.SIGINT)
    out = kdist_proc("submit", "--timeout", "30", str(spec), limit=LIMIT)
    line = interrupted(out)
    assert "job demo keeps running in namespace default" in line, out.describe()
    assert api.store.alive("jobs") == ["demo"]


def test_a_batch_interrupted_half_way_is_undone(api: FakeApi, kdist_proc, tmp_path):
    a = objects.job_yaml(tmp_path / "a.yaml", "alpha")
    b = objects.job_yaml(tmp_path / "b.yaml", "beta")
    api.after_create["jobs"] = lambda job: api.after_create.__setitem__(
        "jobs", lambda job: signal_kdist(signal.SIGTERM, times=2))
    out = kdist_proc("submit", "--no-wait", str(a), str(b), limit=LIMIT)
    line = interrupted(out)
    assert f"{b}: job beta was not created: deleted again job.batch/beta" in line, \
        out.describe()
    assert f"the batch is undone: deleted job alpha ({a})" in line, out.describe()
    assert "no job of this batch exists" in line and "keeps running" not in line
    assert api.store.alive("jobs") == [], out.describe()
