"""The end of a watch: a finished pod's log stream that never ends (kwok's, a proxy
holding it) is not waited for; one plain read from where the follower got to gives the
rest, each line once and in order (kdist.kube.watch.logfollow)."""

from __future__ import annotations

import threading
import time
from typing import Any

from kdist.kube.watch.logfollow import LogCursor, read_rest
from kdist.kube.watch.reflector import Session, Sources
from kdist.kube.watch.tracker import Tracker
from tests.unit.test_watch import ReplaySource

LINES = ["2025-11-30T10:00:01Z one", "2025-11-30T10:00:02Z two",
         "2025-11-30T10:00:02Z two again", "2025-11-30T10:00:03Z three"]


def _job(done: bool) -> dict[str, Any]:
    status = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]} \
        if done else {"active": 1}
    return {"kind": "Job", "apiVersion": "batch/v1",
            "metadata": {"name": "mnist", "namespace": "default", "uid": "j",
                         "resourceVersion": "1", "labels": {"kdist.dev/job-name": "mnist"}},
            "spec": {"completions": 1, "parallelism": 1, "completionMode": "Indexed"},
            "status": status}


def _pod(phase: str) -> dict[str, Any]:
    state = {"terminated": {"exitCode": 0, "finishedAt": "2025-11-30T10:00:04Z"}} \
        if phase == "Succeeded" else {"running": {"startedAt": "2025-11-30T10:00:00Z"}}
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "mnist-0-aaaaa", "namespace": "default", "uid": "p0",
                         "resourceVersion": "2", "creationTimestamp": "2025-11-30T10:00:00Z",
                         "labels": {"kdist.dev/job-name": "mnist",
                                    "batch.kubernetes.io/job-completion-index": "0"}},
            "spec": {"containers": [{"name": "pytorch"}], "nodeName": "n1"},
            "status": {"phase": phase, "containerStatuses": [
                {"name": "pytorch", "restartCount": 0, "state": state}]}}


class NeverEnding:
    """kwok's follow: the first two lines, then silence until the session stops; a plain
    read gives the whole log."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop, self.calls = stop, []

    def stream_log(self, pod, *, follow, tail, since_seconds):
        self.calls.append((follow, since_seconds))
        if not follow:
            yield from LINES
            return
        yield from LINES[:2]
        self.stop.wait(30)

    def container_instance(self, pod):
        return False, 0


def test_a_finished_pods_stream_that_never_ends_is_read_to_its_end_at_once():
    stop = threading.Event()
    logs = NeverEnding(stop)
    tracker = Tracker("mnist")
    session = Session(tracker, Sources(ReplaySource("job", [_job(True)], stop),
                                       ReplaySource("pods", [_pod("Succeeded")], stop), logs))
    session.start()
    started = time.monotonic()
    seen = list(session.events(tick=0.1, drain=5))
    took = time.monotonic() - started
    session.close()
    stop.set()
    logged = [line for kind, (_, line) in [s for s in seen if s[0] == "log"]]
    assert logged == ["one", "two", "two again", "three"], seen
    assert took < 2.5, f"waited {took:.1f} s: the drain (5 s) for a stream that never ends"
    assert any(not follow for follow, _ in logs.calls), logs.calls


def test_a_running_pods_stream_is_still_given_the_drain():
    """A job over while a pod still runs (a failed gang): its log may still grow, so its
    follower is not cut short: the watch ends at the drain, as before."""
    stop = threading.Event()
    logs = NeverEnding(stop)
    failed = dict(_job(False), status={"failed": 1, "conditions": [
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]})
    session = Session(Tracker("mnist"), Sources(ReplaySource("job", [failed], stop),
                                                ReplaySource("pods", [_pod("Running")], stop),
                                                logs))
    session.start()
    started = time.monotonic()
    list(session.events(tick=0.1, drain=1.0))
    took = time.monotonic() - started
    session.close()
    stop.set()
    assert took >= 0.9, took
    assert all(follow for follow, _ in logs.calls), "no plain read of a running pod's log"


def test_the_cursor_sends_each_line_once_whichever_reader_gets_it_first():
    cursor, sent = LogCursor(), []
    for raw in LINES[:2]:
        cursor.take(raw, sent.append)

    class Rest:
        def stream_log(self, pod, *, follow, tail, since_seconds):
            assert not follow and since_seconds is not None and since_seconds >= 1
            yield from LINES

    read_rest(Rest(), "p", lambda kind, payload: sent.append(payload[1]), cursor)
    for raw in LINES:  # the follower's own copies, late
        cursor.take(raw, sent.append)
    assert sent == ["one", "two", "two again", "three"]


def test_a_refused_last_read_is_a_warning_and_keeps_what_was_read():
    from kdist.kube.errors import Transient

    class Refused:
        def stream_log(self, pod, *, follow, tail, since_seconds):
            raise Transient("the API server answered 500 Internal Server Error")
            yield  # a generator, like the real one

    got: list[Any] = []
    read_rest(Refused(), "p", lambda kind, payload: got.append((kind, payload)), LogCursor())
    assert got == [("warning", "the last lines of pod p's log could not be read: the API "
                               "server answered 500 Internal Server Error")]
