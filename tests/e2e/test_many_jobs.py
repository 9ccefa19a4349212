"""Many jobs, one watcher: `kdist wait` and `kdist list --watch` over 20 jobs (issue 13).

Twenty one-pod jobs of the paced script (small requests, so they all fit on
one node; every third a JobSet, the rest Indexed Jobs), two of which fail on purpose.
`kdist wait --all` must end when the last one does, name each ending once, and exit 1
because two failed; `kdist list --watch` must show every job reaching its final phase.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest

from tests.e2e.conftest import require_backend
from tests.e2e.conftest_cli import (  # noqa: F401 - fixtures
    job_file_fixture,
    kdist_fixture,
    kdist_popen_fixture,
)

JOBS = 20
FAILING = {"many-03", "many-11"}


def _names() -> list[str]:
    return [f"many-{i:02d}" for i in range(JOBS)]


@pytest.fixture(name="twenty")
def twenty_fixture(kube, job_file, kdist) -> list[str]:  # noqa: F811
    require_backend(kube, "jobset")
    files = []
    for name in _names():
        paced = {"PACE": "0.3"}
        if name in FAILING:
            paced.update(FAIL_RANK="0", FAIL_AT="3", FAIL_CODE="1")
        # Every third a JobSet: `wait` and `list --watch` follow every training kind at once.
        backend = "jobset" if int(name[-2:]) % 3 == 2 else "indexed-job"
        files.append(job_file(name, nodes=1, paced=paced, args=["--max-steps", "8"],
                              backend=backend,
                              resources={"cpu": "50m", "memory": "512Mi", "shm": "16Mi"}))
    created = kdist("submit", *files, "--no-wait")  # several files, one call
    assert created.returncode == 0, created.stderr
    assert sum(1 for line in created.stdout.splitlines() if " created in namespace " in line) \
        == JOBS, created.stdout
    return _names()


@pytest.mark.timeout(600)
def test_wait_and_list_watch_follow_twenty_jobs(twenty, kdist, kdist_popen):  # noqa: F811
    watcher = kdist_popen("list", "--watch")
    started = time.monotonic()
    done = kdist("wait", "--all", "--timeout", "400", timeout=450)
    assert done.returncode == 1, done.stderr  # two failed on purpose
    for name in twenty:
        said = [line for line in (done.stdout + done.stderr).splitlines()
                if f"job {name} " in line]
        assert len(said) == 1, (name, said)  # each ending reported once
        if name in FAILING:
            assert "exited with code 1" in said[0], said
        else:
            assert said[0] == f"job {name} succeeded"
    assert "2 of 20 job(s) did not succeed" in done.stderr
    print(f"wait --all: {time.monotonic() - started:.1f}s for {JOBS} jobs")

    # The live table shows every job reach its final phase (read as it prints, then Ctrl-C).
    want = {name: "Failed" if name in FAILING else "Succeeded" for name in twenty}
    final: dict[str, str] = {}
    seen_all = threading.Event()

    def read() -> None:
        for line in watcher.stdout:
            cells = line.split()
            if len(cells) >= 2 and cells[0].startswith("many-"):
                final[cells[0]] = cells[1]  # NAME PHASE ...: the last line per job wins
                if final == want:
                    seen_all.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    seen_all.wait(60)
    watcher.send_signal(signal.SIGINT)
    assert watcher.wait(30) == 0, watcher.stderr.read()
    reader.join(10)
    assert final == want, final

    # Named jobs that all succeeded: exit 0. A name that is not there: exit 2.
    ok = [n for n in twenty if n not in FAILING][:3]
    assert kdist("wait", *ok, "--timeout", "60").returncode == 0
    missing = kdist("wait", "many-00", "nope-zz", "--timeout", "60")
    assert missing.returncode == 2 and "nope-zz" in missing.stderr
