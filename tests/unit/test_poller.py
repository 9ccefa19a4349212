"""A job's PodGroup and Kueue Workload are read by polling, not watched: a job holds two
watches (its own and its pods'), whatever explains its wait (kdist.kube.watch.poller)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kdist.kube.errors import Transient
from kdist.kube.watch.backoff import Backoff
from kdist.kube.watch.poller import SETTLED_EVERY, WAITING_EVERY, Poller
from kdist.kube.watch.reflector import Session, Sources
from kdist.kube.watch.tracker import Tracker
from kdist.shared.errors import ClusterError
from tests.unit.test_log_rest import _job, _pod
from tests.unit.test_watch import ReplaySource


def _group(rv: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"kind": "PodGroup", "apiVersion": "scheduling.k8s.io/v1beta1",
            "metadata": {"name": "mnist", "uid": "g", "resourceVersion": rv},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}}, "status": status or {}}


class Listed:
    """Answers each list() with the next of `answers` (the last again and again); never
    watched."""

    what = "podgroup mnist"

    def __init__(self, answers: list[Any], stop: threading.Event | None = None) -> None:
        self.answers, self.stop, self.lists = answers, stop, 0

    def list(self):
        self.lists += 1
        answer = self.answers[min(self.lists, len(self.answers)) - 1]
        if self.stop is not None and self.lists >= len(self.answers) + 2:
            self.stop.set()
        if isinstance(answer, Exception):
            raise answer
        return answer, str(1000 + self.lists)  # the list's own version moves every time

    def watch(self, rv):
        raise AssertionError("an explaining object is polled, never watched")


def test_a_poller_emits_only_what_changed():
    stop = threading.Event()
    source = Listed([[_group("5")], [_group("5")], [_group("6")]], stop)
    got: list[Any] = []
    Poller(source, lambda kind, items: got.append((kind, items)), stop, lambda: 0.0,
           Backoff(first=0)).run()
    assert source.lists >= 4
    assert [items[0]["metadata"]["resourceVersion"] for _, items in got] == ["5", "6"]


def test_a_poller_rides_out_a_few_failures_and_gives_up_on_many():
    stop = threading.Event()
    blip = Listed([Transient("503"), [_group("5")]], stop)
    got: list[Any] = []
    Poller(blip, lambda kind, items: got.append(items), stop, lambda: 0.0,
           Backoff(attempts=3, first=0)).run()
    assert got == [[_group("5")]]
    down = Listed([Transient("503 Service Unavailable")])
    with pytest.raises(ClusterError, match="lost the reads of podgroup mnist after 3 attempts"):
        Poller(down, lambda *a: None, threading.Event(), lambda: 0.0,
               Backoff(attempts=3, first=0)).run()


def test_the_session_polls_the_podgroup_fast_while_pods_wait_and_slowly_after():
    stop = threading.Event()
    why = "0/1 nodes are available: 1 Insufficient cpu."
    held = _group("7", {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "False",
                                        "reason": "Unschedulable", "message": why,
                                        "lastTransitionTime": "2025-01-02T03:04:00Z"}]})
    gang = Listed([[held]])
    pending = dict(_pod("Running"), status={"phase": "Pending"})
    job = _job(False)
    job["spec"]["template"] = {"spec": {"schedulingGroup": {"podGroupName": "mnist"}}}
    tracker = Tracker("mnist")
    session = Session(tracker, Sources(ReplaySource("job", [job], stop),
                                       ReplaySource("pods", [pending], stop), None, gang=gang))
    session.start()
    warnings: list[str] = []
    deadline = time.monotonic() + 5
    for kind, payload in session.events(tick=0.1):
        if kind == "warning":
            warnings.append(payload)
        if warnings or time.monotonic() > deadline:
            break
    assert session._poll_every() == WAITING_EVERY
    tracker.state.ranks[0].phase = "Running"
    assert session._poll_every() == SETTLED_EVERY
    session.close()
    stop.set()
    assert any(why in w for w in warnings), warnings
