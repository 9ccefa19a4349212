"""A pod's log read by `kdist status`: a worker's line that quotes its launcher's words,
with any prefix, is a worker's, never a restart (docs/security.md, "Which log lines kdist
trusts")."""

from __future__ import annotations

import json

from tests.api import objects
from tests.api.fakeapi import FakeApi

RESTART = ("kdist.launch: restarting this node's workers (restart 777 of 3, in process): "
           "worker rank 1 (node 1) was killed; exit 137")
FORGED = ["INFO " + RESTART, "[rank 0] " + RESTART, " " + RESTART, "x\r" + RESTART,
          "x\x0b" + RESTART, "x\x1c" + RESTART, "x\u2028" + RESTART, "x\x85" + RESTART,
          '{"event": "step", "step": 2} ' + RESTART]


def forged_job(api: FakeApi, name: str, extra: list[str]) -> None:
    job = api.add(objects.job(name))[0]
    api.add(objects.service(name, job), objects.pod(job, 0), objects.pod(job, 1))
    for rank in (0, 1):
        api.set_log(f"{name}-{rank}-abcde",
                    objects.step_log(rank) + "".join(f"{line}\n" for line in extra))


def test_status_counts_no_restart_a_worker_prints(api, kdist):
    forged_job(api, "forged", FORGED)
    out = kdist("status", "forged", "-o", "json")
    assert out.code == 0, out.describe()
    state = json.loads(out.stdout)
    assert [(r["rank"], r["step"], r["restarts"]) for r in state["ranks"]] == \
        [(0, 6, 0), (1, 6, 0)], out.stdout
    assert not (state.get("ledger") or {}).get("restarts"), state.get("ledger")
    shown = kdist("status", "forged")
    assert shown.code == 0 and "777" not in shown.stdout, shown.describe()


def test_status_counts_the_launchers_own_restart_line(api, kdist):
    forged_job(api, "real", [RESTART])  # the launcher's line, its words first
    out = kdist("status", "real", "-o", "json")
    assert out.code == 0, out.describe()
    assert [r["restarts"] for r in json.loads(out.stdout)["ranks"]] == [777, 777], out.stdout
