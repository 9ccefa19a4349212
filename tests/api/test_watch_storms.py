"""A watch that fails the same way on every try is retried with a growing pause, a bounded
number of times, then ends the command with one line (issue 38).

Before: a watch answered 410 on every try, ERROR events (410, 500) in a 200 stream, or a
stream that sends one BOOKMARK and ends made kdist re-list/re-watch hundreds of times in
10 s, for as long as --timeout allowed: each event, an ERROR or a BOOKMARK included, reset
the failure count, and a 410 relisted at once without counting at all.

The pauses are scaled down here (same bound, tiny delays) so that giving up takes well
under a second; `test_the_real_backoff_keeps_a_storm_small` runs the real numbers for 10 s.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.api.checks import error_line
from tests.api.fakeapi import FakeApi
from tests.api.store import status_body
from tests.api.test_verbs import running_job

JOBS = "/apis/batch/v1/namespaces/default/jobs"
PODS = "/api/v1/namespaces/default/pods"
ATTEMPTS = 8  # the real bound (kdist.kube.watch.reflector.WATCH_BACKOFF.attempts)

pytestmark = pytest.mark.timeout(120)


def _error(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"type": "ERROR", "object": status_body(code, reason, message)}


def storm(api: FakeApi, shape: str, plural: str = "jobs") -> None:
    """Make every watch on `plural` fail in `shape`'s way."""
    path = JOBS if plural == "jobs" else PODS
    if shape == "410 answer":
        api.fail(410, "Expired", "too old resource version: 1 (2000)", path=path, watch=True)
    elif shape == "ERROR 410 event":
        api.script_every_watch(plural, [_error(410, "Expired", "too old resource version")])
    elif shape == "ERROR 500 event":
        api.script_every_watch(plural, [_error(500, "InternalError", "etcd leader changed")])
    elif shape == "one BOOKMARK, then the end":
        kind, version = ("Job", "batch/v1") if plural == "jobs" else ("Pod", "v1")
        api.script_every_watch(plural, [{"type": "BOOKMARK", "object": {
            "kind": kind, "apiVersion": version, "metadata": {"resourceVersion": "5000"}}}])
    else:
        raise AssertionError(shape)


SHAPES = ["410 answer", "ERROR 410 event", "ERROR 500 event", "one BOOKMARK, then the end"]
# wait: the many-jobs watcher; submit and logs -f: one job's session; delete: the wait for
# its objects to go.
VERBS = {"wait": ["wait", "demo", "--timeout", "10"],
         "submit": ["submit", "--timeout", "10", "{spec}"],
         "logs -f": ["logs", "-f", "demo"],
         "delete": ["delete", "demo"]}


@pytest.fixture
def fast_backoff(monkeypatch):
    """The real bound, with pauses of 10 to 40 ms."""
    from kdist.kube.watch import reflector

    real = getattr(reflector, "WATCH_BACKOFF", reflector.Backoff())
    monkeypatch.setattr(reflector, "WATCH_BACKOFF",
                        dataclasses.replace(real, first=0.01, cap=0.04), raising=False)


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("shape", SHAPES)
def test_a_watch_failing_on_every_try_ends_with_one_line(api, kdist, spec, fast_backoff,
                                                          shape, verb):
    if verb != "submit":
        running_job(api, "demo")
    storm(api, shape)
    out = kdist(*[a.format(spec=spec) for a in VERBS[verb]])
    watch_calls = [r for r in out.requests if r.path == JOBS]
    assert len(watch_calls) <= 2 * ATTEMPTS + 2, \
        f"{len(watch_calls)} lists/watches of jobs:\n{out.describe()}"
    error_line(out, 3, "lost the watch on", f"after {ATTEMPTS} attempts")
    assert out.seconds < 8, out.describe()


@pytest.mark.parametrize("shape", SHAPES)
def test_a_pod_watch_failing_on_every_try_ends_wait(api, kdist, fast_backoff, shape):
    running_job(api, "demo")
    storm(api, shape, "pods")
    out = kdist("wait", "demo", "--timeout", "10")
    assert len([r for r in out.requests if r.path == PODS]) <= 2 * ATTEMPTS + 3, out.describe()
    error_line(out, 3, "lost the watch on pods", f"after {ATTEMPTS} attempts")


def test_events_between_failures_keep_the_watch_alive(api, kdist, fast_backoff):
    """Real progress (an ADDED/MODIFIED/DELETED event) resets the count: a flaky server
    that delivers the job's end between errors is followed to that end."""
    job = running_job(api, "demo")
    error = [_error(500, "InternalError", "etcd leader changed")]
    api.script_watch("jobs", *[error] * (ATTEMPTS - 1))
    api.script_watch("jobs", [{"type": "MODIFIED", "object": job}])
    api.script_watch("jobs", *[error] * (ATTEMPTS - 1))
    done = dict(job, status={"conditions": [{"type": "Complete", "status": "True"}],
                             "succeeded": 2})
    api.script_watch("jobs", [{"type": "MODIFIED", "object": done}])
    out = kdist("wait", "demo", "--timeout", "20")
    assert out.code == 0, out.describe()


@pytest.mark.timeout(60)
def test_the_real_backoff_keeps_a_storm_small(api, kdist):
    """The real pauses (0.5 s doubling, capped): in 10 s of a 410 on every watch, a handful
    of requests, not hundreds; the wait's own timeout ends the command."""
    running_job(api, "demo")
    storm(api, "410 answer")
    out = kdist("wait", "demo", "--timeout", "10")
    calls = [r for r in out.requests if r.path == JOBS]
    assert 4 <= len(calls) < 20, f"{len(calls)} lists/watches of jobs:\n{out.describe()}"
    error_line(out, 1, "timed out after 10s")


def test_the_real_backoff_gives_up_within_a_minute():
    from kdist.kube.watch.reflector import Backoff

    real = Backoff()
    waited = sum(real.delay(f) for f in range(1, real.attempts))
    assert 20 <= waited <= 60, waited
    assert real.delay(100) == real.cap <= 30
