"""Kueue: a queued job is rendered suspended on both backends, and its Workload's
verdict (queued and why, never fits, admitted) reaches the tracker and `kdist list`."""

from __future__ import annotations

import pytest

from kdist import backends
from kdist.kube.watch.objects import job_phase, workload_state
from kdist.kube.watch.tracker import Tracker
from kdist.rendering import render
from kdist.spec import validate_job
from tests.unit.helpers import spec_with


def _workload(reserved: str | None = None, admitted: str | None = None) -> dict:
    conditions = []
    if reserved is not None:
        conditions.append({"type": "QuotaReserved", "status": "False", "reason": "Pending",
                           "message": reserved})
    if admitted is not None:
        conditions.append({"type": "Admitted", "status": "True"})
    return {"kind": "Workload", "spec": {"queueName": "team-a"},
            "status": {"conditions": conditions,
                       "admission": {"clusterQueue": admitted or ""}}}


@pytest.mark.parametrize("backend", backends.NAMES)
def test_queued_jobs_are_rendered_suspended(backend):
    job = validate_job(spec_with(**{"spec.backend": backend, "spec.scheduling": {
        "queue": "team-a"}}))
    training = render(job)[0]
    assert training["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert backends.get(backend).suspended(training) and job_phase(training) == "Queued"
    plain = render(validate_job(spec_with(**{"spec.backend": backend})))[0]
    assert not backends.get(backend).suspended(plain)


def test_workload_verdicts():
    wait = "couldn't assign flavors to pod set main: insufficient unused quota for cpu"
    never = "couldn't assign flavors: insufficient quota for cpu in flavor x, request > " \
            "maximum capacity (1)"
    assert workload_state(_workload(wait)) == ("queued", wait)
    assert workload_state(_workload(never))[0] == "never-fits"
    assert workload_state(_workload(admitted="kdist-e2e")) == (
        "admitted", "admitted by ClusterQueue kdist-e2e")
    assert workload_state(_workload()) == ("queued", "waiting for admission")


def test_tracker_says_queued_once_then_admitted():
    t = Tracker("second", "ns")
    t.job_event("ADDED", {"kind": "Job", "metadata": {"name": "second"},
                          "spec": {"completions": 2, "suspend": True}})
    said = t.feed("queue", "relist", [_workload("insufficient unused quota for cpu")])
    assert said == ["job second queued in LocalQueue team-a: insufficient unused quota for cpu"]
    assert t.state.phase == "Queued"
    assert t.feed("queue", "MODIFIED", _workload("insufficient unused quota for cpu")) == []
    said = t.feed("queue", "MODIFIED", _workload(admitted="kdist-e2e"))
    assert said == ["job second admitted by ClusterQueue kdist-e2e"]
    assert t.state.phase == "Pending"
    assert t.state.to_dict()["queue"]["status"] == "admitted"


def test_list_shows_queued_for_a_suspended_queued_job():
    labels = {"kueue.x-k8s.io/queue-name": "team-a"}
    assert job_phase({"kind": "Job", "metadata": {"labels": labels},
                      "spec": {"suspend": True}}) == "Queued"
    assert job_phase({"kind": "PyTorchJob", "metadata": {"labels": labels},
                      "spec": {"runPolicy": {"suspend": True}}}) == "Queued"
    assert job_phase({"kind": "Job", "metadata": {}, "spec": {"suspend": True}}) == "Suspended"
