"""Cluster answers bounded by kdist's own limits (issue 22): a kdist-labelled object that
says something no kdist job can have is a clear exit 3, in bounded time and memory.

A Job with `completions: 2147483647` made `status`, `logs` and `wait` build a rank for
every index (GBs, past --timeout and SIGTERM). Each case runs kdist as a child process
with its address space capped, so a run that grows fails fast instead of taking the
machine's memory, and compares it with a plain run on this machine now (`baseline`).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.api import objects
from tests.api.checks import error_line

pytestmark = pytest.mark.timeout(240)

ABSURD = 2**31 - 1
SLACK = 5.0  # seconds beyond a plain run's
MEMORY_SLACK_MB = 60
ADDRESS_SPACE_MB = 3000  # far above a plain run's; a per-index structure of 2^31 is not
VERBS = {"status": ["status", "demo"], "logs": ["logs", "demo"],
         "wait": ["wait", "demo", "--timeout", "5"], "wait --all": ["wait", "--all",
                                                                     "--timeout", "5"],
         "logs -f": ["logs", "-f", "demo"], "list --watch": ["list", "--watch"]}


def absurd_job(kind: str, value: Any = ABSURD) -> dict[str, Any]:
    if kind == "indexed-job":
        job = objects.job("demo")
        job["spec"]["completions"] = job["spec"]["parallelism"] = value
        return job
    job = objects.pytorchjob("demo")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = value
    return job


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("kind", ["indexed-job", "pytorchjob"])
def test_absurd_completions_are_a_cluster_answer_error(api, kdist_proc, baseline, verb, kind):
    stored = api.add(absurd_job(kind))[0]
    api.add(objects.pod(stored, 0))
    out = kdist_proc(*VERBS[verb], limit=baseline.seconds + 30,
                     max_memory_mb=ADDRESS_SPACE_MB)
    assert not out.timed_out, f"kdist was still running; killed:\n{out.describe()}"
    field = "spec.completions" if kind == "indexed-job" else "Worker.replicas"
    error_line(out, 3, "demo", field, str(ABSURD), "1 to 1000")
    assert out.seconds <= baseline.seconds + SLACK, \
        f"a plain run took {baseline.seconds:.1f}s:\n{out.describe()}"
    assert out.max_rss_mb <= baseline.max_rss_mb + MEMORY_SLACK_MB, \
        f"peak {out.max_rss_mb:.0f} MB, a plain run {baseline.max_rss_mb:.0f} MB"


@pytest.mark.parametrize("value", [0, -1, 1001, "2", 2.0, True, None, [2]],
                         ids=lambda v: json.dumps(v))
def test_completions_kdist_cannot_have(api, kdist, value):
    job = absurd_job("indexed-job", value)
    if value is None:
        job["spec"].pop("completions")
    api.add(job)
    out = kdist("status", "demo", "-o", "json")
    if value is None:  # not said: the ranks come from the pods seen
        assert out.code == 0, out.describe()
        return
    error_line(out, 3, "spec.completions", "1 to 1000")


def test_a_pod_with_a_rank_no_kdist_job_has_is_not_a_rank(api, kdist):
    job = api.add(objects.job("demo"))[0]
    api.add(objects.pod(job, 0), objects.pod(job, 1))
    for index in (str(ABSURD), "-1", "1" * 5000, "١"):  # the last: an Arabic-Indic one
        pod = objects.pod(job, 0)
        pod["metadata"]["name"] = f"demo-x{len(index)}-{abs(hash(index)) % 1000}"
        pod["metadata"]["labels"][objects.INDEX] = index[:63]
        pod["metadata"]["annotations"][objects.INDEX] = index
        api.add(pod)
    out = kdist("status", "demo", "-o", "json")
    assert out.code == 0, out.describe()
    assert [r["rank"] for r in json.loads(out.stdout)["ranks"]] == [0, 1], out.describe()


def test_counts_that_are_not_numbers_do_not_crash(api, kdist):
    job = api.add(objects.job("demo"))[0]
    job["status"]["ready"] = "many"
    api.store.update(job)
    pod = objects.pod(job, 0)
    pod["status"]["containerStatuses"][0]["restartCount"] = "9" * 5000
    api.add(pod)
    for args in (["status", "demo", "-o", "json"], ["list"]):
        out = kdist(*args)
        assert out.code == 0 and out.crash is None, out.describe()


def test_an_answer_beyond_the_bound_is_refused_not_read_whole(api, kdist, monkeypatch):
    """The bound is 128 MiB; shrunk here so that a few jobs exceed it."""
    monkeypatch.setattr("kdist.kube.client.MAX_ANSWER_BYTES", 4000)
    api.add(*(objects.job(f"job-{i}") for i in range(10)))
    out = kdist("list")
    error_line(out, 3, "more than", api.url)


def test_a_watch_line_beyond_the_bound_is_refused(api, kdist, monkeypatch):
    monkeypatch.setattr("kdist.kube.client.MAX_EVENT_BYTES", 100_000)
    job = api.add(objects.job("demo"))[0]
    huge = dict(job, metadata=dict(job["metadata"], annotations={"x": "y" * 200_000}))
    api.script_watch("jobs", [{"type": "MODIFIED", "object": huge}])
    out = kdist("wait", "demo", "--timeout", "10")
    error_line(out, 3, "a line of more than", "/jobs")


@pytest.mark.parametrize("verb", ["status", "wait"])
def test_a_huge_restart_count_in_place_is_counted_at_once(api, kdist_proc, baseline, verb):
    """A pod restarted in place 2147483647 times by its count, with the kubelet's record of
    the last: the restarts whose exit no watch saw were counted one by one (minutes of
    full CPU); they are one restart of the ledger, as any number of them is."""
    job = api.add(objects.job("demo"))[0]
    pod = objects.pod(job, 0)
    pod["status"]["containerStatuses"][0].update(restartCount=ABSURD, lastState={
        "terminated": {"exitCode": 137, "reason": "RestartingAllContainers",
                       "finishedAt": None}})
    api.add(pod, objects.pod(job, 1))
    args = ["status", "demo", "-o", "json"] if verb == "status" else \
        ["wait", "demo", "--timeout", "3"]
    out = kdist_proc(*args, limit=baseline.seconds + 30)
    assert not out.timed_out, f"kdist was still running; killed:\n{out.describe()}"
    assert out.seconds <= baseline.seconds + SLACK + (3 if verb == "wait" else 0), \
        f"a plain run took {baseline.seconds:.1f}s:\n{out.describe()}"
    assert out.crash is None and "Traceback" not in out.stderr, out.describe()
    if verb == "status":
        assert out.code == 0, out.describe()
        shown = json.loads(out.stdout)
        assert shown["ranks"][0]["restarts"] == ABSURD, out.describe()
        assert shown["ledger"]["restartsUsed"] == 1, out.describe()
