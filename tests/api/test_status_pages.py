"""`kdist status` of a 1,000-pod job reads its pods a page at a time, and no more (issue 53).

It read them in one answer (~6 MB at 1,000 pods as kube-apiserver lists them, all of it
decoded and held at once) after asking discovery about every operator's kind first. Now:
the job (one request when it is a built-in Indexed Job), its pods in pages of POD_PAGE
(limit and continue), each let go before the next is read, and at most LOG_NODES logs.
Counted here, not timed: requests, and the bytes of each answer (what the client
decodes); what status shows is the same as with one whole list.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest

from kdist.shared import limits
from tests.api import objects
from tests.api.fakeapi import FakeApi

pytestmark = pytest.mark.timeout(300)

NODES = 1000
FAILED, RESTARTED, DONE, PENDING, REPLACED = 3, 500, 750, 999, 10


def big_job(api: FakeApi) -> dict[str, Any]:
    """A running 1,000-pod Indexed Job, its pods as kube-apiserver lists them: one rank
    failed, one restarted in its pod twice, one done, one not scheduled, one replaced (a
    failed pod and its successor)."""
    job = api.add(objects.job("big", nodes=NODES))[0]
    for rank in range(NODES):
        code = {FAILED: 1, DONE: 0}.get(rank)
        pod = objects.full_pod(job, rank, exit_code=code,
                               **({"restarts": 2, "last_exit": 137} if rank == RESTARTED
                                  else {}))
        if rank == PENDING:
            pod["spec"].pop("nodeName")
            pod["status"] = {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/1000 nodes are available: 1000 Insufficient cpu."}]}
        if rank == REPLACED:
            old = objects.full_pod(job, rank, exit_code=137)
            old["metadata"]["name"] = f"big-{rank}-older"
            old["metadata"]["creationTimestamp"] = "2025-01-02T03:00:00Z"
            api.add(old)
        api.add(pod)
        api.set_log(pod["metadata"]["name"], objects.step_log(rank, world=NODES))
    return job


def timeless(text: str) -> Any:
    """Status as `-o json` says it, without the times the ledger takes from the clock (when
    this run saw a failure; a replaced rank's is one)."""
    state = json.loads(text)
    for part in (state["ledger"], *state["ledger"]["restarts"]):
        for key in [k for k in part if k in ("resumedAt", "asOf", "secondsLost")]:
            part.pop(key)
    return state


def undated(text: str) -> str:
    """The status table without its clock: durations (the job's elapsed time, a restart's
    seconds lost: until this run saw it)."""
    return re.sub(r"\b[0-9.]+s\b", "-s", text)


def pages(out: Any) -> list[Any]:
    return [r for r in out.requests if r.path == "/api/v1/namespaces/default/pods"]


def test_status_reads_the_pods_in_pages_and_the_job_without_discovery(api, kdist):
    big_job(api)
    whole = len(json.dumps(api.store.list(_query())).encode())
    out = kdist("status", "big", "-o", "json")
    assert out.code == 0, out.describe()
    listed = pages(out)
    pods = NODES + 1
    assert len(listed) == math.ceil(pods / limits.POD_PAGE), out.describe()
    assert all(r.query.get("limit") == str(limits.POD_PAGE) for r in listed), out.describe()
    assert [bool(r.query.get("continue")) for r in listed] == [False] + [True] * (
        len(listed) - 1), out.describe()
    logs = [r for r in out.requests if r.path.endswith("/log")]
    assert len(logs) == limits.LOG_NODES, out.describe()
    # The job, its pods, the logs: no discovery (an Indexed Job is built in), nothing twice.
    assert not [r for r in out.requests if r.path.count("/") <= 3], out.describe()
    assert len(out.requests) == 1 + len(listed) + len(logs), out.describe()
    sizes = api.answered(listed)
    # Each pod sent (and decoded) once; no answer holds more than a page of them.
    assert sum(sizes) < whole * 1.01, (sizes, whole)
    assert max(sizes) < whole * 1.2 * limits.POD_PAGE / pods, (sizes, whole)
    state = json.loads(out.stdout)
    assert len(state["ranks"]) == NODES


def test_status_shows_what_one_whole_list_shows(api, kdist, monkeypatch):
    """Pages change how the pods are read, not what status makes of them."""
    big_job(api)
    paged = kdist("status", "big", "-o", "json")
    table = kdist("status", "big")
    monkeypatch.setattr(limits, "POD_PAGE", 10 * NODES)
    whole = kdist("status", "big", "-o", "json")
    whole_table = kdist("status", "big")
    assert paged.code == whole.code == 0, paged.describe()
    assert len(pages(whole)) == 1 and len(pages(paged)) > 1, whole.describe()
    assert timeless(paged.stdout) == timeless(whole.stdout)
    assert (undated(table.stdout), table.stderr) == (undated(whole_table.stdout),
                                                      whole_table.stderr)
    ranks = {r["rank"]: r for r in json.loads(paged.stdout)["ranks"]}
    assert ranks[FAILED]["exit_code"] == 1 and ranks[FAILED]["phase"] == "Failed", ranks[FAILED]
    assert ranks[RESTARTED]["restarts"] == 2, ranks[RESTARTED]
    assert ranks[DONE]["phase"] == "Succeeded", ranks[DONE]
    assert ranks[PENDING]["reason"] == "Unschedulable", ranks[PENDING]
    assert ranks[REPLACED]["pod"] == f"big-{REPLACED}-abcde", ranks[REPLACED]
    assert ranks[REPLACED]["restarts"] == 1, ranks[REPLACED]
    assert ranks[NODES - 1 - 1]["node"] == f"kwok-node-{NODES - 2}", ranks[NODES - 2]


def test_an_expired_snapshot_is_listed_again_whole(api, kdist):
    """A continue token outlives etcd's history (410 Expired after ~5 minutes): the pods
    are listed again in one answer, as client-go's pager does, and status is the same."""
    big_job(api)
    before = kdist("status", "big", "-o", "json")
    api.fail(410, "Expired", "The provided continue parameter is too old",
             method="GET", path="/pods$", query="continue", times=1)
    out = kdist("status", "big", "-o", "json")
    assert out.code == 0, out.describe()
    listed = pages(out)
    assert [r.query.get("limit") for r in listed] == [str(limits.POD_PAGE)] * 2 + [None], \
        out.describe()
    assert timeless(out.stdout) == timeless(before.stdout)


def test_a_list_that_never_ends_is_refused(api, kdist):
    api.add(objects.job("small", nodes=2))
    page = {"kind": "PodList", "apiVersion": "v1",
            "metadata": {"resourceVersion": "1", "continue": "same"}, "items": []}
    api.answer(page, method="GET", path="/pods$", watch=False)
    out = kdist("status", "small")
    assert out.code != 0, out.describe()
    assert len(out.error_lines) == 1 and "continues at 'same' again" in out.stderr, \
        out.describe()
    assert len(pages(out)) == 2, out.describe()


def _query() -> Any:
    from tests.api.store import Query

    return Query("pods", "default", "kdist.dev/job-name=big")
