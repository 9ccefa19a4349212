"""A lost node is named: the node controller marks its pods not Ready while their
containers still read as running; the tracker says so once, in words."""

from __future__ import annotations

from kdist.kube.watch.tracker import Tracker


def _pod(ready: str) -> dict:
    return {"metadata": {"name": "j-1-abc", "uid": "u1", "labels": {
        "batch.kubernetes.io/job-completion-index": "1"}},
        "spec": {"nodeName": "kdist-worker"},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": ready}, {"type": "ContainersReady", "status": "True"}],
            "containerStatuses": [{"name": "pytorch", "state": {"running": {}}}]}}


def test_a_lost_node_is_said_once():
    t = Tracker("j", "ns")
    t.job_event("ADDED", {"kind": "Job", "metadata": {"name": "j"}, "spec": {"completions": 2}})
    assert t.pod_event("ADDED", _pod("True")) == []
    said = t.pod_event("MODIFIED", _pod("False"))
    assert said == ["node kdist-worker NotReady (its kubelet stopped reporting); rank 1 (pod "
                    "j-1-abc) is lost with it: replaced once the node returns or is tainted "
                    "node.kubernetes.io/out-of-service"]
    assert t.pod_event("MODIFIED", _pod("False")) == []
